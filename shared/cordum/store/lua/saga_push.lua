-- Push a compensation template onto a workflow's saga stack (LIFO: rollback LPOPs).
-- Recording is idempotent per step: the result of one job may be delivered more
-- than once (a redelivery after a failed state write), and a step recorded twice
-- would be compensated twice. The recorded-set makes the second push a no-op.
-- A push-back (an entry popped by a rollback whose dispatch failed) passes no
-- step id and always lands, at the head where it was popped from.
-- Both keys expire ARGV[2] seconds after the last push, so an abandoned workflow's
-- stack does not live forever.
-- KEYS[1] saga:<tenant>:<workflowID>:stack   KEYS[2] saga:<tenant>:<workflowID>:recorded
-- (the tenant's own keys: the caller names them, see saga_key in store/saga.py)
-- ARGV[1] the entry (proto-binary JobRequest)
-- ARGV[2] TTL of both keys (s)
-- ARGV[3] step id to record once ("" = push-back, no check)
-- Returns 1 when the entry was pushed, 0 when the step was recorded already.
if ARGV[3] ~= '' then
  if redis.call('SADD', KEYS[2], ARGV[3]) == 0 then
    return 0
  end
  redis.call('EXPIRE', KEYS[2], ARGV[2])
end
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
