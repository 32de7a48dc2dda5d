"""Outputs whose content check cannot reach the kernel are held, not quarantined.

On the real Redis, NATS and safety kernel process (its output policy service): a
SUCCEEDED job whose content scan finds the kernel down stays SUCCEEDED and unserved,
in the held set; the held-output tick checks it again once the kernel answers, and
quarantines it with ``output_check_unavailable`` only past the hold limit.
"""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

import nats
import pytest
import redis.asyncio as aioredis
from google.protobuf import json_format

from cordum import protocol, runtime
from cordum.bus.publisher import NatsPublisher
from cordum.config import PoolsConfig, load_settings
from cordum.registry.reader import SnapshotReader
from cordum.safety.client import SafetyClient
from cordum.safety.failmode import FailMode
from cordum.safety.output_client import OutputPolicyClient
from cordum.scheduler.backoff import BackoffPolicy
from cordum.scheduler.engine import Engine
from cordum.scheduler.held_outputs import HeldOutputRechecker, HoldPolicy
from cordum.scheduler.output_check import OutputChecker
from cordum.scheduler.strategy import LeastLoadedStrategy
from cordum.store.held_outputs import HELD_KEY, HeldOutputs
from cordum.store.jobs import JobStore, now_us
from cordum.store.locks import JobLocks
from cordum.store.results import served_result_ptr
from tests.conftest import NATS_URL, REDIS_URL
from tests.helpers import free_port, run

SAFETY_YAML = r"""
default_decision: allow
output_policy: {enabled: true, fail_mode: closed}
output_rules:
  - {id: leak, decision: quarantine, reason: "private key in output",
     match: {keywords: [BEGIN PRIVATE KEY]}}
"""
PRIVATE_KEY = "-----BEGIN PRIVATE KEY----- MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"


