-- Extend a lock only while the caller still holds it (compare-and-PEXPIRE).
-- KEYS[1] lock key
-- ARGV[1] the holder's token  ARGV[2] new time to live (ms, counted from now)
-- Returns 1 when the lock was renewed, 0 when it is gone or holds another token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
