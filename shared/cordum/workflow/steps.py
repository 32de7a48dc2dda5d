"""A step's working state and its end (docs/workflows.md, "How a run moves" and "How the
step kinds behave").

:class:`Advance` is one engine call's state; :func:`complete` and :func:`fail` end a
step (its result into the run context, or its error to an ``on_error`` handler),
:func:`apply_result` applies a step job's state (with its retry policy) and
:func:`fire_delay` ends a delay whose time has come. Starting a step, per kind, is
:mod:`cordum.workflow.step_kinds`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from cordum.workflow import gates
from cordum.workflow.model import (
    GATE_PASSED,
    GATE_WAITING,
    StepStatus,
    TimelineEvent,
    format_time,
    parse_time,
)
from cordum.workflow.retry import StepRetryPolicy
from cordum.workflow.status import RECOVERABLE, job_outcome

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cordum.workflow.definition import Step, StepMeta, Workflow
    from cordum.workflow.gates import GateRecord
    from cordum.workflow.model import StepRun, WorkflowRun

MAX_INLINE_OUTPUT = 256 * 1024
"""Outputs larger than this (as JSON) stay behind their result pointer only."""


def utc(moment: datetime) -> datetime:
    """A naive time is taken as UTC, never as the host's local time."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


@dataclass(slots=True)
class StepJob:
    """A step's job, ready to be published on ``sys.job.submit`` with ``input`` at
    ``ctx:<job_id>``."""

    job_id: str
    step_id: str
    topic: str
    input: Any
    env: dict[str, str]
    labels: dict[str, str]
    priority: str
    deadline_ms: int
    idempotency_key: str
    meta: StepMeta | None = None
    kind: str = "job"
    """``job`` for a worker step, ``approval`` for a gate."""
    definition_step: str = ""
    """The definition's step the job runs (``step_id`` is its path: ``s[2]`` for an item)."""
    resend: int = 0
    """0 for the first send; n for the n-th time the same job is sent again."""


@dataclass(slots=True)
class Advance:
    """One engine call's working state: the run it changes and what it asks the caller
    to do afterwards."""

    run: WorkflowRun
    wf: Workflow
    now: datetime
    jobs: list[StepJob] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[TimelineEvent] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    """Child runs a subworkflow step asks for (see :mod:`cordum.workflow.subworkflow`)."""
    cancel_runs: list[str] = field(default_factory=list)
    """Child runs to cancel (their parent ended first)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Names a child step sees besides the run's (``item``, ``loop``)."""
    gates: Mapping[str, GateRecord] = field(default_factory=dict)
    """Gate job id -> its approval record, for the gate jobs whose end is applied."""

    @property
    def stamp(self) -> str:
        return format_time(self.now)

    def note(self, kind: str, step_id: str = "", *, job_id: str = "", status: str = "",
             result_ptr: str = "", message: str = "", data: dict[str, Any] | None = None,
             ) -> None:
        self.timeline.append(TimelineEvent(
            time=self.stamp, type=kind, run_id=self.run.id, workflow_id=self.run.workflow_id,
            step_id=step_id, job_id=job_id, status=status, result_ptr=result_ptr,
            message=message, data=data))

    def scope(self) -> dict[str, Any]:
        """What templates and conditions see (§4)."""
        ctx = self.run.context
        return {"input": self.run.input, "ctx": ctx, "steps": ctx.setdefault("steps", {}),
                **self.extra}


def copy_value(value: Any) -> Any:
    """A JSON copy of a run value handed on (a step's input, a child run's): whoever
    gets it never edits the run's own."""
    return json.loads(json.dumps(value, default=str)) if value is not None else None


def is_child(step: Step, sr: StepRun) -> bool:
    """A for_each item or a loop iteration: its state lives under its parent's
    ``children``, never in the run context, and it has no ``on_error`` of its own."""
    return sr.step_id != step.id


