"""Pool flush: a pool coming online replays its waiting jobs (real Redis and JetStream).

Each test publishes on its own stream and submit subject, and uses pools and
topics named after a fresh tag, so a live stack's jobs are never sent and its
consumers never see ours. The job indexes are shared with everything else on
this Redis: the tests' jobs get index scores from January 1970, ahead of any
real job, so that a flush reads them within its first batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
import redis.asyncio as aioredis
from google.protobuf import json_format
from nats.js.api import RetentionPolicy, StreamConfig

from cordum.bus.flush import FlushPolicy, FlushReport, JetStreamPublisher, PoolFlusher
from cordum.config import PoolsConfig, load_settings
from cordum.protocol import BusPacket, Heartbeat, JobRequest, decode, packet
from cordum.registry.ingest import HeartbeatIngest
from cordum.registry.live import LiveRegistry
from cordum.registry.pools import pool_serves
from cordum.registry.writer import SnapshotWriter
from cordum.store.jobs import JobState, JobStore, NewJob, index_key, meta_key, request_key
from tests.conftest import NATS_URL, REDIS_URL
from tests.helpers import eventually, run

SETTINGS = load_settings(env={"REDIS_URL": REDIS_URL, "NATS_URL": NATS_URL})
FLUSH_TEST_DB = 13
TTL_S = 30.0
NOW_POLICY = FlushPolicy(settle_s=0.0)


class Clock:
    """Shared by the registry and the flusher, so a test can age workers and buckets."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class RecordingPublisher:
    """The real JetStream publisher, counting what the flusher asked it to send."""

    def __init__(self, inner: JetStreamPublisher) -> None:
        self.inner = inner
        self.sent: list[tuple[str, str]] = []

    async def publish_durable(self, subject: str, msg: BusPacket, *, msg_id: str) -> None:
        self.sent.append((msg.job_request.job_id, msg_id))
        await self.inner.publish_durable(subject, msg, msg_id=msg_id)


class FlushEnv:
    def __init__(self, nc: Any, redis: Any) -> None:
        self.tag = uuid.uuid4().hex[:8]
        self.nc = nc
        self.js = nc.jetstream()
        self.redis = redis
        self.store = JobStore(redis)
        self.stream = f"TEST_FLUSH_{self.tag}"
        self.subject = f"test.{self.tag}.job.submit"
        self.pool = f"gpu-{self.tag}"
        self.other_pool = f"cpu-{self.tag}"
        self.topic = f"job.{self.tag}.render"
        self.other_topic = f"job.{self.tag}.crunch"
        self.pools = PoolsConfig(
            topics={self.topic: [self.pool], self.other_topic: [self.other_pool]}
        )
        self.clock = Clock()
        self.publisher = RecordingPublisher(JetStreamPublisher(self.js))
        self.ids: list[str] = []

    def flusher(self, policy: FlushPolicy = NOW_POLICY) -> PoolFlusher:
        return PoolFlusher(
            self.redis,
            self.publisher,
            functools.partial(pool_serves, self.pools),
            policy=policy,
            subject=self.subject,
            clock=self.clock,
        )

    async def job(
        self,
        name: str,
        *,
        topic: str = "",
        state: JobState = JobState.PENDING,
        labels: dict[str, str] | None = None,
        age_s: float | None = None,
    ) -> str:
        """A stored job in ``state``; with ``age_s`` None its index entry dates from 1970."""
        job_id = f"flush-{name}-{self.tag}"
        self.ids.append(job_id)
        topic = topic or self.topic
        req = JobRequest(job_id=job_id, topic=topic, tenant_id="default")
        req.labels.update(labels or {})
        meta = {"labels": json.dumps(labels)} if labels else {}
        await self.store.create(
            NewJob(
                job_id=job_id,
                trace_id=f"tr-{job_id}",
                tenant=f"t-{self.tag}",
                topic=topic,
                context="{}",
                request=json_format.MessageToJson(req, indent=None),
                meta=meta,
            )
        )
        if state is not JobState.PENDING:
            await self.store.transition(job_id, [state])
        score = 1_000_000 if age_s is None else int((self.clock.now - age_s) * 1_000_000)
        await self.redis.zadd(index_key(state), {job_id: score}, xx=True)
        return job_id

    async def stored(self) -> list[tuple[BusPacket, str]]:
        """Every packet on the test stream, with its Nats-Msg-Id."""
        count = (await self.js.stream_info(self.stream)).state.messages
        out = []
        for seq in range(1, count + 1):
            raw = await self.js.get_msg(self.stream, seq)
            out.append((decode(raw.data).packet, (raw.headers or {}).get("Nats-Msg-Id", "")))
        return out

    async def cleanup(self) -> None:
        for job_id in self.ids:
            await self.redis.delete(
                meta_key(job_id),
                request_key(job_id),
                f"ctx:{job_id}",
                f"job:events:{job_id}",
                f"trace:tr-{job_id}",
            )
            for state in JobState:
                await self.redis.zrem(index_key(state), job_id)
            await self.redis.zrem("job:recent", job_id)
        await self.redis.delete(f"job:tenant:active:t-{self.tag}")


