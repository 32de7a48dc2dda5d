-- Settle the messages of one queue call before they are acked or NAKed.
-- A message the queue accepted gets its processed key, so a redelivery (the ack was
-- lost) is acked without a second send; every message gives up its in-flight key, but
-- only while the caller still holds it.
-- KEYS[2i-1] cordum:bus:processed:<stream>:<seq>   KEYS[2i] cordum:bus:inflight:<stream>:<seq>
-- ARGV[1] forwarder id (the in-flight value it claimed with)
-- ARGV[2] processed TTL (s)
-- ARGV[2+i] '1' when the queue accepted message i, '0' when it goes back to the stream
-- Returns the number of processed keys written.
local marked = 0
for i = 1, #KEYS / 2 do
  local processed, inflight = KEYS[2 * i - 1], KEYS[2 * i]
  if ARGV[2 + i] == '1' then
    redis.call('SET', processed, '1', 'EX', ARGV[2])
    marked = marked + 1
  end
  if redis.call('GET', inflight) == ARGV[1] then
    redis.call('DEL', inflight)
  end
end
return marked
