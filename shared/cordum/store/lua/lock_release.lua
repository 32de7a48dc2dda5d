-- Release a lock only while the caller still holds it (compare-and-delete), so a
-- holder whose lease already expired can never delete the next holder's lock.
-- KEYS[1] lock key; KEYS[2..] keys the holder's work is done with (deleted with the
--   lock, and only while it is still the holder's: another holder may own them now)
-- ARGV[1] the holder's token (the value SET NX wrote)
-- Returns 1 when the lock was deleted, 0 when it is gone or holds another token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', unpack(KEYS))
  return 1
end
return 0
