-- A job's last move under its job lock and the lock's release, in one round trip: the
-- submit function's move to RUNNING after the publish (cordum.scheduler.dispatch).
-- The body is transition.lua, unchanged, run as a function in place of the marker
-- line below: its KEYS and ARGV are the ones transition.lua documents, with one key
-- and one argument more at the ends, taken off before it runs.
-- KEYS[#KEYS] the lock key (cordum:scheduler:job:<id>)
-- ARGV[#ARGV] the holder's token
-- The release is lock_release.lua's compare-and-delete, made after the move whatever
-- the move's status (the holder is done either way): a holder whose lease ran out
-- never deletes the next holder's lock. The move's own checks (the states it may
-- leave, the state table) are transition.lua's.
-- Returns transition.lua's {status, previous state, workflow id} and a fourth
-- element: 1 when the lock was deleted, 0 when it is gone or holds another token.
local lock_token = table.remove(ARGV)
local lock_key = table.remove(KEYS)
local function move()
-- @transition.lua@
end
local out = move()
out[4] = 0
if redis.call('GET', lock_key) == lock_token then
  redis.call('DEL', lock_key)
  out[4] = 1
end
return out
