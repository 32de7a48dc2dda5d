-- Move a tenant's staged audit events from its outbox into its chain, oldest first
-- (run after audit_chain.lua: with_audit). An event leaves the outbox only in the
-- step that appends it, so none is lost or appended twice.
-- KEYS[1] the outbox (a list of items "<sha256 hex of the event>\n<event bytes>")
-- KEYS[2] the chain's stream  KEYS[3] its head  KEYS[4] the set of tenants with a
-- staged event
-- ARGV[1] the HMAC key ('' for none)  ARGV[2] at most this many events
-- ARGV[3] the tenant (removed from KEYS[4] once its outbox is empty)
-- Returns the number appended.
--
-- The digest was computed where the event was staged, so a drain hashes no event.
-- An item without one (a canonical event starts with "{", staged by an older
-- version) has its digest computed here: about 43 us of Redis time per 64 bytes.
local moved = 0
for _ = 1, tonumber(ARGV[2]) do
  local item = redis.call('LINDEX', KEYS[1], 0)
  if not item then break end
  local digest, event
  if string.sub(item, 65, 65) == '\n' and not string.find(string.sub(item, 1, 64), '[^0-9a-f]') then
    digest, event = string.sub(item, 1, 64), string.sub(item, 66)
  else
    digest, event = sha256_hex(item), item
  end
  audit_append(KEYS[2], KEYS[3], event, digest, ARGV[1])
  redis.call('LPOP', KEYS[1])
  moved = moved + 1
end
if redis.call('LLEN', KEYS[1]) == 0 then redis.call('SREM', KEYS[4], ARGV[3]) end
return moved
