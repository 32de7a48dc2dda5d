-- Create a workflow run: idempotency check, the tenant's open-run limit, the limit of
-- runs under its root run, then every key the run lives in, all in one step (no second
-- caller can slip between check and write).
-- KEYS[1] wf:run:idempotency:<tenant>:<key>  KEYS[2] wf:runs:active:<tenant>
-- KEYS[3] wf:run:<run_id>  KEYS[4] wf:run:def:<run_id>  KEYS[5] wf:runs:<tenant>:<workflow_id>
-- KEYS[6] wf:runs:org:<tenant>  KEYS[7] wf:runs:open
-- KEYS[8] wf:run:tree:<root run id> (a child run only: the runs made under its root)
-- ARGV[1] run id  ARGV[2] body hash  ARGV[3] open-run limit (0 = none)  ARGV[4] run JSON
-- ARGV[5] definition JSON  ARGV[6] score (updated_at, us)  ARGV[7] idempotency TTL (s)
-- ARGV[8] '1' when an idempotency key was given, else '0'
-- ARGV[9] runs allowed under the root (0 = none), ARGV[10] the count's TTL (s) (with KEYS[8])
-- ARGV[11] M, the number of audit arguments: 0 unless the run is started through the
--         API (a governance act); else the last two KEYS are the tenant's audit stream
--         and head and ARGV[12..11+M] what audit_append takes after them (the script is
--         loaded after audit_chain.lua: store.audit.with_audit)
-- Returns {'created', run id} | {'existing', run id} (same key, same body; or a run of
-- that id is stored: a refused child's record is never replaced)
--       | {'conflict', run id} (same key, other body) | {'limit', open runs}
--       | {'root_limit', runs made under the root}.
local run_id, body_hash = ARGV[1], ARGV[2]
if ARGV[8] == '1' then
  local held = redis.call('GET', KEYS[1])
  if held then
    local sp = string.find(held, ' ', 1, true)
    local earlier = sp and string.sub(held, 1, sp - 1) or held
    local earlier_hash = sp and string.sub(held, sp + 1) or ''
    if earlier_hash == body_hash then
      return {'existing', earlier}
    end
    return {'conflict', earlier}
  end
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {'existing', run_id}
end
local audited = tonumber(ARGV[11])
local rooted = #KEYS - (audited > 0 and 2 or 0) >= 8
if rooted and tonumber(ARGV[9]) > 0 then
  local made = tonumber(redis.call('GET', KEYS[8]) or '0')
  if made >= tonumber(ARGV[9]) then
    return {'root_limit', tostring(made)}
  end
end
local limit = tonumber(ARGV[3])
if limit > 0 then
  local open = redis.call('SCARD', KEYS[2])
  if open >= limit then
    return {'limit', tostring(open)}
  end
end
if audited > 0 then
  -- Every check is above: the run and its event, or neither.
  audit_append(KEYS[#KEYS - 1], KEYS[#KEYS], unpack(ARGV, 12, 11 + audited))
end
local score = ARGV[6]
redis.call('SET', KEYS[3], ARGV[4])
redis.call('SET', KEYS[4], ARGV[5])
redis.call('ZADD', KEYS[5], score, run_id)
redis.call('ZADD', KEYS[6], score, run_id)
redis.call('ZADD', KEYS[7], score, run_id)
redis.call('SADD', KEYS[2], run_id)
if ARGV[8] == '1' then
  redis.call('SET', KEYS[1], run_id .. ' ' .. body_hash, 'EX', tonumber(ARGV[7]))
end
if rooted then
  redis.call('INCR', KEYS[8])
  redis.call('EXPIRE', KEYS[8], tonumber(ARGV[10]))
end
return {'created', run_id}
