"""The audit chain on the real Redis: the Lua SHA-256/HMAC against Python's, appends,
concurrency, composition into another script, the outbox and its drain, and tampering
found by the verifier."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os

import pytest
import redis.asyncio as aioredis

from cordum.store.audit import (
    MAX_EVENT_BYTES,
    MAX_READ,
    AuditChain,
    AuditEncodingError,
    AuditEntry,
    AuditEvent,
    encode_event,
    entry_hash,
    entry_hmac,
    event_digest,
    head_key,
    stream_key,
    with_audit,
)
from cordum.store.audit_trail import OUTBOX_TENANTS, AuditTrail, outbox_key
from cordum.store.audit_verify import verify_chain
from cordum.store.errors import StoreError
from tests.conftest import REDIS_URL
from tests.helpers import run

KEY = b"audit-test-key"


class Env:
    def __init__(self, unique: str) -> None:
        self.unique = unique
        self.loop = asyncio.new_event_loop()
        self.redis = aioredis.Redis.from_url(REDIS_URL)
        self.other = aioredis.Redis.from_url(REDIS_URL)
        self.tenant = f"acme-{unique}"
        self.chain = AuditChain(self.redis, KEY)

    def run(self, coro, timeout: float = 30.0):  # type: ignore[no-untyped-def]
        return run(coro, timeout, loop=self.loop)

    def event(self, n: int = 0, tenant: str | None = None, **over: object) -> AuditEvent:
        fields: dict[str, object] = dict(
            type="approval.approve", severity="HIGH", tenant=tenant or self.tenant,
            actor="alice", actor_key="key-1", at=1_700_000_000_000_000 + n,
            job_id=f"job-{n}", reason=f"act {n}")
        fields.update(over)
        return AuditEvent(**fields)  # type: ignore[arg-type]

    def append(self, n: int, chain: AuditChain | None = None) -> tuple[int, str]:
        return self.run((chain or self.chain).append(self.tenant, self.event(n)))

    def entries(self, tenant: str | None = None) -> list[AuditEntry]:
        return self.run(self.chain.read(tenant or self.tenant, count=MAX_READ))

    def verify(self, tenant: str | None = None, **kw: object):  # type: ignore[no-untyped-def]
        kw.setdefault("hmac_key", KEY)
        return self.run(verify_chain(self.redis, tenant or self.tenant, **kw))  # type: ignore[arg-type]

    def rewrite(self, entries: list[AuditEntry]) -> None:
        """The tenant's stream deleted and written anew with ``entries`` in this order,
        each under its own stream id (as someone with write access could)."""
        async def go() -> None:
            key = stream_key(self.tenant)
            await self.redis.delete(key)
            for e in entries:
                fields = {"seq": e.seq, "prev": e.prev, "hash": e.hash, "event": e.event}
                if e.hmac is not None:
                    fields["hmac"] = e.hmac
                await self.redis.xadd(key, fields, id=e.stream_id)
        self.run(go())


@pytest.fixture
def env(unique):
    e = Env(unique)
    yield e
    keys = e.run(e.redis.keys(f"audit:*{unique}*"))
    keys += e.run(e.redis.keys(f"test:audit:{unique}*"))
    if keys:
        e.run(e.redis.delete(*keys))
    e.run(e.redis.aclose())
    e.run(e.other.aclose())
    e.loop.close()


def gaps(result) -> list[tuple[int, str]]:  # type: ignore[no-untyped-def]
    return [(g.at_seq, g.type) for g in result.gaps]


# --------------------------------------------------------------------------- the Lua hashes

LENGTHS = [0, 1, 3, 55, 56, 57, 63, 64, 65, 111, 119, 120, 127, 128, 129, 500, 1000, 4096, 16384]


def test_lua_sha256_matches_hashlib_on_many_inputs(env):
    script = env.redis.register_script(with_audit("return sha256_hex(ARGV[1])"))
    inputs = [b"", b"abc", "größe ✓ 日本語 \U0001f600".encode(), bytes(range(256)) * 3]
    inputs += [os.urandom(n) for n in LENGTHS] + [b"a" * n for n in LENGTHS]

    async def go():
        return [await script(args=[m]) for m in inputs]

    for message, got in zip(inputs, env.run(go()), strict=True):
        assert got.decode() == hashlib.sha256(message).hexdigest(), len(message)


def test_lua_hmac_sha256_matches_the_hmac_module(env):
    script = env.redis.register_script(with_audit("return hmac_sha256_hex(ARGV[1], ARGV[2])"))
    cases = [(os.urandom(k), os.urandom(n)) for k in (1, 16, 32, 63, 64, 65, 200)
             for n in (0, 55, 64, 500)]
    cases += [(b"key", "größe ✓".encode()), (b"\x00" * 10, b"")]

    async def go():
        return [await script(args=[k, m]) for k, m in cases]

    for (key, message), got in zip(cases, env.run(go()), strict=True):
        assert got.decode() == hmac.new(key, message, hashlib.sha256).hexdigest(), (
            len(key), len(message))


# --------------------------------------------------------------------------- appending


def test_appends_chain_and_each_hash_recomputes_in_python(env):
    results = [env.append(n) for n in range(1, 4)]
    entries = env.entries()
    assert [r[0] for r in results] == [1, 2, 3]
    prev = ""
    for n, (entry, (seq, digest)) in enumerate(zip(entries, results, strict=True), start=1):
        assert seq == n
        data = encode_event(env.event(n))
        assert (entry.stream_id, entry.seq, entry.prev, entry.event) == (f"{n}-1", str(n), prev,
                                                                          data)
        assert entry.hash == digest == entry_hash(prev, n, data)
        assert entry.hmac == entry_hmac(KEY, prev, n, data)
        assert entry.decoded()["job_id"] == f"job-{n}"
        prev = digest
    assert env.run(env.chain.head(env.tenant)) == (3, results[-1][1])
    result = env.verify()
    assert result.as_dict() == {"status": "ok", "total_events": 3, "verified_events": 3,
                                "first_seq": 1, "last_seq": 3, "gaps": [],
                                "hmac_verified": True, "gaps_truncated": False}


def test_without_a_key_entries_have_an_empty_hmac_and_verify_ok_without_one(env):
    plain = AuditChain(env.redis)
    env.append(1, plain)
    assert env.entries()[0].hmac == ""
    assert env.verify(hmac_key=None).status == "ok"
    assert gaps(env.verify()) == [(1, "hmac_missing")]


def test_200_concurrent_appends_on_two_clients_give_seq_1_to_200_without_a_fork(env):
    second = AuditChain(env.other, KEY)

    async def go():
        return await asyncio.gather(*(
            (env.chain if n % 2 else second).append(env.tenant, env.event(n))
            for n in range(200)))

    results = env.run(go())
    assert sorted(seq for seq, _ in results) == list(range(1, 201))
    entries = env.entries()
    assert [e.seq_number for e in entries] == list(range(1, 201))
    for before, after in zip(entries, entries[1:], strict=False):
        assert after.prev == before.hash
    result = env.verify(batch=37)
    assert (result.status, result.total_events, result.verified_events) == ("ok", 200, 200)


def test_read_is_bounded_and_pages_after_a_seq(env):
    for n in range(1, 8):
        env.append(n)
    page = env.run(env.chain.read(env.tenant, after_seq=2, count=3))
    assert [e.seq_number for e in page] == [3, 4, 5]
    assert [e.seq_number for e in env.run(env.chain.read(env.tenant, after_seq=5))] == [6, 7]
    assert env.run(env.chain.read(env.tenant, after_seq=7)) == []
    many = env.run(env.chain.read(env.tenant, count=10**6))
    assert len(many) == 7  # the count is capped at MAX_READ, not refused


def test_a_client_that_decodes_replies_reads_and_verifies_the_same_bytes(env):
    env.run(env.chain.append(env.tenant, env.event(1, reason="größe ✓")))
    env.append(2)

    async def go():
        text = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
        try:
            return (await AuditChain(text, KEY).read(env.tenant),
                    await verify_chain(text, env.tenant, hmac_key=KEY))
        finally:
            await text.aclose()

    entries, result = env.run(go())
    assert [e.event for e in entries] == [e.event for e in env.entries()]
    assert result.status == "ok"


def test_tenants_chains_are_independent(env):
    other = f"globex-{env.unique}"
    env.append(1)
    env.append(2)
    seq, digest = env.run(env.chain.append(other, env.event(9, tenant=other)))
    assert seq == 1
    entries = env.run(env.chain.read(other))
    assert [(e.seq, e.prev) for e in entries] == [("1", "")]
    assert env.verify().total_events == 2
    assert env.verify(tenant=other).status == "ok"
    env.run(env.redis.xdel(stream_key(other), "1-1"))
    assert env.verify().status == "ok"
    assert env.verify(tenant=other).status == "compromised"


def test_an_event_of_another_tenant_is_refused(env):
    with pytest.raises(ValueError, match="appended to"):
        env.run(env.chain.append(env.tenant, env.event(1, tenant="someone-else")))


def test_an_event_over_16_kib_appends_nothing(env):
    with pytest.raises(AuditEncodingError, match="over 16384"):
        env.run(env.chain.append(env.tenant, env.event(1, reason="x" * MAX_EVENT_BYTES)))
    # The script holds the same bound for bytes that did not come through encode_event.
    script = env.redis.register_script(with_audit(
        "return audit_append(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3])"))
    keys = [stream_key(env.tenant), head_key(env.tenant)]
    big = b"x" * (MAX_EVENT_BYTES + 1)
    with pytest.raises(Exception, match="AUDIT event of 16385 bytes is over 16384"):
        env.run(script(keys=keys, args=[big, event_digest(big), KEY]))
    with pytest.raises(Exception, match="AUDIT empty event"):
        env.run(script(keys=keys, args=[b"", event_digest(b""), KEY]))
    assert env.run(env.redis.exists(*keys)) == 0
    full = b"x" * MAX_EVENT_BYTES
    assert env.run(script(keys=keys, args=[full, event_digest(full), KEY]))[0] == 1


@pytest.mark.parametrize("digest", ["", "abc", "A" * 64, "g" * 64, "0" * 63, "0" * 65,
                                    hashlib.sha256(b"x").hexdigest().upper()])
def test_a_digest_that_is_not_64_lowercase_hex_digits_appends_nothing(env, digest):
    script = env.redis.register_script(with_audit(
        "return audit_append(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3])"))
    keys = [stream_key(env.tenant), head_key(env.tenant)]
    with pytest.raises(Exception, match="AUDIT event digest must be 64 lowercase hex"):
        env.run(script(keys=keys, args=[b"{}", digest, KEY]))
    assert env.run(env.redis.exists(*keys)) == 0


def test_a_writer_that_chains_another_events_digest_fails_verification_at_its_seq(env):
    env.append(1)
    script = env.redis.register_script(with_audit(
        "return audit_append(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3])"))
    keys = [stream_key(env.tenant), head_key(env.tenant)]
    shown, chained = encode_event(env.event(2)), encode_event(env.event(3))
    # The script takes the digest on trust (it does not hash the event again) ...
    assert env.run(script(keys=keys, args=[shown, event_digest(chained), KEY]))[0] == 2
    env.append(4)
    # ... and the verifier, which hashes the stored event itself, names the entry.
    result = env.verify()
    assert (result.status, gaps(result)) == ("compromised", [(2, "hash_mismatch"),
                                                             (2, "hmac_mismatch")])
    assert result.verified_events == 2


def test_the_lua_hashes_the_same_bytes_whatever_the_events_size(env):
    small = env.run(env.chain.append(env.tenant, env.event(1)))
    large = env.run(env.chain.append(env.tenant, env.event(2, reason="r" * 16000)))
    entries = env.entries()
    assert small[1] == entry_hash("", 1, entries[0].event)
    assert large[1] == entry_hash(small[1], 2, entries[1].event)
    assert len(entries[1].event) > 16000


# --------------------------------------------------------------------------- composition

COMPOSED = """
-- KEYS[1] a record  KEYS[2] the audit stream  KEYS[3] its head
-- ARGV[1] the record's value  ARGV[2] the event  ARGV[3] its SHA-256 hex
-- ARGV[4] the HMAC key  ARGV[5] '1': refuse
if ARGV[5] == '1' then
  return redis.error_reply('refused by its own check')
