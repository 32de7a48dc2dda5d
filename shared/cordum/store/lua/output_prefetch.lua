-- What a result's output checks read, in one call: the stored request and the
-- result's size and first bytes. Reads only: nothing is written.
-- KEYS[1] job:req:<id>   KEYS[2] the result's key (absent: no result to read)
-- ARGV[1] the last byte offset of the head to read (GETRANGE end, inclusive)
-- Returns {request or false} without KEYS[2], else {request or false, size, head}.
local req = redis.call('GET', KEYS[1])
if #KEYS < 2 then
  return {req}
end
return {req, redis.call('STRLEN', KEYS[2]), redis.call('GETRANGE', KEYS[2], 0, ARGV[1])}
