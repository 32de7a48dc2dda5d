-- Save a run and everything that changes with it, in one step: the run, its outbox,
-- its new timeline events (the last 1000 kept), its place in the run indexes (open or
-- not), its step jobs' mappings and inputs, and its timer; and only while the run's
-- lock still holds the saver's token, checked in the same step (a holder whose lease
-- ran out must not write over the run the next holder reads).
-- KEYS[1] wf:run:<run_id>  KEYS[2] wf:run:outbox:<run_id>  KEYS[3] wf:run:timeline:<run_id>
-- KEYS[4] wf:run:def:<run_id>  KEYS[5] wf:runs:<tenant>:<workflow_id>  KEYS[6] wf:runs:org:<tenant>
-- KEYS[7] wf:runs:open  KEYS[8] wf:runs:active:<tenant>  KEYS[9] cordum:wf:delay:timers
-- KEYS[10] cordum:wf:run:lock:<run_id>
-- KEYS[11..] per step job: wf:run:job:<job id>, then per context: ctx:<id>
-- ARGV[1] run id  ARGV[2] run JSON  ARGV[3] outbox JSON ('' for none)
-- ARGV[4] '1' when the run is terminal  ARGV[5] run TTL (s, when terminal)
-- ARGV[6] score (updated_at, us)  ARGV[7] timeline cap  ARGV[8] timer: 'keep' | 'drop' | score
-- ARGV[9] timer member  ARGV[10] job mapping TTL (s)  ARGV[11] context TTL (s)
-- ARGV[12] n jobs  ARGV[13] n contexts  ARGV[14] n timeline events
-- ARGV[15] the run lock's token of the saving holder ('' for a save made without it)
-- ARGV[16] '1' to release the run lock (delete KEYS[10]) after the writes: the holder
--         carries the outbox out after the release (see WorkflowStore.save)
-- ARGV[17] M, the number of audit arguments: 0 unless the save is a governance act (a
--         run cancelled through the API); else the last two KEYS are the tenant's audit
--         stream and head and ARGV[18..17+M] what audit_append takes after them (the
--         script is loaded after audit_chain.lua: store.audit.with_audit)
-- ARGV[18+M..] the jobs' mapping JSON, then the contexts' JSON, then the timeline events
-- Returns 1, or 0 (and writes nothing) when ARGV[15] is a token the lock no longer
-- holds: the holder's lease ran out or another holder took the run since.
if ARGV[15] ~= '' and redis.call('GET', KEYS[10]) ~= ARGV[15] then
  return 0
end
local audited = tonumber(ARGV[17])
if audited > 0 then
  -- Before any write: the run saved and its event, or neither.
  audit_append(KEYS[#KEYS - 1], KEYS[#KEYS], unpack(ARGV, 18, 17 + audited))
end
local run_id, terminal, ttl = ARGV[1], ARGV[4] == '1', tonumber(ARGV[5])
local score = ARGV[6]
if terminal then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ttl)
else
  redis.call('SET', KEYS[1], ARGV[2])
end
if ARGV[3] ~= '' then
  if terminal then
    redis.call('SET', KEYS[2], ARGV[3], 'EX', ttl)
  else
    redis.call('SET', KEYS[2], ARGV[3])
  end
else
  redis.call('DEL', KEYS[2])
end
local n_jobs, n_ctx, n_events = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])
local at = 18 + audited
for i = 1, n_jobs do
  redis.call('SET', KEYS[10 + i], ARGV[at], 'EX', tonumber(ARGV[10]))
  at = at + 1
end
for i = 1, n_ctx do
  redis.call('SET', KEYS[10 + n_jobs + i], ARGV[at], 'EX', tonumber(ARGV[11]))
  at = at + 1
end
if n_events > 0 then
  redis.call('RPUSH', KEYS[3], unpack(ARGV, at, at + n_events - 1))
  redis.call('LTRIM', KEYS[3], -tonumber(ARGV[7]), -1)
end
if terminal then
  redis.call('EXPIRE', KEYS[3], ttl)
  redis.call('EXPIRE', KEYS[4], ttl)
end
redis.call('ZADD', KEYS[5], score, run_id)
redis.call('ZADD', KEYS[6], score, run_id)
if terminal then
  redis.call('ZREM', KEYS[7], run_id)
  redis.call('SREM', KEYS[8], run_id)
else
  redis.call('ZADD', KEYS[7], score, run_id)
  redis.call('SADD', KEYS[8], run_id)
end
if ARGV[8] == 'drop' then
  redis.call('ZREM', KEYS[9], ARGV[9])
elseif ARGV[8] ~= 'keep' then
  redis.call('ZADD', KEYS[9], ARGV[8], ARGV[9])
end
if ARGV[16] == '1' and ARGV[15] ~= '' then
  redis.call('DEL', KEYS[10])
end
return 1
