-- Read a run with its timer score, and with ``full`` its definition snapshot and outbox,
-- in one round trip (the timer's member names the workflow, which only the run knows).
-- KEYS[1] wf:run:<run_id>  KEYS[2] cordum:wf:delay:timers  KEYS[3] wf:run:def:<run_id>
-- KEYS[4] wf:run:outbox:<run_id>
-- ARGV[1] run id  ARGV[2] '1' to read the definition and outbox too
-- Returns nil when the run does not exist, else {run JSON, timer score or false,
-- definition JSON or false, outbox JSON or false}.
local run = redis.call('GET', KEYS[1])
if not run then
  return nil
end
local ok, doc = pcall(cjson.decode, run)
local score = false
if ok and type(doc) == 'table' and type(doc['workflow_id']) == 'string' then
  score = redis.call('ZSCORE', KEYS[2], doc['workflow_id'] .. ':' .. ARGV[1])
end
if ARGV[2] ~= '1' then
  return {run, score, false, false}
end
return {run, score, redis.call('GET', KEYS[3]), redis.call('GET', KEYS[4])}
