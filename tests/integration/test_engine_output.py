"""The output policy on the result path (reference 1.5 steps 6-9, case 24), on the real
Redis, NATS and safety kernel process (its output policy service)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import nats
import pytest
import redis.asyncio as aioredis

from cordum import protocol, runtime
from cordum.bus.publisher import NatsPublisher
from cordum.config import PoolsConfig, load_settings
from cordum.registry.reader import SnapshotReader
from cordum.safety.client import SafetyClient
from cordum.safety.failmode import FailMode
from cordum.safety.output_client import OutputPolicyClient
from cordum.scheduler.backoff import BackoffPolicy
from cordum.scheduler.engine import Engine
from cordum.scheduler.output_check import OutputChecker
from cordum.scheduler.strategy import LeastLoadedStrategy
from cordum.store.audit import stream_key
from cordum.store.jobs import JobStore
from cordum.store.locks import JobLocks
from cordum.store.results import decision_key, redacted_key
from tests.conftest import NATS_URL, REDIS_URL
from tests.helpers import free_port, serving_kernel

SAFETY_YAML = r"""
default_decision: allow
output_policy: {enabled: true, fail_mode: closed}
output_rules:
  - {id: blocked, decision: quarantine, reason: "blocked topic", match: {topics: [job.blocked]}}
  - {id: mask, decision: redact, match: {topics: [job.mask], content_patterns: ['\d{4}']}}
  - {id: leak, decision: quarantine, reason: "private key in output",
     match: {keywords: [BEGIN PRIVATE KEY]}}
"""
TOPICS = ["job.default", "job.blocked", "job.mask"]


@pytest.fixture(scope="module")
def kernel_addr(tmp_path_factory):
    path = tmp_path_factory.mktemp("output") / "safety.yaml"
    path.write_text(SAFETY_YAML)
    with serving_kernel(path) as addr:
        yield addr


class Harness:
    def __init__(self, unique: str, kernel_addr: str, fail_mode: FailMode) -> None:
        self.unique = unique
        self.job_id = f"job-out-{unique}"
        self.worker_id = f"w-{unique}"
        self.snapshot_key = f"test:snapshot:{unique}"
        self.redis = aioredis.Redis.from_url(REDIS_URL)
        self.store = JobStore(self.redis)
        cfg = load_settings(env={"REDIS_URL": REDIS_URL, "NATS_URL": NATS_URL})
        self.client = OutputPolicyClient(kernel_addr, fail_mode=fail_mode)
        self.wiring: dict[str, Any] = dict(
            store=self.store,
            registry=SnapshotReader(self.redis, key=self.snapshot_key, max_age_s=0),
            strategy=LeastLoadedStrategy(
                PoolsConfig(topics={t: ["default"] for t in TOPICS}, pools={})),
            safety=SafetyClient(kernel_addr, 1.0),
            publisher=NatsPublisher(cfg),
            locks=JobLocks(self.redis),
            backoff=BackoffPolicy(),
            output=OutputChecker(self.client, self.redis),
        )
        self.engine = Engine(**self.wiring)

    def rewire(self, **changes: Any) -> None:
        """A new engine with some of its collaborators replaced."""
        self.wiring.update(changes)
        self.engine = Engine(**self.wiring)

    async def dispatch(self, topic: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        doc = {"captured_at": now, "writer_id": "t", "pools": {}, "topics": {},
               "workers": [{"worker_id": self.worker_id, "pool": "default",
                            "active_jobs": 0, "max_parallel_jobs": 4}]}
        await self.redis.set(self.snapshot_key, json.dumps(doc), ex=60)
        req = protocol.JobRequest(job_id=self.job_id, topic=topic, tenant_id=f"t-{self.unique}")
        outcome = await self.engine.handle_request(protocol.packet(
            trace_id=f"tr-{self.unique}", sender_id="test", job_request=req).SerializeToString())
        assert outcome.action == "dispatched", outcome

    async def succeed(self, output: str) -> bytes:
        key = protocol.result_key(self.job_id)
        await self.redis.set(key, output, ex=60)
        res = protocol.JobResult(job_id=self.job_id, worker_id=self.worker_id,
                                 status=protocol.JobStatus.JOB_STATUS_SUCCEEDED,
                                 result_ptr=protocol.pointer(key))
        return protocol.packet(trace_id=f"tr-{self.unique}", sender_id=self.worker_id,
                               job_result=res).SerializeToString()

    async def meta(self) -> dict[str, str]:
        return await self.store.get(self.job_id)

    async def audited(self) -> list[dict[str, Any]]:
        """The events of the tenant's audit chain, oldest first."""
        entries = await self.redis.xrange(stream_key(f"t-{self.unique}"))
        return [json.loads(fields[b"event"]) for _, fields in entries]

    async def cleanup(self) -> None:
        keys = await self.redis.keys(f"*{self.unique}*")
        if keys:
            await self.redis.delete(*keys)
        await self.redis.zrem("dlq:index", self.job_id)
        await self.client.aclose()
        await self.redis.aclose()


