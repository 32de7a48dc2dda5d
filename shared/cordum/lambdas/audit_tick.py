"""The audit tick, wired here so its Lambda module stays one call (the tick loop and
the invocation around it: :mod:`cordum.lambdas.ticks`).

Every ``INTERVAL_S`` under its TTL-hold lock, while the invocation's time allows: the
tenants' outboxes drained into their chains, then, with ``CORDUM_AUDIT_BUCKET`` set,
each chain's next entries exported to S3 and what is exported and older than the last
``CORDUM_AUDIT_KEEP_ENTRIES`` trimmed from Redis (:func:`cordum.store.audit_export.export_all`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from cordum import aws, runtime
from cordum.config import settings
from cordum.lambdas.ticks import run_ticks, scheduled
from cordum.store.audit_export import ExportSummary, export_all
from cordum.store.audit_trail import AuditTrail, process_hmac_key
from cordum.store.locks import TtlHoldLock

if TYPE_CHECKING:
    from collections.abc import Callable

LOCK_KEY = "cordum:audit:export"
INTERVAL_S = 15.0
"""Four ticks a minute: at the default bounds up to 4 x 100 tenants x 1000 entries."""


def audit_tick(context: Any) -> dict[str, Any]:
    """The audit tick's invocation: its ticks' totals."""
    return scheduled(context, _invocation)


@lru_cache(maxsize=1)
def _wiring() -> tuple[Any, Any, TtlHoldLock]:
    cfg = settings()
    redis = runtime.redis_client(cfg)
    s3 = aws.client("s3") if cfg.audit_bucket else None
    return redis, s3, TtlHoldLock(redis, LOCK_KEY, ttl_s=2 * INTERVAL_S)


async def _invocation(remaining_ms: Callable[[], int]) -> dict[str, Any]:
    cfg = settings()
    redis, s3, lock = _wiring()
    key = process_hmac_key()

    async def tick(deadline: float) -> ExportSummary:
        if s3 is None:
            return ExportSummary(drained=await AuditTrail(redis, key).drain_all())
        return await export_all(redis, s3, cfg.audit_bucket, keep=cfg.audit_keep_entries,
                                hmac_key=key, deadline=deadline)

    run = await run_ticks(tick, lock, remaining_ms, INTERVAL_S)
    return {
        "ticks": run.ticks,
        "failed_ticks": run.failed,
        "stopped": run.stopped,
        "drained": sum(s.drained for s in run.results),
        "exported": sum(s.exported for s in run.results),
        "trimmed": sum(s.trimmed for s in run.results),
        "held": max((s.held for s in run.results), default=0),
        "failed": sum(len(s.failed) for s in run.results),
    }
