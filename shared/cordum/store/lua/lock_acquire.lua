-- Take a lock: SET NX PX, which a call sent again also takes for its own.
-- KEYS[1] the lock key   ARGV[1] token   ARGV[2] TTL (ms)
-- Returns 1 when the key is the token's, 0 while another holder has it. The client
-- sends a command again when its answer is late, and a Redis that stalled runs both
-- sends: the second then finds the key its first set. A token is one caller's (a new
-- uuid per attempt), so the key holding it is this call's own, not another holder's.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end
return 0
