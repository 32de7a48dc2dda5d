"""One worker as the registry knows it, and the load order routing uses."""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cordum.protocol import Heartbeat


STARTED_AT_LABEL = "cordum.started_at"
"""Heartbeat label: epoch seconds the worker started (before it subscribed). A
worker restarted under the same id says so with it, and the jobs dispatched
before are sent again at once (``scheduler.lost_workers``); without it they wait
for the lost-dispatch count. Only the worker's own jobs hang on it."""


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One worker as its last heartbeat described it."""

    worker_id: str
    pool: str
    active_jobs: int = 0
    max_parallel_jobs: int = 0
    capabilities: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    cpu_load: float = 0.0
    gpu_utilization: float = 0.0
    memory_load: float = 0.0
    region: str = ""
    type: str = ""
    last_seen: float = 0.0
    """Epoch seconds of the last heartbeat; 0 when unknown, which never counts as fresh."""

    @property
    def started_at(self) -> float | None:
        """When its process started (``STARTED_AT_LABEL``); None when unsaid or unreadable."""
        try:
            value = float(self.labels.get(STARTED_AT_LABEL, ""))
        except ValueError:
            return None
        return value if math.isfinite(value) and value > 0 else None


def worker_from_heartbeat(hb: Heartbeat, last_seen: float) -> WorkerInfo:
    return WorkerInfo(
        hb.worker_id,
        hb.pool,
        hb.active_jobs,
        hb.max_parallel_jobs,
        tuple(hb.capabilities),
        dict(hb.labels),
        hb.cpu_load,
        hb.gpu_utilization,
        hb.memory_load,
        hb.region,
        hb.type,
        last_seen,
    )


def _worker_id(worker: WorkerInfo) -> str:
    return worker.worker_id


def load_score(worker: WorkerInfo) -> float:
    """Cordum's load score, lower is lighter: each active job counts 1, a fully
    busy CPU or GPU counts 1 more."""
    return worker.active_jobs + worker.cpu_load / 100 + worker.gpu_utilization / 100


def load_order(worker: WorkerInfo) -> tuple[float, int, str]:
    """Routing preference: lighter first; equal scores go to fewer active jobs,
    then to the lower worker id, so every replica orders workers the same way."""
    return (load_score(worker), worker.active_jobs, worker.worker_id)


class WorkerSnapshot(list[WorkerInfo]):
    """Live workers sorted by id, with each pool's workers in ``load_order``.

    Built once per snapshot read, so routing a job looks at the few lightest
    workers of its pools instead of scanning every worker.
    """

    __slots__ = ("by_pool",)

    def __init__(self, workers: Iterable[WorkerInfo] = (),
                 by_pool: dict[str, list[WorkerInfo]] | None = None) -> None:
        if by_pool is None:
            super().__init__(sorted(workers, key=_worker_id))
            by_pool = {}
            for w in self:
                by_pool.setdefault(w.pool, []).append(w)
            for members in by_pool.values():
                members.sort(key=load_order)
        else:
            super().__init__(workers)
        self.by_pool: dict[str, list[WorkerInfo]] = by_pool

    def get(self, worker_id: str) -> WorkerInfo | None:
        i = bisect_left(self, worker_id, key=_worker_id)
        if i < len(self) and self[i].worker_id == worker_id:
            return self[i]
        return None

    def replaced(self, worker: WorkerInfo) -> WorkerSnapshot:
        """A copy in which ``worker`` (same id and pool, new load) replaces its old entry.

        Copy-on-write: a caller still holding this snapshot keeps a consistent view.
        """
        i = bisect_left(self, worker.worker_id, key=_worker_id)
        old = self[i]
        assert old.worker_id == worker.worker_id and old.pool == worker.pool
        workers = list(self)
        workers[i] = worker
        members = list(self.by_pool[worker.pool])
        del members[bisect_left(members, load_order(old), key=load_order)]
        insort(members, worker, key=load_order)
        return WorkerSnapshot(workers, {**self.by_pool, worker.pool: members})
