-- One sliding velocity window, shared by every safety-kernel replica.
-- Timed by the Redis clock, so replicas with skewed clocks agree on the window.
-- KEYS[1] window key (cordum:safety:velocity:<rule id>:<key value>): a sorted set,
--         member = the request's job id (a job checked twice counts once),
--         score  = when it was last seen, ms
-- ARGV[1] "record" to count this request, "peek" to only read the window
-- ARGV[2] window length, ms (> 0)
-- ARGV[3] member (record only)
-- Returns the number of requests in the window; for "record", this one included.
-- The key expires one window after its newest request, so idle windows cost nothing.
local key, mode = KEYS[1], ARGV[1]
local window = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cutoff = now - window

if mode == 'peek' then
  return redis.call('ZCOUNT', key, '(' .. string.format('%d', cutoff), '+inf')
end

redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', cutoff))
redis.call('ZADD', key, string.format('%d', now), ARGV[3])
redis.call('PEXPIRE', key, window)
return redis.call('ZCARD', key)
