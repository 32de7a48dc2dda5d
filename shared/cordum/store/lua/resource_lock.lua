-- A tenant's named resource lock (cordum.store.resource_locks): acquire, renew,
-- release or read it in one atomic call, on Redis's own clock.
--
-- KEYS[1] the lock (rlock:<tenant>:<sha256 of the resource>), a JSON document
--         {resource, mode, updated_at, owners: [{owner, principal, expires_at, fence,
--         acquired_at}]}, expiring (PXAT) with its last owner
-- KEYS[2] the tenant's index (rlock:<tenant>:#index): sha256 -> the lock's expiry (ms),
--         expiring with the tenant's last lock
-- KEYS[3] the tenant's fencing counter (rlock:<tenant>:#fence), never expiring
-- ARGV[1] acquire | renew | release | get
-- ARGV[2] owner token   ARGV[3] the caller's principal   ARGV[4] EXCLUSIVE | SHARED
-- ARGV[5] ttl (ms)   ARGV[6] the resource's name   ARGV[7] most owners of a lock
-- ARGV[8] most live locks of the tenant   ARGV[9] the lock's member in the index
--
-- Owners whose hold ran out are dropped before anything is decided, so no sweeper is
-- needed. Returns {status, now (ms), the lock's JSON or "", detail}; status is ok,
-- busy (detail: ms until the blocking holds run out), not_held, not_owner (the token
-- is held by another principal), too_many_owners, too_many_locks or missing. On ok,
-- detail is the owner's fencing token (acquire, renew, release).
local lock_key, index_key, fence_key = KEYS[1], KEYS[2], KEYS[3]
local op = ARGV[1]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local function load()
  local raw = redis.call('GET', lock_key)
  if not raw then
    return nil
  end
  local doc = cjson.decode(raw)
  local kept = {}
  if type(doc.owners) == 'table' then
    for _, o in ipairs(doc.owners) do
      if tonumber(o.expires_at) > now then
        kept[#kept + 1] = o
      end
    end
  end
  if #kept == 0 then
    return nil
  end
  doc.owners = kept
  return doc
end

local function latest(doc)
  local last = now
  for _, o in ipairs(doc.owners) do
    if o.expires_at > last then
      last = o.expires_at
    end
  end
  return last
end

local function find(doc, owner)
  for i, o in ipairs(doc.owners) do
    if o.owner == owner then
      return i, o
    end
  end
  return nil, nil
end

local function save(doc)
  doc.updated_at = now
  local until_ms = latest(doc)
  local raw = cjson.encode(doc)
  redis.call('SET', lock_key, raw, 'PXAT', until_ms)
  redis.call('ZADD', index_key, until_ms, ARGV[9])
  -- The index goes when the tenant's last lock runs out.
  local top = redis.call('ZREVRANGE', index_key, 0, 0, 'WITHSCORES')
  redis.call('PEXPIREAT', index_key, top[2])
  return raw
end

if op == 'get' then
  local doc = load()
  if not doc then
    return {'missing', now, '', ''}
  end
  return {'ok', now, cjson.encode(doc), ''}
end

local owner, principal = ARGV[2], ARGV[3]
local doc = load()

if op == 'acquire' then
  local mode, ttl = ARGV[4], tonumber(ARGV[5])
  local index = nil
  if not doc then
    -- A lock new to the index counts against the tenant's bound; entries of locks
    -- that ran out are dropped first.
    redis.call('ZREMRANGEBYSCORE', index_key, '-inf', now)
    if not redis.call('ZSCORE', index_key, ARGV[9])
        and redis.call('ZCARD', index_key) >= tonumber(ARGV[8]) then
      return {'too_many_locks', now, '', ''}
    end
    doc = {resource = ARGV[6], mode = mode, owners = {}}
  else
    local i, held = find(doc, owner)
    if held and held.principal ~= principal then
      return {'not_owner', now, '', ''}
    end
    if held then
      if mode == 'EXCLUSIVE' and doc.mode == 'SHARED' and #doc.owners > 1 then
        return {'busy', now, cjson.encode(doc), tostring(latest(doc) - now)}
      end
      if mode == 'EXCLUSIVE' then
        doc.mode = 'EXCLUSIVE'
      end
      index = i
    elseif doc.mode == 'EXCLUSIVE' or mode == 'EXCLUSIVE' then
      return {'busy', now, cjson.encode(doc), tostring(latest(doc) - now)}
    elseif #doc.owners >= tonumber(ARGV[7]) then
      return {'too_many_owners', now, cjson.encode(doc), ''}
    end
  end
  local fence = redis.call('INCR', fence_key)
  local entry = {owner = owner, principal = principal, expires_at = now + ttl,
                 fence = fence, acquired_at = now}
  if index then
    entry.acquired_at = doc.owners[index].acquired_at
    doc.owners[index] = entry
  else
    doc.owners[#doc.owners + 1] = entry
  end
  return {'ok', now, save(doc), tostring(fence)}
end

if not doc then
  return {'not_held', now, '', ''}
end
local i, held = find(doc, owner)
if not held then
  return {'not_held', now, '', ''}
end
if held.principal ~= principal then
  return {'not_owner', now, '', ''}
end

if op == 'renew' then
  held.expires_at = now + tonumber(ARGV[5])
  return {'ok', now, save(doc), tostring(held.fence)}
end

if op == 'release' then
  table.remove(doc.owners, i)
  if #doc.owners == 0 then
    redis.call('DEL', lock_key)
    redis.call('ZREM', index_key, ARGV[9])
    doc.updated_at = now
    doc.owners = nil
    return {'ok', now, cjson.encode(doc), tostring(held.fence)}
  end
  return {'ok', now, save(doc), tostring(held.fence)}
end

return redis.error_reply('unknown resource lock operation')
