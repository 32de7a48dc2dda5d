-- Append one event to a tenant's log, once, and keep the log bounded.
-- KEYS[1] cordum:stream:<tenant> (the log)   KEYS[2] cordum:stream:seen:<digest>
-- ARGV[1] max events (MAXLEN ~)   ARGV[2] max age (ms; MINID ~ from the server's clock)
-- ARGV[3] the log's TTL (s)   ARGV[4] the seen key's TTL (s)
-- ARGV[5..] entry field, value pairs (the entry also records 'prev')
-- Returns {previous id, new id}: the previous is the last entry before this one
-- ('0-0' for none), so a reader can tell whether it saw it (and a replay whether
-- entries before one were trimmed away). Returns {} when KEYS[2]
-- exists: the same bus message was appended already (a re-publish, another replica).
if redis.call('SET', KEYS[2], '1', 'NX', 'EX', tonumber(ARGV[4])) == false then
  return {}
end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local prev = '0-0'
if last[1] then prev = last[1][1] end
local fields = {'prev', prev}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(fields))
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('XTRIM', KEYS[1], 'MINID', '~', tostring(now_ms - tonumber(ARGV[2])))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
return {prev, id}
