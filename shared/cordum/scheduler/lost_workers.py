"""Jobs of lost workers and of lost dispatches: sent to another worker, or failed.

Two signals, read from the registry snapshot and the job meta (workers send no
acknowledgement and their progress is not recorded):

* Lost worker. A fresh snapshot (written within ``snapshot_max_age_s``) lists
  the job's worker with a heartbeat older than the TTL, or, when its writer is
  trusted to have heard every live worker (``registry.liveness``), not at all.
  Only jobs dispatched before the snapshot was written count: a worker that
  joined after it is not missing from it. Reason ``worker_lost``.
* Restarted worker. The job's worker heartbeats, but its process started
  (``registry.workers.STARTED_AT_LABEL``) more than ``restart_margin_s`` after
  the job's dispatch: the process that had the job is gone. Reason
  ``worker_lost``; the restarted worker may take the job again.
* Lost dispatch. The job's worker is alive and has a free slot, and its last
  heartbeat counts fewer active jobs than it holds without stored output
  (``res:<id>``: output stored means it had the job, and only the result is on
  its way) among the jobs dispatched to it ``delivery_s`` or more before that
  heartbeat. As many as are missing fail, the youngest of those dispatched at
  least ``dispatch_grace_s`` before it (two heartbeats at 5 s): the dispatch a
  NATS restart swallows is the last one sent. Reason ``dispatch_lost``; another
  worker of its pool is preferred, the same one taken when none is left.
  Heartbeats carry a count, not job ids: while the worker runs some of its
  jobs, which one was lost is a guess; a wrong guess runs a job twice (its
  first worker's result is then dropped), never ends one twice.

A job with attempts left (the request path's ``max_scheduling_retries``, and
the policy's ``max_retries`` budget) goes RETRYING, then through the engine at
once, which counts the attempt and picks a worker other than the ones this tick
gave up on; when none can take it the replayer drives it on later. Without
attempts left it ends FAILED with a DLQ entry, and a workflow step's run hears
it. Each move is one transition script fenced by the state scanned, the worker
of record and the job's ``updated_at`` at the scan: a job that moved on, or was
dispatched again meanwhile (even to the same worker), is left alone, and a late
result of the lost worker is dropped by the result path's worker fence.

Cost per tick: two round trips for the snapshot; per state (DISPATCHED, RUNNING)
at most ``max_pages`` pages of ``batch_size`` index entries, one ZRANGEBYSCORE
and one pipelined HMGET each, resuming where the last tick stopped; one EXISTS
pipeline; then per job handled (at most ``max_jobs_per_tick``) one transition
and one dispatch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cordum import protocol
from cordum.errors import RetryAfter
from cordum.lambdas.ticks import past
from cordum.metrics import METRICS
from cordum.registry.snapshot import HEARTBEAT_TTL_S, SNAPSHOT_INTERVAL_S
from cordum.scheduler.avoiding import AvoidingDirectory, avoiding
from cordum.scheduler.constraints import parse_constraints
from cordum.scheduler.engine import Engine
from cordum.scheduler.transitions import StateWriter
from cordum.store.errors import InvalidTransition, StoreError
from cordum.store.jobs import JobState

if TYPE_CHECKING:
    from cordum.registry.liveness import Liveness, SnapshotLiveness
    from cordum.store.indexes import JobIndexes

log = logging.getLogger(__name__)

WORKER_LOST = "worker_lost"
DISPATCH_LOST = "dispatch_lost"
RESTARTED = "restarted"
"""Internal: a WORKER_LOST whose worker is back under its id (not avoided)."""
ASSIGNED_STATES = (JobState.DISPATCHED, JobState.RUNNING)
_FIELDS = ("worker_id", "updated_at", "attempts", "safety_constraints", "topic", "trace_id")


@dataclass(frozen=True, slots=True)
class LostWorkerPolicy:
    """When a worker or a dispatch counts as lost, and how much one tick looks at."""

    heartbeat_ttl_s: float = HEARTBEAT_TTL_S
    """A worker silent this long is gone (the registry's TTL)."""
    snapshot_max_age_s: float = 3 * SNAPSHOT_INTERVAL_S
    """An older snapshot says nothing about who is gone: the tick does nothing."""
    writer_warmup_s: float = 2 * SNAPSHOT_INTERVAL_S
    """A snapshot writer first seen less long ago may not have heard every worker yet."""
    restart_margin_s: float = 0.25
    """A worker's start counts only this long after a dispatch (its clock and ours differ)."""
    delivery_s: float = 0.25
    """A job dispatched this long before a heartbeat is in its count, if the worker has it
    (NATS delivers in milliseconds). Longer would leave out the jobs of the last moments,
    which the count includes: under load the missing one would never show."""
    dispatch_grace_s: float = 10.0
    """Only a dispatch this much older than the heartbeat (two at 5 s) is taken for lost."""
    batch_size: int = 200
    """Index entries read per page."""
    max_pages: int = 25
    """Pages per state and tick; the next tick goes on from there."""
    max_jobs_per_tick: int = 1_000
    """Jobs handled per tick; the rest are found again by the next one."""


@dataclass(frozen=True, slots=True)
class Assigned:
    """A DISPATCHED or RUNNING job as the scan found it."""

    job_id: str
    state: str
    worker_id: str
    since_us: int
    """Its last transition (µs): the dispatch, and the fence of the move."""
    meta: dict[str, str]


@dataclass(slots=True)
class LostReport:
    """What one tick did with lost jobs, for logs and the handler's answer."""

    retried: dict[str, int] = field(default_factory=dict)
    """Failed retryably and dispatched again, by reason."""
    not_dispatched: dict[str, int] = field(default_factory=dict)
    """Failed retryably but not dispatched now (no worker, busy lock): left to the replayer."""
    failed: dict[str, int] = field(default_factory=dict)
    """FAILED with a DLQ entry: no attempts left."""
    moved: int = 0
    """Moved on between the scan and the write: left alone."""
    errors: int = 0
    listed: int = 0
    pages: int = 0
    skipped: str = ""
    """Why the tick did nothing ('' when it looked)."""
    stopped_early: bool = False

    @property
    def total_handled(self) -> int:
        return sum(self.retried.values()) + sum(self.not_dispatched.values()) + sum(
            self.failed.values())

    def as_dict(self) -> dict[str, Any]:
        return {"retried": dict(self.retried), "not_dispatched": dict(self.not_dispatched),
                "failed": dict(self.failed), "moved": self.moved, "errors": self.errors,
                "listed": self.listed, "pages": self.pages, "skipped": self.skipped,
                "stopped_early": self.stopped_early}


class LostWorkers:
    """Finds the jobs of lost workers and lost dispatches and hands them on."""

    def __init__(self, engine: Engine, indexes: JobIndexes, liveness: SnapshotLiveness,
                 policy: LostWorkerPolicy | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        """``engine`` dispatches again (through a copy that avoids the lost workers);
        ``clock`` (epoch seconds) ages heartbeats and the snapshot."""
        self._directory = AvoidingDirectory(engine.ports.registry)
        self._engine = avoiding(engine, self._directory)
        self._store = engine.ports.store
        self._runs = engine.ports.runs
        self._writer = StateWriter(engine.ports, engine.policy)
        self._max_attempts = engine.policy.max_scheduling_retries
        self._indexes = indexes
        self._liveness = liveness
        self.policy = policy or LostWorkerPolicy()
        self._clock = clock
        self._cursor: dict[str, int | None] = {}

    async def tick(self, deadline: float | None = None) -> LostReport:
        """One look at the snapshot and the DISPATCHED and RUNNING jobs."""
        p = self.policy
        report = LostReport()
        try:
            live = await self._liveness.read()
        except Exception as exc:  # no knowledge: nothing is lost
            report.skipped = f"snapshot unreadable: {type(exc).__name__}"
            log.error("lost workers: snapshot unreadable: %s", exc)
            return report
        now = self._clock()
        if live.problem is not None:
            report.skipped = f"snapshot {live.problem}"
            return report
        if live.age_s(now) > p.snapshot_max_age_s:
            report.skipped = f"snapshot {live.age_s(now):.0f}s old"
            return report
        jobs = await self._scan(report, deadline)
        if report.stopped_early:
            return report
        chosen = self._of_lost_workers(jobs, live, now)
        taken = {job.job_id for job, _ in chosen}
        try:
            chosen += await self._lost_dispatches(
                [j for j in jobs if j.job_id not in taken], live, now)
        except StoreError as exc:
            log.error("lost workers: reading results failed: %s", exc)
            report.errors += 1
        # A restarted worker is alive and may take its jobs again; one that lost a
        # dispatch is passed over while its pool has another.
        self._directory.avoid = frozenset(j.worker_id for j, why in chosen if why == WORKER_LOST)
        self._directory.prefer_not = frozenset(
            j.worker_id for j, why in chosen if why == DISPATCH_LOST)
        try:
            for job, reason in chosen[:p.max_jobs_per_tick]:
                if past(deadline):
                    report.stopped_early = True
                    break
                await self._handle(job, reason, report)
        finally:
            self._directory.avoid = self._directory.prefer_not = frozenset()
        if report.total_handled or report.errors:
            log.warning("lost workers tick: %s", report.as_dict())
        return report

    async def _scan(self, report: LostReport, deadline: float | None) -> list[Assigned]:
        p = self.policy
        found: list[Assigned] = []
        for state in ASSIGNED_STATES:
            after = self._cursor.get(state)
            for _ in range(p.max_pages):
                if past(deadline):
                    report.stopped_early = True
                    return found
                try:
                    rows = await self._indexes.list_jobs_after(state, after, p.batch_size)
                    metas = await self._indexes.get_meta_fields([r[0] for r in rows], _FIELDS)
                except StoreError as exc:
                    log.error("lost workers: scanning %s failed: %s", state, exc)
                    report.errors += 1
                    return found
                report.pages += 1
                report.listed += len(rows)
                for (job_id, score), meta in zip(rows, metas, strict=True):
                    if meta["worker_id"]:
                        found.append(Assigned(job_id, state.value, meta["worker_id"],
                                              _int(meta["updated_at"]) or score, meta))
                # A short page is the end of the index: the next tick starts at its head.
                after = rows[-1][1] if len(rows) == p.batch_size else None
                if after is None:
                    break
            self._cursor[state] = after
        return found

    def _of_lost_workers(self, jobs: list[Assigned], live: Liveness,
                         now: float) -> list[tuple[Assigned, str]]:
        """Jobs whose worker is gone (WORKER_LOST) or restarted since (RESTARTED)."""
        ttl = self.policy.heartbeat_ttl_s
        trust_absence = live.absence_trusted(self.policy.writer_warmup_s)
        assert live.captured_at is not None
        lost = []
        for job in jobs:
            since = job.since_us / 1e6
            if since > live.captured_at:
                continue  # dispatched after the snapshot: its worker may be newer than it
            worker = live.workers.get(job.worker_id)
            if worker is None and not trust_absence:
                continue
            if worker is None or worker.last_seen < now - ttl:
                lost.append((job, WORKER_LOST))
            elif (started := worker.started_at) is not None and \
                    started > since + self.policy.restart_margin_s:
                lost.append((job, RESTARTED))
        return lost

    async def _lost_dispatches(self, jobs: list[Assigned], live: Liveness,
                               now: float) -> list[tuple[Assigned, str]]:
        p = self.policy
        held: dict[str, list[Assigned]] = {}
        for job in jobs:
            # Every job sent a moment before its worker's last heartbeat is in its count.
            worker = live.alive(job.worker_id, now, p.heartbeat_ttl_s)
            if worker is not None and job.since_us / 1e6 <= worker.last_seen - p.delivery_s:
                held.setdefault(worker.worker_id, []).append(job)
        suspects = []
        for worker_id, owned in held.items():
            worker = live.workers[worker_id]
            # At capacity, a job may wait in the worker's client uncounted; an unknown
            # capacity (0) is trusted only when the worker says it runs nothing.
            free = worker.active_jobs < max(worker.max_parallel_jobs, 1)
            if free and worker.active_jobs < len(owned):
                suspects.append((worker, owned))
        if not suspects:
            return []
        stored = iter(await self._indexes.existing(
            [protocol.result_key(j.job_id) for _, owned in suspects for j in owned]))
        lost = []
        for worker, owned in suspects:
            unanswered = [j for j in owned if not next(stored)]
            missing = len(unanswered) - worker.active_jobs
            # Only a dispatch two heartbeats old is blamed; of those, the youngest.
            old = sorted((j for j in unanswered
                          if j.since_us / 1e6 <= worker.last_seen - p.dispatch_grace_s),
                         key=lambda j: j.since_us)
            if missing > 0 and old:
                lost += [(j, DISPATCH_LOST) for j in old[-missing:]]
        return lost

    def _attempts_left(self, meta: dict[str, str]) -> bool:
        """Whether the request path would dispatch the job once more (its own checks:
        ``attempts`` counts the dispatches so far, each move into SCHEDULED)."""
        attempts = _int(meta.get("attempts", ""))
        if attempts >= self._max_attempts:
            return False
        constraints = parse_constraints(meta.get("safety_constraints", ""))
        max_retries = constraints.budgets.max_retries if constraints is not None else 0
        return not (max_retries > 0 and attempts >= max_retries + 1)

    async def _handle(self, job: Assigned, why: str, report: LostReport) -> None:
        retry = self._attempts_left(job.meta)
        reason = WORKER_LOST if why == RESTARTED else why
        detail = {WORKER_LOST: f"{reason}: worker {job.worker_id} not heard from for "
                               f"{self.policy.heartbeat_ttl_s:g}s",
                  RESTARTED: f"{reason}: worker {job.worker_id} restarted after the dispatch",
                  }.get(why, f"{reason}: worker {job.worker_id} never reported the job")
        dlq = None if retry else {"topic": job.meta.get("topic", ""),
                                  "status": JobState.FAILED.value, "reason": detail,
                                  "reason_code": reason}
        try:
            result = await self._store.transition(
                job.job_id, [JobState.RETRYING if retry else JobState.FAILED],
                only_from=(job.state,), fields={"failure_reason": detail}, dlq=dlq,
                unchanged_since=job.since_us, worker_of_record=job.worker_id)
        except (InvalidTransition, StoreError) as exc:
            log.error("lost workers: moving %s failed: %s", job.job_id, exc)
            report.errors += 1
            return
        if not result.applied:
            report.moved += 1
            return
        log.warning("job %s: %s", job.job_id, detail)
        METRICS.count("jobs_lost", reason=reason)
        if not retry:
            report.failed[reason] = report.failed.get(reason, 0) + 1
            await self._writer.publish_dlq(job.job_id, JobState.FAILED.value, detail, reason)
            await self._tell_run(result.workflow_id, job.job_id)
            return
        dispatched = await self._dispatch_again(job)
        tally = report.retried if dispatched else report.not_dispatched
        tally[reason] = tally.get(reason, 0) + 1

    async def _dispatch_again(self, job: Assigned) -> bool:
        """Through the request path, as the replayer would; False leaves it RETRYING."""
        try:
            req = await self._indexes.get_request(job.job_id)
            if req is None:
                log.error("lost workers: job %s has no stored request", job.job_id)
                return False
            outcome = await self._engine.handle_job_request(req, job.meta.get("trace_id", ""))
        except RetryAfter as exc:
            log.info("lost workers: job %s not dispatched now: %s", job.job_id, exc)
            return False
        except Exception:
            log.exception("lost workers: dispatching %s again failed", job.job_id)
            return False
        return outcome.action == "dispatched"

    async def _tell_run(self, run_id: str, job_id: str) -> None:
        """A workflow step's job ended: its run hears it (a lost send is found by the
        workflow reconciler)."""
        if not run_id or self._runs is None:
            return
        from cordum.bus.workflow_events import RunEvent

        try:
            await self._runs.send(RunEvent.job_ended(job_id, run_id))
        except Exception as exc:
            log.error("workflow event for %s not sent: %s", job_id, exc)


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return 0
