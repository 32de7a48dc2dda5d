-- An output decision recorded on a job: meta fields and side records, in one call.
-- The state does not move (a content check's ALLOW or REDACT on a SUCCEEDED job).
-- KEYS[1] job:meta:<id>   KEYS[2..1+N] the side records' keys
-- ARGV[1] N   ARGV[2..1+2N] value, TTL (s) pairs of the side records
-- ARGV[2+2N..] meta field, value pairs
local n = tonumber(ARGV[1])
for i = 1, n do
  redis.call('SET', KEYS[1 + i], ARGV[2 * i], 'EX', tonumber(ARGV[1 + 2 * i]))
end
if #ARGV > 1 + 2 * n then
  redis.call('HSET', KEYS[1], unpack(ARGV, 2 + 2 * n))
end
return 1
