"""The reconciler: stuck and overdue jobs become TIMEOUT (Cordum's reconciler).

Each tick moves to TIMEOUT the jobs that have stayed SCHEDULED longer than
60 s, DISPATCHED longer than the dispatch timeout, RUNNING longer than the
running timeout, and the jobs whose deadline has passed; ``failure_reason``
says which, in Cordum's words ("timeout: RUNNING >5m0s").

Where Cordum wrote the state and then the reason without a lock, each timeout
here is one transition script fenced by ``only_from=<the state scanned>``: a
job that moved to another state between the scan and the write (a result came
in) is left alone, and the state and its reason land together. The fence also
holds the scan's cutoff: a job that left the scanned state and came back to it
after the cutoff (RUNNING -> RETRYING -> ... -> RUNNING) is not timed out for
its earlier stay.

A scan reads the per-state index from its oldest entry up to the cutoff, one
page at a time. A job that times out leaves the index, so the next page starts
where the entries left in place end: the cost is O(stale jobs), never
O(jobs stored).

Before the timeouts, a tick hands the jobs of lost workers and lost dispatches
on to another worker (``lost_workers.py``), when it is given that collaborator.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cordum.lambdas.ticks import past
from cordum.scheduler.timeouts import ReconcilerTimeouts
from cordum.store.errors import InvalidTransition, StoreError
from cordum.store.jobs import OPEN_STATES, JobState, now_us

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from cordum.scheduler.lost_workers import LostReport, LostWorkers
    from cordum.store.indexes import JobIndexes
    from cordum.store.jobs import JobStore

log = logging.getLogger(__name__)

LOCK_KEY = "cordum:reconciler:default"
DEADLINE_REASON = "timeout: deadline expired"



# ------------------------------------------------------------------ settings


@dataclass(frozen=True, slots=True)
class ReconcilerPolicy:
    """What one reconciler tick looks for, and how much work it allows itself."""

    dispatch_timeout_s: float = 120.0
    """A DISPATCHED job older than this times out."""
    running_timeout_s: float = 300.0
    """A RUNNING job older than this times out."""
    scheduled_timeout_s: float = 60.0
    """A SCHEDULED job older than this times out (fixed in Cordum)."""
    batch_size: int = 200
    """Index entries read per page."""
    max_iterations: int = 100
    """Pages per scan; what is left is seen by the next tick."""
    max_tries_per_job: int = 3
    """Attempts of one job's transition when Redis fails; then it is left for the next tick."""

    @classmethod
    def from_timeouts(cls, timeouts: ReconcilerTimeouts) -> ReconcilerPolicy:
        return cls(dispatch_timeout_s=timeouts.dispatch_timeout_s,
                   running_timeout_s=timeouts.running_timeout_s)


# ------------------------------------------------------------------ reasons


def go_duration(seconds: float) -> str:
    """``seconds`` as Go's ``time.Duration.String`` prints it: 30s, 2m0s, 1h0m0s, 1.5s, 250ms."""
    ns = round(seconds * 1_000_000_000)
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < 1_000:
        return f"{sign}{ns}ns"
    if ns < 1_000_000:
        return f"{sign}{_decimal(ns, 1_000)}µs"
    if ns < 1_000_000_000:
        return f"{sign}{_decimal(ns, 1_000_000)}ms"
    hours, rest = divmod(ns, 3_600 * 1_000_000_000)
    minutes, rest = divmod(rest, 60 * 1_000_000_000)
    secs = _decimal(rest, 1_000_000_000)
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{sign}{minutes}m{secs}s"
    return f"{sign}{secs}s"


