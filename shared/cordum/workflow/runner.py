"""Applying one event to one run: under the run lock, outbox first, then the engine.

Every change to a run goes through the runner (``apply``, and ``cancel``,
``reconcile`` and ``fail`` for the API and the reconciler):

    lock + load (run, its definition, any outbox left; for a job event the job's
    stored end) -> carry out the outbox left -> engine (start / on_job / on_timer /
    cancel / reconcile) -> save run + new outbox -> carry it out -> unlock + delete it

The runner decides; the stores read and write. The job store is read through them
too: one job's end with the run (``WorkflowStore.locked_run``), the ends of a run's
open steps for the reconciler (``JobReads.step_job_ends``).

Applying the same event twice changes nothing the second time: a start finds the
run started, a job's end finds its step done (or another job id on it), a timer
finds nothing due, a cancel finds the run terminal. Redis round trips per event:
three (lock + load + the job's end, save, unlock + outbox delete); more only for a
reconcile (the ends of the open steps' jobs, the child runs), a child run's end (that
run) and a run that would outgrow its size limit (the run as last saved).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cordum.approval import job_hash
from cordum.bus.workflow_events import RunEvent
from cordum.errors import RetryAfter
from cordum.step_job_ids import parse_step_job_id
from cordum.store.errors import LockBusy, StoreError
from cordum.store.reads import JobReads
from cordum.workflow import engine, job_ends, subworkflow
from cordum.workflow.child_runs import ChildRuns
from cordum.workflow.definition_store import DefinitionStore
from cordum.workflow.errors import RunNotCancellable, RunNotFound
from cordum.workflow.keys import outbox_key
from cordum.workflow.limits import LimitedDefinitions, RunLimits
from cordum.workflow.model import (
    OPEN_RUN,
    TERMINAL_RUN,
    WorkflowRun,
    step_runs,
)
from cordum.workflow.outbox import OutboxRunner, contexts_of, job_request
from cordum.workflow.outbox_entries import (
    PublishJob,
    QueueTimer,
    RunNews,
    SendAlert,
    StartChildRun,
    TellParent,
    decode,
    encode,
    run_news,
    to_outbox,
)
from cordum.workflow.redis_io import dumps
from cordum.workflow.status import job_outcome

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cordum.bus.publisher import JobPublisher
    from cordum.bus.workflow_events import RunEventSink
    from cordum.protocol import JobRequest
    from cordum.store.jobs import AuditParts
    from cordum.store.locks import Lease
    from cordum.store.step_jobs import StoredJobEnd
    from cordum.workflow.definition import Workflow
    from cordum.workflow.engine import Effects
    from cordum.workflow.limits import WorkflowLimits
    from cordum.workflow.outbox_entries import Entry
    from cordum.workflow.store import LockedRun, WorkflowStore

log = logging.getLogger(__name__)

LOCK_WAIT_S = 2.0
"""How long an event waits for a run lock another writer holds before it is retried."""
RETRY_S = 1.0
"""The delay of a retried event (lock busy, Redis or NATS unavailable)."""
INLINE_OUTPUT_BYTES = 256 * 1024
"""Outputs up to this size are inlined in the run context; beyond, the pointer only."""
RUN_TOO_LARGE = "run_too_large"
"""The error code of a run failed because its document would outgrow its limit."""


def utcnow() -> datetime:
    return datetime.now(UTC)


class WorkflowRunner:
    """Applies run events; the workflow function's and the reconciler's one door."""

    def __init__(self, store: WorkflowStore, redis: Any, publisher: JobPublisher,
                 events: RunEventSink | None,
                 limits: Mapping[str, WorkflowLimits] | None = None, *,
                 max_active_runs: int = 0, run_limits: RunLimits | None = None) -> None:
        self.store = store
        self._jobs = JobReads(redis)
        """The job store's side: the ends of the jobs of a run's open steps."""
        self._events = events
        self._outbox = OutboxRunner(publisher, events, spawn=self._spawn, tell=self._tell)
        self._definitions = DefinitionStore(redis)
        self._limited = LimitedDefinitions(limits)
        """timeouts.yaml's ``workflows.<id>`` limits, applied to each run's definition."""
        self._run_limits = run_limits or RunLimits()
        """timeouts.yaml's ``limits``: the run document's size, the runs under a root."""
        self._children = ChildRuns(store, self._definitions, max_active_runs=max_active_runs,
                                   limits=self._run_limits)
        """``max_active_runs``: the tenant's open-run limit (0: none), for child runs."""

    async def announce_start(self, run: WorkflowRun) -> None:
        """Queue the run's start (or, with no queue configured, apply it at once)."""
        event = RunEvent("start", run.id, tenant=run.org_id)
        if self._events is None:
            await self.apply(event)
            return
        await self._events.send(event)

    async def cancel(self, tenant: str, run_id: str, *, audit: AuditParts | None = None) -> bool:
        """Cancel an open run now (the API's cancel); False when it was terminal.
        ``audit``: the cancel's event, written by the save that ends the run."""
        run = await self.store.get_run(tenant, run_id)
        if run is None:
            raise RunNotFound("workflow run not found")
        if run.status not in OPEN_RUN:
            return False
        try:
            async with self.store.locked_run(run_id, wait_s=LOCK_WAIT_S) as locked:
                return await self._apply_locked(locked, "cancel", None, audit=audit)
        except LockBusy as exc:
            raise RunNotCancellable("workflow run is busy, try again") from exc

    async def apply(self, event: RunEvent) -> str:
        """Apply a queued event; returns what happened (for the log). Raises
        ``RetryAfter`` when it must be delivered again (lock busy, store down)."""
        run_id, job = event.run_id, None
        if event.kind == "child":
            job = ("", event.job_id)
        if event.kind == "job":
            # ``<run>:<step path>@<attempt>``: the engine applies it only to the step
            # whose job it is (the same id), with the state the job store holds.
            step_path = step_path_of(event.job_id, run_id)
            if not step_path:
                return "ignored: not a step job of this run"
            job = (step_path, event.job_id)
        try:
            # The lock, the run and (for a job's end) the job's stored end: one round trip.
            async with self.store.locked_run(
                    run_id, wait_s=LOCK_WAIT_S, job_id=job[1] if job else "",
                    max_result_bytes=INLINE_OUTPUT_BYTES) as locked:
                changed = await self._apply_locked(locked, event.kind, job)
        except LockBusy as exc:
            raise RetryAfter(f"run {run_id} is locked", RETRY_S) from exc
        except StoreError as exc:
            raise RetryAfter(f"run {run_id}: {exc}", RETRY_S) from exc
        return f"{event.kind} {'applied' if changed else 'changed nothing'}"

    async def reconcile(self, run_id: str, *, stale_start_s: float) -> bool:
        """The reconciler's pass over one open run (lock taken without waiting)."""
        async with self.store.locked_run(run_id) as locked:
            return await self._apply_locked(locked, "reconcile", None,
                                            stale_start_s=stale_start_s)

    async def fail(self, run_id: str, error: dict[str, Any]) -> bool:
        """Fail an open run with ``error``, as the reconciler ends a run the engine cannot
        advance: its open steps and their jobs are cancelled as a cancel does. An outbox
        left by an earlier event is carried out but for its step jobs, child runs and
        timer. False when the run is gone or ended. The lock is taken without waiting."""
        async with self.store.locked_run(run_id) as locked:
            if locked.loaded is None or locked.lease is None:
                return False
            run, wf, stored = locked.loaded
            effects = engine.fail_run(run, self._limited(wf), utcnow(), error)
            if not effects.timeline:
                return False
            outbox: list[Entry] = [e for e in decode(stored) if not isinstance(
                e, PublishJob | StartChildRun | QueueTimer)]
            outbox += to_outbox(effects, timer_at=None)
            parent = (run.metadata or {}).get(subworkflow.PARENT_RUN)
            if parent:
                outbox.append(TellParent(str(parent)))  # the parent's step waits on this run
            await self.store.save(run, timeline=effects.timeline,
                                  outbox=encode(outbox) or None, timer_at=None,
                                  lease=locked.lease)
            locked.lease.release_also.clear()
            if outbox:
                await self._carry_out(locked.lease, run, outbox)
            return True

    async def _apply_locked(self, locked: LockedRun, kind: str, job: tuple[str, str] | None,
                            *, stale_start_s: float = 0.0,
                            audit: AuditParts | None = None) -> bool:
        lease, loaded, ended = locked.lease, locked.loaded, locked.job
        if loaded is None or lease is None:
            return False
        run, wf, stored = loaded
        wf = self._limited(wf)
        if stored:  # carried out, then deleted with the lock (even with no entry left)
            await self._carry_out(lease, run, decode(stored))
        before = run.updated_at
        timer_before = engine.timer_at(run, wf)
        now = utcnow()
        effects = await self._decide(run, wf, kind, job, ended, now, stale_start_s)
        if effects is None or (run.updated_at == before and not _has_work(effects)):
            return False
        document = None  # the run as JSON, when the size check encoded it already
        if kind != "cancel":  # a cancel ends the run as it is
            run, effects, document = await self._within_size(run, wf, effects, now)
        timer_at = effects.timer_at
        outbox = to_outbox(effects, timer_at=timer_at if timer_at != timer_before else None,
                           steps=wf.steps)
        parent = (run.metadata or {}).get(subworkflow.PARENT_RUN)
        if parent and any(e.type == "run_status" and e.status in TERMINAL_RUN
                          for e in effects.timeline):
            outbox.append(TellParent(str(parent)))  # the parent's step waits on this run
        news = run_news(str(run.status), effects.timeline)
        if news is not None:  # last: the stream hears of the jobs once they are sent
            outbox.append(news)
        step_jobs = [entry for entry in outbox if isinstance(entry, PublishJob)]
        # Each step job's request, built once: hashed for the save, then published.
        requests = {sent.job_id: job_request(run, sent) for sent in step_jobs}
        kept = released_outbox(outbox)
        await self.store.save(
            run, timeline=effects.timeline,
            outbox=encode(outbox if kept is None else kept) or None,
            jobs={sent.job_id: (sent.step_id, job_hash(requests[sent.job_id]))
                  for sent in step_jobs} or None,
            contexts=contexts_of(step_jobs) or None,
            timer_at=timer_at if timer_at != timer_before else ..., document=document,
            audit=audit, lease=lease, release=kept is not None)
        # The save wrote this event's outbox over any leftover (or deleted it): only
        # what is carried out from here on may be deleted with the lock (when the save
        # released it, the outbox kept is left for the job's end to drop).
        lease.release_also.clear()
        if outbox:
            await self._carry_out(lease, run, outbox, requests)
        return True

    async def _decide(self, run: WorkflowRun, wf: Workflow, kind: str,
                      job: tuple[str, str] | None, ended: StoredJobEnd | None,
                      now: datetime, stale_start_s: float) -> Effects | None:
        if kind == "start":
            return engine.start(run, wf, now) if run.status == "pending" else None
        if kind == "cancel":
            return engine.cancel(run, wf, now)
        if kind == "timer":
            return engine.on_timer(run, wf, now)
        if kind == "job" and job is not None and ended is not None:
            step_path, job_id = job
            end = job_ends.stored_end(job_id, ended, output_policy=_output_policy())
            if not job_outcome(end.state):
                return None
            return engine.on_job(run, wf, step_path, job_id, end.state, output=end.output,
                                 result_ptr=end.result_ptr, error=end.error, now=now,
                                 gate=end.gate)
        if kind == "child" and job is not None:
            child = await self.store.get_run(run.org_id, job[1])
            return engine.on_child(run, wf, job[1], child, now)
        if kind == "reconcile":
            if run.status == "pending":
                started = _parse_time(run.created_at)
                if started is None or (now - started).total_seconds() >= stale_start_s:
                    return engine.start(run, wf, now)  # its start event was lost
                return None
            ends = [engine.on_child(run, wf, child_id, child, now)
                    for child_id, child in await self._ended_children(run, wf)]
            found = await self._job_ends(run)
            return engine.merged([*ends, engine.reconcile(
                run, wf, {j: e.state for j, e in found.items()}, now,
                outputs={j: e.output for j, e in found.items() if e.output is not None},
                pointers={j: e.result_ptr for j, e in found.items()},
                gates={j: e.gate for j, e in found.items() if e.gate is not None})])
        return None

    async def _ended_children(self, run: WorkflowRun, wf: Workflow,
                              ) -> list[tuple[str, WorkflowRun | None]]:
        """Child runs of running subworkflow steps that ended (or were never stored) and
        whose end never reached this run."""
        if run.status not in OPEN_RUN:
            return []
        out = []
        for child_id in subworkflow.child_runs(run, wf, open_only=True):
            child = await self.store.get_run(run.org_id, child_id)
            if child is None or child.status not in OPEN_RUN:
                out.append((child_id, child))
        return out

    async def _spawn(self, parent: WorkflowRun, spec: dict[str, Any]) -> None:
        """Stores a subworkflow step's child run (:mod:`cordum.workflow.child_runs`) and
        queues its start. Its id is the same for the same step attempt, so a repeated
        outbox finds the run it made. A missing definition or a refused child is told
        to the parent, whose step then fails."""
        child, created = await self._children.make(parent, spec)
        if child is None or child.terminal:
            await self._tell(RunEvent("child", parent.id, tenant=parent.org_id,
                                      job_id=str(spec["run_id"])))
        elif created:
            await self.announce_start(child)

    async def _within_size(self, run: WorkflowRun, wf: Workflow, effects: Effects,
                           now: datetime) -> tuple[WorkflowRun, Effects, str | None]:
        """The run, this event's effects and the run's JSON (encoded once, for the save),
        unless the run document would outgrow ``max_run_document_bytes``: then the run as
        last saved (this lock holds it), failed ``run_too_large``, and no JSON. Nothing
        this event asked for goes out; the jobs and child runs still open are cancelled."""
        limit = self._run_limits.max_run_document_bytes
        document = dumps(run.to_json())
        size = len(document)  # ASCII JSON: characters are bytes
        if size <= limit:
            return run, effects, document
        log.warning("run %s: its document would be %d bytes (max_run_document_bytes %d); "
                    "failed", run.id, size, limit)
        earlier = await self.store.get_run(run.org_id, run.id) or run
        error = {"code": RUN_TOO_LARGE, "message": f"the run's document would be {size} "
                 f"bytes; a run may be at most {limit} (max_run_document_bytes)"}
        return earlier, engine.fail_run(earlier, wf, now, error), None

    async def _tell(self, event: RunEvent) -> None:
        """An event for another run (a child's end, a parent's cancel). With no queue it
        is left to the reconciler: applying it here could wait on a lock this call holds."""
        if self._events is not None:
            await self._events.send(event)

    async def _job_ends(self, run: WorkflowRun) -> dict[str, job_ends.JobEnd]:
        """The ends of the jobs of the run's open steps, as the API would serve them (a
        lost result is applied with its output, as its event would have been)."""
        job_ids = [s.job_id for _, s in step_runs(run)
                   if s.job_id and s.status in ("running", "waiting")]
        output_policy = _output_policy()
        stored = await self._jobs.step_job_ends(job_ids, job_ends.JOB_FIELDS,
                                                output_policy=output_policy,
                                                max_result_bytes=INLINE_OUTPUT_BYTES)
        return {job_id: job_ends.stored_end(job_id, end, output_policy=output_policy)
                for job_id, end in stored.items()}

    async def _carry_out(self, lease: Lease, run: WorkflowRun, outbox: list[Entry],
                         requests: Mapping[str, JobRequest] | None = None) -> None:
        try:
            await self._outbox.perform(run, outbox, requests=requests)
        except Exception as exc:
            # Saved with the run: the next event (or the reconciler) carries it out.
            raise RetryAfter(f"run {run.id}: outbox not carried out: {exc}", RETRY_S) from exc
        # Removed by the lock's release, in its round trip: a release that fails (or a
        # lease lost meanwhile) leaves it to be carried out again, which repeats nothing.
        lease.release_also.append(outbox_key(run.id))