@contextlib.asynccontextmanager
async def flush_env() -> AsyncIterator[FlushEnv]:
    nc = await nats.connect(SETTINGS.nats_url)
    # A database of its own: a flush reads the oldest waiting jobs of the whole store,
    # and those of other tests or of a local stack would crowd this test's out.
    redis = aioredis.Redis.from_url(SETTINGS.redis_url, db=FLUSH_TEST_DB)
    env = FlushEnv(nc, redis)
    await env.js.add_stream(
        StreamConfig(
            name=env.stream,
            subjects=[env.subject],
            retention=RetentionPolicy.LIMITS,
            max_age=300,
            duplicate_window=120,
        )
    )
    try:
        yield env
    finally:
        await env.js.delete_stream(env.stream)
        await env.cleanup()
        await redis.aclose()
        await nc.close()


def heartbeat_bytes(hb: Heartbeat) -> bytes:
    return packet(trace_id=hb.worker_id, sender_id=hb.worker_id, heartbeat=hb).SerializeToString()


# --------------------------------------------------------------------------- transition


def test_pool_comes_online_on_its_first_fresh_worker_only() -> None:
    clock = Clock()
    registry = LiveRegistry(ttl_s=TTL_S, clock=clock)

    # Given an empty registry, the first worker of a pool brings the pool online
    assert registry.update_heartbeat_with_transition(Heartbeat(worker_id="a1", pool="a"))
    # A second worker of that pool, and the first one again, do not
    clock.now += 5
    assert not registry.update_heartbeat_with_transition(Heartbeat(worker_id="a2", pool="a"))
    assert not registry.update_heartbeat_with_transition(Heartbeat(worker_id="a1", pool="a"))
    # Another pool is a transition of its own; a worker without a pool never is
    assert registry.update_heartbeat_with_transition(Heartbeat(worker_id="b1", pool="b"))
    assert not registry.update_heartbeat_with_transition(Heartbeat(worker_id="n1", pool=""))

    # When every worker of the pool has been silent past the TTL
    clock.now += TTL_S + 1
    # Then the next heartbeat, even from a worker seen before, brings it online again
    seen = registry.record(Heartbeat(worker_id="a2", pool="a"))
    assert seen.pool_online and seen.joined
    assert not registry.update_heartbeat_with_transition(Heartbeat(worker_id="a1", pool="a"))


def test_worker_moving_to_an_empty_pool_brings_that_pool_online() -> None:
    clock = Clock()
    registry = LiveRegistry(ttl_s=TTL_S, clock=clock)
    registry.record(Heartbeat(worker_id="w", pool="a"))

    seen = registry.record(Heartbeat(worker_id="w", pool="b"))

    assert seen.pool_online and not seen.joined


# --------------------------------------------------------------------------- flush


def test_heartbeat_of_a_pool_coming_online_republishes_its_pending_job_once() -> None:
    async def scenario() -> None:
        async with flush_env() as env:
            hb_subject = f"test.{env.tag}.heartbeat"
            snapshot, lock = f"test:{env.tag}:workers:snapshot", f"test:{env.tag}:writer"
            flusher = env.flusher()
            flushes: list[asyncio.Task[FlushReport | None]] = []

            def on_pool_online(pool: str) -> None:
                task = flusher.trigger(pool)
                if task is not None:
                    flushes.append(task)

            ingest = HeartbeatIngest(
                env.nc,
                SnapshotWriter(env.redis, key=snapshot, lock_key=lock),
                {env.topic: env.pool},
                subject=hb_subject,
                on_pool_online=on_pool_online,
            )
            # Set after construction: an empty registry is falsy (it has a
            # length), and the constructor's ``registry or ...`` would drop it.
            ingest.registry = LiveRegistry(ttl_s=TTL_S, clock=env.clock)
            await ingest.start()
            try:
                # Given a job waiting for a pool with no worker
                job_id = await env.job("waiting")

                async def beat(worker_id: str) -> None:
                    hb = Heartbeat(worker_id=worker_id, pool=env.pool, max_parallel_jobs=1)
                    await env.nc.publish(hb_subject, heartbeat_bytes(hb))
                    await env.nc.flush()

                async def flushed(n: int) -> None:
                    await eventually(lambda: len(flushes) >= n)
                    await asyncio.gather(*flushes)

                # When the pool's first worker sends a heartbeat
                await beat(f"w1-{env.tag}")
                await flushed(1)
                # And a second worker of the pool joins (once the ingest has recorded it,
                # it has also decided whether the pool came online: the same callback)
                await beat(f"w2-{env.tag}")
                await eventually(lambda: len(ingest.registry) == 2)

                # Then the job was republished once, as a packet CAP accepts
                assert len(flushes) == 1
                assert env.publisher.sent == [
                    (job_id, f"flush:{job_id}:{int(env.clock.now) // 10}")
                ]
                stored = await env.stored()
                assert len(stored) == 1
                msg, msg_id = stored[0]
                assert msg_id == f"flush:{job_id}:{int(env.clock.now) // 10}"
                assert msg.job_request.job_id == job_id
                assert msg.job_request.topic == env.topic
                assert msg.trace_id == f"tr-{job_id}"
                assert msg.sender_id == "cordum-scheduler"
                assert msg.protocol_version == 1
                assert msg.HasField("created_at")

                # When the pool's workers go silent and one comes back
                env.clock.now += TTL_S + 1
                await beat(f"w1-{env.tag}")
                await flushed(2)

                # Then the still waiting job is republished once more, under a new id
                assert len(flushes) == 2
                stored = await env.stored()
                assert len(stored) == 2
                assert stored[1][1] == f"flush:{job_id}:{int(env.clock.now) // 10}"
            finally:
                ingest.stop()
                await ingest.close()
                await flusher.close()
                await env.redis.delete(snapshot, lock)

    run(scenario())