def _decimal(value: int, unit: int) -> str:
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    digits = str(frac).rjust(len(str(unit)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}"


def timeout_reason(state: str, timeout_s: float | None = None) -> str:
    """Cordum's failure_reason for a stale job: "timeout: RUNNING >30s"."""
    if timeout_s is None:
        return f"timeout: {state} exceeded"
    return f"timeout: {state} >{go_duration(timeout_s)}"


# ------------------------------------------------------------------ the tick


@dataclass(slots=True)
class ReconcileReport:
    """What one tick did, for logs and the handler's answer."""

    timed_out: dict[str, int] = field(default_factory=dict)
    """Jobs moved to TIMEOUT, by the state scanned ("deadline" for expired deadlines)."""
    moved: int = 0
    """Listed, but in another state by the time of the write: left alone."""
    orphaned: int = 0
    """Index entries of jobs that no longer exist (left in place)."""
    failed: int = 0
    """Jobs whose transition failed on every try; the next tick sees them again."""
    listed: int = 0
    stopped_early: bool = False
    """The invocation's deadline came before the scan was through."""
    lost: LostReport | None = None
    """What became of the jobs of lost workers and lost dispatches."""

    @property
    def total_timed_out(self) -> int:
        return sum(self.timed_out.values())

    def as_dict(self) -> dict[str, Any]:
        return {"timed_out": self.total_timed_out, "by_state": dict(self.timed_out),
                "moved": self.moved, "orphaned": self.orphaned, "failed": self.failed,
                "listed": self.listed, "stopped_early": self.stopped_early,
                "lost": self.lost.as_dict() if self.lost is not None else None}


class Reconciler:
    def __init__(self, store: JobStore, indexes: JobIndexes,
                 policy: ReconcilerPolicy | None = None,
                 *, clock_us: Callable[[], int] = now_us,
                 lost: LostWorkers | None = None) -> None:
        self._store = store
        self._indexes = indexes
        self.policy = policy or ReconcilerPolicy()
        self._clock_us = clock_us
        self._lost = lost

    async def tick(self, deadline: float | None = None) -> ReconcileReport:
        """One pass over SCHEDULED, DISPATCHED, RUNNING and the deadlines.

        ``deadline`` (a ``time.monotonic()`` instant) ends the pass early; what
        is left is the next tick's.
        """
        p = self.policy
        report = ReconcileReport()
        if self._lost is not None:
            # First: a job its lost worker held is retried now, not timed out later.
            report.lost = await self._lost.tick(deadline)
            if report.lost.stopped_early:
                report.stopped_early = True
                return report
        now = self._clock_us()
        for state, timeout_s in ((JobState.SCHEDULED, p.scheduled_timeout_s),
                                 (JobState.DISPATCHED, p.dispatch_timeout_s),
                                 (JobState.RUNNING, p.running_timeout_s)):
            cutoff = now - int(timeout_s * 1_000_000)

            def page(offset: int, limit: int, state: str = state,
                     cutoff: int = cutoff) -> Awaitable[list[str]]:
                return self._indexes.list_jobs_by_state(state, cutoff, limit, offset=offset)

            await self._sweep(state.value, page, (state,), timeout_reason(state, timeout_s),
                              deadline, report, unchanged_since=cutoff)
            if report.stopped_early:
                break
        if not report.stopped_early:

            def expired(offset: int, limit: int) -> Awaitable[list[str]]:
                return self._indexes.expired_deadlines(now, limit, offset=offset)

            await self._sweep("deadline", expired, OPEN_STATES, DEADLINE_REASON, deadline,
                              report)
        if report.total_timed_out or report.failed or report.stopped_early:
            log.warning("reconciler tick: %s", report.as_dict())
        return report

    async def _sweep(self, source: str, page: Callable[[int, int], Awaitable[list[str]]],
                     only_from: Iterable[str], reason: str, deadline: float | None,
                     report: ReconcileReport, *, unchanged_since: int | None = None) -> None:
        p = self.policy
        only_from = tuple(only_from)
        # Entries at the head of the range that stay there (gone jobs, failed writes):
        # the next page starts after them. A job that times out or moved on has left
        # the range, so it needs no skipping.
        kept = 0
        for _ in range(p.max_iterations):
            if past(deadline):
                report.stopped_early = True
                return
            try:
                ids = await page(kept, p.batch_size)
            except StoreError as exc:
                log.error("reconciler: listing %s failed: %s", source, exc)
                return
            if not ids:
                return
            report.listed += len(ids)
            for job_id in ids:
                if past(deadline):
                    report.stopped_early = True
                    return
                outcome = await self._time_out(job_id, only_from, reason, deadline,
                                               unchanged_since)
                if outcome == "timed_out":
                    report.timed_out[source] = report.timed_out.get(source, 0) + 1
                    log.info("job %s timed out (%s): %s", job_id, source, reason)
                elif outcome == "moved":
                    report.moved += 1
                elif outcome == "orphaned":
                    report.orphaned += 1
                    kept += 1
                else:
                    report.failed += 1
                    kept += 1
        log.error("reconciler: %s scan stopped after %d pages", source, p.max_iterations)

    async def _time_out(self, job_id: str, only_from: tuple[str, ...], reason: str,
                        deadline: float | None, unchanged_since: int | None = None) -> str:
        last: Exception | None = None
        for _ in range(self.policy.max_tries_per_job):
            if last is not None and past(deadline):
                break
            try:
                result = await self._store.transition(
                    job_id, [JobState.TIMEOUT], only_from=only_from,
                    fields={"failure_reason": reason}, unchanged_since=unchanged_since)
            except InvalidTransition as exc:
                log.warning("reconciler: %s", exc)
                return "failed"
            except StoreError as exc:
                last = exc
                continue
            if result.applied:
                return "timed_out"
            return "moved" if result.previous else "orphaned"
        log.error("reconciler: timing out %s failed: %s", job_id, last)
        return "failed"
