"""Lambda: reconciler tick (EventBridge rate(1 minute)).

Hands the jobs of lost workers and lost dispatches to another worker (or fails
them), then times out stale SCHEDULED / DISPATCHED / RUNNING jobs and jobs past
their deadline, ticking twice a minute under the reconciler's TTL-hold lock.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from cordum import runtime
from cordum.config import settings
from cordum.logs import setup
from cordum.metrics import METRICS
from cordum.registry.liveness import SnapshotLiveness
from cordum.scheduler.lost_workers import LostWorkers
from cordum.scheduler.reconciler import (
    LOCK_KEY,
    Reconciler,
    ReconcilerPolicy,
    ReconcilerTimeouts,
)
from cordum.scheduler.service import default_engine
from cordum.scheduler.ticks import run_ticks
from cordum.store.indexes import JobIndexes
from cordum.store.jobs import JobStore
from cordum.store.locks import TtlHoldLock

setup()


@lru_cache(maxsize=1)
def _wiring() -> tuple[Reconciler, TtlHoldLock, float]:
    cfg = settings()
    timeouts = ReconcilerTimeouts.load(cfg.config_dir)
    redis = runtime.redis_client(cfg)
    lost = LostWorkers(default_engine(), JobIndexes(redis), SnapshotLiveness(redis))
    reconciler = Reconciler(JobStore(redis), JobIndexes(redis),
                            ReconcilerPolicy.from_timeouts(timeouts), lost=lost)
    lock = TtlHoldLock(redis, LOCK_KEY, ttl_s=2 * timeouts.scan_interval_s)
    return reconciler, lock, timeouts.scan_interval_s


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    reconciler, lock, interval_s = _wiring()
    run = runtime.run(
        run_ticks(reconciler.tick, lock, context.get_remaining_time_in_millis, interval_s))
    for report in run.results:
        for state, n in report.timed_out.items():
            METRICS.count("stale_jobs", n, state=state)
    METRICS.flush()
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
