-- Create a job accepted by the gateway: payload, request, meta and PENDING in one step.
-- KEYS[1] job:meta:<id>   KEYS[2] job:req:<id>    KEYS[3] ctx:<id>
-- KEYS[4] job:index:<state>  KEYS[5] job:recent  KEYS[6] job:events:<id>
-- KEYS[7] job:tenant:active:<tenant>  KEYS[8] trace:<trace_id>
-- KEYS[9] job:tenant:index:<tenant>:<state> (the tenant's share of KEYS[4])
-- ARGV[1] job id  ARGV[2] now (us)  ARGV[3] state  ARGV[4] context payload
-- ARGV[5] request payload  ARGV[6] meta TTL (s)  ARGV[7] data TTL (s)
-- ARGV[8] N, the number of audit arguments: 0 for an act that is not audited (an
--         allowed submit); else KEYS[10] and KEYS[11] are the tenant's audit stream
--         and head, and ARGV[9..8+N] what audit_append takes after them (the script is
--         loaded after audit_chain.lua: store.audit.with_audit)
-- ARGV[9+N..] meta field, value pairs
-- Returns 1 when created (also to the same call run again), 0 when the job already
-- exists (nothing is written).
if redis.call('EXISTS', KEYS[1]) == 1 then
  -- The client sends a command again when its answer is late, and a Redis that stalled
  -- runs both sends: a job created at this call's own "now" is this call's.
  if redis.call('HGET', KEYS[1], 'created_at') == ARGV[2] then return 1 end
  return 0
end
local audited = tonumber(ARGV[8])
if audited > 0 then
  -- Its checks come before any write: the job and its event, or neither.
  audit_append(KEYS[10], KEYS[11], unpack(ARGV, 9, 8 + audited))
end
local id, now, state = ARGV[1], ARGV[2], ARGV[3]
local meta_ttl, data_ttl = tonumber(ARGV[6]), tonumber(ARGV[7])
redis.call('SET', KEYS[3], ARGV[4], 'EX', data_ttl)
redis.call('SET', KEYS[2], ARGV[5], 'EX', meta_ttl)
local fields = {'state', state, 'updated_at', now, 'created_at', now, 'attempts', '0'}
for i = 9 + audited, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('EXPIRE', KEYS[1], meta_ttl)
redis.call('ZADD', KEYS[4], now, id)
redis.call('ZADD', KEYS[9], now, id)
redis.call('EXPIRE', KEYS[9], meta_ttl)
redis.call('ZADD', KEYS[5], now, id)
redis.call('ZREMRANGEBYRANK', KEYS[5], 0, -1001)
redis.call('RPUSH', KEYS[6], '{"ts":' .. now .. ',"state":' .. cjson.encode(state) .. '}')
redis.call('EXPIRE', KEYS[6], meta_ttl)
redis.call('SADD', KEYS[7], id)
redis.call('EXPIRE', KEYS[7], meta_ttl)
redis.call('SADD', KEYS[8], id)
redis.call('EXPIRE', KEYS[8], meta_ttl)
return 1
