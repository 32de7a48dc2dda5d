"""Replay waiting jobs as soon as their pool comes online (Cordum's pool flush).

The submit Lambda leaves a job PENDING, acked, when no live worker serves its
topic; the pending replayer picks it up again only after two minutes. The
bridge sees every heartbeat, so it notices first when a pool goes from no fresh
worker to one, and ``PoolFlusher`` then puts that pool's waiting jobs back on
``sys.job.submit``. From there the normal path (bridge -> SQS -> submit Lambda)
dispatches them; the engine holds the job lock and treats a job already
DISPATCHED or RUNNING as a redelivery, so a job sent twice runs once.

One flush per pool at a time: a transition seen while that pool's flush is
still running joins it instead of starting another (Cordum's flushLatch).
Bridge replicas each see the heartbeat and each flush; their publishes carry
the same ``Nats-Msg-Id`` inside one ``dedup_bucket_s`` window, so JetStream
stores one of them.

A flush decides nothing about scheduling: it republishes, and the engine routes,
checks policy and moves the job under its lock. The one rule it needs, which
waiting jobs a pool may take, is handed in (``cordum.registry.pools.pool_serves``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cordum.protocol import (
    SENDER_SCHEDULER,
    SUBJECT_SUBMIT,
    InvalidPacket,
    packet,
    validate_job_request,
)
from cordum.store.errors import StoreError
from cordum.store.indexes import JobIndexes, RedisIndexClientProtocol
from cordum.store.jobs import JobState, decode_labels, meta_key
from cordum.text import as_text

if TYPE_CHECKING:
    from collections.abc import Awaitable

    import nats.js

    from cordum.bus.publisher import DurablePublisher
    from cordum.protocol import BusPacket

log = logging.getLogger("cordum.bus.flush")

FLUSHED_STATES = (JobState.PENDING, JobState.SCHEDULED)

PoolRule = Callable[[str, str, Mapping[str, str]], bool]
"""``(pool, topic, labels)``: whether a waiting job of ``topic`` with ``labels`` is one
``pool`` may take."""


@dataclass(frozen=True, slots=True)
class FlushPolicy:
    """Which jobs one pool flush replays, and how its publishes are deduplicated."""

    limit: int = 200
    """Oldest jobs read per state (Cordum's ListJobsByState limit); the pending
    replayer covers whatever lies beyond."""
    min_age_s: float = 0.0
    """Jobs that entered their state less than this long ago are left alone.
    Cordum replays only jobs older than 5 minutes; here every waiting job is
    replayed. A job turned PENDING a moment before the pool came online is the
    one that most needs it (it was left waiting on a snapshot without the new
    worker); one still under a submit invocation's job lock costs that second
    invocation a wait on the lock and a no-op, nothing more."""
    settle_s: float = 0.5
    """Pause between the transition and the listing, so that the worker
    snapshot the submit Lambda reads names the new worker before the replayed
    jobs reach it (the ingest writes the snapshot on a new worker at once)."""
    dedup_bucket_s: int = 10
    """Publishes of one job within the same window of this many seconds share a
    ``Nats-Msg-Id`` and JetStream keeps one (its duplicate window is longer)."""

    def __post_init__(self) -> None:
        if self.limit < 1 or self.min_age_s < 0 or self.settle_s < 0 or self.dedup_bucket_s < 1:
            raise ValueError("limit and dedup_bucket_s must be >= 1, min_age_s and settle_s >= 0")


class JetStreamPublisher:
    """``DurablePublisher`` over a JetStream context the caller already holds."""

    def __init__(self, js: nats.js.JetStreamContext, *, timeout_s: float = 2.0) -> None:
        self._js = js
        self._timeout_s = timeout_s

    async def publish_durable(self, subject: str, msg: BusPacket, *, msg_id: str) -> None:
        from cordum.bus.publisher import PublishError

        try:
            await self._js.publish(
                subject,
                msg.SerializeToString(),
                timeout=self._timeout_s,
                headers={"Nats-Msg-Id": msg_id},
            )
        except Exception as exc:
            raise PublishError(f"publish {subject}: {type(exc).__name__}: {exc}") from exc


class RedisMetaClientProtocol(RedisIndexClientProtocol, Protocol):
    """What the flusher reads: the job indexes and a few job:meta fields."""

    def hmget(self, name: str, keys: list[str]) -> Awaitable[Any]: ...


@dataclass(frozen=True, slots=True)
class FlushReport:
    pool: str
    listed: int
    """Job ids read from the PENDING and SCHEDULED indexes."""
    matched: int
    """Of those, still waiting and routed to the pool."""
    published: int
    skipped: int
    """Matched but not sent: no stored request, an invalid one, or a failed publish."""


class PoolFlusher:
    """Republishes a pool's waiting jobs on the submit subject, one flush per pool at a time."""

    def __init__(
        self,
        redis: RedisMetaClientProtocol,
        publisher: DurablePublisher,
        serves: PoolRule,
        *,
        policy: FlushPolicy | None = None,
        subject: str = SUBJECT_SUBMIT,
        indexes: JobIndexes | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._redis = redis
        self._publisher = publisher
        self._serves = serves
        self._policy = policy or FlushPolicy()
        self._subject = subject
        self._indexes = indexes or JobIndexes(redis)
        self._clock = clock
        self._running: dict[str, asyncio.Task[FlushReport | None]] = {}

    def trigger(self, pool: str) -> asyncio.Task[FlushReport | None] | None:
        """Start a flush of ``pool`` in the background, or join the one running.

        Never raises and never waits: it is called from the heartbeat callback.
        The task's result is None when the flush failed (the failure is logged).
        """
        if not pool:
            return None
        running = self._running.get(pool)
        if running is not None and not running.done():
            log.debug("pool flush already running: pool=%s", pool)
            return running
        task = asyncio.get_running_loop().create_task(self._guarded(pool))
        self._running[pool] = task
        task.add_done_callback(functools.partial(self._forget, pool))
        return task

    def _forget(self, pool: str, task: asyncio.Task[Any]) -> None:
        if self._running.get(pool) is task:
            del self._running[pool]

    async def _guarded(self, pool: str) -> FlushReport | None:
        try:
            if self._policy.settle_s:
                await asyncio.sleep(self._policy.settle_s)
            return await self.flush(pool)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("pool flush failed: pool=%s %s: %s", pool, type(exc).__name__, exc)
            return None

    async def close(self) -> None:
        """Cancel the flushes still running (the pending replayer covers their jobs)."""
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._running.clear()

    async def flush(self, pool: str) -> FlushReport:
        """Republish every waiting job of ``pool``; raises ``StoreError`` if listing fails."""
        now = self._clock()
        cutoff_us = int((now - self._policy.min_age_s) * 1_000_000)
        bucket = int(now) // self._policy.dedup_bucket_s
        listed = matched = published = skipped = 0
        for state in FLUSHED_STATES:
            ids = await self._indexes.list_jobs_by_state(state, cutoff_us, self._policy.limit)
            listed += len(ids)
            for job_id in ids:
                fields = await self._redis.hmget(
                    meta_key(job_id), ["state", "topic", "labels", "trace_id"]
                )
                current, topic, labels, trace_id = (as_text(v) for v in fields)
                # The index was read a moment ago: a job dispatched since then is left alone.
                if current not in FLUSHED_STATES:
                    continue
                if not self._serves(pool, topic, decode_labels({"labels": labels})):
                    continue
                matched += 1
                if await self._republish(job_id, trace_id, bucket):
                    published += 1
                else:
                    skipped += 1
        report = FlushReport(pool, listed, matched, published, skipped)
        log.info(
            "pool flush: pool=%s listed=%d matched=%d published=%d skipped=%d",
            pool,
            listed,
            matched,
            published,
            skipped,
        )
        return report

    async def _republish(self, job_id: str, trace_id: str, bucket: int) -> bool:
        try:
            req = await self._indexes.get_request(job_id)
        except StoreError as exc:
            log.warning("pool flush: job_id=%s skipped, request unreadable: %s", job_id, exc)
            return False
        if req is None:
            log.warning("pool flush: job_id=%s skipped, no stored request", job_id)
            return False
        try:
            validate_job_request(req)
        except InvalidPacket as exc:
            log.warning("pool flush: job_id=%s skipped: %s", job_id, exc)
            return False
        msg = packet(trace_id=trace_id or job_id, sender_id=SENDER_SCHEDULER, job_request=req)
        try:
            await self._publisher.publish_durable(
                self._subject, msg, msg_id=f"flush:{job_id}:{bucket}"
            )
        except Exception as exc:
            log.warning("pool flush: job_id=%s not republished: %s", job_id, exc)
            return False
        return True
