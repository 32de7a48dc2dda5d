-- Record a failed call on the shared safety-kernel circuit breaker (hash layout: admit.lua).
-- KEYS[1] breaker key
-- ARGV[1] probe token ("" for a call admitted while closed)
-- ARGV[2] fail threshold  ARGV[3] first wait, ms  ARGV[4] longest wait (open duration), ms
-- ARGV[5] failure window, ms  ARGV[6] half-open idle TTL, ms
-- Returns {state, failures, cooldown_ms}; state "closed", "open" or "half_open".
-- closed:    failures + 1 (the first one starts the failure window, the key's TTL);
--            reaching the threshold opens the breaker: probes after the first wait.
-- open:      nothing is written; the wait runs from the failure that (re)opened it.
-- half-open: a failed probe of this round reopens the breaker with twice the last wait
--            (at most the longest) and drops the round's probes; a call admitted before
--            the breaker opened is stale and ignored.
local key, token = KEYS[1], ARGV[1]
local threshold, first_ms, cap_ms = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local window_ms, idle_ms = tonumber(ARGV[5]), tonumber(ARGV[6])

local fields = redis.pcall('HMGET', key, 'failures', 'open_until', 'wait_ms')
if fields.err then
  -- Cordum's string counter: replaced by the hash, counting starts again.
  redis.call('DEL', key)
  fields = {false, false, false}
end
local failures = tonumber(fields[1]) or 0
local open_until = tonumber(fields[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function open(wait_ms)
  wait_ms = math.min(wait_ms, cap_ms)
  local probes = {}
  for _, field in ipairs(redis.call('HKEYS', key)) do
    if string.sub(field, 1, 2) == 'p:' then probes[#probes + 1] = field end
  end
  if #probes > 0 then
    redis.call('HDEL', key, unpack(probes))
  end
  redis.call('HSET', key, 'failures', failures, 'open_until', now + wait_ms, 'successes', 0,
             'wait_ms', wait_ms)
  redis.call('PEXPIRE', key, wait_ms + idle_ms)
  return {'open', failures, wait_ms}
end

if not open_until then
  failures = failures + 1
  if failures >= threshold then
    return open(first_ms)
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
  -- A hash opened by a version without wait_ms starts the doubling again.
  local last_ms = tonumber(fields[3])
  return open(last_ms and last_ms * 2 or first_ms)
end
return {'half_open', failures, 0}
