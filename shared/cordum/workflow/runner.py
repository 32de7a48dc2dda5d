"""Applying one event to one run: under the run lock, outbox first, then the engine.

Every change to a run goes through ``WorkflowRunner.apply``:

    lock run -> load (run, its definition, any outbox left) -> carry out that outbox
    -> engine (start / on_job / on_timer / cancel / reconcile) -> save run + new outbox
    -> carry out the outbox -> clear it -> unlock

Applying the same event twice changes nothing the second time: a start finds the
run started, a job's end finds its step done (or another job id on it), a timer
finds nothing due, a cancel finds the run terminal. Redis round trips per event:
lock, load, (job state and result for a ``job`` event), save, clear + unlock.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cordum.bus.workflow_events import RunEvent
from cordum.protocol import result_key
from cordum.scheduler.errors import RetryAfter
from cordum.store.errors import LockBusy, StoreError
from cordum.store.jobs import meta_key
from cordum.workflow import engine, subworkflow
from cordum.workflow.definition_store import DefinitionStore
from cordum.workflow.errors import RunNotCancellable, RunNotFound
from cordum.workflow.keys import outbox_key
from cordum.workflow.limits import LimitedDefinitions
from cordum.workflow.model import (
    OPEN_RUN,
    TERMINAL_RUN,
    RunStatus,
    WorkflowRun,
    format_time,
    step_runs,
)
from cordum.workflow.outbox import OutboxRunner, contexts_of, to_outbox

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cordum.bus.workflow_events import RunEventSink
    from cordum.scheduler.ports import DurablePublisher
    from cordum.store.locks import Lease
    from cordum.workflow.definition import Workflow
    from cordum.workflow.engine import Effects
    from cordum.workflow.limits import WorkflowLimits
    from cordum.workflow.store import LockedRun, StoredJobEnd, WorkflowStore

log = logging.getLogger(__name__)

LOCK_WAIT_S = 2.0
"""How long an event waits for a run lock another writer holds before it is retried."""
RETRY_S = 1.0
"""The delay of a retried event (lock busy, Redis or NATS unavailable)."""
INLINE_OUTPUT_BYTES = 256 * 1024
"""Outputs up to this size are inlined in the run context; beyond, the pointer only."""


def utcnow() -> datetime:
    return datetime.now(UTC)


class WorkflowRunner:
    """Applies run events; the workflow function's and the reconciler's one door."""

    def __init__(self, store: WorkflowStore, redis: Any, publisher: DurablePublisher,
                 events: RunEventSink | None,
                 limits: Mapping[str, WorkflowLimits] | None = None) -> None:
        self.store = store
        self._redis = redis
        self._events = events
        self._outbox = OutboxRunner(publisher, events, spawn=self._spawn, tell=self._tell)
        self._definitions = DefinitionStore(redis)
        self._limited = LimitedDefinitions(limits)
        """timeouts.yaml's ``workflows.<id>`` limits, applied to each run's definition."""

    async def announce_start(self, run: WorkflowRun) -> None:
        """Queue the run's start (or, with no queue configured, apply it at once)."""
        event = RunEvent("start", run.id, tenant=run.org_id)
        if self._events is None:
            await self.apply(event)
            return
        await self._events.send(event)

    async def cancel(self, tenant: str, run_id: str) -> bool:
        """Cancel an open run now (the API's cancel); False when it was terminal."""
        run = await self.store.get_run(tenant, run_id)
        if run is None:
            raise RunNotFound("workflow run not found")
        if run.status not in OPEN_RUN:
            return False
        try:
            async with self.store.locked_run(run_id, wait_s=LOCK_WAIT_S) as locked:
                return await self._apply_locked(locked, "cancel", None)
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

    async def _apply_locked(self, locked: LockedRun, kind: str, job: tuple[str, str] | None,
                            *, stale_start_s: float = 0.0) -> bool:
        lease, loaded, ended = locked.lease, locked.loaded, locked.job
        if loaded is None or lease is None:
            return False
        run, wf, leftover = loaded
        wf = self._limited(wf)
        if leftover:
            await self._carry_out(lease, run, leftover)
        before = run.updated_at
        timer_before = engine.timer_at(run, wf)
        now = utcnow()
        effects = await self._decide(run, wf, kind, job, ended, now, stale_start_s)
        if effects is None or (run.updated_at == before and not _has_work(effects)):
            return False
        timer_at = effects.timer_at
        outbox = to_outbox(effects, timer_at=timer_at if timer_at != timer_before else None,
                           steps=wf.steps)
        parent = (run.metadata or {}).get(subworkflow.PARENT_RUN)
        if parent and any(e.type == "run_status" and e.status in TERMINAL_RUN
                          for e in effects.timeline):
            outbox.append({"parent": str(parent)})  # the parent's step waits on this run
        step_jobs = [entry["job"] for entry in outbox if "job" in entry]
        await self.store.save(
            run, timeline=effects.timeline, outbox=outbox or None,
            jobs={doc["job_id"]: doc["step_id"] for doc in step_jobs} or None,
            contexts=contexts_of(step_jobs) or None,
            timer_at=timer_at if timer_at != timer_before else ...)
        # The save wrote this event's outbox over any leftover (or deleted it): only
        # what is carried out from here on may be deleted with the lock.
        lease.release_also.clear()
        if outbox:
            await self._carry_out(lease, run, outbox)
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
            state, output, result_ptr, error = job_end(job_id, ended)
            if not state:
                return None
            return engine.on_job(run, wf, step_path, job_id, state, output=output,
                                 result_ptr=result_ptr, error=error, now=now)
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
            states, outputs = await self._job_states(run)
            return engine.merged([*ends, engine.reconcile(run, wf, states, now,
                                                          outputs=outputs)])
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
        """Stores a subworkflow step's child run and queues its start. Its id is the same
        for the same step attempt, so a repeated outbox finds the run it made. A missing
        definition is told to the parent, whose step then fails."""
        child_id = str(spec["run_id"])
        wf = await self._definitions.get_definition(parent.org_id, str(spec["workflow_id"]))
        if wf is None:
            await self._tell(RunEvent("child", parent.id, tenant=parent.org_id,
                                      job_id=child_id))
            return
        stamp = format_time(utcnow())
        child = WorkflowRun(
            id=child_id, workflow_id=wf.id, org_id=parent.org_id, team_id=parent.team_id,
            input=spec.get("input"), status=RunStatus.PENDING, started_at=stamp,
            created_at=stamp, updated_at=stamp, triggered_by=parent.triggered_by,
            metadata=dict(spec.get("metadata") or {}), dry_run=bool(spec.get("dry_run")),
            labels={"parent_run_id": parent.id, **({"dry_run": "true"}
                                                   if spec.get("dry_run") else {})})
        _, created = await self.store.create_run(
            child, wf, idempotency_key=f"subworkflow:{child_id}", body_hash=child_id,
            max_active=0)
        if created:
            await self.announce_start(child)

    async def _tell(self, event: RunEvent) -> None:
        """An event for another run (a child's end, a parent's cancel). With no queue it
        is left to the reconciler: applying it here could wait on a lock this call holds."""
        if self._events is not None:
            await self._events.send(event)

    async def _job_states(self, run: WorkflowRun) -> tuple[dict[str, str], dict[str, Any]]:
        """Stored states of the jobs of the run's open steps ('' for a job not stored),
        and the outputs of those that succeeded (a lost result is applied with its
        output, as its event would have been; one more round trip, only then)."""
        job_ids = [s.job_id for _, s in step_runs(run)
                   if s.job_id and s.status in ("running", "waiting")]
        if not job_ids:
            return {}, {}
        pipe = self._redis.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hmget(meta_key(job_id), "state", "result_status")
        rows = await pipe.execute()
        states: dict[str, str] = {}
        for job_id, (state, status) in zip(job_ids, rows, strict=True):
            states[job_id] = step_job_state(_text(state) if state is not None else "",
                                            _text(status) if status is not None else "")
        done = [j for j, state in states.items() if state == "SUCCEEDED"]
        if not done:
            return states, {}
        pipe = self._redis.pipeline(transaction=False)
        for job_id in done:
            pipe.strlen(result_key(job_id))
            pipe.get(result_key(job_id))
        replies = await pipe.execute()
        outputs: dict[str, Any] = {}
        for job_id, size, raw in zip(done, replies[::2], replies[1::2], strict=True):
            if raw is not None and int(size or 0) <= INLINE_OUTPUT_BYTES:
                outputs[job_id] = _output(raw)
        return states, outputs

    async def _carry_out(self, lease: Lease, run: WorkflowRun,
                         outbox: list[dict[str, Any]]) -> None:
        try:
            await self._outbox.perform(run, outbox)
        except Exception as exc:
            # Saved with the run: the next event (or the reconciler) carries it out.
            raise RetryAfter(f"run {run.id}: outbox not carried out: {exc}", RETRY_S) from exc
        # Removed by the lock's release, in its round trip: a release that fails (or a
        # lease lost meanwhile) leaves it to be carried out again, which repeats nothing.
        lease.release_also.append(outbox_key(run.id))


