"""The DAG advance: a run moved on by one event, with no I/O (docs/workflows.md, "How a
run moves" and "Dry runs and reruns").

Each entry point changes ``run`` in place and returns the Effects the caller must carry
out afterwards, in this order: save the run (with the timeline and the timer), then
publish the jobs, cancels and alerts. A step is saved ``running`` before its job goes
out, so a crash in between leaves a step the reconciler can see, never a job the run
does not know.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from cordum.store.jobs import OPEN_STATES, JobState
from cordum.store.results import result_pointer
from cordum.workflow import composite, lost_jobs, parallel, subworkflow
from cordum.workflow.model import (
    TERMINAL_RUN,
    RunStatus,
    StepRun,
    StepStatus,
    parse_time,
    step_runs,
)
from cordum.workflow.status import (
    OPEN,
    HandlerFate,
    deciding_step,
    error_owners,
    handler_fate,
    job_outcome,
    kind_of,
    owned_steps,
    readiness,
    run_status,
)
from cordum.workflow.step_kinds import begin
from cordum.workflow.steps import (
    Advance,
    StepJob,
    apply_result,
    delay_due,
    fire_delay,
    is_delay,
    reset_lost_gates,
    utc,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cordum.workflow.definition import Workflow
    from cordum.workflow.gates import GateRecord
    from cordum.workflow.model import TimelineEvent, WorkflowRun

__all__ = ["Effects", "StepJob", "cancel", "on_child", "on_job", "on_timer", "reconcile",
           "start"]

CANCEL_REASON = "workflow run cancelled"
TIMEOUT_REASON = "workflow run timed out"


@dataclass(slots=True)
class Effects:
    """What must happen outside once the changed run is saved."""

    jobs: list[StepJob] = field(default_factory=list)
    """Step jobs to publish (their input goes to ``ctx:<job_id>`` first)."""
    cancels: list[str] = field(default_factory=list)
    """Job ids to send a JobCancel for."""
    alerts: list[dict[str, Any]] = field(default_factory=list)
    """SystemAlerts of notify steps, for ``sys.workflow.event`` (best effort)."""
    timeline: list[TimelineEvent] = field(default_factory=list)
    timer_at: float | None = None
    """Earliest fire time (unix s) of a delay, a retry backoff or the run's timeout;
    None when the run waits on no clock (a terminal run never does)."""
    runs: list[dict[str, Any]] = field(default_factory=list)
    """Child runs of subworkflow steps to store and start."""
    cancel_runs: list[str] = field(default_factory=list)
    """Child runs to cancel: their parent ended before them."""


def start(run: WorkflowRun, wf: Workflow, now: datetime) -> Effects:
    """pending -> running, and the steps with nothing to wait for are started. Starting
    a run that is already under way only dispatches what is ready (a repeated event)."""
    a = Advance(run, wf, utc(now))
    if run.status in TERMINAL_RUN:
        return _effects(a)
    _ensure_steps(a)
    if run.status == RunStatus.PENDING:
        run.started_at = run.started_at or a.stamp
        if run.rerun_of:
            a.note("run_rerun", step_id=run.rerun_step, data={
                "rerun_of": run.rerun_of, "from_step": run.rerun_step,
                "by": str((run.metadata or {}).get("rerun_by") or run.triggered_by)})
        _set_status(a, RunStatus.RUNNING)
    if not _timed_out(a):
        _settle(a)
    return _effects(a)


def on_job(run: WorkflowRun, wf: Workflow, step_path: str, job_id: str, state: str, *,
           output: Any, result_ptr: str, error: dict[str, Any] | None,
           now: datetime, gate: GateRecord | None = None) -> Effects:
    """A step job reached ``state`` (the job store's state, or FAILED_FATAL as the result
    carried it). Ignored for a terminal run, a job that is not the step's current one
    and a step already done: results may arrive twice or late. ``gate``: the job's
    approval record, which alone opens a gate (:mod:`cordum.workflow.gates`)."""
    a = Advance(run, wf, utc(now), gates={job_id: gate} if gate is not None else {})
    if run.status in TERMINAL_RUN or run.status == RunStatus.PENDING:
        return _effects(a)
    _ensure_steps(a)
    if _timed_out(a):
        return _effects(a)
    _apply(a, step_path, job_id, state, output, result_ptr, error)
    _settle(a)
    return _effects(a)


def on_child(run: WorkflowRun, wf: Workflow, child_id: str, child: WorkflowRun | None,
             now: datetime) -> Effects:
    """The child run ``child_id`` of a subworkflow step ended (``child`` None: it was
    never stored). Ignored unless a running step is waiting on exactly that run."""
    a = Advance(run, wf, utc(now))
    if run.status in TERMINAL_RUN or run.status == RunStatus.PENDING:
        return _effects(a)
    _ensure_steps(a)
    if _timed_out(a):
        return _effects(a)
    for step_id, step in wf.steps.items():
        sr = run.steps[step_id]
        if sr.job_id == child_id and sr.status == StepStatus.RUNNING and (
                child is None or child.status in TERMINAL_RUN):
            subworkflow.child_ended(a, step, sr, child)
    _settle(a)
    return _effects(a)


def on_timer(run: WorkflowRun, wf: Workflow, now: datetime) -> Effects:
    """A timer came due: the run's timeout, delays that are over and retry backoffs that
    have run out (those steps are pending and start again)."""
    a = Advance(run, wf, utc(now))
    if run.status in TERMINAL_RUN or run.status == RunStatus.PENDING:
        return _effects(a)
    _ensure_steps(a)
    if not _timed_out(a):
        _fire_delays(a)
        _settle(a)
    return _effects(a)


def cancel(run: WorkflowRun, wf: Workflow, now: datetime,
           reason: str = CANCEL_REASON) -> Effects:
    """Every open step and the run become ``cancelled``; the jobs still out are cancelled.
    A terminal run stays as it is."""
    return _end(run, wf, now, RunStatus.CANCELLED, {"code": "cancelled", "message": reason},
                reason)


def reconcile(run: WorkflowRun, wf: Workflow, jobs: Mapping[str, str],
              now: datetime, *, outputs: Mapping[str, Any] | None = None,
              pointers: Mapping[str, str] | None = None,
              gates: Mapping[str, GateRecord] | None = None) -> Effects:
    """The reconciler's pass over one run (§8). ``jobs`` maps the job ids of running and
    waiting steps to their stored state: a terminal one is a result that never arrived
    and is applied as it would have been (with its output from ``outputs``, its
    pointer from ``pointers``, its approval record from ``gates``). Then the timer
    work of ``on_timer``. A pending run whose start was lost is started; a cancelled
    or timed-out run has its jobs that are still open cancelled again."""
    if run.status == RunStatus.PENDING:
        return start(run, wf, now)
    if run.status in TERMINAL_RUN:
        a = Advance(run, wf, utc(now))
        if run.status in (RunStatus.CANCELLED, RunStatus.TIMED_OUT):
            for _, sr in step_runs(run):
                if sr.job_id and jobs.get(sr.job_id) in OPEN_STATES:
                    a.cancels.append(sr.job_id)
            a.cancel_runs.extend(subworkflow.child_runs(run, wf, open_only=False))
        return _effects(a)
    a = Advance(run, wf, utc(now), gates=gates or {})
    _ensure_steps(a)
    if _timed_out(a):
        return _effects(a)
    for path, sr in step_runs(run):
        state = jobs.get(sr.job_id, "") if sr.job_id else ""
        if sr.status in (StepStatus.RUNNING, StepStatus.WAITING) and job_outcome(state):
            ptr = (pointers.get(sr.job_id, "") if pointers is not None
                   else result_pointer(sr.job_id) if state == JobState.SUCCEEDED else "")
            _apply(a, path, sr.job_id, state, (outputs or {}).get(sr.job_id), ptr, None)
    reset_lost_gates(a, jobs)
    lost_jobs.resend_lost_jobs(a, jobs)
    _fire_delays(a)
    _settle(a)
    return _effects(a)


def _fire_delays(a: Advance) -> None:
    for step_id, step in a.wf.steps.items():
        sr = a.run.steps[step_id]
        if sr.status == StepStatus.RUNNING and is_delay(step) and delay_due(sr, a.now):
            fire_delay(a, step, sr)


def _apply(a: Advance, step_path: str, job_id: str, state: str, output: Any,
           result_ptr: str, error: dict[str, Any] | None) -> None:
    sr, step = a.run.steps.get(step_path), a.wf.steps.get(step_path)
    found = composite.parent_of(step_path) if sr is None else None
    if found is not None:  # a for_each item or a loop iteration: its parent's child
        parent_sr, parent = a.run.steps.get(found[0]), a.wf.steps.get(found[0])
        if parent_sr is None or parent is None or parent_sr.status != StepStatus.RUNNING:
            return
        sr = (parent_sr.children or {}).get(step_path)
        step = composite.body_of(a.wf, parent)
    if sr is None or step is None or not job_id or sr.job_id != job_id:
        return
    if sr.status not in (StepStatus.RUNNING, StepStatus.WAITING):
        return
    apply_result(a, step, sr, state, output, result_ptr, error)


def _settle(a: Advance) -> None:
    """Starts every step that became ready, again and again while steps finish at once,
    then brings the run's status up to date."""
    run, wf = a.run, a.wf
    owners = error_owners(wf)
    owned = owned_steps(wf)
    changed = True
    while changed:
        changed = False
        for step_id, step in wf.steps.items():
            sr = run.steps[step_id]
            if sr.status == StepStatus.RUNNING and composite.is_composite(step):
                drive = (parallel.drive_parallel if kind_of(step) == "parallel"
                         and not step.for_each else composite.drive)
                changed = drive(a, step, sr, begin) or changed
                continue
            if sr.status != StepStatus.PENDING or step_id in owned:
                continue
            if sr.next_attempt_at and parse_time(sr.next_attempt_at) > a.now:
                continue  # a retry backing off
            if step_id in owners:
                if handler_fate(step_id, run, owners) is not HandlerFate.IN_PLAY:
                    continue
            else:
                verdict = readiness(step, run, wf, owners)
                if verdict.blocked_by:
                    sr.status = StepStatus.SKIPPED
                    sr.skip_reason = verdict.blocked_by
                    sr.completed_at = a.stamp
                    a.note("step_skipped", step_id, status=sr.status, message=verdict.blocked_by)
                    changed = True
                    continue
                if not verdict.ready:
                    continue
            begin(a, step, sr)
            changed = True
    status = run_status(run, wf)
    if status in TERMINAL_RUN:
        error = None
        if status != RunStatus.SUCCEEDED:
            culprit = deciding_step(run, wf, status)
            failed = run.steps.get(culprit)
            error = {"step_id": culprit, **((failed.error or {}) if failed else {})}
        _close(a, status, error, "")
    else:
        _set_status(a, status)


