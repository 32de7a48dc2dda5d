"""The audit export (cordum.store.audit_export) against the real Redis and S3 (moto)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import boto3
import pytest
import redis.asyncio as aioredis
from moto import mock_aws

from cordum.store.audit import AuditChain, AuditEvent, head_key, stream_key
from cordum.store.audit_export import (
    TENANTS_KEY,
    export_all,
    export_tenant,
    exporting_key,
    object_key,
    tenant_prefix,
    trim_tenant,
)
from cordum.store.audit_export_verify import verify_exported
from cordum.store.audit_trail import AuditTrail, exported_key, hold_key
from cordum.store.audit_verify import verify_chain
from tests.conftest import REDIS_URL
from tests.helpers import run

KEY = b"audit-export-test-key-0123456789"
BUCKET = "cordum-audit-export-test"


class Env:
    def __init__(self, unique: str, s3: Any) -> None:
        self.unique = unique
        self.s3 = s3
        self.loop = asyncio.new_event_loop()
        self.redis = aioredis.Redis.from_url(REDIS_URL)
        self.other = aioredis.Redis.from_url(REDIS_URL)
        self.tenant = f"acme/{unique}.x"
        self.chain = AuditChain(self.redis, KEY)

    def run(self, coro, timeout: float = 60.0):  # type: ignore[no-untyped-def]
        return run(coro, timeout, loop=self.loop)

    def append(self, n: int, tenant: str | None = None) -> None:
        tenant = tenant or self.tenant

        async def go() -> None:
            for i in range(n):
                await self.chain.append(tenant, AuditEvent(
                    type="approval.approve", severity="HIGH", tenant=tenant, actor="alice",
                    actor_key="key-1", at=1_700_000_000_000_000 + i, job_id=f"job-{i}",
                    reason="act ünïcode"))
        self.run(go())

    def export(self, batch: int = 10, tenant: str | None = None, redis: Any = None):  # type: ignore[no-untyped-def]
        return self.run(export_tenant(redis or self.redis, self.s3, BUCKET,
                                      tenant or self.tenant, batch=batch))

    def keys(self, tenant: str | None = None) -> list[str]:
        page = self.s3.list_objects_v2(Bucket=BUCKET, Prefix=tenant_prefix(tenant or self.tenant))
        return [o["Key"].rsplit("/", 1)[1] for o in page.get("Contents") or []]

    def mark(self) -> str:
        return (self.run(self.redis.get(exported_key(self.tenant))) or b"").decode()

    def seqs_in_redis(self) -> list[int]:
        items = self.run(self.redis.xrange(stream_key(self.tenant)))
        return [int(sid.decode().split("-")[0]) for sid, _ in items]

    def verify(self):  # type: ignore[no-untyped-def]
        return self.run(verify_exported(self.s3, BUCKET, self.tenant, KEY))

    def body(self, first: int, last: int) -> list[dict[str, Any]]:
        data = self.s3.get_object(Bucket=BUCKET, Key=object_key(self.tenant, first, last))
        return [json.loads(line) for line in data["Body"].read().decode().splitlines()]

    def put(self, first: int, last: int, lines: list[dict[str, Any]]) -> None:
        body = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines).encode()
        self.s3.put_object(Bucket=BUCKET, Key=object_key(self.tenant, first, last), Body=body)


@pytest.fixture
def env(unique, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        e = Env(unique, s3)
        yield e
        keys = e.run(e.redis.keys(f"audit:*{unique}*"))
        if keys:
            e.run(e.redis.delete(*keys))
        e.run(e.redis.zrem(TENANTS_KEY, e.tenant, f"other-{unique}"))
        e.run(e.redis.aclose())
        e.run(e.other.aclose())
        e.loop.close()


def gaps(result) -> list[tuple[int, str]]:  # type: ignore[no-untyped-def]
    return [(g.at_seq, g.type) for g in result.gaps]


def test_exports_in_order_one_object_per_call_across_ticks(env):
    env.append(25)
    done = [env.export(10) for _ in range(4)]
    assert [(d.first_seq, d.last_seq, d.entries, d.marked) for d in done] == [
        (1, 10, 10, True), (11, 20, 10, True), (21, 25, 5, True), (0, 0, 0, False)]
    assert env.keys() == ["000000000001-000000000010.jsonl", "000000000011-000000000020.jsonl",
                          "000000000021-000000000025.jsonl"]
    assert env.keys()[0] and tenant_prefix(env.tenant) == f"audit/acme%2F{env.unique}%2Ex/"
    head = env.run(env.redis.get(head_key(env.tenant))).decode()
    assert env.mark() == head
    env.append(3)
    assert env.export(10).last_seq == 28
    lines = env.body(26, 28)
    assert [x["seq"] for x in lines] == ["26", "27", "28"]
    assert set(lines[0]) == {"id", "seq", "prev", "hash", "hmac", "event"}
    assert json.loads(lines[0]["event"])["reason"] == "act ünïcode"
    meta = env.s3.head_object(Bucket=BUCKET, Key=object_key(env.tenant, 26, 28),
                              ChecksumMode="ENABLED")
    assert meta["ContentType"] == "application/x-ndjson" and meta.get("ChecksumSHA256")


def test_two_concurrent_exporters_neither_skip_nor_double_mark(env):
    env.append(47)
    for _ in range(8):
        async def both():  # type: ignore[no-untyped-def]
            return await asyncio.gather(
                export_tenant(env.redis, env.s3, BUCKET, env.tenant, batch=10),
                export_tenant(env.other, env.s3, BUCKET, env.tenant, batch=7))
        a, b = env.run(both())
        if a.marked and b.marked:
            # One after the other: consecutive ranges, no seq twice.
            assert {a.first_seq, b.first_seq} == {min(a.first_seq, b.first_seq),
                                                  min(a.last_seq, b.last_seq) + 1}
        elif a.entries and b.entries and a.first_seq == b.first_seq:
            # Both wrote from the same mark: the claimed range, one name, one mark moved.
            assert (a.last_seq, a.key) == (b.last_seq, b.key) and (a.marked or b.marked)
    names = env.keys()
    spans = [tuple(int(x) for x in n.removesuffix(".jsonl").split("-")) for n in names]
    assert spans[0][0] == 1 and spans[-1][1] == 47
    assert all(s[0] == p[1] + 1 for p, s in zip(spans, spans[1:], strict=False))
    assert env.mark().startswith("47:") and env.verify().status == "ok"


def test_a_claimed_range_is_the_one_written_whatever_the_batch(env):
    # Given another exporter's claim of 1-10 (its write not done yet)
    env.append(12)
    env.run(env.redis.set(exporting_key(env.tenant), "1-10"))
    # Then an exporter with a smaller batch writes and marks exactly 1-10
    done = env.export(4)
    assert (done.first_seq, done.last_seq, done.entries, done.marked) == (1, 10, 10, True)
    assert env.mark().startswith("10:")
    assert env.run(env.redis.get(exporting_key(env.tenant))) is None


def test_a_write_whose_mark_failed_is_written_again_under_the_same_name(env):
    env.append(5)
    env.export(10)
    old = env.body(1, 5)
    # The mark update never happened (a crash after the write): mark and claim as before it.
    env.run(env.redis.delete(exported_key(env.tenant)))
    env.run(env.redis.set(exporting_key(env.tenant), "1-5"))
    env.append(4)  # more entries since: the claimed range stays 1-5
    again = env.export(10)
    assert (again.first_seq, again.last_seq, again.marked) == (1, 5, True)
    assert env.body(1, 5) == old and env.keys() == ["000000000001-000000000005.jsonl"]
    assert env.export(10).first_seq == 6
    assert env.verify().status == "ok"


def test_other_bytes_under_an_objects_name_are_refused_not_overwritten(env):
    env.append(3)
    env.put(1, 3, [{"seq": "1"}])
    with pytest.raises(Exception, match="other bytes"):
        env.export(10)
    assert env.mark() == ""


def test_trimming_keeps_unexported_and_the_last_keep_entries_and_stops_under_a_hold(env):
    env.append(30)
    assert env.run(trim_tenant(env.redis, env.tenant, keep=0)) == 0  # nothing exported
    env.export(20)  # 1..20 exported
    env.run(env.redis.set(hold_key(env.tenant), "case-42"))
    assert env.run(trim_tenant(env.redis, env.tenant, keep=5)) is None
    assert env.seqs_in_redis() == list(range(1, 31))
    env.run(env.redis.delete(hold_key(env.tenant)))
    # keep 5 would allow up to 25: the mark (20) bounds it.
    assert env.run(trim_tenant(env.redis, env.tenant, keep=5)) == 20
    assert env.seqs_in_redis() == list(range(21, 31))
    env.export(20)  # 21..30
    assert env.run(trim_tenant(env.redis, env.tenant, keep=4)) == 6
    assert env.seqs_in_redis() == [27, 28, 29, 30]
    assert env.run(env.redis.get(head_key(env.tenant))).decode().startswith("30:")


def test_verify_of_redis_seeded_from_the_export_continues_the_chain_after_a_trim(env):
    env.append(23)
    while env.export(10).entries:
        pass
    env.run(trim_tenant(env.redis, env.tenant, keep=3))
    assert env.seqs_in_redis() == [21, 22, 23]
    exported = env.verify()
    assert exported.status == "ok" and exported.objects == 3
    assert (exported.first_seq, exported.last_seq) == (1, 23)
    assert exported.hmac_verified
    env.append(4)
    rest = env.run(verify_chain(env.redis, env.tenant, hmac_key=KEY, seed=exported.seed))
    assert rest.status == "partial" and not rest.gaps and rest.last_seq == 27
    # Without the seed the trimmed prefix is missing.
    assert (1, "missing") in gaps(env.run(verify_chain(env.redis, env.tenant, hmac_key=KEY)))


@pytest.fixture
def exported(env):  # type: ignore[no-untyped-def]
    env.append(30)
    while env.export(10).entries:
        pass
    assert env.verify().status == "ok"
    return env


def test_an_edited_line_is_a_hash_mismatch_at_its_seq(exported):
    env = exported
    lines = env.body(11, 20)
    event = json.loads(lines[4]["event"])
    event["actor"] = "mallory"
    lines[4]["event"] = json.dumps(event, separators=(",", ":"), sort_keys=True)
    env.put(11, 20, lines)
    result = env.verify()
    assert result.status == "compromised" and gaps(result) == [(15, "hash_mismatch"),
                                                        (15, "hmac_mismatch")]


def test_a_deleted_object_is_missing_seqs_from_its_first(exported):
    env = exported
    env.s3.delete_object(Bucket=BUCKET, Key=object_key(env.tenant, 11, 20))
    result = env.verify()
    assert result.status == "compromised"
    assert [g.as_dict() for g in result.gaps] == [{"at_seq": 11, "type": "missing", "count": 10}]


def test_reordered_lines_and_swapped_objects_are_reported_with_their_seq(exported):
    env = exported
    lines = env.body(1, 10)
    lines[2], lines[3] = lines[3], lines[2]
    env.put(1, 10, lines)
    found = gaps(env.verify())
    assert (3, "out_of_order") in found and all(seq in (3, 4) for seq, _ in found)
    lines[2], lines[3] = lines[3], lines[2]
    env.put(1, 10, lines)
    assert env.verify().status == "ok"
    first, second = env.body(11, 20), env.body(21, 30)
    env.put(11, 20, second)
    env.put(21, 30, first)
    found = gaps(env.verify())
    assert (11, "object_mismatch") in found and (21, "object_mismatch") in found


def test_a_changed_hmac_or_an_unreadable_object_is_reported(exported):
    env = exported
    lines = env.body(21, 30)
    lines[9]["hmac"] = "0" * 64
    env.put(21, 30, lines)
    assert gaps(env.verify()) == [(30, "hmac_mismatch")]
    env.s3.put_object(Bucket=BUCKET, Key=object_key(env.tenant, 21, 30), Body=b"not json\n")
    assert (21, "object_unreadable") in gaps(env.verify())


def test_export_all_drains_exports_trims_and_counts_held_tenants(env):
    other = f"other-{env.unique}"
    env.append(12)
    env.append(4, tenant=other)
    trail = AuditTrail(env.redis, KEY)

    async def stage() -> None:
        pipe = env.redis.pipeline(transaction=True)
        AuditTrail.stage(pipe, AuditEvent(type="workflow.put", severity="LOW", tenant=other,
                                          actor="bob", actor_key="k", at=1))
        await pipe.execute()
    env.run(stage())
    env.run(env.redis.set(hold_key(other), "1"))
    del trail
    summary = env.run(export_all(env.redis, env.s3, BUCKET, max_tenants=1000, batch=100,
                                 keep=2, hmac_key=KEY))
    assert summary.drained >= 1 and summary.held >= 1 and not summary.failed
    assert summary.exported >= 12 + 5 and summary.trimmed >= 10
    assert env.keys() == ["000000000001-000000000012.jsonl"]
    assert env.keys(other) == ["000000000001-000000000005.jsonl"]
    assert env.seqs_in_redis() == [11, 12]
    assert len(env.run(env.redis.xrange(stream_key(other)))) == 5


# -- the gateway's verify reads the bucket ------------------------------------------------

def gateway_verify(env: Env) -> dict[str, Any]:
    from cordum.gateway.audit.service import AuditService
    from cordum.gateway.core.auth import Principal

    who = Principal(tenant=env.tenant, role="admin", principal_id="auditor", key_id="k-1")
    service = AuditService(env.redis, KEY, bucket=BUCKET, s3=env.s3)
    return env.run(service.verify(who))


def test_the_verify_route_checks_the_exported_part_so_a_trim_loses_nothing(env):
    env.append(25)
    env.export(batch=10)
    env.export(batch=10)
    env.run(trim_tenant(env.redis, env.tenant, keep=3))
    assert env.seqs_in_redis()[0] > 1  # trimmed: Redis alone cannot prove seqs 1..
    body = gateway_verify(env)
    assert (body["status"], body["gaps"]) == ("ok", []), body
    assert body["exported"]["status"] == "ok" and body["exported"]["last_seq"] == 20
    assert body["exported_through_seq"] == 20


def test_an_edited_exported_object_makes_the_whole_chain_compromised(env):
    env.append(12)
    env.export(batch=10)
    env.run(trim_tenant(env.redis, env.tenant, keep=2))
    lines = env.body(1, 10)
    lines[4]["event"] = lines[4]["event"].replace("alice", "mallory")
    env.put(1, 10, lines)
    body = gateway_verify(env)
    assert body["status"] == "compromised", body
    assert {"at_seq": 5, "type": "hash_mismatch"} in [
        {k: g[k] for k in ("at_seq", "type")} for g in body["exported"]["gaps"]]
