"""The echo worker on real NATS and Redis.

Every test uses its own worker id, pool, topic and job ids, so it can run
beside a live stack (which only routes to the pools it knows).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import nats
import redis.asyncio as aioredis

from cordum.config import load_settings
from cordum.protocol import (
    SUBJECT_HEARTBEAT,
    SUBJECT_RESULT,
    BusPacket,
    JobRequest,
    JobStatus,
    context_key,
    direct_subject,
    packet,
    pointer,
    result_key,
)
from cordum.registry.workers import STARTED_AT_LABEL
from cordum.worker.echo import EchoWorker
from cordum.worker.settings import EchoWorkerSettings, load_worker_settings
from tests.conftest import NATS_URL, REDIS_URL
from tests.helpers import run

SETTINGS = load_settings(env={"REDIS_URL": REDIS_URL, "NATS_URL": NATS_URL})


class Collector:
    """Packets seen on a subject, filtered, with a wait for the first match."""

    def __init__(self, accept: Callable[[BusPacket], bool]) -> None:
        self.packets: list[BusPacket] = []
        self._accept = accept
        self._arrived = asyncio.Event()

    async def on_message(self, msg: Any) -> None:
        pkt = BusPacket()
        try:
            pkt.ParseFromString(msg.data)
        except Exception:
            return
        if self._accept(pkt):
            self.packets.append(pkt)
            self._arrived.set()

    async def wait(self, count: int = 1, timeout: float = 3.0) -> list[BusPacket]:
        async def enough() -> None:
            while len(self.packets) < count:
                self._arrived.clear()
                await self._arrived.wait()

        await asyncio.wait_for(enough(), timeout)
        return self.packets


class Env:
    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:8]
        self.worker_id = f"echo-test-{tag}"
        self.pool = f"test-pool-{tag}"
        self.topic = f"job.test-{tag}.echo"
        self.keys: list[str] = []
        self.nc: Any = None
        self.redis: Any = None
        self.worker: EchoWorker | None = None

    def job(self, **labels: str) -> JobRequest:
        job_id = f"test-{uuid.uuid4().hex}"
        self.keys += [context_key(job_id), result_key(job_id)]
        return JobRequest(
            job_id=job_id,
            topic=self.topic,
            priority=1,
            context_ptr=pointer(context_key(job_id)),
            labels=labels,
        )

    def results_for(self, *job_ids: str) -> Collector:
        wanted = set(job_ids)
        return Collector(
            lambda p: p.WhichOneof("payload") == "job_result" and p.job_result.job_id in wanted
        )

    async def publish(self, subject: str, pkt: BusPacket) -> None:
        await self.nc.publish(subject, pkt.SerializeToString())
        await self.nc.flush()


@contextlib.asynccontextmanager
async def echo_env() -> AsyncIterator[Env]:
    env = Env()
    env.nc = await nats.connect(SETTINGS.nats_url)
    env.redis = aioredis.Redis.from_url(SETTINGS.redis_url)
    try:
        yield env
    finally:
        if env.worker is not None:
            await env.worker.stop(timeout_s=1.0)
        if env.keys:
            await env.redis.delete(*env.keys)
        await env.redis.aclose()
        await env.nc.close()


async def start_worker(env: Env, **overrides: Any) -> EchoWorker:
    cfg = EchoWorkerSettings(
        worker_id=env.worker_id, pool=env.pool, topics=(env.topic,), max_parallel=3, **overrides
    )
    env.worker = EchoWorker(cfg, SETTINGS)
    await env.worker.start()
    return env.worker


def test_job_on_direct_subject_is_echoed_and_answered_succeeded() -> None:
    async def scenario() -> None:
        async with echo_env() as env:
            # Given a running worker and a job whose context is stored
            await start_worker(env)
            req = env.job()
            context = {"prompt": "hello", "topic": env.topic, "tenant_id": "default"}
            await env.redis.set(context_key(req.job_id), json.dumps(context), ex=60)
            results = env.results_for(req.job_id)
            await env.nc.subscribe(SUBJECT_RESULT, cb=results.on_message)

            # When the job is published on the worker's direct subject
            trace_id = uuid.uuid4().hex
            await env.publish(
                direct_subject(env.worker_id),
                packet(trace_id=trace_id, sender_id="cordum-scheduler", job_request=req),
            )

            # Then one SUCCEEDED result comes back, pointing at the stored echo
            (pkt,) = await results.wait()
            res = pkt.job_result
            assert res.status == JobStatus.JOB_STATUS_SUCCEEDED
            assert res.result_ptr == f"redis://res:{req.job_id}"
            assert res.worker_id == env.worker_id
            assert res.execution_ms >= 0
            assert pkt.trace_id == trace_id
            assert pkt.sender_id == env.worker_id
            assert pkt.protocol_version == 1
            assert pkt.HasField("created_at")
            stored = json.loads(await env.redis.get(result_key(req.job_id)))
            assert stored == {"echo": context, "worker_id": env.worker_id, "job_id": req.job_id}
            assert 0 < await env.redis.ttl(result_key(req.job_id)) <= 86_400

    run(scenario())


def test_job_on_topic_queue_group_is_answered() -> None:
    async def scenario() -> None:
        async with echo_env() as env:
            await start_worker(env)
            req = env.job()
            await env.redis.set(context_key(req.job_id), json.dumps({"prompt": "q"}), ex=60)
            results = env.results_for(req.job_id)
            await env.nc.subscribe(SUBJECT_RESULT, cb=results.on_message)

            await env.publish(env.topic, packet(trace_id="t1", sender_id="s", job_request=req))

            (pkt,) = await results.wait()
            assert pkt.job_result.status == JobStatus.JOB_STATUS_SUCCEEDED

    run(scenario())


def test_a_burst_of_jobs_is_served_within_one_redis_connection_per_slot() -> None:
    async def scenario() -> None:
        async with echo_env() as env:
            # Given a worker of 3 slots
            worker = await start_worker(env)
            reqs = [env.job() for _ in range(24)]
            for req in reqs:
                await env.redis.set(context_key(req.job_id), json.dumps({"n": 1}), ex=60)
            results = env.results_for(*(r.job_id for r in reqs))
            await env.nc.subscribe(SUBJECT_RESULT, cb=results.on_message)
            # When 24 jobs arrive at once
            for req in reqs:
                await env.nc.publish(env.topic, packet(trace_id="t", sender_id="s",
                                                       job_request=req).SerializeToString())
            await env.nc.flush()
            answered = await results.wait(len(reqs), timeout=10.0)
            # Then every one succeeds, over at most one connection per slot and one more
            assert {p.job_result.status for p in answered} == {JobStatus.JOB_STATUS_SUCCEEDED}
            pool = worker._redis.connection_pool
            opened = len(pool._available_connections) + len(pool._in_use_connections)
            assert 1 <= opened <= 3 + 1
            # And the pool itself refuses a fifth, whatever a later change does to slots
            assert pool.max_connections == 3 + 1

    run(scenario())


def test_heartbeats_carry_worker_fields_and_active_jobs() -> None:
    async def scenario() -> None:
        async with echo_env() as env:
            # Given a heartbeat listener subscribed before the worker starts
            beats = Collector(
                lambda p: (
                    p.WhichOneof("payload") == "heartbeat"
                    and p.heartbeat.worker_id == env.worker_id
                )
            )
            await env.nc.subscribe(SUBJECT_HEARTBEAT, cb=beats.on_message)
            await env.nc.flush()

            # When the worker starts (heartbeat at once, then every 0.2 s)
            before_start = time.time()
            await start_worker(env, heartbeat_interval_s=0.2)
            first, _ = await beats.wait(2)

            # Then heartbeats describe it as Cordum reads them
            hb = first.heartbeat
            assert first.sender_id == env.worker_id
            assert first.protocol_version == 1
            assert first.trace_id
            assert hb.pool == env.pool
            assert hb.max_parallel_jobs == 3
            assert list(hb.capabilities) == [env.topic]
            assert hb.active_jobs == 0
            assert 0.0 <= hb.cpu_load <= 100.0
            # And when its process started, so a restart's lost jobs are sent again
            started = float(hb.labels[STARTED_AT_LABEL])
            assert before_start - 1.0 <= started <= time.time()

            # And a slow job shows up in active_jobs while it runs
            req = env.job(**{"echo.sleep_ms": "800"})
            await env.redis.set(context_key(req.job_id), "{}", ex=60)
            await env.publish(
                direct_subject(env.worker_id),
                packet(trace_id="t", sender_id="s", job_request=req),
            )
            for _ in range(20):
                if any(p.heartbeat.active_jobs == 1 for p in beats.packets):
                    break
                await beats.wait(len(beats.packets) + 1)
            assert any(p.heartbeat.active_jobs == 1 for p in beats.packets)

    run(scenario())


def test_packet_a_cap_worker_would_drop_gets_no_result() -> None:
    async def scenario() -> None:
        async with echo_env() as env:
            await start_worker(env)
            dropped, answered = env.job(), env.job()
            for req in (dropped, answered):
                await env.redis.set(context_key(req.job_id), "{}", ex=60)
            results = env.results_for(dropped.job_id, answered.job_id)
            await env.nc.subscribe(SUBJECT_RESULT, cb=results.on_message)

            # Given a packet without trace_id, then a valid one
            invalid = packet(trace_id="x", sender_id="s", job_request=dropped)
            invalid.trace_id = ""
            await env.publish(direct_subject(env.worker_id), invalid)
            bad_priority = env.job()
            bad_priority.priority = 7
            await env.publish(
                direct_subject(env.worker_id),
                packet(trace_id="x", sender_id="s", job_request=bad_priority),
            )
            await env.publish(
                direct_subject(env.worker_id),
                packet(trace_id="t", sender_id="s", job_request=answered),
            )

            # Then only the valid one is answered
            await results.wait()
            # An answer to a dropped packet would come from a job task running beside the
            # valid one's: this window is the time such a task takes, for it to show.
            await asyncio.sleep(0.2)
            assert [p.job_result.job_id for p in results.packets] == [answered.job_id]
            assert not await env.redis.exists(result_key(dropped.job_id))

    run(scenario())


def test_missing_or_non_json_context_fails_with_invalid_input() -> None:
    async def scenario() -> None:
        async with echo_env() as env:
            await start_worker(env)
            missing, not_json = env.job(), env.job()
            await env.redis.set(context_key(not_json.job_id), b"\x00not json", ex=60)
            results = env.results_for(missing.job_id, not_json.job_id)
            await env.nc.subscribe(SUBJECT_RESULT, cb=results.on_message)

            for req in (missing, not_json):
                await env.publish(
                    direct_subject(env.worker_id),
                    packet(trace_id="t", sender_id="s", job_request=req),
                )

            by_id = {p.job_result.job_id: p.job_result for p in await results.wait(2)}
            for req, why in ((missing, "not found"), (not_json, "not JSON")):
                res = by_id[req.job_id]
                assert res.status == JobStatus.JOB_STATUS_FAILED
                assert res.error_code == "invalid_input"
                assert why in res.error_message
                assert res.worker_id == env.worker_id
                assert not res.result_ptr

    run(scenario())


def test_fail_label_returns_the_requested_failure() -> None:
    async def scenario() -> None:
        async with echo_env() as env:
            await start_worker(env)
            fatal = env.job(**{"echo.fail": "fatal"})
            retryable = env.job(**{"echo.fail": "retryable"})
            results = env.results_for(fatal.job_id, retryable.job_id)
            await env.nc.subscribe(SUBJECT_RESULT, cb=results.on_message)

            for req in (fatal, retryable):
                await env.publish(
                    direct_subject(env.worker_id),
                    packet(trace_id="t", sender_id="s", job_request=req),
                )

            by_id = {p.job_result.job_id: p.job_result for p in await results.wait(2)}
            assert by_id[fatal.job_id].status == JobStatus.JOB_STATUS_FAILED_FATAL
            assert by_id[retryable.job_id].status == JobStatus.JOB_STATUS_FAILED_RETRYABLE

    run(scenario())


def test_settings_from_env() -> None:
    cfg = load_worker_settings(
        {"WORKER_ID": "w-1", "WORKER_TOPICS": " job.a, job.b ,", "WORKER_MAX_PARALLEL": "2"}
    )
    assert (cfg.worker_id, cfg.pool, cfg.topics, cfg.max_parallel) == (
        "w-1",
        "default",
        ("job.a", "job.b"),
        2,
    )
    default = load_worker_settings({})
    assert default.worker_id.startswith("echo-")
    assert default.topics == ("job.default", "job.echo")
    assert default.max_parallel == 4


def test_a_fresh_worker_does_not_report_its_start_up_burst_as_load():
    import time as _time

    from cordum.worker.echo import _CpuMeter

    meter = _CpuMeter()
    end = _time.process_time() + 0.05
    while _time.process_time() < end:  # a burst of CPU right after start
        pass
    assert meter.read() == 0.0


def test_a_receipts_file_counts_each_delivery_before_the_job_runs(tmp_path) -> None:
    receipts = tmp_path / "receipts.txt"

    async def scenario() -> None:
        async with echo_env() as env:
            await start_worker(env, receipts_path=str(receipts))
            req = env.job()
            await env.redis.set(context_key(req.job_id), json.dumps({"prompt": "r"}), ex=60)
            results = env.results_for(req.job_id)
            await env.nc.subscribe(SUBJECT_RESULT, cb=results.on_message)
            for _ in range(2):  # the same job delivered twice is counted twice
                await env.publish(direct_subject(env.worker_id),
                                  packet(trace_id="t", sender_id="s", job_request=req))
            await results.wait(2)
            assert receipts.read_text().splitlines() == [req.job_id, req.job_id]
            # A retry the worker asks for is written down as such.
            retry = env.job()
            retry.labels["echo.fail"] = "retryable"
            results = env.results_for(retry.job_id)
            await env.nc.subscribe(SUBJECT_RESULT, cb=results.on_message)
            await env.publish(direct_subject(env.worker_id),
                              packet(trace_id="t", sender_id="s", job_request=retry))
            await results.wait()
            assert receipts.read_text().splitlines()[2:] == [retry.job_id,
                                                             f"{retry.job_id} retry"]

    run(scenario())
