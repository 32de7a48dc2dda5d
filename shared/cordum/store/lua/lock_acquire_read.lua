-- Take a lock and, in the same round trip, read the hash it guards.
-- KEYS[1] the lock key   KEYS[2] the hash to read (e.g. job:meta:<id>)
-- ARGV[1] token   ARGV[2] TTL (ms)
-- Returns {0} when the lock is held by someone else, else {1, field, value, ...}.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0}
end
local out = {1}
local fields = redis.call('HGETALL', KEYS[2])
for i = 1, #fields do out[#out + 1] = fields[i] end
return out
