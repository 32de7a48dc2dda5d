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
import json
import logging
import time
from bisect import bisect_left, insort
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from cordum.scheduler.errors import NoWorkers

SNAPSHOT_KEY = "sys:workers:snapshot"
SNAPSHOT_MAX_AGE_S = 5.0
"""The bridge rewrites the snapshot this often; reading it more often finds nothing new."""
HEARTBEAT_TTL_S = 30.0
"""Cordum's worker heartbeat TTL: silent for this long means gone."""

log = logging.getLogger(__name__)


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


class SnapshotSource(Protocol):
    """The part of ``redis.asyncio.Redis`` the registry uses."""

    def get(self, name: str) -> Awaitable[Any]: ...


class _Timestamps:
    """RFC 3339 instants to epoch seconds. The bridge writes them at second
    precision, so thousands of workers share a handful of distinct strings."""

    def __init__(self) -> None:
        self._seen: dict[str, float | None] = {}

    def parse(self, value: Any) -> float | None:
        if not isinstance(value, str) or not value:
            return None
        if value not in self._seen:
            try:
                instant = datetime.fromisoformat(value)
            except ValueError:
                self._seen[value] = None
            else:
                if instant.tzinfo is None:
                    instant = instant.replace(tzinfo=UTC)
                self._seen[value] = instant.timestamp()
        return self._seen[value]


def _text(value: Any) -> str:
    return value if value.__class__ is str else ("" if value is None else str(value))


def _worker(entry: Any, default_seen: float | None, timestamps: _Timestamps) -> WorkerInfo | None:
    # Runs once per worker on every read (10,000 workers every 5 s at the
    # budget's scale): positional arguments and no needless conversions.
    if entry.__class__ is not dict:
        return None
    get = entry.get
    worker_id = _text(get("worker_id")).strip()
    if not worker_id:
        return None
    last_seen = timestamps.parse(get("last_heartbeat"))
    if last_seen is None:
        last_seen = default_seen
    labels = get("labels")
    capabilities = get("capabilities")
    try:
        return WorkerInfo(
            worker_id,
            _text(get("pool")),
            int(get("active_jobs") or 0),
            int(get("max_parallel_jobs") or 0),
            tuple(map(_text, capabilities)) if capabilities else (),
            {_text(k): _text(v) for k, v in labels.items()} if labels else {},
            # The SDK's heartbeat helper sends no gpu_utilization and the
            # snapshot omits zero values: a missing load reads as idle.
            float(get("cpu_load") or 0),
            float(get("gpu_utilization") or 0),
            float(get("memory_load") or 0),
            _text(get("region")),
            _text(get("type")),
            last_seen or 0.0,
        )
    except (TypeError, ValueError, AttributeError):
        return None


def _decode(raw: bytes | str | None) -> tuple[list[WorkerInfo], str | None]:
    """The snapshot's workers, and what was wrong with it (None when nothing)."""
    if not raw:
        return [], "missing"
    try:
        doc = json.loads(raw)
    except ValueError:
        return [], "not valid JSON"
    if not isinstance(doc, dict):
        return [], "not a JSON object"
    entries = doc.get("workers") or []
    if not isinstance(entries, list):
        return [], "its workers field is not a list"
    timestamps = _Timestamps()
    default_seen = timestamps.parse(doc.get("captured_at"))
    workers = [w for e in entries if (w := _worker(e, default_seen, timestamps)) is not None]
    return workers, None


def parse_snapshot(raw: bytes | str | None) -> list[WorkerInfo]:
    """Every well-formed worker entry of a snapshot, fresh or not; [] when the
    snapshot is missing or corrupt. Malformed entries are skipped."""
    return _decode(raw)[0]


class SnapshotRegistry:
    """This container's view of the live workers."""

    def __init__(
        self,
        redis: SnapshotSource,
        *,
        key: str = SNAPSHOT_KEY,
        max_age_s: float = SNAPSHOT_MAX_AGE_S,
        ttl_s: float = HEARTBEAT_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._redis = redis
        self._key = key
        self._max_age = max_age_s
        self._ttl = ttl_s
        self._clock = clock
        self._by_id: dict[str, WorkerInfo] = {}
        self._fresh = WorkerSnapshot()
        self._oldest_seen = float("inf")
        self._loaded_at = float("-inf")
        self._problem: str | None = None
        self._reading: asyncio.Task[None] | None = None

    async def workers(self, *, refresh: bool = False) -> WorkerSnapshot:
        """The workers heard from within ``ttl_s``, sorted by id. Do not mutate it."""
        if refresh or time.monotonic() - self._loaded_at > self._max_age:
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
            workers, problem = _decode(raw)
            self._report(problem)
            self._merge(workers)
        self._loaded_at = time.monotonic()

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


def pick_worker(workers: list[WorkerInfo], pools: list[str]) -> WorkerInfo | None:
    """The least-loaded worker of ``pools`` (overloaded ones skipped), or None.

    Kept for callers that resolve pools themselves; ``LeastLoadedStrategy.pick``
    also applies preferred pool/worker, requires, placement labels and readiness.
    """
    from cordum.scheduler.strategy import PoolOverloaded, select_least_loaded

    try:
        return select_least_loaded(workers, pools, topic="")
    except (NoWorkers, PoolOverloaded):
        return None
