"""Lambda: pending replayer tick (EventBridge rate(1 minute)).

Re-drives PENDING, approved APPROVAL_REQUIRED and SCHEDULED jobs older than
the dispatch timeout through the engine, then checks held outputs again (with the
output policy on), ticking twice a minute under the replayer's TTL-hold lock.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from cordum import runtime
from cordum.config import settings
from cordum.logs import setup
from cordum.metrics import METRICS
from cordum.scheduler.held_outputs import HeldOutputRechecker, HeldReport, HoldPolicy
from cordum.scheduler.reconciler import ReconcilerTimeouts
from cordum.scheduler.replayer import LOCK_KEY, PendingReplayer, ReplayerPolicy, ReplayReport
from cordum.scheduler.service import default_engine
from cordum.scheduler.ticks import run_ticks
from cordum.store.indexes import JobIndexes
from cordum.store.locks import TtlHoldLock

setup()


@lru_cache(maxsize=1)
def _wiring() -> tuple[PendingReplayer, HeldOutputRechecker | None, TtlHoldLock, float]:
    cfg = settings()
    timeouts = ReconcilerTimeouts.load(cfg.config_dir)
    redis = runtime.redis_client(cfg)
    engine = default_engine()
    replayer = PendingReplayer(engine, JobIndexes(redis), ReplayerPolicy.from_timeouts(timeouts))
    held = HeldOutputRechecker.of_engine(engine, HoldPolicy.from_settings(cfg))
    lock = TtlHoldLock(redis, LOCK_KEY, ttl_s=2 * timeouts.scan_interval_s)
    return replayer, held, lock, timeouts.scan_interval_s


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    replayer, held, lock, interval_s = _wiring()

    async def tick(deadline: float) -> tuple[ReplayReport, HeldReport]:
        report = await replayer.tick(deadline)
        return report, await held.tick(deadline) if held is not None else HeldReport()

    run = runtime.run(
        run_ticks(tick, lock, context.get_remaining_time_in_millis, interval_s))
    replays = [r for r, _ in run.results]
    outputs = [h for _, h in run.results]
    replayed = sum(r.total_replayed for r in replays)
    if replayed:
        METRICS.count("orphan_replayed", replayed)
    METRICS.flush()
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
