"""What a run's steps add up to: dependency satisfaction, skips and the run status (§3, §5).

Everything here reads a run and its definition and decides; nothing changes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from cordum.store.jobs import NO_STATE, OPEN_STATES, JobState
from cordum.workflow.model import RunStatus, StepStatus

if TYPE_CHECKING:
    from cordum.workflow.definition import Step, Workflow
    from cordum.workflow.model import WorkflowRun

DONE = frozenset({StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.DENIED,
                  StepStatus.CANCELLED, StepStatus.TIMED_OUT, StepStatus.SKIPPED})
"""Step statuses nothing moves a step out of."""

OPEN = frozenset({StepStatus.PENDING, StepStatus.RUNNING, StepStatus.WAITING})

RECOVERABLE = frozenset({StepStatus.FAILED, StepStatus.DENIED, StepStatus.TIMED_OUT})
"""Outcomes an ``on_error`` step can make good; a cancelled or skipped step has none."""


class Recovery(StrEnum):
    """Where a step that ended badly stands with its ``on_error`` chain."""

    RECOVERED = "recovered"
    PENDING = "pending"
    UNRECOVERED = "unrecovered"


class HandlerFate(StrEnum):
    """Whether an ``on_error`` step will run: only one of its owners failing starts it."""

    IN_PLAY = "in_play"
    UNNEEDED = "unneeded"
    UNDECIDED = "undecided"


@dataclass(frozen=True, slots=True)
class Readiness:
    """A pending step's dependencies: all satisfied, one blocking for good, or neither yet."""

    ready: bool = False
    blocked_by: str = ""
    """The skip reason when a dependency can never be satisfied."""


WAIT = Readiness()
READY = Readiness(ready=True)


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """What a step job's end means for the step (before any retry)."""

    status: StepStatus
    code: str = ""
    message: str = ""


FATAL_STATE = "FAILED_FATAL"
"""Stored as FAILED by the job store; the result path hands it on as the result carried
it, since it alone sets off the saga's rollback and is never retried."""
RETRYABLE_STATE = "FAILED_RETRYABLE"
"""A worker's "try me again" (the store's RETRYING), should a caller hand it on as such."""

JOB_OUTCOMES = {
    JobState.SUCCEEDED: JobOutcome(StepStatus.SUCCEEDED),
    JobState.FAILED: JobOutcome(StepStatus.FAILED, "job_failed", "the step's job failed"),
    RETRYABLE_STATE: JobOutcome(StepStatus.FAILED, "job_failed", "the step's job failed"),
    FATAL_STATE: JobOutcome(StepStatus.FAILED, "job_failed_fatal",
                            "the step's job failed fatally"),
    JobState.TIMEOUT: JobOutcome(StepStatus.FAILED, "job_timeout", "the step's job timed out"),
    JobState.DENIED: JobOutcome(StepStatus.DENIED, "job_denied", "the step's job was denied"),
    JobState.CANCELLED: JobOutcome(StepStatus.CANCELLED, "job_cancelled",
                                   "the step's job was cancelled"),
    JobState.OUTPUT_QUARANTINED: JobOutcome(StepStatus.FAILED, "output_quarantined",
                                            "the step's output was quarantined"),
}


def job_outcome(state: str) -> JobOutcome | None:
    """The step outcome of a job state; None while the job is still open (or not stored
    at all: "" or ``-``). A state this table does not know fails the step rather than
    leave it running for ever."""
    if state in JOB_OUTCOMES:
        return JOB_OUTCOMES[state]
    if not state or state == NO_STATE or state in OPEN_STATES:
        return None
    return JobOutcome(StepStatus.FAILED, "job_failed", f"the step's job ended {state!r}")


def error_owners(wf: Workflow) -> dict[str, list[str]]:
    """Handler step id -> the steps naming it as ``on_error``, in definition order."""
    owners: dict[str, list[str]] = {}
    for step_id, step in wf.steps.items():
        if step.on_error and step.on_error in wf.steps and step.on_error != step_id:
            owners.setdefault(step.on_error, []).append(step_id)
    return owners


def handler_fate(handler_id: str, run: WorkflowRun, owners: dict[str, list[str]]) -> HandlerFate:
    """An error handler is in play once an owner failed; it is unneeded once every owner
    ended another way, since then nothing can start it any more."""
    names = owners.get(handler_id, [])
    statuses = [_status(run, owner) for owner in names]
    if any(s in RECOVERABLE for s in statuses):
        return HandlerFate.IN_PLAY
    if statuses and all(s in DONE for s in statuses):
        return HandlerFate.UNNEEDED
    return HandlerFate.UNDECIDED


def recovery(step_id: str, run: WorkflowRun, wf: Workflow) -> Recovery:
    """Follows the ``on_error`` chain of a step that ended failed, denied or timed out:
    recovered when the chain ends in a success, pending while a handler may still run."""
    seen: set[str] = set()
    current = step_id
    while True:
        seen.add(current)
        handler = wf.steps[current].on_error if current in wf.steps else ""
        if not handler or handler not in wf.steps or handler in seen:
            return Recovery.UNRECOVERED
        status = _status(run, handler)
        if status is StepStatus.SUCCEEDED:
            return Recovery.RECOVERED
        if status in RECOVERABLE:
            current = handler
            continue
        if status in OPEN:
            return Recovery.PENDING
        return Recovery.UNRECOVERED


