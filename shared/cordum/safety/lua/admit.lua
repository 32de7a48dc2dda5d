-- Admit one call through the shared safety-kernel circuit breaker, or report its state.
-- The breaker is one hash, timed by the Redis clock so every replica agrees:
--   failures    failures counted (closed: within the failure window; then while open)
--   open_until  when the open breaker next admits probes, ms; absent = closed, past = half-open
--   wait_ms     the wait that set open_until; a failed probe doubles it (failure.lua)
--   successes   probe successes in the current half-open round
--   p:<token>   one admitted probe, value = its lease expiry, ms
-- KEYS[1] breaker key (cordum:cb:safety:failures or cordum:cb:safety:output:failures)
-- ARGV[1] "admit", or "peek" to report the state without taking a probe slot
-- ARGV[2] fail threshold  ARGV[3] probe quota (half-open max)  ARGV[4] probe token
-- ARGV[5] probe lease, ms  ARGV[6] half-open idle TTL, ms
-- Returns {kind, failures, cooldown_ms, probes}; kind is
--   "closed"     admitted (nothing is written)
--   "open"       rejected; cooldown_ms is the time until probes are admitted (nothing is written)
--   "probe"      half-open, admitted as a probe under lease p:<token>
--   "full"       half-open, rejected: the probe quota is taken
--   "half_open"  (peek only) half-open; probes = live probe leases
-- A string at KEYS[1] is the counter Cordum's Go scheduler writes; it is read with Cordum's
-- meaning: open while it is >= the threshold, for the rest of its TTL.
local key, mode, token = KEYS[1], ARGV[1], ARGV[4]
local threshold, quota = tonumber(ARGV[2]), tonumber(ARGV[3])
local lease_ms, idle_ms = tonumber(ARGV[5]), tonumber(ARGV[6])

local fields = redis.pcall('HMGET', key, 'failures', 'open_until')
if fields.err then
  local count = tonumber(redis.call('GET', key)) or 0
  if count >= threshold then
    return {'open', count, math.max(redis.call('PTTL', key), 0), 0}
  end
  return {'closed', count, 0, 0}
end
local failures = tonumber(fields[1]) or 0
local open_until = tonumber(fields[2])
if not open_until then
  return {'closed', failures, 0, 0}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now < open_until then
  return {'open', failures, open_until - now, 0}
end

-- Half-open. A lease that ran out belongs to a caller that died mid-call: its slot is free.
local live, expired = 0, {}
local all = redis.call('HGETALL', key)
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 2) == 'p:' then
    if tonumber(all[i + 1]) > now then live = live + 1 else expired[#expired + 1] = all[i] end
  end
end
if mode == 'peek' then
  return {'half_open', failures, 0, live}
end
if #expired > 0 then
  redis.call('HDEL', key, unpack(expired))
end
if live >= quota then
  return {'full', failures, 0, live}
end
redis.call('HSET', key, 'p:' .. token, now + lease_ms)
redis.call('PEXPIRE', key, math.max(idle_ms, lease_ms))
return {'probe', failures, 0, live + 1}
