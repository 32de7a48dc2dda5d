-- Record a successful call on the shared safety-kernel circuit breaker (hash layout: admit.lua).
-- KEYS[1] breaker key
-- ARGV[1] probe token ("" for a call admitted while closed)  ARGV[2] successes to close
-- Returns {state, failures, cooldown_ms}; state "closed", "open" or "half_open".
-- closed:    failures are reset (the key is deleted); with no failures nothing is written.
-- open:      nothing is written (a call admitted before the breaker opened).
-- half-open: a probe of this round frees its slot and counts; enough successes close
--            the breaker (key deleted). Any other call is stale and ignored.
local key, token, close_after = KEYS[1], ARGV[1], tonumber(ARGV[2])

local fields = redis.pcall('HMGET', key, 'failures', 'open_until')
if fields.err then
  -- Cordum's string counter: a success resets it, as in Cordum.
  redis.call('DEL', key)
  return {'closed', 0, 0}
end
local failures = tonumber(fields[1]) or 0
local open_until = tonumber(fields[2])
if not open_until then
  if failures > 0 then
    redis.call('DEL', key)
  end
  return {'closed', 0, 0}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now < open_until then
  return {'open', failures, open_until - now}
end
if token == '' or redis.call('HDEL', key, 'p:' .. token) == 0 then
  return {'half_open', failures, 0}
end
if redis.call('HINCRBY', key, 'successes', 1) >= close_after then
  redis.call('DEL', key)
  return {'closed', 0, 0}
end
return {'half_open', failures, 0}
