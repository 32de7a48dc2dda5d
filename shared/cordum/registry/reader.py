"""Live workers, read from the registry snapshot ``sys:workers:snapshot``.

The bridge writes the snapshot every 5 s from heartbeats. A container reads it
before its first pick and again once its copy is older than ``max_age_s``;
between reads it routes on its copy. Workers are merged by id, the most
recently heard-from entry winning, so a snapshot written by a replica that
missed a worker does not hide it while it is still fresh. Whatever the copy
holds, a worker not heard from for ``ttl_s`` is never returned.

A missing or corrupt snapshot, or an unreachable Redis, means no new knowledge:
a cold container starts with no workers. It is logged once per outage and is
never an error, because the engine already turns "no workers" into a retry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Protocol

from cordum.registry.snapshot import (
    HEARTBEAT_TTL_S,
    SNAPSHOT_INTERVAL_S,
    SNAPSHOT_KEY,
    decode_snapshot,
)
from cordum.registry.workers import WorkerInfo, WorkerSnapshot

log = logging.getLogger(__name__)


class RedisSnapshotClientProtocol(Protocol):
    """The part of ``redis.asyncio.Redis`` the reader uses."""

    def get(self, name: str) -> Awaitable[Any]: ...


class SnapshotReader:
    """This container's view of the live workers."""

    def __init__(
        self,
        redis: RedisSnapshotClientProtocol,
        *,
        key: str = SNAPSHOT_KEY,
        max_age_s: float = SNAPSHOT_INTERVAL_S,
        ttl_s: float = HEARTBEAT_TTL_S,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock`` (epoch seconds) ages the workers; ``monotonic`` ages this copy."""
        self._redis = redis
        self._key = key
        self._max_age = max_age_s
        self._ttl = ttl_s
        self._clock = clock
        self._monotonic = monotonic
        self._by_id: dict[str, WorkerInfo] = {}
        self._fresh = WorkerSnapshot()
        self._oldest_seen = float("inf")
        self._loaded_at = float("-inf")
        self._problem: str | None = None
        self._reading: asyncio.Task[None] | None = None

    async def workers(self, *, refresh: bool = False) -> WorkerSnapshot:
        """The workers heard from within ``ttl_s``, sorted by id. Do not mutate it."""
        if refresh or self._monotonic() - self._loaded_at > self._max_age:
            await self._read()
        return self._live()

    def is_alive(self, worker_id: str) -> bool:
        """Whether ``worker_id`` was heard from within ``ttl_s``, as far as this
        container knows: a worker picked a moment ago may have gone silent since."""
        worker = self._by_id.get(worker_id)
        return worker is not None and worker.last_seen >= self._clock() - self._ttl

    def record_dispatch(self, worker_id: str) -> None:
        """Count a job just sent to ``worker_id`` until the next snapshot reports it.

        Without this, every job routed between two snapshot reads would go to
        the same worker, the one that was lightest when the copy was taken.
        """
        worker = self._by_id.get(worker_id)
        if worker is None:
            return
        counted = replace(worker, active_jobs=worker.active_jobs + 1)
        self._by_id[worker_id] = counted
        self._fresh = self._fresh.replaced(counted)

    async def _read(self) -> None:
        # Jobs of one batch are handled concurrently: when the copy expires they
        # share one GET instead of each paying a round trip.
        task = self._reading
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            task = self._reading = asyncio.ensure_future(self._fetch())
        await asyncio.shield(task)

    async def _fetch(self) -> None:
        try:
            raw = await self._redis.get(self._key)
        except Exception as exc:  # any client failure: route on what we have, never fail here
            self._report(f"unreadable ({type(exc).__name__}: {exc})")
        else:
            stored = decode_snapshot(raw)
            self._report(stored.problem)
            self._merge(stored.workers)
        self._loaded_at = self._monotonic()

    def _report(self, problem: str | None) -> None:
        # One warning per outage, not one per read: a corrupt snapshot would
        # otherwise be reported every few seconds by every container.
        if problem is not None and problem != self._problem:
            log.warning("worker snapshot %s is %s: routing on %d known workers",
                        self._key, problem, len(self._by_id))
        elif problem is None and self._problem is not None:
            log.info("worker snapshot %s is readable again", self._key)
        self._problem = problem

    def _merge(self, workers: list[WorkerInfo]) -> None:
        cutoff = self._clock() - self._ttl
        for w in workers:
            if w.last_seen < cutoff:
                continue
            known = self._by_id.get(w.worker_id)
            # On equal heartbeat times the snapshot read later wins: it also
            # replaces counts added by record_dispatch with the worker's own.
            if known is None or w.last_seen >= known.last_seen:
                self._by_id[w.worker_id] = w
        self._rebuild(cutoff)

    def _live(self) -> WorkerSnapshot:
        cutoff = self._clock() - self._ttl
        if self._oldest_seen < cutoff:
            self._rebuild(cutoff)
        return self._fresh

    def _rebuild(self, cutoff: float) -> None:
        for worker_id in [i for i, w in self._by_id.items() if w.last_seen < cutoff]:
            del self._by_id[worker_id]
        self._fresh = WorkerSnapshot(self._by_id.values())
        self._oldest_seen = min((w.last_seen for w in self._fresh), default=float("inf"))