def _close(a: Advance, status: RunStatus, error: dict[str, Any] | None, reason: str) -> None:
    """Ends the run: open steps are cancelled (timed out, for a timeout) and their jobs
    with them; error handlers never needed and steps never reached are skipped."""
    run = a.run
    owned = owned_steps(a.wf)
    a.cancel_runs.extend(subworkflow.child_runs(run, a.wf, open_only=True))
    ended = StepStatus.TIMED_OUT if status == RunStatus.TIMED_OUT else StepStatus.CANCELLED
    for step_id in a.wf.steps:
        sr = run.steps[step_id]
        if sr.status not in OPEN:
            continue
        composite.close_children(sr, ended, a.stamp, a.cancels)
        if sr.status == StepStatus.PENDING and status not in (RunStatus.CANCELLED,
                                                              RunStatus.TIMED_OUT):
            sr.status = StepStatus.SKIPPED
            sr.skip_reason = (f"run by {owned[step_id]}" if step_id in owned
                              else "error handler not needed" if status == RunStatus.SUCCEEDED
                              else f"run {status}")
        else:
            if (sr.job_id and sr.status in (StepStatus.RUNNING, StepStatus.WAITING)
                    and kind_of(a.wf.steps[step_id]) != "subworkflow"):
                a.cancels.append(sr.job_id)
            sr.status = (StepStatus.TIMED_OUT if status == RunStatus.TIMED_OUT
                         else StepStatus.CANCELLED)
            if status == RunStatus.TIMED_OUT and sr.error is None:
                sr.error = {"code": "run_timed_out", "message": TIMEOUT_REASON}
        sr.next_attempt_at = None
        sr.completed_at = a.stamp
    run.completed_at = a.stamp
    run.error = error
    if status == RunStatus.SUCCEEDED:
        run.output = {sid: entry.get("output") for sid, entry in
                      a.scope()["steps"].items() if isinstance(entry, dict)}
    _set_status(a, status, message=reason)


