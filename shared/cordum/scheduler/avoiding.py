"""A tick's view of the workers, less the ones it gave up on (``scheduler.lost_workers``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cordum.registry.workers import WorkerSnapshot
from cordum.scheduler.engine import Engine

if TYPE_CHECKING:
    from cordum.scheduler.ports import WorkerDirectory


class AvoidingDirectory:
    """The engine's worker directory less the workers a tick gave up on: the ``avoid``
    ones (gone) always, the ``prefer_not`` ones (alive, but a dispatch to them was
    lost) unless nobody else in their pool is left."""

    def __init__(self, inner: WorkerDirectory) -> None:
        self._inner = inner
        self.avoid: frozenset[str] = frozenset()
        self.prefer_not: frozenset[str] = frozenset()
        self._kept: frozenset[str] = frozenset()

    async def workers(self, *, refresh: bool = False) -> Sequence[Any]:
        workers = await self._inner.workers(refresh=refresh)
        if not self.avoid and not self.prefer_not:
            return workers
        gone = self.avoid | self.prefer_not
        if not isinstance(workers, WorkerSnapshot):
            kept = [w for w in workers if w.worker_id not in gone] or [
                w for w in workers if w.worker_id not in self.avoid]
            self._kept = frozenset(w.worker_id for w in kept)
            return kept
        pools = {pool: [w for w in members if w.worker_id not in gone]
                 or [w for w in members if w.worker_id not in self.avoid]
                 for pool, members in workers.by_pool.items()}
        ids = {w.worker_id for members in pools.values() for w in members}
        self._kept = frozenset(ids)
        return WorkerSnapshot([w for w in workers if w.worker_id in ids
                               or (not w.pool and w.worker_id not in gone)], pools)

    def is_alive(self, worker_id: str) -> bool:
        if worker_id in self.avoid or (worker_id in self.prefer_not
                                        and worker_id not in self._kept):
            return False
        return self._inner.is_alive(worker_id)

    def record_dispatch(self, worker_id: str) -> None:
        self._inner.record_dispatch(worker_id)


def avoiding(engine: Engine, directory: AvoidingDirectory) -> Engine:
    p = engine.ports
    return Engine(store=p.store, registry=directory, strategy=p.strategy, safety=p.safety,
                  publisher=p.publisher, locks=p.locks, backoff=p.backoff,
                  input_fail_open=engine.input_fail_open, saga=p.saga, rollback=p.rollback,
                  requests=p.requests, output=p.output, runs=p.runs, policy=engine.policy)
