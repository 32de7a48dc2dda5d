"""The scheduler's two scheduled functions, wired here so their Lambda modules stay one
call each (the tick loop and the invocation around it: :mod:`cordum.lambdas.ticks`).

- :func:`reconciler_tick` hands the jobs of lost workers and lost dispatches to another
  worker (or fails them), then times out stale SCHEDULED / DISPATCHED / RUNNING jobs
  and jobs past their deadline.
- :func:`replayer_tick` re-drives PENDING, approved APPROVAL_REQUIRED and SCHEDULED
  jobs older than the dispatch timeout through the engine, then checks held outputs
  again (with the output policy on).

Each ticks every ``scan_interval_s`` (30 s) under its own TTL-hold lock while the
invocation's time allows (:func:`cordum.lambdas.ticks.run_ticks`); the collaborators
are built once per container.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from cordum import runtime
from cordum.config import settings
from cordum.lambdas.ticks import run_ticks, scheduled
from cordum.metrics import METRICS
from cordum.registry.liveness import SnapshotLiveness
from cordum.scheduler.held_outputs import HeldOutputRechecker, HeldReport, HoldPolicy
from cordum.scheduler.lost_workers import LostWorkers
from cordum.scheduler.reconciler import LOCK_KEY as RECONCILER_LOCK
from cordum.scheduler.reconciler import Reconciler, ReconcilerPolicy, ReconcilerTimeouts
from cordum.scheduler.replayer import LOCK_KEY as REPLAYER_LOCK
from cordum.scheduler.replayer import PendingReplayer, ReplayerPolicy, ReplayReport
from cordum.scheduler.service import default_engine
from cordum.store.indexes import JobIndexes
from cordum.store.jobs import JobStore
from cordum.store.locks import TtlHoldLock

if TYPE_CHECKING:
    from collections.abc import Callable


def reconciler_tick(context: Any) -> dict[str, Any]:
    """The reconciler's invocation: its ticks' totals."""
    return scheduled(context, _reconcile)


def replayer_tick(context: Any) -> dict[str, Any]:
    """The pending replayer's invocation (with the held outputs' recheck): its totals."""
    return scheduled(context, _replay)


@lru_cache(maxsize=1)
def _timeouts() -> ReconcilerTimeouts:
    return ReconcilerTimeouts.load(settings().config_dir)


def _tick_lock(key: str) -> TtlHoldLock:
    """A tick's TTL-hold: one replica ticks per two intervals."""
    return TtlHoldLock(runtime.redis_client(settings()), key,
                       ttl_s=2 * _timeouts().scan_interval_s)


@lru_cache(maxsize=1)
def _reconciler() -> tuple[Reconciler, TtlHoldLock]:
    redis = runtime.redis_client(settings())
    lost = LostWorkers(default_engine(), JobIndexes(redis), SnapshotLiveness(redis))
    reconciler = Reconciler(JobStore(redis), JobIndexes(redis),
                            ReconcilerPolicy.from_timeouts(_timeouts()), lost=lost)
    return reconciler, _tick_lock(RECONCILER_LOCK)


@lru_cache(maxsize=1)
def _replayer() -> tuple[PendingReplayer, HeldOutputRechecker | None, TtlHoldLock]:
    cfg = settings()
    redis = runtime.redis_client(cfg)
    engine = default_engine()
    replayer = PendingReplayer(engine, JobIndexes(redis),
                               ReplayerPolicy.from_timeouts(_timeouts()))
    held = HeldOutputRechecker.of_engine(engine, HoldPolicy.from_settings(cfg))
    return replayer, held, _tick_lock(REPLAYER_LOCK)


async def _reconcile(remaining_ms: Callable[[], int]) -> dict[str, Any]:
    reconciler, lock = _reconciler()
    run = await run_ticks(reconciler.tick, lock, remaining_ms, _timeouts().scan_interval_s)
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


async def _replay(remaining_ms: Callable[[], int]) -> dict[str, Any]:
    replayer, held, lock = _replayer()

    async def tick(deadline: float) -> tuple[ReplayReport, HeldReport]:
        report = await replayer.tick(deadline)
        return report, await held.tick(deadline) if held is not None else HeldReport()

    run = await run_ticks(tick, lock, remaining_ms, _timeouts().scan_interval_s)
    replays = [r for r, _ in run.results]
    outputs = [h for _, h in run.results]
    replayed = sum(r.total_replayed for r in replays)
    if replayed:
        METRICS.count("orphan_replayed", replayed)
    return {
        "ticks": run.ticks,
        "failed_ticks": run.failed,
        "stopped": run.stopped,
        "replayed": replayed,
        "retry_later": sum(r.retry_later for r in replays),
        "failed": sum(r.failed for r in replays),
        "stopped_early": any(r.stopped_early for r in replays),
        "outputs_decided": sum(h.decided + h.quarantined for h in outputs),
        "outputs_still_held": sum(h.still_held for h in outputs),
    }
