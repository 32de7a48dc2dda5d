-- Take a lock and, in the same round trip, read the hash it guards.
-- KEYS[1] the lock key   KEYS[2] the hash to read (e.g. job:meta:<id>)
-- ARGV[1] token   ARGV[2] TTL (ms)
-- Returns "" when the lock is held by someone else, else the hash as one JSON object
-- of strings ("{}" when it is absent): one reply to parse instead of two per field.
-- A call sent again after a late answer finds the key its first send set: still its
-- own (lock_acquire.lua).
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
    and redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return ''
end
local fields = redis.call('HGETALL', KEYS[2])
if #fields == 0 then return '{}' end
local hash = {}
for i = 1, #fields, 2 do hash[fields[i]] = fields[i + 1] end
return cjson.encode(hash)