def complete(a: Advance, step: Step, sr: StepRun, output: Any, result_ptr: str = "", *,
             event: str = "step_completed", message: str = "") -> None:
    """A step succeeded: its result goes to ``context.steps.<id>`` and ``output_path``."""
    if step.result_data_path and output is not None:
        output = _get_path(output, step.result_data_path)
        if output is _MISSING:
            problem = f"result_data_path {step.result_data_path!r} not found in the job result"
            a.note("step_output_invalid", sr.step_id, job_id=sr.job_id, message=problem)
            fail(a, step, sr, StepStatus.FAILED,
                 {"code": "step_output_invalid", "message": problem}, event="")
            return
    if step.output_schema and output is not None:
        problem = schema_problem(output, step.output_schema)
        if problem:
            a.note("step_output_invalid", sr.step_id, job_id=sr.job_id, message=problem)
            fail(a, step, sr, StepStatus.FAILED,
                 {"code": "step_output_invalid", "message": problem}, event="")
            return
    inlined = _inline(output)
    sr.status = StepStatus.SUCCEEDED
    sr.completed_at = a.stamp
    sr.next_attempt_at = None
    sr.error = None
    sr.output = inlined
    if not is_child(step, sr):
        record_output(a, step, inlined, result_ptr)
    if event:
        a.note(event, sr.step_id, job_id=sr.job_id, status=sr.status, result_ptr=result_ptr,
               message=message)


def record_output(a: Advance, step: Step, output: Any, result_ptr: str = "") -> None:
    """A step's output into ``context.steps.<id>`` and its ``output_path``."""
    a.scope()["steps"][step.id] = {"output": output, "result_ptr": result_ptr}
    if step.output_path:
        _set_path(a.run.context, step.output_path, output)


def fail(a: Advance, step: Step, sr: StepRun, status: StepStatus, error: dict[str, Any], *,
         event: str = "step_failed") -> None:
    """A step ended badly; a failure its ``on_error`` step can handle starts that step."""
    sr.status = status
    sr.completed_at = a.stamp
    sr.next_attempt_at = None
    sr.error = error
    if event:
        a.note(event, sr.step_id, job_id=sr.job_id, status=status,
               message=str(error.get("message", "")), data={"error": error})
    handler = step.on_error
    if is_child(step, sr) or status not in RECOVERABLE or not handler or handler not in a.wf.steps:
        return
    target = a.run.steps.get(handler)
    if target is None or target.status != StepStatus.PENDING or target.attempts:
        return  # already started for another owner: one run of a handler serves all
    target.input = {"error": {**error, "step_id": step.id}}
    a.note("step_error_redirect", step.id, status=status, message=handler,
           data={"on_error": handler})


def apply_result(a: Advance, step: Step, sr: StepRun, state: str, output: Any,
                 result_ptr: str, error: dict[str, Any] | None) -> None:
    """A step job's state applied to its step (an open state changes nothing)."""
    outcome = job_outcome(state)
    if outcome is None:
        return
    approval = (step.type or "").strip().lower() == "approval"
    if outcome.status is StepStatus.SUCCEEDED and (approval or sr.gate == GATE_WAITING):
        why = gates.refusal(a.gates.get(sr.job_id), a.run)
        if why:
            # Whatever wrote the gate job's state, only an approval opens the gate.
            sr.gate = ""
            fail(a, step, sr, StepStatus.FAILED, {
                "code": gates.NOT_RECORDED, "job_id": sr.job_id,
                "message": f"the gate job ended SUCCEEDED without a valid approval: {why}"})
            return
    if sr.gate == GATE_WAITING:
        _gate_result(a, step, sr, outcome.status, state, error)
        return
    if outcome.status is StepStatus.SUCCEEDED:
        complete(a, step, sr, output, result_ptr,
                 event="step_approved" if approval else "step_completed")
        return
    # The job's own words are kept, but the code stays the engine's, so readers of a
    # step error see one vocabulary whatever the worker said.
    reported = {k: v for k, v in (error or {}).items() if v not in ("", None)}
    if reported.get("code", outcome.code) != outcome.code:
        reported["job_code"] = reported["code"]
    reported.setdefault("message", outcome.message)
    reported.update(code=outcome.code, state=state)
    policy = StepRetryPolicy.of(step)
    tries = sr.attempts - (1 if sr.gate == GATE_PASSED else 0)  # the gate was no try
    if not policy.allows(tries, state):
        rejected = approval and outcome.status is StepStatus.DENIED
        fail(a, step, sr, outcome.status, reported,
             event="step_rejected" if rejected else "step_failed")
        return
    wait_s = policy.delay_s(tries)
    sr.status = StepStatus.PENDING
    sr.error = reported
    sr.next_attempt_at = format_time(a.now + timedelta(seconds=wait_s))
    a.note("step_failed", sr.step_id, job_id=sr.job_id, status=sr.status,
           message=f"attempt {sr.attempts} failed; retrying in {wait_s}s",
           data={"error": reported, "retry_at": sr.next_attempt_at})


