"""The pending replayer: jobs left waiting go through the engine again (Cordum's PendingReplayer).

A job stays PENDING when no worker could take it (the request was acked), and
SCHEDULED when a dispatch broke off; an approved job may be left in
APPROVAL_REQUIRED; a job whose worker answered FAILED_RETRYABLE is RETRYING, and
nothing else would ever move it (Cordum leaves it there: we drive it again, each
replay counting as a scheduling attempt, so a job that is always retryable ends
FAILED at the scheduling-retry cap). Approved means what the approve endpoint recorded in the
job's meta, never a label of the stored request. Each tick hands the stored
request of such jobs, older than the pending age (RETRYING ones: the retry
age), back to
``engine.handle_job_request``, which takes the job lock and decides again. One
page of 200 per state, a single pass.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from cordum.approval import APPROVED, STATUS_FIELD
from cordum.errors import RetryAfter
from cordum.lambdas.ticks import past
from cordum.store.errors import StoreError
from cordum.store.jobs import JobState, now_us

if TYPE_CHECKING:
    from collections.abc import Callable

    from cordum.protocol import JobRequest
    from cordum.scheduler.timeouts import ReconcilerTimeouts
    from cordum.store.indexes import JobIndexes

log = logging.getLogger(__name__)

LOCK_KEY = "cordum:replayer:pending"


class JobRequestHandler(Protocol):
    """The engine entry point the replayer drives."""

    async def handle_job_request(self, req: JobRequest, trace_id: str) -> Any: ...


@dataclass(frozen=True, slots=True)
class ReplayerPolicy:
    """Which waiting jobs a tick re-drives."""

    pending_age_s: float = 120.0
    """Jobs that entered their state longer ago than this are replayed (Cordum passes
    the dispatch timeout)."""
    retry_age_s: float = 5.0
    """RETRYING jobs (their worker asked for a retry) go again this long after it, at
    the next tick: a retry is no job left waiting, and waiting the pending age (the
    dispatch timeout, 300 s as shipped) would cost minutes per retry. The tick
    interval spaces retries; the scheduling-retry cap ends a job that always asks."""
    batch_size: int = 200
    """Index entries read per state and tick."""

    @classmethod
    def from_timeouts(cls, timeouts: ReconcilerTimeouts) -> ReplayerPolicy:
        return cls(pending_age_s=timeouts.dispatch_timeout_s)


@dataclass(slots=True)
class ReplayReport:
    """What one tick did, for logs and the handler's answer."""

    replayed: dict[str, int] = field(default_factory=dict)
    """Requests the engine took (whatever it decided), by state scanned."""
    retry_later: int = 0
    """The engine answered RetryAfter (lock busy, safety unavailable, ...)."""
    failed: int = 0
    """The engine or the store failed for the job."""
    missing_request: int = 0
    """No stored request (or an unreadable one): nothing to replay."""
    not_approved: int = 0
    """APPROVAL_REQUIRED jobs still waiting for a human."""
    listed: int = 0
    stopped_early: bool = False

    @property
    def total_replayed(self) -> int:
        return sum(self.replayed.values())

    def as_dict(self) -> dict[str, Any]:
        return {"replayed": self.total_replayed, "by_state": dict(self.replayed),
                "retry_later": self.retry_later, "failed": self.failed,
                "missing_request": self.missing_request, "not_approved": self.not_approved,
                "listed": self.listed, "stopped_early": self.stopped_early}


class PendingReplayer:
    def __init__(self, engine: JobRequestHandler, indexes: JobIndexes,
                 policy: ReplayerPolicy | None = None,
                 *, clock_us: Callable[[], int] = now_us) -> None:
        self._engine = engine
        self._indexes = indexes
        self.policy = policy or ReplayerPolicy()
        self._clock_us = clock_us

    async def tick(self, deadline: float | None = None) -> ReplayReport:
        """PENDING, then approved APPROVAL_REQUIRED, then SCHEDULED jobs older than the
        pending age, then RETRYING jobs older than the retry age. ``deadline`` (a
        ``time.monotonic()`` instant) ends the pass early."""
        report = ReplayReport()
        now = self._clock_us()
        for state in (JobState.PENDING, JobState.APPROVAL_REQUIRED, JobState.SCHEDULED,
                      JobState.RETRYING):
            age_s = (self.policy.retry_age_s if state is JobState.RETRYING
                     else self.policy.pending_age_s)
            await self._replay(state, now - int(age_s * 1_000_000), deadline, report)
            if report.stopped_early:
                break
        if report.listed:
            log.info("replayer tick: %s", report.as_dict())
        return report

    async def _replay(self, state: JobState, cutoff: int, deadline: float | None,
                      report: ReplayReport) -> None:
        try:
            ids = await self._indexes.list_jobs_by_state(state, cutoff, self.policy.batch_size)
        except StoreError as exc:
            log.error("replayer: listing %s failed: %s", state, exc)
            return
        report.listed += len(ids)
        for job_id in ids:
            if past(deadline):
                report.stopped_early = True
                return
            try:
                if (state is JobState.APPROVAL_REQUIRED
                        and await self._indexes.get_meta_field(job_id, STATUS_FIELD)
                        != APPROVED):
                    report.not_approved += 1
                    continue
                req = await self._indexes.get_request(job_id)
                trace_id = await self._indexes.get_trace_id(job_id) if req is not None else ""
            except StoreError as exc:
                log.error("replayer: loading %s failed: %s", job_id, exc)
                report.failed += 1
                continue
            if req is None:
                log.error("replayer: %s job %s has no stored request", state, job_id)
                report.missing_request += 1
                continue
            try:
                await self._engine.handle_job_request(req, trace_id)
            except RetryAfter as exc:
                # The job stays where it is; the next tick (or the queue) tries again.
                log.warning("replayer: %s job %s not now: %s", state, job_id, exc)
                report.retry_later += 1
                continue
            except Exception:
                log.exception("replayer: replaying %s job %s failed", state, job_id)
                report.failed += 1
                continue
            report.replayed[state.value] = report.replayed.get(state.value, 0) + 1
