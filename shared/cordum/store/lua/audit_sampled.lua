-- Append an event of an act anyone can repeat at will (a key that fails to
-- authenticate, a caller over its rate limit) at most once per bucket and window,
-- and at most ARGV[2] times per window in all, so a flood of them costs the chain a
-- bounded number of entries (run after audit_chain.lua: with_audit).
-- KEYS[1] the bucket's mark  KEYS[2] the window's count  KEYS[3] the stream  KEYS[4] its head
-- ARGV[1] the window (s)  ARGV[2] the most events per window  ARGV[3] M
-- ARGV[4..3+M] what audit_append takes after the keys
-- Returns the entry's seq, or 0 when the event was left out (counted in KEYS[2]).
local window = tonumber(ARGV[1])
local count = redis.call('INCR', KEYS[2])
if count == 1 then redis.call('EXPIRE', KEYS[2], window) end
if count > tonumber(ARGV[2]) then return 0 end
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', window) then return 0 end
local appended = audit_append(KEYS[3], KEYS[4], unpack(ARGV, 4, 3 + tonumber(ARGV[3])))
return appended[1]
