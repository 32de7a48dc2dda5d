"""The submit and result paths of the engine on the real Redis, NATS and safety kernel."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import nats
import pytest
import redis.asyncio as aioredis

from cordum import protocol
from cordum.bus.publisher import NatsPublisher
from cordum.config import PoolsConfig, load_settings
from cordum.safety.client import SafetyClient
from cordum.safety.kernel import Policy, serve
from cordum.scheduler.engine import Engine
from cordum.scheduler.errors import NoWorkers, RetryAfter, UnparseableRecord
from cordum.scheduler.registry import SnapshotRegistry
from cordum.store.jobs import JobStore
from tests.conftest import NATS_URL, REDIS_URL

CONFIG = Path(__file__).resolve().parents[2] / "config"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def kernel_addr():
    addr = f"127.0.0.1:{free_port()}"
    server = serve(addr, Policy(CONFIG / "safety.yaml"))
    yield addr
    server.stop(grace=0)


class Harness:
    def __init__(self, unique: str, kernel_addr: str) -> None:
        self.unique = unique
        self.worker_id = f"w-{unique}"
        self.snapshot_key = f"test:snapshot:{unique}"
        self.redis = aioredis.Redis.from_url(REDIS_URL)
        self.store = JobStore(self.redis)
        cfg = load_settings(env={"REDIS_URL": REDIS_URL, "NATS_URL": NATS_URL})
        self.engine = Engine(
            store=self.store,
            registry=SnapshotRegistry(self.redis, key=self.snapshot_key, max_age_s=0),
            safety=SafetyClient(kernel_addr, 1.0),
            publisher=NatsPublisher(cfg),
            pools=PoolsConfig(topics={"job.default": ["default"]}, pools={}),
        )

    async def add_worker(self) -> None:
        doc = {"captured_at": "2026-01-01T00:00:00Z", "writer_id": "t", "pools": {},
               "topics": {}, "workers": [{"worker_id": self.worker_id, "pool": "default",
                                          "active_jobs": 0, "max_parallel_jobs": 4}]}
        await self.redis.set(self.snapshot_key, json.dumps(doc), ex=60)

    def request(self, job_id: str | None = None) -> bytes:
        req = protocol.JobRequest(job_id=job_id or f"job-{self.unique}", topic="job.default",
                                  tenant_id=f"t-{self.unique}")
        return protocol.packet(trace_id=f"tr-{self.unique}", sender_id="test",
                               job_request=req).SerializeToString()

    def result(self, status=protocol.JobStatus.JOB_STATUS_SUCCEEDED) -> bytes:
        res = protocol.JobResult(job_id=f"job-{self.unique}", status=status,
                                 worker_id=self.worker_id,
                                 result_ptr=f"redis://res:job-{self.unique}")
        return protocol.packet(trace_id=f"tr-{self.unique}", sender_id=self.worker_id,
                               job_result=res).SerializeToString()

    async def state(self) -> str:
        return (await self.store.get(f"job-{self.unique}")).get("state", "")

    async def cleanup(self) -> None:
        keys = await self.redis.keys(f"*{self.unique}*")
        if keys:
            await self.redis.delete(*keys)
        await self.redis.aclose()


@pytest.fixture
def harness(unique, kernel_addr):
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    h = Harness(unique, kernel_addr)
    yield loop, h
    loop.run_until_complete(h.cleanup())
    from cordum import runtime

    loop.run_until_complete(runtime.aclose())
    loop.close()


def test_request_is_dispatched_to_the_worker_subject_and_recorded_running(harness):
    loop, h = harness

    async def scenario():
        await h.add_worker()
        nc = await nats.connect(NATS_URL)
        sub = await nc.subscribe(protocol.direct_subject(h.worker_id))
        outcome = await h.engine.handle_request(h.request())
        msg = await sub.next_msg(timeout=2)
        await nc.close()
        return outcome, protocol.decode(msg.data)

    outcome, decoded = loop.run_until_complete(scenario())
    assert outcome.action == "dispatched" and outcome.detail == h.worker_id
    assert decoded.kind == "job_request"
    assert decoded.packet.sender_id == protocol.SENDER_SCHEDULER
    assert decoded.packet.job_request.job_id == f"job-{h.unique}"
    meta = loop.run_until_complete(h.store.get(f"job-{h.unique}"))
    assert meta["state"] == "RUNNING" and meta["worker_id"] == h.worker_id
    assert meta["attempts"] == "1" and meta["safety_decision"] == "ALLOW"
    events = loop.run_until_complete(h.redis.lrange(f"job:events:job-{h.unique}", 0, -1))
    assert [json.loads(e)["state"] for e in events] == ["SCHEDULED", "DISPATCHED", "RUNNING"]


def test_redelivered_request_of_a_running_job_is_a_no_op(harness):
    loop, h = harness

    async def scenario():
        await h.add_worker()
        first = await h.engine.handle_request(h.request())
        second = await h.engine.handle_request(h.request())
        return first, second

    first, second = loop.run_until_complete(scenario())
    assert first.action == "dispatched" and second.action == "noop"
    assert loop.run_until_complete(h.redis.llen(f"job:events:job-{h.unique}")) == 3


def test_no_live_worker_means_retry_later(harness):
    loop, h = harness
    with pytest.raises(NoWorkers) as info:
        loop.run_until_complete(h.engine.handle_request(h.request()))
    assert info.value.delay_s > 0


def test_unreachable_kernel_fails_closed_with_retry(harness):
    loop, h = harness
    h.engine._safety = SafetyClient(f"127.0.0.1:{free_port()}", 0.3)
    with pytest.raises(RetryAfter, match="safety unavailable"):
        loop.run_until_complete(h.engine.handle_request(h.request()))
    assert loop.run_until_complete(h.state()) == ""


def test_garbage_is_unparseable_and_invalid_request_is_dropped(harness):
    loop, h = harness
    with pytest.raises(UnparseableRecord):
        loop.run_until_complete(h.engine.handle_request(b"\xff\x00garbage"))
    bad = protocol.packet(trace_id="t", sender_id="s",
                          job_request=protocol.JobRequest(job_id="", topic="job.default"))
    outcome = loop.run_until_complete(h.engine.handle_request(bad.SerializeToString()))
    assert outcome.action == "dropped" and "job_id is empty" in outcome.detail


def test_result_records_terminal_state_once(harness):
    loop, h = harness

    async def scenario():
        await h.add_worker()
        await h.engine.handle_request(h.request())
        first = await h.engine.handle_result(h.result())
        # A duplicate or a late different result changes nothing.
        dup = await h.engine.handle_result(h.result(protocol.JobStatus.JOB_STATUS_FAILED))
        return first, dup

    first, dup = loop.run_until_complete(scenario())
    assert (first.action, first.state) == ("recorded", "SUCCEEDED")
    assert dup.action == "ignored"
    meta = loop.run_until_complete(h.store.get(f"job-{h.unique}"))
    assert meta["state"] == "SUCCEEDED"
    assert meta["result_ptr"] == f"redis://res:job-{h.unique}"


def test_retryable_failure_moves_to_retrying(harness):
    loop, h = harness

    async def scenario():
        await h.add_worker()
        await h.engine.handle_request(h.request())
        return await h.engine.handle_result(
            h.result(protocol.JobStatus.JOB_STATUS_FAILED_RETRYABLE))

    assert loop.run_until_complete(scenario()).state == "RETRYING"
