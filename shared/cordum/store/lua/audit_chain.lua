-- The audit chain's library chunk: SHA-256 and HMAC-SHA256 in plain Lua 5.1 on the
-- `bit` library (Redis's Lua has only SHA-1), and the append of one event to a
-- tenant's chain. It defines functions only and runs nothing: a script that appends
-- is this chunk followed by its own body (cordum.store.audit.with_audit), so that a
-- governance act and its audit event are written by one script, atomically.
--
-- What the body may call:
--   sha256_hex(s)                 -> 64 lowercase hex digits
--   hmac_sha256_hex(key, s)       -> 64 lowercase hex digits (RFC 2104)
--   audit_append(stream_key, head_key, event, event_sha256, hmac_key) -> {seq, hash}
--
-- audit_append reads the head ("<seq>:<hash>", absent for an empty chain), checks
-- everything it checks, then writes: XADD of the entry with id "<seq>-1" and fields
-- seq, prev, hash, hmac, event; SET of the head. Every failure of its own (an empty
-- or oversized event, a digest that is not 64 lowercase hex digits, a malformed head,
-- a head deleted from a chain that has entries, an entry id the stream refuses)
-- raises before its first write. Redis does not undo a script's writes when the
-- script fails part way, so a body that composes it does its own checks first, then
-- calls audit_append, then does its own writes.
--
--   hash = SHA-256(prev .. "\n" .. seq .. "\n" .. event_sha256)
--   hmac = HMAC-SHA256(hmac_key, same bytes), "" when hmac_key is ""
-- prev is the previous entry's hash in hex ("" for seq 1); seq is in decimal;
-- event_sha256 is SHA-256(event) in lowercase hex, computed by the caller: the script
-- hashes at most 200 bytes whatever the event's size (a fixed cost), and does not
-- hash the event again. A writer that passes another event's digest writes an entry
-- that fails verification (the verifier hashes the stored event itself).
--
-- Locals stay inside audit_library below, which builds the functions the first time
-- one is called: the chunk adds five names to the body's main function (whose limit is
-- 200 locals) and costs a script that never appends next to nothing.

local sha256_hex, hmac_sha256_hex, audit_append
local AUDIT_EVENT_MAX = 16384