def _timed_out(a: Advance) -> bool:
    """Applies the workflow's ``timeout_sec`` (counted from ``started_at``) when it has
    run out; True when it did."""
    deadline = _deadline(a.run, a.wf)
    if deadline is None or a.now < deadline:
        return False
    _close(a, RunStatus.TIMED_OUT, {"code": "run_timed_out", "message": TIMEOUT_REASON},
           TIMEOUT_REASON)
    return True


def _deadline(run: WorkflowRun, wf: Workflow) -> datetime | None:
    if wf.timeout_sec <= 0 or not run.started_at:
        return None
    return parse_time(run.started_at) + timedelta(seconds=wf.timeout_sec)


def _set_status(a: Advance, status: RunStatus, *, message: str = "") -> None:
    if a.run.status == status:
        return
    a.run.status = status
    a.note("run_status", status=status, message=message)


def _ensure_steps(a: Advance) -> None:
    for step_id in a.wf.steps:
        if step_id not in a.run.steps:
            a.run.steps[step_id] = StepRun(step_id=step_id)
    a.run.context.setdefault("steps", {})


def _effects(a: Advance) -> Effects:
    run = a.run
    if a.timeline:  # every change to a run is on its timeline
        run.updated_at = a.stamp
    return Effects(jobs=a.jobs, cancels=list(dict.fromkeys(a.cancels)), alerts=a.alerts,
                   timeline=a.timeline, timer_at=timer_at(run, a.wf),
                   runs=a.runs,
                   cancel_runs=list(dict.fromkeys(a.cancel_runs)))