def released_outbox(outbox: list[Entry]) -> list[Entry] | None:
    """What the save keeps of an outbox it may carry out after releasing the run's lock
    (one round trip for the save and the release instead of a save, then a release that
    deletes the outbox): its one step job's publish, kept for a retry that finds it
    (the job's end drops it: ``lua/read_run.lua``); the run's news and alerts are best
    effort and not kept. None (a save under the lock, the release after the outbox)
    when it holds anything else, or more than one step job: a kept job is dropped only
    by its own end, so every other event of the run would publish the rest again."""
    jobs: list[Entry] = [entry for entry in outbox if isinstance(entry, PublishJob)]
    if len(jobs) > 1 or not all(isinstance(e, PublishJob | RunNews | SendAlert)
                                for e in outbox):
        return None
    return jobs


def _output_policy() -> bool:
    """Whether SUCCEEDED outputs are checked by the output policy (their decision must
    be final before a run sees them)."""
    from cordum.config import settings

    return settings().output_policy_enabled


def step_path_of(job_id: str, run_id: str) -> str:
    """The step path of a step job id of ``run_id`` ('' when it is not one)."""
    parts = parse_step_job_id(job_id)
    return parts.path if parts is not None and run_id and parts.run_id == run_id else ""


def _has_work(effects: Effects) -> bool:
    return bool(effects.jobs or effects.cancels or effects.alerts or effects.timeline)


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
