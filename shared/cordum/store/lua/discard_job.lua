-- Undo create_job for a job whose submit could not be published (no half-written job).
-- Only a job still in the state it was created with is removed.
-- KEYS as create_job.lua. ARGV[1] job id  ARGV[2] expected state
-- Returns 1 when removed, 0 when the job moved on or does not exist.
if redis.call('HGET', KEYS[1], 'state') ~= ARGV[2] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[6])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[9], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('SREM', KEYS[7], ARGV[1])
redis.call('SREM', KEYS[8], ARGV[1])
return 1
