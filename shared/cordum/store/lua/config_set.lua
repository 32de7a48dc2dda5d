-- Write one config document if it is still at the revision its writer read, with the
-- write's event in the audit chain, in one step (cordum.store.config_docs).
-- KEYS[1] the document (cfg:<scope>:...): a JSON object with "revision"
-- KEYS[2] the set of the chain tenant's document keys (the count bound)
-- ARGV[1] the revision the writer read (0: there was no document)
-- ARGV[2] the new document (JSON)
-- ARGV[3] how many documents one tenant may hold
-- ARGV[4] M, the number of audit-chain arguments (0: none); else KEYS[3] and KEYS[4]
--         are the chain's stream and head and ARGV[5..4+M] what audit_append takes
--         after them (the script is loaded after audit_chain.lua)
-- Returns 1 when written, 0 when the revision moved (nothing written), -1 when the
-- document is new and the tenant already holds the most documents it may.
local raw = redis.call('GET', KEYS[1])
local stored = 0
if raw then
  local ok, doc = pcall(cjson.decode, raw)
  if not ok or type(doc) ~= 'table' then
    return redis.error_reply('config: the stored document is not a JSON object')
  end
  stored = tonumber(doc.revision) or 0
end
if stored ~= tonumber(ARGV[1]) then return 0 end
if not raw and redis.call('SISMEMBER', KEYS[2], KEYS[1]) == 0 and
    redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[3]) then
  return -1
end

local audited = tonumber(ARGV[4])
if audited > 0 then
  -- Every check is above: the write and its event in the chain, or neither.
  audit_append(KEYS[3], KEYS[4], unpack(ARGV, 5, 4 + audited))
end
redis.call('SADD', KEYS[2], KEYS[1])
redis.call('SET', KEYS[1], ARGV[2])
return 1
