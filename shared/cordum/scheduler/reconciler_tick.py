"""The reconciler's scheduled function (EventBridge, every minute): hands the jobs of
lost workers and lost dispatches to another worker (or fails them), then times out stale
SCHEDULED / DISPATCHED / RUNNING jobs and jobs past their deadline, ticking under its
TTL-hold lock (:mod:`cordum.scheduler.ticks`)."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from cordum import runtime
from cordum.config import settings
from cordum.lambdas.ticks import run_ticks, scheduled
from cordum.metrics import METRICS
from cordum.registry.liveness import SnapshotLiveness
from cordum.scheduler.lost_workers import LostWorkers
from cordum.scheduler.reconciler import LOCK_KEY as RECONCILER_LOCK
from cordum.scheduler.reconciler import Reconciler, ReconcilerPolicy
from cordum.scheduler.service import default_engine
from cordum.scheduler.ticks import tick_lock, timeouts
from cordum.store.indexes import JobIndexes
from cordum.store.jobs import JobStore

if TYPE_CHECKING:
    from collections.abc import Callable

    from cordum.store.locks import TtlHoldLock


def reconciler_tick(context: Any) -> dict[str, Any]:
    """The reconciler's invocation: its ticks' totals."""
    return scheduled(context, _reconcile)


@lru_cache(maxsize=1)
def _reconciler() -> tuple[Reconciler, TtlHoldLock]:
    redis = runtime.redis_client(settings())
    lost = LostWorkers(default_engine(results=False), JobIndexes(redis), SnapshotLiveness(redis))
    reconciler = Reconciler(JobStore(redis), JobIndexes(redis),
                            ReconcilerPolicy.from_timeouts(timeouts()), lost=lost)
    return reconciler, tick_lock(RECONCILER_LOCK)


async def _reconcile(remaining_ms: Callable[[], int]) -> dict[str, Any]:
    reconciler, lock = _reconciler()
    run = await run_ticks(reconciler.tick, lock, remaining_ms, timeouts().scan_interval_s)
    for report in run.results:
        for state, n in report.timed_out.items():
            METRICS.count("stale_jobs", n, state=state)
    return {
        "ticks": run.ticks,
        "failed_ticks": run.failed,
        "stopped": run.stopped,
        "timed_out": sum(r.total_timed_out for r in run.results),
        "moved": sum(r.moved for r in run.results),
        "failed": sum(r.failed for r in run.results),
        "lost_retried": sum(sum(r.lost.retried.values()) for r in run.results if r.lost),
        "lost_failed": sum(sum(r.lost.failed.values()) for r in run.results if r.lost),
        "stopped_early": any(r.stopped_early for r in run.results),
    }