def make(unique, addr, fail_mode=FailMode.CLOSED):
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    return loop, Harness(unique, addr, fail_mode)


def close(loop, h):
    loop.run_until_complete(h.cleanup())
    loop.run_until_complete(runtime.aclose())
    loop.close()


@pytest.fixture
def harness(unique, kernel_addr):
    loop, h = make(unique, kernel_addr)
    yield loop, h
    close(loop, h)


async def listen(*subjects: str):
    nc = await nats.connect(NATS_URL)
    subs = [await nc.subscribe(s) for s in subjects]
    return nc, subs


async def drain(sub, job_id: str, timeout: float = 1.0) -> list[protocol.BusPacket]:
    """Packets about ``job_id`` that arrive on ``sub`` within ``timeout``."""
    found = []
    while True:
        try:
            msg = await sub.next_msg(timeout=timeout)
        except (TimeoutError, nats.errors.TimeoutError):
            return found
        packet = protocol.decode(msg.data).packet
        payload = packet.job_result if packet.HasField("job_result") else packet.job_progress
        if payload.job_id == job_id:
            found.append(packet)


def test_sync_quarantine_sets_the_state_dlq_and_audit_event(harness):
    """Case 24 (TestHandleJobResultOutputQuarantined)."""
    loop, h = harness

    async def scenario():
        await h.dispatch("job.blocked")
        nc, (dlq, audit) = await listen(protocol.SUBJECT_DLQ, protocol.SUBJECT_AUDIT_OUTPUT)
        outcome = await h.engine.handle_result(await h.succeed("fine output"))
        found = await drain(dlq, h.job_id), await drain(audit, h.job_id)
        await nc.close()
        return outcome, found

    outcome, (dlq, audit) = loop.run_until_complete(scenario())
    assert outcome.state == "OUTPUT_QUARANTINED"
    meta = loop.run_until_complete(h.meta())
    assert meta["state"] == "OUTPUT_QUARANTINED" and meta["output_decision"] == "QUARANTINE"
    assert meta["result_ptr"] == ""  # quarantined output is never served
    record = json.loads(meta["output_safety"])
    assert record["phase"] == "sync" and record["rule_id"] == "blocked" and record["quarantined"]
    stored = json.loads(loop.run_until_complete(h.redis.get(decision_key(h.job_id))))
    assert stored == record
    entry = json.loads(loop.run_until_complete(h.redis.get(f"dlq:entry:{h.job_id}")))
    assert entry["reason_code"] == "output_quarantined" and entry["status"] == "DENIED"
    assert entry["reason"] == "blocked topic" and entry["last_state"] == "RUNNING"
    assert [p.job_result.error_code for p in dlq] == ["output_quarantined"]
    assert dlq[0].job_result.status == protocol.JobStatus.JOB_STATUS_DENIED
    assert len(audit) == 1
    progress = audit[0].job_progress
    assert progress.step_id == "output_policy" and progress.percent == 100
    assert progress.status == protocol.JobStatus.JOB_STATUS_DENIED
    assert progress.message == "blocked topic"
    # One audit event, appended by the transition's own script, naming the policy.
    [event] = loop.run_until_complete(h.audited())
    assert (event["type"], event["actor"], event["job_id"], event["reason"]) == \
        ("output.quarantine", "system:output-policy", h.job_id, "blocked topic")


