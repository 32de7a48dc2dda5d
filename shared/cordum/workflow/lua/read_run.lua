-- Read a run with its timer score; with ``full`` also its definition snapshot and
-- outbox; with a token, first take the run's lock; with a job id, that step job's end
-- as the job store holds it. All in one round trip (the timer's member names the
-- workflow, which only the run knows).
-- KEYS[1] wf:run:<run_id>  KEYS[2] cordum:wf:delay:timers  KEYS[3] wf:run:def:<run_id>
-- KEYS[4] wf:run:outbox:<run_id>  KEYS[5] cordum:wf:run:lock:<run_id>
-- KEYS[6] job:meta:<job id>  KEYS[7] res:<job id>  KEYS[8] res:<job id>:redacted
-- KEYS[9] wf:run:job:<job id>  (KEYS[6..9] only with a job)
-- ARGV[1] run id  ARGV[2] '1' to read the definition and outbox too
-- ARGV[3] lock token ('' to read without the lock)  ARGV[4] lock TTL (ms)
-- ARGV[5] the most bytes of a result to return (with a job)  ARGV[6] the job's id
-- A leftover outbox whose one entry is the publish of this very job (ARGV[6]) is
-- done once the job store holds the job (the submit path stored it, so the publish
-- landed): with the lock taken, it is deleted and not returned. (A save that releases
-- the lock keeps such an outbox: WorkflowStore.save.)
-- Returns {'busy'} when the lock is held by another token, {'none'} when the run does not
-- exist (a lock just taken is given back), else {'ok', run JSON, timer score or false,
-- definition JSON or false, outbox JSON or false[, the job's meta fields (see
-- WorkflowStore.JOB_FIELDS), the result its result_ptr names (the worker's, or the
-- redacted copy after a REDACT) or false (absent or longer than ARGV[5]), the
-- engine's record of the job or false]}.
if ARGV[3] ~= '' then
  -- A call sent again after a late answer finds the lock its first send took: still
  -- its own (store/lua/lock_acquire.lua).
  if not redis.call('SET', KEYS[5], ARGV[3], 'NX', 'PX', tonumber(ARGV[4]))
      and redis.call('GET', KEYS[5]) ~= ARGV[3] then
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
local outbox = redis.call('GET', KEYS[4])
if outbox and ARGV[6] and ARGV[6] ~= '' and ARGV[3] ~= ''
   and redis.call('EXISTS', KEYS[6]) == 1 then
  local ok_box, entries = pcall(cjson.decode, outbox)
  local job = ok_box and type(entries) == 'table' and #entries == 1
              and type(entries[1]) == 'table' and entries[1]['job']
  if type(job) == 'table' and job['job_id'] == ARGV[6] then
    redis.call('DEL', KEYS[4])
    outbox = false
  end
end
local reply = {'ok', run, score, redis.call('GET', KEYS[3]), outbox}
if KEYS[6] then
  local fields = redis.call('HMGET', KEYS[6], 'state', 'result_status', 'result_ptr',
                            'failure_reason', 'topic', 'approval_status', 'approved_by',
                            'approval_job_hash', 'output_safety')
  reply[6] = fields
  local source = KEYS[7]
  if fields[3] == 'redis://' .. KEYS[8] then
    source = KEYS[8]
  end
  local size = redis.call('STRLEN', source)
  reply[7] = false
  if size > 0 and size <= tonumber(ARGV[5]) then
    reply[7] = redis.call('GET', source)
  end
  reply[8] = redis.call('GET', KEYS[9])
end
return reply
