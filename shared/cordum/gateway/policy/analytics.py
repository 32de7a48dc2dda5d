"""Policy analytics: how often each rule decided the caller's tenant's jobs in a window,
how often it asked a person, and what the people answered and how fast
(docs/http-api.md, "Policy analytics").

Read from each job's meta (``cordum.store.jobs``; the approval fields are written by
the approve and reject endpoints, ``cordum.gateway.approvals``):

- the rule: ``safety_rule_id`` (a job without one, never checked, is not counted);
- asked: the job was gated (:func:`cordum.approval.is_gated`: ``safety_decision``
  REQUIRE_APPROVAL, or ``safety_approval_required``, which stays once the dispatch
  re-check of an approved job writes ALLOW);
- answered: ``approval_status`` APPROVED or REJECTED, at ``approval_decided_at`` (µs);
  the latency runs from ``safety_checked_at`` (µs, when the kernel gated the job).

An override is an approval: a person let run what the policy held back. A rejection
agrees with the policy and is not one (Cordum counts both). ``override_rate`` is
overrides over approvals asked, 3 decimals.

Bounds: at most :data:`MAX_JOBS` jobs (newest first), read in pipelined batches of
``HMGET``; at most :data:`TIME_BUDGET_S` of scanning, less when the invocation ends
sooner. Either bound reached is answered as ``truncated: true``.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cordum.approval import APPROVED, REJECTED, STATUS_FIELD, is_gated
from cordum.gateway.core.paging import Position
from cordum.gateway.core.times import rfc3339_us
from cordum.gateway.policy.history import TenantWindow, window_us

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from cordum.gateway.policy.history import Batch, StoredJob
    from cordum.gateway.policy.models import AnalyticsRequest
    from cordum.store.reads import RedisReadProtocol

MAX_JOBS = 10_000
"""Jobs one analytics call reads at most."""
BATCH = 500
"""Metas read per pipelined round trip (a few short fields each)."""
TIME_BUDGET_S = 10.0
DEADLINE_MARGIN_S = 2.0
LATENCY_BUCKETS_MS = (1_000, 10_000, 60_000, 600_000, 3_600_000, 86_400_000)
"""Upper bounds of the approval latency histogram (1 s, 10 s, 1 min, 10 min, 1 h, 1 d),
then +inf (``le_ms: null``). Counts are cumulative, as Prometheus's: a bucket counts
every answer at or under its bound."""
FIELDS = ("tenant", "safety_decision", "safety_rule_id", "safety_approval_required",
          STATUS_FIELD, "approval_decided_at", "safety_checked_at")
INVALID_WINDOW = "invalid_analytics_window"


@dataclass(slots=True)
class RuleStats:
    hits: int = 0
    asked: int = 0
    approved: int = 0
    rejected: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    days: Counter[str] = field(default_factory=Counter)

    def add(self, job: StoredJob) -> None:
        meta = job.meta
        self.hits += 1
        self.days[datetime.fromtimestamp(job.score / 1e6, tz=UTC).date().isoformat()] += 1
        if not is_gated(meta):
            return
        self.asked += 1
        status = meta.get(STATUS_FIELD, "")
        if status not in (APPROVED, REJECTED):
            return
        if status == APPROVED:
            self.approved += 1
        else:
            self.rejected += 1
        latency = latency_ms(meta)
        if latency is not None:
            self.latencies_ms.append(latency)


def latency_ms(meta: dict[str, str]) -> float | None:
    """approval_decided_at − safety_checked_at in ms; None when either is missing or the
    answer would precede the question (a later re-check rewrote the check time)."""
    try:
        asked, answered = int(meta["safety_checked_at"]), int(meta["approval_decided_at"])
    except (KeyError, ValueError):
        return None
    return None if answered < asked else (answered - asked) / 1000


def histogram(latencies: Iterable[float]) -> list[dict[str, Any]]:
    values = list(latencies)
    out: list[dict[str, Any]] = [{"le_ms": bound, "count": sum(v <= bound for v in values)}
                                 for bound in LATENCY_BUCKETS_MS]
    out.append({"le_ms": None, "count": len(values)})
    return out


def _rate(part: int, whole: int) -> float:
    return round(part / whole, 3) if whole else 0.0


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


def rule_view(rule_id: str, s: RuleStats) -> dict[str, Any]:
    return {"rule_id": rule_id, "hit_count": s.hits, "approval_count": s.asked,
            "approved_count": s.approved, "rejected_count": s.rejected,
            "override_count": s.approved, "override_rate": _rate(s.approved, s.asked),
            "avg_approval_latency_ms": _mean(s.latencies_ms),
            "approval_latency_histogram": histogram(s.latencies_ms),
            "daily_hits": [{"date": d, "count": n} for d, n in sorted(s.days.items())]}


class PolicyAnalytics:
    """One analytics call over ``tenant``'s jobs."""

    def __init__(self, redis: RedisReadProtocol, tenant: str, *, max_jobs: int = MAX_JOBS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._redis = redis
        self._tenant = tenant
        self._max_jobs = max_jobs
        self._clock = clock

    async def run(self, body: AnalyticsRequest, *, deadline: float | None = None
                  ) -> dict[str, Any]:
        low, high = window_us(body.from_, body.to, INVALID_WINDOW)
        stop_at = self._clock() + TIME_BUDGET_S
        if deadline is not None:
            stop_at = min(stop_at, deadline - DEADLINE_MARGIN_S)
        only = body.rule_filter.strip()
        window = TenantWindow(self._redis, self._tenant, low, high)
        rules: dict[str, RuleStats] = {}
        position: Position | None = None
        scanned = 0
        truncated = False
        pending: Batch | None = None
        while True:
            if pending is None:
                pending = await window.entries(position, min(BATCH, self._max_jobs - scanned))
            entries, exhausted = pending
            more = min(BATCH, self._max_jobs - scanned - len(entries))
            then = (Position(*entries[-1]), more) if entries and not exhausted and more else None
            jobs, pending = await window.read(entries, FIELDS, with_request=False, then=then)
            for job in jobs:
                rule_id = job.meta.get("safety_rule_id", "")
                if rule_id and (not only or rule_id == only):
                    rules.setdefault(rule_id, RuleStats()).add(job)
            scanned += len(entries)
            if exhausted:
                break
            position = Position(*entries[-1])
            if scanned >= self._max_jobs or self._clock() >= stop_at:
                truncated = True
                break
        return self._answer(low, high, rules, scanned, truncated)

    def _answer(self, low: int, high: int, rules: dict[str, RuleStats], scanned: int,
                truncated: bool) -> dict[str, Any]:
        ordered = sorted(rules.items(), key=lambda kv: (-kv[1].hits, kv[0]))
        asked = sum(s.asked for s in rules.values())
        approved = sum(s.approved for s in rules.values())
        latencies = [v for s in rules.values() for v in s.latencies_ms]
        gated = [(_rate(s.approved, s.asked), s.approved, rid)
                 for rid, s in rules.items() if s.approved]
        # Highest rate first; of equal rates the rule overridden most, then the first id.
        top = min(gated, key=lambda g: (-g[0], -g[1], g[2]))[2] if gated else ""
        return {
            "tenant": self._tenant,
            "time_range": {"from": rfc3339_us(low), "to": rfc3339_us(high)},
            "rules": [rule_view(rid, s) for rid, s in ordered],
            "summary": {
                "total_rules": len(rules), "total_hits": sum(s.hits for s in rules.values()),
                "approvals_asked": asked, "approved": approved,
                "rejected": sum(s.rejected for s in rules.values()),
                "total_overrides": approved, "override_rate": _rate(approved, asked),
                "avg_approval_latency_ms": _mean(latencies),
                "approval_latency_histogram": histogram(latencies),
                "highest_override_rule_id": top or None},
            "scanned": scanned, "truncated": truncated,
        }
