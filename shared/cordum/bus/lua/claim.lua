-- Claim the messages of one pull before they are sent to the queue.
-- A message already forwarded (its processed key exists) is reported, not claimed; one
-- whose in-flight key another forwarder holds is reported busy with the time that claim
-- has left. The caller's own leftover claim (a release that never reached Redis) is
-- taken again: one forwarder never handles the same message twice at once.
-- Needs Redis with cluster mode disabled (the keys of one pull live in any slot).
-- KEYS[2i-1] cordum:bus:processed:<stream>:<seq>   KEYS[2i] cordum:bus:inflight:<stream>:<seq>
-- ARGV[1] forwarder id, stored as the in-flight value
-- ARGV[2] in-flight TTL (ms)
-- Returns one {status, ms} per message, in KEYS order: {'processed', 0}, {'claimed', 0}
-- or {'busy', PTTL of the other forwarder's in-flight key}.
local out = {}
for i = 1, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    out[#out + 1] = {'processed', 0}
  else
    local holder = redis.call('GET', KEYS[i + 1])
    if holder and holder ~= ARGV[1] then
      out[#out + 1] = {'busy', redis.call('PTTL', KEYS[i + 1])}
    else
      redis.call('SET', KEYS[i + 1], ARGV[1], 'PX', ARGV[2])
      out[#out + 1] = {'claimed', 0}
    end
  end
end
return out
