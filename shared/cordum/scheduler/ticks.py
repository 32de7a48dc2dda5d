"""What the scheduler's two scheduled functions share: the tick interval and timeouts
(timeouts.yaml) and a tick's TTL-hold lock. Each function is wired in a module of its
own, so its Lambda module imports only its own collaborators:

- :mod:`cordum.scheduler.reconciler_tick` hands the jobs of lost workers and lost
  dispatches to another worker (or fails them), then times out stale SCHEDULED /
  DISPATCHED / RUNNING jobs and jobs past their deadline;
- :mod:`cordum.scheduler.replayer_tick` re-drives PENDING, approved APPROVAL_REQUIRED
  and SCHEDULED jobs older than the dispatch timeout through the engine, then checks
  held outputs again (with the output policy on).

Each ticks every ``scan_interval_s`` (30 s) under its own TTL-hold lock while the
invocation's time allows (:func:`cordum.lambdas.ticks.run_ticks`); the collaborators
are built once per container.
"""

from __future__ import annotations

from functools import lru_cache

from cordum import runtime
from cordum.config import settings
from cordum.scheduler.timeouts import ReconcilerTimeouts
from cordum.store.locks import TtlHoldLock


@lru_cache(maxsize=1)
def timeouts() -> ReconcilerTimeouts:
    return ReconcilerTimeouts.load(settings().config_dir)


def tick_lock(key: str) -> TtlHoldLock:
    """A tick's TTL-hold: one replica ticks per two intervals."""
    return TtlHoldLock(runtime.redis_client(settings()), key,
                       ttl_s=2 * timeouts().scan_interval_s)