def timer_at(run: WorkflowRun, wf: Workflow) -> float | None:
    """When the run must next be looked at by a timer (unix seconds): the earliest step
    delay or retry backoff, or the workflow's timeout; None when nothing waits."""
    if run.status in TERMINAL_RUN:
        return None
    times: list[datetime] = []
    deadline = _deadline(run, wf)
    if deadline is not None:
        times.append(deadline)
    for _, sr in step_runs(run):
        if sr.next_attempt_at and sr.status in (StepStatus.PENDING, StepStatus.RUNNING):
            times.append(parse_time(sr.next_attempt_at))
    return min(times).timestamp() if times else None


def merged(effects: list[Effects]) -> Effects:
    """Several engine calls on one run in one event, as one set of effects (the last
    call's timer and the run as it now stands)."""
    out = Effects()
    for e in effects:
        out.jobs += e.jobs
        out.cancels += [c for c in e.cancels if c not in out.cancels]
        out.alerts += e.alerts
        out.timeline += e.timeline
        out.runs += e.runs
        out.cancel_runs += [r for r in e.cancel_runs if r not in out.cancel_runs]
        out.timer_at = e.timer_at
    return out


def fail_run(run: WorkflowRun, wf: Workflow, now: datetime, error: dict[str, Any]) -> Effects:
    """The run fails with ``error`` whatever its steps say (one the engine cannot advance):
    open steps and their jobs are closed as a cancel does; a terminal run stays as it is."""
    return _end(run, wf, now, RunStatus.FAILED, error,
                f"{error.get('code')}: {error.get('message')}")


def _end(run: WorkflowRun, wf: Workflow, now: datetime, status: RunStatus,
         error: dict[str, Any], reason: str) -> Effects:
    a = Advance(run, wf, utc(now))
    if run.status not in TERMINAL_RUN:
        _ensure_steps(a)
        _close(a, status, error, reason)
    return _effects(a)
