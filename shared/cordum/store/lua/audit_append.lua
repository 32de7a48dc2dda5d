-- Append one event to a tenant's audit chain (run after audit_chain.lua: with_audit).
-- KEYS[1] the chain's stream  KEYS[2] its head
-- ARGV[1] the event's canonical bytes  ARGV[2] their SHA-256, lowercase hex
-- ARGV[3] the HMAC key ('' for none)
-- Returns {seq, hash}.
return audit_append(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3])
