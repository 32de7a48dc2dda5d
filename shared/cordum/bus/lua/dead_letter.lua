-- Write the DLQ records of messages about to be terminated, all or none.
-- The caller terminates the messages only after this returned: a record is never
-- missing for a terminated message.
-- KEYS[1] dlq:bus:index (ZSET, member <stream>:<seq>, score = time written in us)
-- KEYS[1+i] dlq:bus:<stream>:<seq>
-- ARGV[1] now (us)  ARGV[2] record TTL (s)  ARGV[3] index entries kept (newest)
-- ARGV[2+2i] index member of record i   ARGV[3+2i] record i (JSON)
-- Returns the number of records written.
local n = #KEYS - 1
for i = 1, n do
  redis.call('SET', KEYS[1 + i], ARGV[3 + 2 * i], 'EX', ARGV[2])
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2 + 2 * i])
end
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(tonumber(ARGV[3]) + 1))
return n