def _gate_result(a: Advance, step: Step, sr: StepRun, status: StepStatus, state: str,
                 error: dict[str, Any] | None) -> None:
    """The approval gate a ``policy_gate: require_approval`` put in front of the step
    ended: granted, the step starts (it is pending again, its dependencies still met);
    otherwise the step ends as the gate did."""
    if status is StepStatus.SUCCEEDED:
        sr.gate = GATE_PASSED
        sr.status = StepStatus.PENDING
        a.note("step_approved", sr.step_id, job_id=sr.job_id, status=sr.status,
               message="policy gate approved")
        return
    reported = {**(error or {}), "code": "policy_gate_rejected" if status is StepStatus.DENIED
                else "policy_gate_failed", "state": state}
    reported.setdefault("message", f"the step's approval gate ended {state}")
    fail(a, step, sr, status, reported,
         event="step_rejected" if status is StepStatus.DENIED else "step_failed")


def fire_delay(a: Advance, step: Step, sr: StepRun) -> None:
    """A running delay step whose time has come."""
    due = sr.next_attempt_at or ""
    complete(a, step, sr, None, event="step_delay_completed", message=due)


def delay_due(sr: StepRun, now: datetime) -> bool:
    return bool(sr.next_attempt_at) and parse_time(str(sr.next_attempt_at)) <= now


def is_delay(step: Step) -> bool:
    return (step.type or "").strip().lower() == "delay"


def _inline(output: Any) -> Any:
    if output is None:
        return None
    size = len(json.dumps(output, separators=(",", ":"), default=str))
    return output if size <= MAX_INLINE_OUTPUT else None


_MISSING = object()


def _get_path(doc: Any, path: str) -> Any:
    """The value at the dot path ``a.b.c`` of a job's result (``_MISSING`` when absent)."""
    current = doc
    for part in (p.strip() for p in path.split(".")):
        if not part:
            continue
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            return _MISSING
    return current


def _set_path(doc: dict[str, Any], path: str, value: Any) -> None:
    """``a.b.c`` in the run context, creating maps on the way (Cordum's setContextPath)."""
    parts = [p.strip() for p in path.split(".")]
    if all(parts):
        set_path(doc, parts, value)


def set_path(doc: dict[str, Any], parts: list[str], value: Any) -> None:
    """``value`` at the path ``parts`` of ``doc``, creating maps on the way."""
    current = doc
    for part in parts[:-1]:
        nxt = current.get(part)
        if not isinstance(nxt, dict):
            nxt = current[part] = {}
        current = nxt
    current[parts[-1]] = value


def schema_problem(value: Any, schema: dict[str, Any]) -> str:
    """The best reason ``value`` breaks ``schema``, or ""; never raises, fetches nothing
    and is bounded in time (:mod:`cordum.workflow.json_schemas`)."""
    from cordum.workflow import json_schemas

    return json_schemas.problem(value, schema)


GATE_LOST_S = 30.0
"""An approval step whose gate job is still not stored this long after it was sent
(per attempt) lost it: it is sent again (§8)."""
GATE_TRIES = 3
"""Gate jobs sent before the step fails with ``approval_gate_lost``."""


def reset_lost_gates(a: Advance, jobs: Mapping[str, str]) -> None:
    for step_id, step in a.wf.steps.items():
        sr = a.run.steps[step_id]
        if (sr.status != StepStatus.WAITING or not sr.job_id or jobs.get(sr.job_id)
                or (step.type or "").strip().lower() != "approval"):
            continue
        started = parse_time(sr.started_at) if sr.started_at else None
        if started is None or (a.now - started).total_seconds() < GATE_LOST_S * sr.attempts:
            continue
        if sr.attempts >= GATE_TRIES:
            fail(a, step, sr, StepStatus.FAILED,
                 {"code": "approval_gate_lost", "job_id": sr.job_id,
                  "message": f"the approval gate job was not stored after {sr.attempts} tries"})
            continue
        a.note("step_gate_reset", step_id, job_id=sr.job_id, status=StepStatus.PENDING,
               message="approval gate job not found; sending it again")
        sr.status = StepStatus.PENDING
        sr.job_id = ""
