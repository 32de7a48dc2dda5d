-- Record a failed call on the shared safety-kernel circuit breaker (hash layout: admit.lua).
-- KEYS[1] breaker key
-- ARGV[1] probe token ("" for a call admitted while closed)
-- ARGV[2] fail threshold  ARGV[3] open duration, ms  ARGV[4] failure window, ms
-- ARGV[5] half-open idle TTL, ms
-- Returns {state, failures, cooldown_ms}; state "closed", "open" or "half_open".
-- closed:    failures + 1 (the first one starts the failure window, the key's TTL);
--            reaching the threshold opens the breaker for the open duration.
-- open:      nothing is written; the window runs from the failure that opened it.
-- half-open: a failed probe of this round reopens the breaker and drops the round's
--            probes; a call admitted before the breaker opened is stale and ignored.
local key, token = KEYS[1], ARGV[1]
local threshold, open_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local window_ms, idle_ms = tonumber(ARGV[4]), tonumber(ARGV[5])

local fields = redis.pcall('HMGET', key, 'failures', 'open_until')
if fields.err then
  -- Cordum's string counter: replaced by the hash, counting starts again.
  redis.call('DEL', key)
  fields = {false, false}
end
local failures = tonumber(fields[1]) or 0
local open_until = tonumber(fields[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function open()
  local probes = {}
  for _, field in ipairs(redis.call('HKEYS', key)) do
    if string.sub(field, 1, 2) == 'p:' then probes[#probes + 1] = field end
  end
  if #probes > 0 then
    redis.call('HDEL', key, unpack(probes))
  end
  redis.call('HSET', key, 'failures', failures, 'open_until', now + open_ms, 'successes', 0)
  redis.call('PEXPIRE', key, open_ms + idle_ms)
  return {'open', failures, open_ms}
end

if not open_until then
  failures = failures + 1
  if failures >= threshold then
    return open()
  end
  redis.call('HSET', key, 'failures', failures)
  if failures == 1 then
    redis.call('PEXPIRE', key, window_ms)
  end
  return {'closed', failures, 0}
end
if now < open_until then
  return {'open', failures, open_until - now}
end
if token ~= '' and redis.call('HEXISTS', key, 'p:' .. token) == 1 then
  failures = failures + 1
  return open()
end
return {'half_open', failures, 0}
