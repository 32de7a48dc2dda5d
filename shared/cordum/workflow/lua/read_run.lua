-- Read a run with its timer score; with ``full`` also its definition snapshot and
-- outbox; with a token, first take the run's lock; with a job id, that step job's end
-- as the job store holds it. All in one round trip (the timer's member names the
-- workflow, which only the run knows).
-- KEYS[1] wf:run:<run_id>  KEYS[2] cordum:wf:delay:timers  KEYS[3] wf:run:def:<run_id>
-- KEYS[4] wf:run:outbox:<run_id>  KEYS[5] cordum:wf:run:lock:<run_id>
-- KEYS[6] job:meta:<job id>  KEYS[7] res:<job id>  (KEYS[6], KEYS[7] only with a job)
-- ARGV[1] run id  ARGV[2] '1' to read the definition and outbox too
-- ARGV[3] lock token ('' to read without the lock)  ARGV[4] lock TTL (ms)
-- ARGV[5] the most bytes of a result to return (with a job)
-- Returns {'busy'} when the lock is held by another, {'none'} when the run does not
-- exist (a lock just taken is given back), else {'ok', run JSON, timer score or false,
-- definition JSON or false, outbox JSON or false[, {state, result_status, result_ptr,
-- failure_reason} of the job, its result or false (absent or longer than ARGV[5])]}.
if ARGV[3] ~= '' then
  if not redis.call('SET', KEYS[5], ARGV[3], 'NX', 'PX', tonumber(ARGV[4])) then
    return {'busy'}
  end
end
local run = redis.call('GET', KEYS[1])
if not run then
  if ARGV[3] ~= '' then
    redis.call('DEL', KEYS[5])
  end
  return {'none'}
end
local ok, doc = pcall(cjson.decode, run)
local score = false
if ok and type(doc) == 'table' and type(doc['workflow_id']) == 'string' then
  score = redis.call('ZSCORE', KEYS[2], doc['workflow_id'] .. ':' .. ARGV[1])
end
if ARGV[2] ~= '1' then
  return {'ok', run, score, false, false}
end
local reply = {'ok', run, score, redis.call('GET', KEYS[3]), redis.call('GET', KEYS[4])}
if KEYS[6] then
  reply[6] = redis.call('HMGET', KEYS[6], 'state', 'result_status', 'result_ptr',
                        'failure_reason')
  local size = redis.call('STRLEN', KEYS[7])
  reply[7] = false
  if size > 0 and size <= tonumber(ARGV[5]) then
    reply[7] = redis.call('GET', KEYS[7])
  end
end
return reply