end
local appended = audit_append(KEYS[2], KEYS[3], ARGV[2], ARGV[3], ARGV[4])
redis.call('SET', KEYS[1], ARGV[1])
return appended
"""


def test_a_composed_script_writes_its_act_and_the_event_together_or_neither(env):
    script = env.redis.register_script(with_audit(COMPOSED))
    record = f"test:audit:{env.unique}:x"
    keys = [record, stream_key(env.tenant), head_key(env.tenant)]

    seq, digest = env.run(script(keys=keys, args=["done", *env.chain.script_args(env.event(1))]))
    assert (seq, env.run(env.redis.get(record))) == (1, b"done")
    assert env.entries()[0].hash == digest.decode()

    # Its own check fails first: neither the record nor an entry is written.
    with pytest.raises(Exception, match="refused by its own check"):
        env.run(script(keys=keys, args=["again", *env.chain.script_args(env.event(2)), "1"]))
    # The append refuses (an oversized event): the record is not written either.
    with pytest.raises(Exception, match="AUDIT event of"):
        big = b"x" * (MAX_EVENT_BYTES + 1)
        env.run(script(keys=keys, args=["again", big, event_digest(big), KEY]))
    assert env.run(env.redis.get(record)) == b"done"
    assert [e.seq_number for e in env.entries()] == [1]
    assert env.verify().status == "ok"


# --------------------------------------------------------------------------- the outbox


def test_staged_events_carry_their_digest_and_drain_into_the_chain_in_order(env):
    trail = AuditTrail(env.redis, KEY)

    async def stage(n: int) -> None:
        pipe = env.redis.pipeline(transaction=True)
        pipe.set(f"test:audit:{env.unique}:act{n}", "done")
        trail.stage(pipe, env.event(n))
        await pipe.execute()

    for n in (1, 2, 3):
        env.run(stage(n))
    staged = env.run(env.redis.lrange(outbox_key(env.tenant), 0, -1))
    for n, item in enumerate(staged, start=1):
        data = encode_event(env.event(n))
        assert item == event_digest(data).encode() + b"\n" + data
    assert env.run(trail.drain(env.tenant, most=2)) == 2
    assert env.run(trail.drain(env.tenant)) == 1
    assert env.run(env.redis.exists(outbox_key(env.tenant))) == 0
    assert env.tenant.encode() not in env.run(env.redis.smembers(OUTBOX_TENANTS))
    entries = env.entries()
    assert [e.event for e in entries] == [encode_event(env.event(n)) for n in (1, 2, 3)]
    assert env.verify().status == "ok"


def test_an_outbox_item_staged_without_a_digest_is_hashed_by_the_drain(env):
    trail = AuditTrail(env.redis, KEY)
    legacy = encode_event(env.event(1))
    env.run(env.redis.rpush(outbox_key(env.tenant), legacy))
    assert env.run(trail.drain(env.tenant)) == 1
    [entry] = env.entries()
    assert entry.event == legacy and entry.hash == entry_hash("", 1, legacy)
    assert env.verify().status == "ok"


# --------------------------------------------------------------------------- tampering


def test_untouched_chain_of_5_verifies_ok(env):
    for n in range(1, 6):
        env.append(n)
    result = env.verify(batch=2)
    assert (result.status, result.verified_events, result.hmac_verified) == ("ok", 5, True)


def test_event_edited_at_seq_2_in_redis_is_a_hash_mismatch_at_2(env):
    for n in range(1, 5):
        env.append(n)
    entries = env.entries()
    e = entries[1]
    entries[1] = AuditEntry(e.stream_id, e.seq, e.prev, e.hash, e.hmac,
                            e.event.replace(b"act 2", b"act 7"))
    env.rewrite(entries)
    result = env.verify()
    assert (result.status, gaps(result)) == ("compromised", [(2, "hash_mismatch"),
                                                             (2, "hmac_mismatch")])
    assert result.verified_events == 3
    assert gaps(env.verify(hmac_key=None)) == [(2, "hash_mismatch")]


def test_event_and_hash_forged_at_seq_3_without_the_key_are_named_at_3(env):
    for n in range(1, 5):
        env.append(n)
    entries = env.entries()
    e = entries[2]
    data = e.event.replace(b"act 3", b"act 9")
    entries[2] = AuditEntry(e.stream_id, e.seq, e.prev, entry_hash(e.prev, 3, data), e.hmac, data)
    env.rewrite(entries)
    assert gaps(env.verify()) == [(3, "hmac_mismatch"), (4, "broken_link")]


def test_entry_3_deleted_with_xdel_is_missing_at_3(env):
    for n in range(1, 6):
        env.append(n)
    env.run(env.redis.xdel(stream_key(env.tenant), "3-1"))
    result = env.verify()
    assert result.status == "compromised"
    assert [g.as_dict() for g in result.gaps] == [{"at_seq": 3, "type": "missing"}]
    assert result.total_events == 4


def test_the_last_entry_5_deleted_is_missing_at_5_by_the_head(env):
    for n in range(1, 6):
        env.append(n)
    env.run(env.redis.xdel(stream_key(env.tenant), "5-1"))
    assert gaps(env.verify()) == [(5, "missing")]


def test_entries_3_and_4_reordered_in_redis_are_named(env):
    for n in range(1, 6):
        env.append(n)
    entries = env.entries()
    swapped = entries[:2] + [entries[3], entries[2]] + entries[4:]
    # A stream keeps its ids in order: the swap puts seq 4 under id 3-1 and 3 under 4-1.
    env.rewrite([AuditEntry(f"{i}-1", e.seq, e.prev, e.hash, e.hmac, e.event)
                 for i, e in enumerate(swapped, start=1)])
    assert gaps(env.verify()) == [(3, "out_of_order"), (4, "out_of_order")]


def test_a_changed_hmac_key_fails_from_seq_1(env):
    for n in range(1, 4):
        env.append(n)
    result = env.verify(hmac_key=b"another-key")
    assert gaps(result) == [(1, "hmac_mismatch"), (2, "hmac_mismatch"), (3, "hmac_mismatch")]
    assert (result.status, result.hmac_verified) == ("compromised", False)
    # Appends under the new key verify under it; the old ones still do not.
    env.append(4, AuditChain(env.redis, b"another-key"))
    assert gaps(env.verify(hmac_key=b"another-key"))[-1] == (3, "hmac_mismatch")


def test_an_hmac_field_removed_at_seq_2_is_hmac_missing_at_2(env):
    for n in range(1, 4):
        env.append(n)
    entries = env.entries()
    e = entries[1]
    entries[1] = AuditEntry(e.stream_id, e.seq, e.prev, e.hash, None, e.event)
    env.rewrite(entries)
    assert gaps(env.verify()) == [(2, "hmac_missing")]


def test_a_deleted_head_is_reported_and_appends_refuse_until_it_is_restored(env):
    for n in range(1, 4):
        env.append(n)
    head = env.run(env.redis.get(head_key(env.tenant)))
    env.run(env.redis.delete(head_key(env.tenant)))
    result = env.verify()
    assert (result.status, gaps(result)) == ("compromised", [(3, "head_missing")])
    with pytest.raises(StoreError, match="head .* is missing from a chain that has entries"):
        env.append(4)
    assert len(env.entries()) == 3
    env.run(env.redis.set(head_key(env.tenant), head))
    assert env.append(4)[0] == 4
    assert env.verify().status == "ok"


def test_a_stale_head_at_2_is_reported_and_the_append_refused(env):
    for n in range(1, 4):
        env.append(n)
    second = env.entries()[1]
    env.run(env.redis.set(head_key(env.tenant), f"2:{second.hash}"))
    assert gaps(env.verify()) == [(3, "head_mismatch")]
    with pytest.raises(StoreError, match="entry 3 refused"):
        env.append(4)
    assert len(env.entries()) == 3


def test_a_trimmed_prefix_verifies_partial_from_a_seed(env):
    results = [env.append(n) for n in range(1, 6)]
    env.run(env.redis.xdel(stream_key(env.tenant), "1-1", "2-1"))
    assert gaps(env.verify()) == [(1, "missing")]
    result = env.verify(seed=results[1])
    assert (result.status, result.total_events, result.first_seq, result.gaps) == (
        "partial", 3, 3, ())
    assert gaps(env.verify(seed=(2, results[0][1]))) == [(3, "broken_link")]


def test_an_empty_chain_verifies_ok(env):
    result = env.verify()
    assert (result.status, result.total_events, result.gaps) == ("ok", 0, ())


# --------------------------------------------------------------------------- sampling


def test_a_flood_is_sampled_per_chain_and_never_leaves_another_tenants_act_out(env):
    from cordum.store.audit_trail import AuditTrail, governance

    trail = AuditTrail(env.redis, KEY)
    flooder, other = env.tenant, f"other-{env.unique}"

    def limited(tenant: str, key: str):  # type: ignore[no-untyped-def]
        return governance("auth.rate_limited", tenant, "p", key)

    async def go() -> tuple[list[int], int, int]:
        seqs = [await trail.record_sampled(limited(flooder, f"k{i}"), f"k{i}", most=5)
                for i in range(7)]
        again = await trail.record_sampled(limited(other, "k0"), "k0-other", most=5)
        repeat = await trail.record_sampled(limited(other, "k0"), "k0-other", most=5)
        return seqs, again, repeat

    seqs, other_seq, repeat = env.run(go())
    # Five distinct callers of the flooding tenant are recorded, the rest counted only.
    assert seqs == [1, 2, 3, 4, 5, 0, 0]
    # Another tenant's act is recorded all the same; the same caller again is not.
    assert (other_seq, repeat) == (1, 0)
    env.run(env.redis.delete(*env.run(env.redis.keys("audit:sample:auth.rate_limited:*"))))
    env.run(env.redis.delete(f"audit:chain:{other}", f"audit:head:{other}"))