def test_content_quarantine_is_the_state_written_never_succeeded_first(harness):
    """Case 24 (TestHandleJobResultAsyncQuarantine): meta ALLOW, content QUARANTINE. Cordum
    writes SUCCEEDED and then downgrades it; here the content scan runs before the state
    is written, which is written once: OUTPUT_QUARANTINED."""
    loop, h = harness

    async def scenario():
        await h.dispatch("job.default")
        nc, (dlq,) = await listen(protocol.SUBJECT_DLQ)
        outcome = await h.engine.handle_result(
            await h.succeed("here it is: -----BEGIN PRIVATE KEY----- abc"))
        found = await drain(dlq, h.job_id)
        await nc.close()
        return outcome, found

    outcome, dlq = loop.run_until_complete(scenario())
    assert outcome.state == "OUTPUT_QUARANTINED"
    meta = loop.run_until_complete(h.meta())
    assert meta["state"] == "OUTPUT_QUARANTINED" and meta["result_ptr"] == ""
    record = json.loads(meta["output_safety"])
    assert record["phase"] == "async" and record["rule_id"] == "leak"
    events = loop.run_until_complete(h.redis.lrange(f"job:events:{h.job_id}", 0, -1))
    states = [json.loads(e)["state"] for e in events]
    assert states[-1] == "OUTPUT_QUARANTINED" and "SUCCEEDED" not in states, states
    entry = json.loads(loop.run_until_complete(h.redis.get(f"dlq:entry:{h.job_id}")))
    assert entry["reason_code"] == "output_quarantined_async"
    assert entry["last_state"] == "RUNNING"
    assert [p.job_result.error_code for p in dlq] == ["output_quarantined_async"]
    [event] = loop.run_until_complete(h.audited())
    assert (event["type"], event["job_id"], event["extra"]["decision"]) == \
        ("output.quarantine", h.job_id, "QUARANTINE")


def test_clean_output_stays_succeeded_with_both_phases_recorded(harness):
    loop, h = harness

    async def scenario():
        await h.dispatch("job.default")
        return await h.engine.handle_result(await h.succeed('{"answer": 42}'))

    outcome = loop.run_until_complete(scenario())
    assert outcome.state == "SUCCEEDED"
    meta = loop.run_until_complete(h.meta())
    assert meta["state"] == "SUCCEEDED" and meta["output_decision"] == "ALLOW"
    assert json.loads(meta["output_safety"])["phase"] == "async"
    assert meta["result_ptr"] == protocol.pointer(protocol.result_key(h.job_id))
    assert loop.run_until_complete(h.redis.exists(f"dlq:entry:{h.job_id}")) == 0
    assert loop.run_until_complete(h.audited()) == []  # an allowed output is no act


def test_sync_redact_swaps_in_the_redacted_result(harness):
    loop, h = harness

    async def scenario():
        await h.dispatch("job.mask")
        return await h.engine.handle_result(await h.succeed("card 1234 5678, ok"))

    outcome = loop.run_until_complete(scenario())
    assert outcome.state == "SUCCEEDED"
    meta = loop.run_until_complete(h.meta())
    assert meta["state"] == "SUCCEEDED"
    assert meta["result_ptr"] == protocol.pointer(redacted_key(h.job_id))
    redacted = loop.run_until_complete(h.redis.get(redacted_key(h.job_id))).decode()
    assert "1234" not in redacted and "5678" not in redacted and "ok" in redacted
    # The original is left where the worker wrote it.
    original = loop.run_until_complete(h.redis.get(protocol.result_key(h.job_id)))
    assert original == b"card 1234 5678, ok"
    [event] = loop.run_until_complete(h.audited())
    assert (event["type"], event["actor"], event["job_id"]) == \
        ("output.redact", "system:output-policy", h.job_id)


def test_same_quarantined_result_twice_gives_one_transition_and_one_dlq_entry(harness):
    loop, h = harness

    async def scenario():
        await h.dispatch("job.blocked")
        nc, (dlq,) = await listen(protocol.SUBJECT_DLQ)
        data = await h.succeed("fine output")
        first = await h.engine.handle_result(data)
        second = await h.engine.handle_result(data)
        found = await drain(dlq, h.job_id)
        await nc.close()
        return first, second, found

    first, second, dlq = loop.run_until_complete(scenario())
    assert first.action == "recorded" and second.action == "ignored"
    events = loop.run_until_complete(h.redis.lrange(f"job:events:{h.job_id}", 0, -1))
    assert [json.loads(e)["state"] for e in events].count("OUTPUT_QUARANTINED") == 1
    assert len(dlq) == 1
    # The redelivery moved nothing, so it appended nothing either.
    assert [e["type"] for e in loop.run_until_complete(h.audited())] == ["output.quarantine"]


