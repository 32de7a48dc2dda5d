-- Count one more scheduling attempt, only for a job that exists.
-- KEYS[1] job:meta:<id>   ARGV[1] meta TTL (s)
-- Returns the new count, or 0 when the job has no meta.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local n = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
return n