class RecordingRuns:
    """A run-event sink (SQS cannot run here) that keeps what it was sent."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def send(self, event: Any) -> None:
        self.sent.append(event)

    async def send_timer(self, event: Any, delay_s: float) -> None:
        self.sent.append(event)


class OwnHeld(HeldOutputs):
    """The held set, as a tick sees it, narrowed to this test's jobs (other tests hold
    outputs in the same Redis)."""

    def __init__(self, redis: Any, unique: str) -> None:
        super().__init__(redis)
        self._unique = unique

    async def oldest(self, limit: int) -> list[tuple[str, int]]:
        everyone = await super().oldest(1_000_000)
        return [(job_id, since) for job_id, since in everyone if self._unique in job_id][:limit]


class World:
    """One step job of a workflow run, RUNNING on its worker, with the engine wired to
    an output policy service at ``addr`` (nothing listens there until a test says)."""

    def __init__(self, unique: str, addr: str,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.unique = unique
        self.addr = addr
        self.own_loop = loop is None
        self.loop = loop or asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.run = functools.partial(run, loop=self.loop, timeout=30)
        self.run_id = f"run-held-{unique}"
        self.job_id = f"{self.run_id}:step@1"
        self.worker_id = f"w-{unique}"
        self.redis = aioredis.Redis.from_url(REDIS_URL)
        self.store = JobStore(self.redis)
        self.client = OutputPolicyClient(addr, fail_mode=FailMode.CLOSED)
        self.runs = RecordingRuns()
        cfg = load_settings(env={"REDIS_URL": REDIS_URL, "NATS_URL": NATS_URL})
        self.engine = Engine(
            store=self.store,
            registry=SnapshotReader(self.redis, key=f"test:snapshot:{unique}", max_age_s=0),
            strategy=LeastLoadedStrategy(PoolsConfig(topics={"job.default": ["default"]},
                                                     pools={})),
            safety=SafetyClient(addr, 1.0),
            publisher=NatsPublisher(cfg),
            locks=JobLocks(self.redis),
            backoff=BackoffPolicy(),
            output=OutputChecker(self.client, self.redis),
            runs=self.runs,
        )
        self.held = OwnHeld(self.redis, unique)

    def running(self) -> None:
        """The job RUNNING on its worker, its request stored (the input kernel may be
        down too, so it is put there by hand)."""
        req = protocol.JobRequest(job_id=self.job_id, topic="job.default",
                                  tenant_id=f"t-{self.unique}", workflow_id=self.run_id)
        req.labels["content_type"] = "text/plain"
        self.run(self.store.transition(self.job_id, ["RUNNING"], only_from=["-"], fields={
            "tenant": f"t-{self.unique}", "topic": "job.default", "worker_id": self.worker_id,
            "workflow_id": self.run_id}))
        self.run(self.store.put_request(self.job_id, json_format.MessageToJson(req, indent=None)))

    def succeed(self, output: str) -> Any:
        key = protocol.result_key(self.job_id)
        self.run(self.redis.set(key, output, ex=120))
        res = protocol.JobResult(job_id=self.job_id, worker_id=self.worker_id,
                                 status=protocol.JobStatus.JOB_STATUS_SUCCEEDED,
                                 result_ptr=protocol.pointer(key))
        data = protocol.packet(trace_id=f"tr-{self.unique}", sender_id=self.worker_id,
                               job_result=res).SerializeToString()
        return self.run(self.engine.handle_result(data))

    def rechecker(self, policy: HoldPolicy | None = None, *, later_s: float = 0.0,
                  ) -> HeldOutputRechecker:
        checker = HeldOutputRechecker.of_engine(
            self.engine, policy, held=self.held,
            clock_us=lambda: now_us() + int(later_s * 1_000_000))
        assert checker is not None
        return checker

    def meta(self) -> dict[str, str]:
        return self.run(self.store.get(self.job_id))

    def served(self) -> str | None:
        return served_result_ptr(self.job_id, self.meta(), output_policy=True)

    def held_since(self) -> float | None:
        return self.run(self.redis.zscore(HELD_KEY, self.job_id))

    def close(self) -> None:
        async def cleanup() -> None:
            keys = await self.redis.keys(f"*{self.unique}*")
            if keys:
                await self.redis.delete(*keys)
            await self.redis.zrem("dlq:index", self.job_id)
            await self.redis.zrem(HELD_KEY, self.job_id)
            await self.client.aclose()
            await self.redis.aclose()
            if self.own_loop:
                await runtime.aclose()

        self.loop.run_until_complete(cleanup())
        if self.own_loop:
            self.loop.close()


@pytest.fixture
def policy_path(tmp_path):
    path = tmp_path / "safety.yaml"
    path.write_text(SAFETY_YAML)
    return path


@pytest.fixture
def world(unique):
    w = World(unique, f"127.0.0.1:{free_port()}")
    yield w
    w.close()


def serve_kernel(addr: str, policy_path) -> Any:
    from cordum.safety.kernel import serve
    from cordum.safety.policy_file import Policy

    return serve(addr, Policy(policy_path))


def test_output_checked_while_the_kernel_is_down_is_held_then_decided(world, policy_path):
    # Given a step job whose content check runs while the kernel is down (fail-closed)
    world.running()
    outcome = world.succeed("a perfectly ordinary output")
    # Then it is not quarantined: SUCCEEDED, its result not served, held for a re-check
    assert outcome.state == "SUCCEEDED"
    meta = world.meta()
    assert meta["state"] == "SUCCEEDED", meta
    assert json.loads(meta["output_safety"])["phase"] == "sync"
    assert world.served() is None
    assert world.held_since() is not None
    assert world.run(world.redis.exists(f"dlq:entry:{world.job_id}")) == 0
    told = len(world.runs.sent)

    # When the kernel answers again and the held-output tick runs
    server = serve_kernel(world.addr, policy_path)
    try:
        report = world.run(world.rechecker().tick())
    finally:
        server.stop(grace=0)

    # Then the decision is recorded, the result served, the hold released, the run told
    assert report.decided == 1, report
    meta = world.meta()
    assert meta["state"] == "SUCCEEDED"
    record = json.loads(meta["output_safety"])
    assert record["phase"] == "async" and record["decision"] == "ALLOW"
    assert not record["quarantined"]
    assert world.served() == protocol.pointer(protocol.result_key(world.job_id))
    assert world.held_since() is None
    assert len(world.runs.sent) == told + 1
    event = world.runs.sent[-1]
    assert (event.kind, event.run_id, event.job_id) == ("job", world.run_id, world.job_id)
    # A FIFO queue would drop an event with the id of the one sent when it was held.
    assert all(event.id != earlier.id for earlier in world.runs.sent[:-1])


def test_output_held_past_the_hold_limit_is_quarantined_as_unavailable(world):
    # Given an output held while the kernel is down, with a hold limit of 1 s
    world.running()
    assert world.succeed("a perfectly ordinary output").state == "SUCCEEDED"
    assert world.meta()["state"] == "SUCCEEDED" and world.held_since() is not None
    policy = HoldPolicy.from_settings(load_settings(env={"CORDUM_OUTPUT_HOLD_MAX_S": "1"}))
    assert policy.max_hold_s == 1.0

    # When a tick runs within the limit, the kernel still down: it stays held
    early = world.run(world.rechecker(policy).tick())
    assert early.still_held == 1, early
    assert world.meta()["state"] == "SUCCEEDED" and world.held_since() is not None

    # When a tick runs past the limit, the kernel still down
    async def tick_and_listen() -> tuple[Any, list[Any]]:
        nc = await nats.connect(NATS_URL)
        sub = await nc.subscribe(protocol.SUBJECT_DLQ)
        report = await world.rechecker(policy, later_s=2.0).tick()
        found = []
        while True:
            try:
                msg = await sub.next_msg(timeout=1.0)
            except (TimeoutError, nats.errors.TimeoutError):
                break
            packet = protocol.decode(msg.data).packet
            if packet.job_result.job_id == world.job_id:
                found.append(packet.job_result)
        await nc.close()
        return report, found

    report, dlq = world.run(tick_and_listen())
    # Then it is quarantined with output_check_unavailable, as an async quarantine is
    assert report.quarantined == 1, report
    meta = world.meta()
    assert meta["state"] == "OUTPUT_QUARANTINED" and meta["result_ptr"] == ""
    record = json.loads(meta["output_safety"])
    assert record["phase"] == "async" and record["quarantined"]
    entry = json.loads(world.run(world.redis.get(f"dlq:entry:{world.job_id}")))
    assert entry["reason_code"] == "output_check_unavailable"
    assert entry["status"] == "DENIED" and entry["last_state"] == "SUCCEEDED"
    assert [r.error_code for r in dlq] == ["output_check_unavailable"]
    assert world.held_since() is None
    assert world.runs.sent[-1].job_id == world.job_id


def test_a_quarantine_decision_is_still_applied_at_once(unique, policy_path):
    # Given the kernel answering, and an output its policy quarantines
    addr = f"127.0.0.1:{free_port()}"
    server = serve_kernel(addr, policy_path)
    w = World(unique, addr)
    try:
        w.running()
        # When the result is applied
        assert w.succeed(f"here it is: {PRIVATE_KEY}").state == "OUTPUT_QUARANTINED"
        # Then the content scan's quarantine is the state written, and nothing is held
        meta = w.meta()
        assert meta["state"] == "OUTPUT_QUARANTINED" and meta["result_ptr"] == ""
        assert json.loads(meta["output_safety"])["rule_id"] == "leak"
        entry = json.loads(w.run(w.redis.get(f"dlq:entry:{w.job_id}")))
        assert entry["reason_code"] == "output_quarantined_async"
        assert w.held_since() is None
    finally:
        w.close()
        server.stop(grace=0)


def test_a_held_output_decided_meanwhile_is_released(world, policy_path):
    # Given a held output that a redelivered result decided since (the kernel is back)
    world.running()
    world.succeed("a perfectly ordinary output")
    first = world.held_since()
    assert first is not None
    server = serve_kernel(world.addr, policy_path)
    try:
        world.succeed("a perfectly ordinary output")
        assert world.served() is not None
        # When the tick comes to it
        report = world.run(world.rechecker().tick())
    finally:
        server.stop(grace=0)
    # Then it is only released (and its run told), not checked again
    assert report.released == 1 and report.decided == 0, report
    assert world.held_since() is None


def test_a_redelivered_result_keeps_when_the_output_was_first_held(world):
    world.running()
    world.succeed("a perfectly ordinary output")
    first = world.held_since()
    assert first is not None
    world.succeed("a perfectly ordinary output")
    assert world.held_since() == first


def test_a_tick_rechecks_at_most_its_batch_oldest_first(unique, policy_path):
    loop = asyncio.new_event_loop()
    worlds = [World(f"{unique}-{n}", f"127.0.0.1:{free_port()}", loop) for n in range(2)]
    try:
        for w in worlds:
            w.running()
            w.succeed("a perfectly ordinary output")
        w0, w1 = worlds
        server = serve_kernel(w0.addr, policy_path)
        try:
            checker = HeldOutputRechecker.of_engine(
                w0.engine, HoldPolicy(batch_size=1), held=OwnHeld(w0.redis, unique))
            assert checker is not None
            report = w0.run(checker.tick())
        finally:
            server.stop(grace=0)
        assert report.listed == 1 and report.decided == 1, report
        assert w0.served() is not None and w1.served() is None
        assert w1.held_since() is not None
    finally:
        for w in worlds:
            w.close()
        loop.run_until_complete(runtime.aclose())
        loop.close()


def test_the_hold_limit_setting():
    assert load_settings(env={}).output_hold_max_s == 600.0
    assert HoldPolicy().max_hold_s == 600.0 and HoldPolicy().batch_size == 100
    from cordum.config import ConfigError

    with pytest.raises(ConfigError, match="CORDUM_OUTPUT_HOLD_MAX_S"):
        load_settings(env={"CORDUM_OUTPUT_HOLD_MAX_S": "0"})
