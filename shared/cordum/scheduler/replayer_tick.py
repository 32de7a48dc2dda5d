"""The pending replayer's scheduled function (EventBridge, every minute): re-drives
PENDING, approved APPROVAL_REQUIRED and SCHEDULED jobs older than the dispatch timeout
through the engine, then checks held outputs again (with the output policy on), ticking
under its TTL-hold lock (:mod:`cordum.scheduler.ticks`)."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from cordum import runtime
from cordum.config import settings
from cordum.lambdas.ticks import run_ticks, scheduled
from cordum.metrics import METRICS
from cordum.scheduler.held_outputs import HeldOutputRechecker, HeldReport, HoldPolicy
from cordum.scheduler.replayer import LOCK_KEY as REPLAYER_LOCK
from cordum.scheduler.replayer import PendingReplayer, ReplayerPolicy, ReplayReport
from cordum.scheduler.service import default_engine
from cordum.scheduler.ticks import tick_lock, timeouts
from cordum.store.indexes import JobIndexes

if TYPE_CHECKING:
    from collections.abc import Callable

    from cordum.store.locks import TtlHoldLock


def replayer_tick(context: Any) -> dict[str, Any]:
    """The pending replayer's invocation (with the held outputs' recheck): its totals."""
    return scheduled(context, _replay)


@lru_cache(maxsize=1)
def _replayer() -> tuple[PendingReplayer, HeldOutputRechecker | None, TtlHoldLock]:
    cfg = settings()
    redis = runtime.redis_client(cfg)
    engine = default_engine()
    replayer = PendingReplayer(engine, JobIndexes(redis),
                               ReplayerPolicy.from_timeouts(timeouts()))
    held = HeldOutputRechecker.of_engine(engine, HoldPolicy.from_settings(cfg))
    return replayer, held, tick_lock(REPLAYER_LOCK)


async def _replay(remaining_ms: Callable[[], int]) -> dict[str, Any]:
    replayer, held, lock = _replayer()

    async def tick(deadline: float) -> tuple[ReplayReport, HeldReport]:
        report = await replayer.tick(deadline)
        return report, await held.tick(deadline) if held is not None else HeldReport()

    run = await run_ticks(tick, lock, remaining_ms, timeouts().scan_interval_s)
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