def step_job_state(state: str, result_status: str) -> str:
    """A step job's state as the engine reads it: FAILED_FATAL is stored as FAILED, and
    the status the worker gave (``result_status``) tells them apart."""
    return "FAILED_FATAL" if state == "FAILED" and result_status == "FAILED_FATAL" else state


def job_end(job_id: str, ended: StoredJobEnd) -> tuple[str, Any, str, dict[str, Any] | None]:
    """(state, output, result pointer, error) of a terminal step job; state '' if open."""
    from cordum.store.jobs import TERMINAL_STATES

    if ended.state not in TERMINAL_STATES:
        return "", None, "", None
    state = step_job_state(ended.state, ended.result_status)
    output: Any = None
    if state == "SUCCEEDED" and ended.result is not None:
        output = _output(ended.result)
    error = None
    if state != "SUCCEEDED":
        error = {"message": ended.failure_reason, "code": ended.result_status or state,
                 "job_id": job_id}
    return state, output, ended.result_ptr, error


def _output(raw: Any) -> Any:
    """A stored job result as the step's output: JSON, else its text."""
    data = raw if isinstance(raw, bytes) else str(raw).encode()
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")


def step_path_of(job_id: str, run_id: str) -> str:
    """The step path of a step job id of ``run_id`` ('' when it is not one)."""
    prefix = f"{run_id}:"
    if not run_id or not job_id.startswith(prefix):
        return ""
    path, sep, attempt = job_id[len(prefix):].rpartition("@")
    return path if sep and attempt.isdigit() else ""


def _has_work(effects: Effects) -> bool:
    return bool(effects.jobs or effects.cancels or effects.alerts or effects.timeline)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