def test_kernel_down_meta_check_fails_open_and_content_check_holds_or_fails_open(unique):
    dead = f"127.0.0.1:{free_port()}"
    for mode, phase in ((FailMode.CLOSED, "sync"), (FailMode.OPEN, "async")):
        loop, h = make(f"{unique}-{mode.value}", dead, mode)
        try:
            async def scenario(h=h):
                # The input kernel is down too: fail-open dispatch needs a live kernel,
                # so the job is put RUNNING by hand.
                await h.store.transition(h.job_id, ["RUNNING"], only_from=["-"],
                                         fields={"tenant": "t", "topic": "job.default",
                                                 "worker_id": h.worker_id})
                return await h.engine.handle_result(await h.succeed("anything"))

            outcome = loop.run_until_complete(scenario())
            meta = loop.run_until_complete(h.meta())
            # The meta check was skipped (fail-open), so the result was recorded...
            assert outcome.state == "SUCCEEDED"
            # ...and the content check found no kernel: held undecided when closed
            # (tests/integration/test_output_held.py), allowed when open.
            assert meta["state"] == "SUCCEEDED", mode
            record = json.loads(meta["output_safety"])
            assert record["skipped"] and record["phase"] == phase
        finally:
            close(loop, h)


def test_disabled_output_policy_writes_no_output_fields(unique, kernel_addr):
    loop, h = make(unique, kernel_addr)
    h.rewire(output=None)
    try:
        async def scenario():
            await h.dispatch("job.blocked")
            return await h.engine.handle_result(await h.succeed("fine"))

        assert loop.run_until_complete(scenario()).state == "SUCCEEDED"
        meta = loop.run_until_complete(h.meta())
        assert meta["state"] == "SUCCEEDED" and "output_safety" not in meta
    finally:
        close(loop, h)


def test_output_past_the_scan_limit_follows_the_fail_mode(unique, kernel_addr):
    from cordum.safety.output_wire import MAX_CONTENT_BYTES

    for mode, expected in ((FailMode.CLOSED, "OUTPUT_QUARANTINED"), (FailMode.OPEN, "SUCCEEDED")):
        loop, h = make(f"{unique}-{mode.value}", kernel_addr, mode)
        try:
            async def scenario(h=h):
                await h.dispatch("job.default")
                # Clean as far as the content check reads, and one byte more.
                return await h.engine.handle_result(await h.succeed("x" * (MAX_CONTENT_BYTES + 1)))

            loop.run_until_complete(scenario())
            meta = loop.run_until_complete(h.meta())
            assert meta["state"] == expected, mode
            record = json.loads(meta["output_safety"])
            assert record["phase"] == "async" and "scan limit" in record["reason"]
            assert record["reason"].endswith(f"fail-{mode.value})")
            assert bool(meta["result_ptr"]) is (mode is FailMode.OPEN)
        finally:
            close(loop, h)


def test_unreadable_result_follows_the_fail_mode(unique, kernel_addr):
    class FailingReads:
        """Redis whose GETRANGE fails: the content check cannot read the result."""

        def __init__(self, redis) -> None:
            self._redis = redis

        def __getattr__(self, name):
            return getattr(self._redis, name)

        async def getrange(self, *args):
            raise ConnectionError("connection reset")

    for mode, expected in ((FailMode.CLOSED, "OUTPUT_QUARANTINED"), (FailMode.OPEN, "SUCCEEDED")):
        loop, h = make(f"{unique}-{mode.value}", kernel_addr, mode)
        h.rewire(output=OutputChecker(h.client, FailingReads(h.redis)))
        try:
            async def scenario(h=h):
                await h.dispatch("job.default")
                # Past the prefetched head, so the check reads the rest itself.
                return await h.engine.handle_result(await h.succeed("y" * 100_000))

            loop.run_until_complete(scenario())
            meta = loop.run_until_complete(h.meta())
            assert meta["state"] == expected, mode
            record = json.loads(meta["output_safety"])
            assert record["reason"].startswith("result unreadable") and record["skipped"]
        finally:
            close(loop, h)