def readiness(step: Step, run: WorkflowRun, wf: Workflow,
              owners: dict[str, list[str]]) -> Readiness:
    """Whether a pending step may start (§3). A dependency is satisfied by success, or by
    a failure its ``on_error`` chain made good; anything else that is done blocks."""
    for dep in step.depends_on:
        if dep not in wf.steps:
            return Readiness(blocked_by=f"dependency {dep} unknown")
        status = _status(run, dep)
        if status is StepStatus.SUCCEEDED:
            continue
        if status in RECOVERABLE:
            state = recovery(dep, run, wf)
            if state is Recovery.RECOVERED:
                continue
            if state is Recovery.PENDING:
                return WAIT
            return Readiness(blocked_by=f"dependency {dep} {status}")
        if status in DONE:
            return Readiness(blocked_by=f"dependency {dep} {status}")
        if (status is StepStatus.PENDING and dep in owners
                and handler_fate(dep, run, owners) is HandlerFate.UNNEEDED):
            return Readiness(blocked_by=f"dependency {dep} not needed")
        return WAIT
    return READY


NO_JOB_KINDS = frozenset({"condition", "delay", "notify", "transform", "storage", "switch",
                          "parallel", "loop", "subworkflow"})
"""Step kinds that dispatch no job of their own (a policy gate has nothing to guard)."""


def kind_of(step: Step) -> str:
    return (step.type or "worker").strip().lower()


def owned_steps(wf: Workflow) -> dict[str, str]:
    """Step id -> the parallel or loop step that runs it (never scheduled on its own)."""
    owned: dict[str, str] = {}
    for step_id, step in wf.steps.items():
        kind = kind_of(step)
        if kind == "parallel":
            ids, _ = parallel_ids(step)
            for child in ids:
                if child != step_id and child in wf.steps:
                    owned.setdefault(child, step_id)
        elif kind == "loop":
            body = body_id(step)
            if body and body != step_id and body in wf.steps:
                owned.setdefault(body, step_id)
    return owned


def body_id(step: Step) -> str:
    spec = step.input or {}
    value = spec.get("body_step", spec.get("body"))
    return value.strip() if isinstance(value, str) else ""


def parallel_ids(step: Step) -> tuple[list[str], str]:
    raw = (step.input or {}).get("steps")
    if isinstance(raw, str):
        return [p.strip() for p in raw.split(",") if p.strip()], ""
    if isinstance(raw, list) and all(isinstance(p, str) for p in raw):
        return [p.strip() for p in raw if p.strip()], ""
    if raw is None:
        return [], ""
    return [], "parallel input.steps must be a list of step ids or a comma-separated string"


def counted(step_id: str, run: WorkflowRun, owners: dict[str, list[str]]) -> bool:
    """Steps the run waits for: all but the error handlers nothing has started."""
    if step_id not in owners:
        return True
    return handler_fate(step_id, run, owners) is HandlerFate.IN_PLAY


def run_status(run: WorkflowRun, wf: Workflow) -> RunStatus:
    """The run's status from its steps; first match wins (§5):
    an unrecovered failed (or cancelled) step -> failed; denied -> denied;
    timed out -> timed_out; a waiting step -> waiting; every counted step done ->
    succeeded; else running."""
    owners = error_owners(wf)
    owned = owned_steps(wf)
    ids = [sid for sid in wf.steps if counted(sid, run, owners) and sid not in owned]
    statuses = {sid: _status(run, sid) for sid in ids}

    def unrecovered(status: StepStatus) -> bool:
        return any(s is status and recovery(sid, run, wf) is Recovery.UNRECOVERED
                   for sid, s in statuses.items())

    cancelled = any(s is StepStatus.CANCELLED and not branch_not_taken(run, sid)
                    for sid, s in statuses.items())
    if unrecovered(StepStatus.FAILED) or cancelled:
        return RunStatus.FAILED
    if unrecovered(StepStatus.DENIED):
        return RunStatus.DENIED
    if unrecovered(StepStatus.TIMED_OUT):
        return RunStatus.TIMED_OUT
    if StepStatus.WAITING in statuses.values():
        return RunStatus.WAITING
    if all(s in DONE for s in statuses.values()):
        return RunStatus.SUCCEEDED
    return RunStatus.RUNNING


def deciding_step(run: WorkflowRun, wf: Workflow, status: RunStatus) -> str:
    """The step whose outcome gave the run ``status`` (failed, denied or timed out), for
    the run's error; "" when none did."""
    wanted = {RunStatus.FAILED: {StepStatus.FAILED, StepStatus.CANCELLED},
              RunStatus.DENIED: {StepStatus.DENIED},
              RunStatus.TIMED_OUT: {StepStatus.TIMED_OUT}}.get(status, set())
    owners = error_owners(wf)
    owned = owned_steps(wf)
    for sid in wf.steps:
        step_status = _status(run, sid)
        if step_status not in wanted or not counted(sid, run, owners) or sid in owned:
            continue
        if step_status is StepStatus.CANCELLED and branch_not_taken(run, sid):
            continue
        if (step_status is StepStatus.CANCELLED
                or recovery(sid, run, wf) is Recovery.UNRECOVERED):
            return sid
    return ""


BRANCH_NOT_TAKEN = "switch_branch_not_taken"
"""The reason of a switch's branch that was not chosen: cancelled, yet complete (§2)."""


def branch_not_taken(run: WorkflowRun, step_id: str) -> bool:
    sr = run.steps.get(step_id)
    return sr is not None and (sr.error or {}).get("reason") == BRANCH_NOT_TAKEN


def _status(run: WorkflowRun, step_id: str) -> StepStatus:
    sr = run.steps.get(step_id)
    return StepStatus(sr.status) if sr is not None else StepStatus.PENDING
