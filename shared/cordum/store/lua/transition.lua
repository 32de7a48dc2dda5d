-- Event timestamps are written as text: cjson would round microseconds to 14 digits.
-- Move a job through one or more states atomically, as Cordum's state machine allows.
-- Per-state index (global and the tenant's own), job:recent, the event log, the tenant
-- active set, the deadline
-- and the attempts counter move with the state, so no reader sees half a transition.
-- Index and tenant keys are derived here from the stored state and tenant: this
-- needs Redis with cluster mode disabled, which is what the stack deploys.
-- KEYS[1] job:meta:<id>  KEYS[2] job:events:<id>  KEYS[3] job:recent  KEYS[4] job:deadline
-- KEYS[5] dlq:entry:<id>  KEYS[6] dlq:index  KEYS[7] job:req:<id>
-- ARGV[1] job id  ARGV[2] now (us)  ARGV[3] meta TTL (s): the retention of a terminal
--         job when the path ends in a terminal state; it applies to job:req too then
-- ARGV[4] states to pass through, comma separated (e.g. "SCHEDULED,DISPATCHED")
-- ARGV[5] states the job may be in, comma separated, "" = any the table allows;
--         "-" stands for a job without state (not created yet)
-- ARGV[6] DLQ entry (JSON object) written with the transition, "" for none; the script
--         adds last_state, attempts and created_at (us); TTL ARGV[7] (s)
-- ARGV[8] "unchanged since" (us) or "": when the job's updated_at is later, it has
--         moved since the caller looked at it and the call is a "skip"
-- ARGV[9] N, the number of side records: KEYS[8+2A..7+2A+N] are SET with the
--         transition, values and TTLs (s) in ARGV[12+M..11+M+2N] (value, ttl pairs)
-- ARGV[10] worker fence or "": unless the meta's worker_id is this one, the call is a
--         "foreign" (a result from a worker the job was not dispatched to, or for a job
--         dispatched to nobody yet)
-- ARGV[11] M, the number of audit arguments: 0 for a move that is not a governance
--         act (A = 0); else (A = 1) KEYS[8] and KEYS[9] are the tenant's audit stream
--         and head and ARGV[12..11+M] what audit_append takes after them (the script is
--         loaded after audit_chain.lua: store.audit.with_audit)
-- ARGV[12+M+2N..] meta field, value pairs written with the last state
-- Returns {status, previous state, workflow id of the job or ""}: status "ok" (also to
-- the same call run again, see below); "skip" when the current state is not in
-- ARGV[5]; "foreign" (see ARGV[10]); "invalid" when the table forbids a step (nothing is
-- written).
local allowed = {
  [''] = {PENDING=1, APPROVAL_REQUIRED=1, SCHEDULED=1, DISPATCHED=1, RUNNING=1, FAILED=1, CANCELLED=1},
  PENDING = {APPROVAL_REQUIRED=1, SCHEDULED=1, DISPATCHED=1, RUNNING=1, DENIED=1, FAILED=1,
             TIMEOUT=1, SUCCEEDED=1, CANCELLED=1, RETRYING=1},
  APPROVAL_REQUIRED = {PENDING=1, SCHEDULED=1, DISPATCHED=1, RUNNING=1, DENIED=1, FAILED=1,
                       TIMEOUT=1, SUCCEEDED=1, CANCELLED=1},
  SCHEDULED = {SCHEDULED=1, DISPATCHED=1, RUNNING=1, DENIED=1, FAILED=1, TIMEOUT=1, SUCCEEDED=1,
               CANCELLED=1, OUTPUT_QUARANTINED=1, RETRYING=1},
  DISPATCHED = {SCHEDULED=1, RUNNING=1, SUCCEEDED=1, FAILED=1, CANCELLED=1, TIMEOUT=1,
                OUTPUT_QUARANTINED=1, RETRYING=1},
  RUNNING = {RUNNING=1, SUCCEEDED=1, FAILED=1, CANCELLED=1, TIMEOUT=1, OUTPUT_QUARANTINED=1,
             RETRYING=1},
  RETRYING = {SCHEDULED=1, DISPATCHED=1, RUNNING=1, RETRYING=1, SUCCEEDED=1, FAILED=1,
              CANCELLED=1, TIMEOUT=1},
  SUCCEEDED = {OUTPUT_QUARANTINED=1},
}
local terminal = {SUCCEEDED=1, FAILED=1, CANCELLED=1, TIMEOUT=1, DENIED=1, OUTPUT_QUARANTINED=1}

local function split(s)
  local out = {}
  for part in string.gmatch(s, '[^,]+') do out[#out + 1] = part end
  return out
end

local id, now, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local prev = redis.call('HGET', KEYS[1], 'state') or ''
local cur = prev
local path = split(ARGV[4])

-- The same call run again: the client sends a command again when its answer is late,
-- and a Redis that stalled runs both sends. The first made the move (the job was
-- updated at this call's own "now" and is in its last state): answer as it did, with
-- the state it left (the event before the ones it pushed), and write nothing.
if prev == path[#path] and redis.call('HGET', KEYS[1], 'updated_at') == now then
  local before = redis.call('LINDEX', KEYS[2], -(#path + 1))
  local left = before and cjson.decode(before).state or ''
  return {'ok', left, redis.call('HGET', KEYS[1], 'workflow_id') or ''}
end

-- Checked before the state: a late result of another worker must not pass for a
-- redelivery of the one that finished the job.
if ARGV[10] ~= '' then
  local worker = redis.call('HGET', KEYS[1], 'worker_id')
  if worker ~= ARGV[10] then
    return {'foreign', prev, redis.call('HGET', KEYS[1], 'workflow_id') or ''}
  end
end
if ARGV[5] ~= '' then
  local ok = false
  for _, s in ipairs(split(ARGV[5])) do
    if s == cur or (s == '-' and cur == '') then ok = true end
  end
  if not ok then return {'skip', prev, redis.call('HGET', KEYS[1], 'workflow_id') or ''} end
end
if ARGV[8] ~= '' then
  local updated = tonumber(redis.call('HGET', KEYS[1], 'updated_at') or '0')
  if updated > tonumber(ARGV[8]) then
    return {'skip', prev, redis.call('HGET', KEYS[1], 'workflow_id') or ''}
  end
end

for _, nxt in ipairs(path) do
  local row = allowed[cur]
  if row == nil or row[nxt] == nil then
    return {'invalid', prev, ''}
  end
  cur = nxt
end

local audited = tonumber(ARGV[11])
local skeys = 7  -- side records' keys follow the audit keys
if audited > 0 then
  -- Every check is above: the move and its event, or neither.
  audit_append(KEYS[8], KEYS[9], unpack(ARGV, 12, 11 + audited))
  skeys = 9
end

local attempts_bump = 0
cur = prev
for _, nxt in ipairs(path) do
  if nxt == 'SCHEDULED' and cur ~= 'SCHEDULED' then attempts_bump = attempts_bump + 1 end
  redis.call('RPUSH', KEYS[2], '{"ts":' .. now .. ',"state":' .. cjson.encode(nxt) .. '}')
  cur = nxt
end

-- Terminal indexes only grow: an entry older than a meta lives names a job that is
-- gone, and the key itself expires with the last job that landed in it.
local function trim(index)
  redis.call('ZREMRANGEBYSCORE', index, '-inf',
             string.format('(%.0f', tonumber(now) - ttl * 1000000))
  redis.call('EXPIRE', index, ttl)
end
if prev ~= '' then
  redis.call('ZREM', 'job:index:' .. string.lower(prev), id)
end
redis.call('ZADD', 'job:index:' .. string.lower(cur), now, id)
if terminal[cur] then trim('job:index:' .. string.lower(cur)) end
local sides = tonumber(ARGV[9])
for i = 1, sides do
  redis.call('SET', KEYS[skeys + i], ARGV[10 + audited + 2 * i],
             'EX', tonumber(ARGV[11 + audited + 2 * i]))
end
local fields = {'state', cur, 'updated_at', now}
for i = 12 + audited + 2 * sides, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
if attempts_bump > 0 then
  redis.call('HINCRBY', KEYS[1], 'attempts', attempts_bump)
end
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[2], ttl)
-- The stored request lives as long as the meta of a finished job (its detail reads it).
if terminal[cur] then redis.call('EXPIRE', KEYS[7], ttl) end
local tenant = redis.call('HGET', KEYS[1], 'tenant')
redis.call('ZADD', KEYS[3], now, id)
redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -1001)
if tenant then
  -- The tenant's own index (store.jobs.tenant_index_key): list pages read it alone,
  -- whatever other tenants store.
  local own = 'job:tenant:index:' .. tenant .. ':'
  if prev ~= '' then redis.call('ZREM', own .. string.lower(prev), id) end
  own = own .. string.lower(cur)
  redis.call('ZADD', own, now, id)
  if terminal[cur] then trim(own) else redis.call('EXPIRE', own, ttl) end
  local active = 'job:tenant:active:' .. tenant
  if terminal[cur] then
    redis.call('SREM', active, id)
  else
    redis.call('SADD', active, id)
    redis.call('EXPIRE', active, ttl)
  end
end
if terminal[cur] then
  redis.call('ZREM', KEYS[4], id)
  redis.call('HDEL', KEYS[1], 'deadline_unix')
else
  -- A deadline set with this transition (or earlier) is what the reconciler scans.
  local deadline = redis.call('HGET', KEYS[1], 'deadline_unix')
  if deadline then redis.call('ZADD', KEYS[4], deadline, id) end
end
if ARGV[6] ~= '' then
  -- Appended as text: cjson prints large numbers with 14 digits, which would
  -- round a microsecond timestamp.
  local attempts = tonumber(redis.call('HGET', KEYS[1], 'attempts') or '0')
  local entry = string.sub(ARGV[6], 1, -2) .. ',"last_state":' .. cjson.encode(prev) ..
    ',"attempts":' .. attempts .. ',"created_at":' .. now .. '}'
  redis.call('SET', KEYS[5], entry, 'EX', tonumber(ARGV[7]))
  redis.call('ZADD', KEYS[6], now, id)
  redis.call('ZREMRANGEBYRANK', KEYS[6], 0, -10001)
end
return {'ok', prev, redis.call('HGET', KEYS[1], 'workflow_id') or ''}
