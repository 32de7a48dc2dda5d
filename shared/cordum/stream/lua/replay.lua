-- The newest entries of a tenant's log after an id, and the log's newest id.
-- KEYS[1] cordum:stream:<tenant>
-- ARGV[1] the id after which to read (exclusive)   ARGV[2] how many at most
-- Returns {exists, newest id, entries newest first}: exists 0 when the log is absent
-- (expired); the newest id is '0-0' when it holds nothing.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0, '0-0', {}}
end
local newest = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local newest_id = '0-0'
if newest[1] then newest_id = newest[1][1] end
local entries = redis.call('XREVRANGE', KEYS[1], '+', '(' .. ARGV[1], 'COUNT', ARGV[2])
return {1, newest_id, entries}
