-- Keep a policy change that waits for a second person's confirmation, with the audit
-- entry that records it, in one step and only if the policy is still what the
-- proposer read (the same compare as commit.lua).
-- KEYS[1] the policy document; KEYS[2] the snapshots; KEYS[3] the audit;
-- KEYS[4] the proposals (cfg:system:policy_proposals): a hash id -> JSON
-- ARGV[1] the revision the proposer read; ARGV[2] the id of the newest snapshot read
-- ARGV[3] how many proposals may wait; ARGV[4] how many audit entries are kept
-- ARGV[5] the proposal's id; ARGV[6] the proposal (JSON); ARGV[7] the audit entry
-- ARGV[8] M, the number of audit-chain arguments (0: none); else KEYS[5] and KEYS[6]
--         are the system chain's stream and head and ARGV[9..8+M] what audit_append
--         takes after them (the script is loaded after audit_chain.lua)
-- ARGV[9+M..] ids of expired proposals, dropped first
-- Returns "ok", "conflict" (nothing written) or "full" (nothing written). Runs after
-- unchanged.lua.
if not policy_unchanged(KEYS[1], KEYS[2], ARGV[1], ARGV[2]) then return 'conflict' end

local audited = tonumber(ARGV[8])
for i = 9 + audited, #ARGV do redis.call('HDEL', KEYS[4], ARGV[i]) end
if redis.call('HLEN', KEYS[4]) >= tonumber(ARGV[3]) then return 'full' end
if audited > 0 then audit_append(KEYS[5], KEYS[6], unpack(ARGV, 9, 8 + audited)) end
redis.call('HSET', KEYS[4], ARGV[5], ARGV[6])
redis.call('LPUSH', KEYS[3], ARGV[7])
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[4]) - 1)
return 'ok'
