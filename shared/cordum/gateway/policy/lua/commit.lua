-- Commit one governed change of the system policy in one step, so two writers never
-- both win: compare what the writer read, then write the policy document, push the
-- snapshots and append the audit entry.
-- KEYS[1] the policy document (cfg:system:policy): a JSON string with "revision"
-- KEYS[2] the snapshots (cfg:system:policy_snapshots): a list of JSON, newest first
-- KEYS[3] the audit (cfg:system:policy_audit): a list of JSON, newest first
-- ARGV[1] the revision the writer read (0: there was no document)
-- ARGV[2] the id of the newest snapshot the writer read ("" when there was none)
-- ARGV[3] the new document (JSON), or "" to leave the document as it is
-- ARGV[4] how many snapshots are kept; ARGV[5] how many audit entries are kept
-- ARGV[6] the audit entry (JSON)
-- ARGV[7] M, the number of audit-chain arguments (0: none); else KEYS[4] and KEYS[5]
--         are the system chain's stream and head and ARGV[8..7+M] what audit_append
--         takes after them (the script is loaded after audit_chain.lua)
-- ARGV[8+M..] snapshots to push (JSON), oldest first
-- Returns 1 when committed, 0 when the document or the newest snapshot changed since
-- the writer read them (nothing is written then). Runs after unchanged.lua.
if not policy_unchanged(KEYS[1], KEYS[2], ARGV[1], ARGV[2]) then return 0 end

local audited = tonumber(ARGV[7])
if audited > 0 then
  -- Every check is above: the change and its event in the chain, or neither.
  audit_append(KEYS[4], KEYS[5], unpack(ARGV, 8, 7 + audited))
end
if ARGV[3] ~= '' then redis.call('SET', KEYS[1], ARGV[3]) end
for i = 8 + audited, #ARGV do redis.call('LPUSH', KEYS[2], ARGV[i]) end
if #ARGV >= 8 + audited then redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[4]) - 1) end
redis.call('LPUSH', KEYS[3], ARGV[6])
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[5]) - 1)
return 1