def test_flush_takes_the_pools_waiting_jobs_and_leaves_the_others() -> None:
    async def scenario() -> None:
        async with flush_env() as env:
            # Given waiting jobs of the pool, routed every way Cordum routes one
            pending = await env.job("pending")
            scheduled = await env.job("scheduled", state=JobState.SCHEDULED)
            by_label = await env.job(
                "label", topic=env.other_topic, labels={"target_pool": env.pool}
            )
            by_prefix = await env.job("prefix", topic=f"job.{env.pool}.unmapped")
            # And jobs it must not touch
            other = await env.job("other", topic=env.other_topic)
            running = await env.job("running", state=JobState.RUNNING)
            fresh = await env.job("fresh", age_s=0.5)
            await env.job("dispatched", state=JobState.DISPATCHED)

            # When the pool is flushed
            report = await env.flusher(FlushPolicy(settle_s=0.0, min_age_s=3.0)).flush(env.pool)

            # Then the waiting ones of that pool are republished, once each
            sent = sorted(job_id for job_id, _ in env.publisher.sent)
            assert sent == sorted([pending, scheduled, by_label, by_prefix])
            assert other not in sent and running not in sent and fresh not in sent
            assert report.published == 4 and report.skipped == 0
            assert len(await env.stored()) == 4

            # And a second flush within the dedup window adds nothing to the stream
            await env.flusher(FlushPolicy(settle_s=0.0, min_age_s=3.0)).flush(env.pool)
            assert len(await env.stored()) == 4

    run(scenario())


def test_job_without_a_stored_request_is_skipped_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        async with flush_env() as env:
            # Given a waiting job whose request is gone, and one without a trace id
            orphan = await env.job("orphan")
            await env.redis.delete(request_key(orphan))
            untraced = await env.job("untraced")
            await env.redis.hdel(meta_key(untraced), "trace_id")

            # When the pool is flushed
            with caplog.at_level(logging.WARNING, logger="cordum.bus.flush"):
                report = await env.flusher().flush(env.pool)

            # Then the orphan is skipped with a log line, and the other goes with its own id
            assert report.matched == 2 and report.published == 1 and report.skipped == 1
            assert any(
                orphan in r.getMessage() and "no stored request" in r.getMessage()
                for r in caplog.records
            )
            [(msg, _)] = await env.stored()
            assert msg.job_request.job_id == untraced
            assert msg.trace_id == untraced

    run(scenario())


def test_concurrent_transitions_of_one_pool_flush_once() -> None:
    async def scenario() -> None:
        async with flush_env() as env:
            job_id = await env.job("burst")
            flusher = env.flusher(FlushPolicy(settle_s=0.1))

            # When the pool comes online twice while its flush is still running
            first = flusher.trigger(env.pool)
            second = flusher.trigger(env.pool)

            # Then both join one flush, which sends the job once
            assert first is not None and first is second
            report = await first
            assert report is not None and report.published == 1
            assert env.publisher.sent == [(job_id, f"flush:{job_id}:{int(env.clock.now) // 10}")]

            # And once it is over, a new transition starts a new flush
            third = flusher.trigger(env.pool)
            assert third is not None and third is not first
            await third
            await flusher.close()

    run(scenario())


def test_by_default_a_job_that_turned_waiting_a_moment_ago_is_flushed_too() -> None:
    async def scenario() -> None:
        async with flush_env() as env:
            fresh = await env.job("just-now", age_s=0.2)
            await env.flusher(FlushPolicy(settle_s=0.0)).flush(env.pool)
            assert [job_id for job_id, _ in env.publisher.sent] == [fresh]

    run(scenario())