local function audit_library()
  local band, bxor = bit.band, bit.bxor
  local rshift, ror, tobit, tohex = bit.rshift, bit.ror, bit.tobit, bit.tohex
  local byte, char, rep, concat, format = string.byte, string.char, string.rep, table.concat,
    string.format
  local floor = math.floor

  -- FIPS 180-4, 4.2.2: the first 32 bits of the fractional parts of the cube roots of
  -- the first 64 primes. tobit keeps every word a signed 32-bit number, as bit returns.
  local K = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
  }
  for i = 1, 64 do K[i] = tobit(K[i]) end
  -- 5.3.3: the first 32 bits of the fractional parts of the square roots of the first 8 primes.
  local H0 = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
  }
  for i = 1, 8 do H0[i] = tobit(H0[i]) end

  local W = {}  -- the message schedule, reused by every block (a script runs alone)

  -- 6.2.2: one 64-byte block of s, starting at byte i, into the state H.
  local function compress(H, s, i)
    for j = 1, 16 do
      -- Arithmetic, not bor/lshift: a word below 2^32 is as good to bit and to sums.
      local b1, b2, b3, b4 = byte(s, i, i + 3)
      W[j] = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
      i = i + 4
    end
    for j = 17, 64 do
      local x, y = W[j - 15], W[j - 2]
      local s0 = bxor(ror(x, 7), ror(x, 18), rshift(x, 3))
      local s1 = bxor(ror(y, 17), ror(y, 19), rshift(y, 10))
      W[j] = tobit(W[j - 16] + s0 + W[j - 7] + s1)
    end
    local a, b, c, d, e, f, g, h = H[1], H[2], H[3], H[4], H[5], H[6], H[7], H[8]
    local bc = bxor(b, c)
    for j = 1, 64 do
      -- Sums of five 32-bit words stay exact in a double; tobit takes them mod 2^32.
      -- Ch(e,f,g) = g ^ (e & (f ^ g)); Maj(a,b,c) = b ^ ((a ^ b) & (b ^ c)), where b ^ c
      -- is the a ^ b of the round before.
      local t1 = h + bxor(ror(e, 6), ror(e, 11), ror(e, 25))
        + bxor(g, band(e, bxor(f, g))) + K[j] + W[j]
      local ab = bxor(a, b)
      local t2 = bxor(ror(a, 2), ror(a, 13), ror(a, 22)) + bxor(b, band(ab, bc))
      h, g, f, e, d, c, b, bc = g, f, e, tobit(d + t1), c, b, a, ab
      a = tobit(t1 + t2)
    end
    H[1], H[2], H[3], H[4] = tobit(H[1] + a), tobit(H[2] + b), tobit(H[3] + c), tobit(H[4] + d)
    H[5], H[6], H[7], H[8] = tobit(H[5] + e), tobit(H[6] + f), tobit(H[7] + g), tobit(H[8] + h)
  end

  -- 5.1.1: s, one 1 bit, zeros to 56 bytes mod 64, then its length in bits (64-bit big endian).
  local function words(s)
    local n = #s
    local bits = n * 8
    local hi, lo = floor(bits / 4294967296), bits % 4294967296
    local padded = s .. "\128" .. rep("\0", (55 - n) % 64)
      .. char(floor(hi / 16777216) % 256, floor(hi / 65536) % 256, floor(hi / 256) % 256, hi % 256,
              floor(lo / 16777216) % 256, floor(lo / 65536) % 256, floor(lo / 256) % 256, lo % 256)
    local H = { H0[1], H0[2], H0[3], H0[4], H0[5], H0[6], H0[7], H0[8] }
    for i = 1, #padded, 64 do compress(H, padded, i) end
    return H
  end

  local function digest(s)  -- the 32 raw bytes
    local H, out = words(s), {}
    for j = 1, 8 do
      local x = H[j] % 4294967296
      out[j] = char(floor(x / 16777216), floor(x / 65536) % 256, floor(x / 256) % 256, x % 256)
    end
    return concat(out)
  end

  sha256_hex = function(s)
    local H = words(s)
    for j = 1, 8 do H[j] = tohex(H[j]) end  -- eight lowercase digits of the unsigned word
    return concat(H)
  end

  -- RFC 2104 with B = 64: a key longer than a block is hashed first, then zero-padded.
  local function pad(key, with)
    local out = {}
    for j = 1, 64 do out[j] = char(bxor(byte(key, j) or 0, with)) end
    return concat(out)
  end

  hmac_sha256_hex = function(key, s)
    if #key > 64 then key = digest(key) end
    return sha256_hex(pad(key, 0x5c) .. digest(pad(key, 0x36) .. s))
  end

  local function refuse(msg)
    error({ err = "AUDIT " .. msg })
  end

  audit_append = function(stream_key, head_key, event, event_sha256, hmac_key)
    if type(event) ~= "string" or #event == 0 then refuse("empty event") end
    if #event > AUDIT_EVENT_MAX then
      refuse(format("event of %d bytes is over %d", #event, AUDIT_EVENT_MAX))
    end
    if type(event_sha256) ~= "string" or #event_sha256 ~= 64
        or string.find(event_sha256, "[^0-9a-f]") then
      refuse("event digest must be 64 lowercase hex digits")
    end
    local seq, prev = 0, ""
    local head = redis.call("GET", head_key)
    if head then
      local s, h = string.match(head, "^(%d+):(%x+)$")
      if not s or #h ~= 64 then refuse("malformed head " .. head_key) end
      seq, prev = tonumber(s), h
    elseif redis.call("EXISTS", stream_key) == 1 then
      -- Starting over at seq 1 would fork the chain: its head must be restored first.
      refuse("head " .. head_key .. " is missing from a chain that has entries")
    end
    seq = seq + 1
    local seq_s = format("%d", seq)
    local hashed = prev .. "\n" .. seq_s .. "\n" .. event_sha256
    local hash = sha256_hex(hashed)
    local mac = ""
    if hmac_key and hmac_key ~= "" then mac = hmac_sha256_hex(hmac_key, hashed) end
    -- The one write that can fail (a stream whose top id is past the head): it comes first.
    local ok = redis.pcall("XADD", stream_key, seq_s .. "-1", "seq", seq_s, "prev", prev,
      "hash", hash, "hmac", mac, "event", event)
    if type(ok) == "table" and ok.err then
      refuse("entry " .. seq_s .. " refused by " .. stream_key .. ": " .. ok.err)
    end
    redis.call("SET", head_key, seq_s .. ":" .. hash)
    return { seq, hash }
  end
end

-- Built on first use: a script that carries this chunk but appends nothing (a job
-- transition that is no governance act) runs none of the tables and closures above,
-- only these three small closures. Each stub is replaced by the real function.
sha256_hex = function(s) audit_library(); return sha256_hex(s) end
hmac_sha256_hex = function(key, s) audit_library(); return hmac_sha256_hex(key, s) end
audit_append = function(...) audit_library(); return audit_append(...) end
