-- What commit.lua and propose.lua check before they write anything (each runs after
-- this chunk: cordum.gateway.policy.store): that the policy is still as its writer
-- read it.
-- policy_unchanged(doc_key, snapshots_key, revision, head_id): whether the document at
-- doc_key still has `revision` (0: there was none) and the newest snapshot in the list
-- snapshots_key still has id `head_id` ("" when there was none). A value that is not a
-- JSON object raises.
local function policy_unchanged(doc_key, snapshots_key, revision, head_id)
  local function decoded(raw, name)
    if not raw then return nil end
    local ok, value = pcall(cjson.decode, raw)
    if not ok or type(value) ~= 'table' then
      error('policy: ' .. name .. ' is not a JSON object')
    end
    return value
  end
  local doc = decoded(redis.call('GET', doc_key), 'document')
  local stored = 0
  if doc then stored = tonumber(doc.revision) or 0 end
  if stored ~= tonumber(revision) then return false end
  local head = decoded(redis.call('LINDEX', snapshots_key, 0), 'snapshot')
  local stored_head = ''
  if head then stored_head = tostring(head.id or '') end
  return stored_head == head_id
end
