"""Lambda: pending replayer tick (EventBridge rate(1 minute)).

Re-drives PENDING, approved APPROVAL_REQUIRED and SCHEDULED jobs older than
the dispatch timeout through the engine, ticking twice a minute under the
replayer's TTL-hold lock.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from cordum import runtime
from cordum.config import settings
from cordum.logs import setup
from cordum.metrics import METRICS
from cordum.scheduler.reconciler import ReconcilerTimeouts
from cordum.scheduler.replayer import LOCK_KEY, PendingReplayer, ReplayerPolicy
from cordum.scheduler.service import default_engine
from cordum.scheduler.ticks import run_ticks
from cordum.store.indexes import JobIndexes
from cordum.store.locks import TtlHoldLock

setup()


@lru_cache(maxsize=1)
def _wiring() -> tuple[PendingReplayer, TtlHoldLock, float]:
    cfg = settings()
    timeouts = ReconcilerTimeouts.load(cfg.config_dir)
    redis = runtime.redis_client(cfg)
    replayer = PendingReplayer(default_engine(), JobIndexes(redis),
                               ReplayerPolicy.from_timeouts(timeouts))
    lock = TtlHoldLock(redis, LOCK_KEY, ttl_s=2 * timeouts.scan_interval_s)
    return replayer, lock, timeouts.scan_interval_s


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    replayer, lock, interval_s = _wiring()
    run = runtime.run(
        run_ticks(replayer.tick, lock, context.get_remaining_time_in_millis, interval_s))
    replayed = sum(r.total_replayed for r in run.results)
    if replayed:
        METRICS.count("orphan_replayed", replayed)
    METRICS.flush()
    return {
        "ticks": run.ticks,
        "failed_ticks": run.failed,
        "stopped": run.stopped,
        "replayed": sum(r.total_replayed for r in run.results),
        "retry_later": sum(r.retry_later for r in run.results),
        "failed": sum(r.failed for r in run.results),
        "stopped_early": any(r.stopped_early for r in run.results),
    }
