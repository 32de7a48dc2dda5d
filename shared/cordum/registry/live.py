"""The live workers one bridge replica has heard from (Cordum's in-memory registry)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cordum.registry.snapshot import HEARTBEAT_TTL_S, snapshot_document, snapshot_workers
from cordum.registry.workers import WorkerInfo, worker_from_heartbeat

if TYPE_CHECKING:
    from cordum.protocol import Heartbeat


@dataclass(frozen=True, slots=True)
class Observation:
    """What one heartbeat changed in the registry."""

    joined: bool
    """The worker was not known, or had gone silent past the TTL."""
    pool_online: bool
    """Its pool had no fresh worker before this heartbeat (an empty pool never counts)."""


class LiveRegistry:
    """Live workers by id, from their heartbeats; silent for ``ttl_s`` means gone."""

    def __init__(self, ttl_s: float = HEARTBEAT_TTL_S,
                 clock: Callable[[], float] = time.time) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._workers: dict[str, WorkerInfo] = {}

    def __len__(self) -> int:
        return len(self._workers)

    def update_heartbeat_with_transition(self, hb: Heartbeat) -> bool:
        """Record a heartbeat; True iff no worker of its pool, itself included,
        was fresh before it (Cordum's UpdateHeartbeatWithTransition)."""
        return self.record(hb).pool_online

    def record(self, hb: Heartbeat) -> Observation:
        """Record a heartbeat and say what it changed."""
        now = self._clock()
        pool_online = bool(hb.pool) and not self._pool_fresh(hb.pool, now)
        previous = self._workers.get(hb.worker_id)
        self._workers[hb.worker_id] = worker_from_heartbeat(hb, now)
        joined = previous is None or now - previous.last_seen > self._ttl_s
        return Observation(joined=joined, pool_online=pool_online)

    def _pool_fresh(self, pool: str, now: float) -> bool:
        # A scan rather than a per-pool index: a worker may change pools between
        # heartbeats, and the registry holds hundreds of workers, not millions.
        return any(
            w.pool == pool and now - w.last_seen <= self._ttl_s for w in self._workers.values()
        )

    def hydrate(self, document: Mapping[str, Any]) -> int:
        """Take the workers of a stored snapshot that are still fresh (Cordum's
        HydrateFromSnapshot), so a replica that just started neither reports them
        as joining nor writes a snapshot without them. Returns how many it took."""
        cutoff = self._clock() - self._ttl_s
        taken = 0
        for worker in snapshot_workers(document):
            if worker.last_seen < cutoff or worker.worker_id in self._workers:
                continue
            self._workers[worker.worker_id] = worker
            taken += 1
        return taken

    def prune(self) -> int:
        cutoff = self._clock() - self._ttl_s
        stale = [wid for wid, w in self._workers.items() if w.last_seen < cutoff]
        for wid in stale:
            del self._workers[wid]
        return len(stale)

    def snapshot(self, topics: Mapping[str, str], *, writer_id: str) -> dict[str, Any]:
        """Cordum's snapshot document of the live workers, plus ``last_heartbeat`` on each."""
        self.prune()
        workers = (self._workers[wid] for wid in sorted(self._workers))
        return snapshot_document(workers, topics, writer_id=writer_id, now=self._clock())
