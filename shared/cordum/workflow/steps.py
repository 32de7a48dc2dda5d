"""Starting and finishing a step, per step kind (reference §2, §3, §5).

A worker step (and any type this engine does not know) and an approval gate become a
job for the caller to publish; condition, transform and notify steps finish at once;
a delay waits on a timer. Part 2 kinds (for_each, parallel, switch, loop, subworkflow,
storage) fail with ``step_type_unsupported`` until the engine learns them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from cordum.workflow import expressions
from cordum.workflow.model import StepStatus, TimelineEvent, format_time, parse_time
from cordum.workflow.retry import StepRetryPolicy
from cordum.workflow.status import RECOVERABLE, job_outcome

if TYPE_CHECKING:
    from cordum.workflow.model import Step, StepMeta, StepRun, Workflow, WorkflowRun

APPROVAL_GATE_TOPIC = "job.cordum.approval-gate"
"""The gate topic workflow approvals use (one of ``scheduler.jobhash.APPROVAL_GATE_TOPICS``)."""
SOURCE_LABEL = "workflow"
UNSUPPORTED_KINDS = frozenset({"parallel", "switch", "loop", "subworkflow", "storage"})
MAX_INLINE_OUTPUT = 256 * 1024
"""Outputs larger than this (as JSON) stay behind their result pointer only."""
SEVERITIES = {"INFO": 1, "WARN": 2, "WARNING": 2, "ERROR": 3, "CRITICAL": 4}
NOTIFY_SOURCE = "workflow-engine"


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
        return {"input": self.run.input, "ctx": ctx, "steps": ctx.setdefault("steps", {})}


def job_id(run_id: str, step_id: str, attempt: int) -> str:
    return f"{run_id}:{step_id}@{attempt}"


def begin(a: Advance, step: Step, sr: StepRun) -> None:
    """Starts a pending step whose dependencies are satisfied (or an activated handler)."""
    sr.attempts += 1
    sr.started_at = sr.started_at or a.stamp
    sr.next_attempt_at = None
    kind = (step.type or "worker").strip().lower()
    if step.for_each or kind in UNSUPPORTED_KINDS:
        what = "for_each" if step.for_each else f"type {kind!r}"
        fail(a, step, sr, StepStatus.FAILED,
             {"code": "step_type_unsupported", "message": f"step {what} is not supported yet"})
        return
    if kind == "condition":
        _condition_step(a, step, sr)
        return
    if step.condition and not _gate(a, step, sr):
        return
    if kind == "delay":
        _delay_step(a, step, sr)
        return
    payload = _payload(a, step, sr)
    if payload is _INVALID:
        return
    if kind == "notify":
        _notify_step(a, step, sr, payload)
    elif kind == "transform":
        complete(a, step, sr, payload)
    elif kind == "approval":
        _dispatch(a, step, sr, payload, approval=True)
    else:
        _dispatch(a, step, sr, payload, approval=False)


def complete(a: Advance, step: Step, sr: StepRun, output: Any, result_ptr: str = "", *,
             event: str = "step_completed", message: str = "") -> None:
    """A step succeeded: its result goes to ``context.steps.<id>`` and ``output_path``."""
    if step.output_schema and output is not None:
        problem = _schema_problem(output, step.output_schema)
        if problem:
            a.note("step_output_invalid", step.id, job_id=sr.job_id, message=problem)
            fail(a, step, sr, StepStatus.FAILED,
                 {"code": "step_output_invalid", "message": problem}, event="")
            return
    inlined = _inline(output)
    sr.status = StepStatus.SUCCEEDED
    sr.completed_at = a.stamp
    sr.next_attempt_at = None
    sr.error = None
    sr.output = inlined
    a.scope()["steps"][step.id] = {"output": inlined, "result_ptr": result_ptr}
    if step.output_path:
        _set_path(a.run.context, step.output_path, inlined)
    if event:
        a.note(event, step.id, job_id=sr.job_id, status=sr.status, result_ptr=result_ptr,
               message=message)


def fail(a: Advance, step: Step, sr: StepRun, status: StepStatus, error: dict[str, Any], *,
         event: str = "step_failed") -> None:
    """A step ended badly; a failure its ``on_error`` step can handle starts that step."""
    sr.status = status
    sr.completed_at = a.stamp
    sr.next_attempt_at = None
    sr.error = error
    if event:
        a.note(event, step.id, job_id=sr.job_id, status=status,
               message=str(error.get("message", "")), data={"error": error})
    handler = step.on_error
    if status not in RECOVERABLE or not handler or handler not in a.wf.steps:
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
    if not policy.allows(sr.attempts, state):
        rejected = approval and outcome.status is StepStatus.DENIED
        fail(a, step, sr, outcome.status, reported,
             event="step_rejected" if rejected else "step_failed")
        return
    wait_s = policy.delay_s(sr.attempts)
    sr.status = StepStatus.PENDING
    sr.error = reported
    sr.next_attempt_at = format_time(a.now + timedelta(seconds=wait_s))
    a.note("step_failed", step.id, job_id=sr.job_id, status=sr.status,
           message=f"attempt {sr.attempts} failed; retrying in {wait_s}s",
           data={"error": reported, "retry_at": sr.next_attempt_at})


def fire_delay(a: Advance, step: Step, sr: StepRun) -> None:
    """A running delay step whose time has come."""
    due = sr.next_attempt_at or ""
    complete(a, step, sr, None, event="step_delay_completed", message=due)


def delay_due(sr: StepRun, now: datetime) -> bool:
    return bool(sr.next_attempt_at) and parse_time(str(sr.next_attempt_at)) <= now


def is_delay(step: Step) -> bool:
    return (step.type or "").strip().lower() == "delay"


_INVALID = object()
"""The payload of a step whose input could not be built (the step has failed)."""


def _payload(a: Advance, step: Step, sr: StepRun) -> Any:
    """The rendered ``input`` templates, or the whole run input for a step without one;
    an activated error handler also gets ``error``."""
    handler = any(other.on_error == step.id for other in a.wf.steps.values())
    error = sr.input.get("error") if handler and isinstance(sr.input, dict) else None
    try:
        payload = (_copy(a.run.input) if step.input is None
                   else expressions.render(step.input, a.scope()))
    except expressions.ExpressionError as exc:
        fail(a, step, sr, StepStatus.FAILED,
             {"code": "step_input_invalid", "message": f"input template: {exc}"})
        return _INVALID
    if error is not None:
        payload = ({**payload, "error": error} if isinstance(payload, dict)
                   else {"input": payload, "error": error})
    if step.input_schema:
        problem = _schema_problem(payload, step.input_schema)
        if problem:
            fail(a, step, sr, StepStatus.FAILED, {"code": "step_input_invalid",
                                                  "message": problem})
            return _INVALID
    sr.input = payload
    return payload


def _gate(a: Advance, step: Step, sr: StepRun) -> bool:
    """A step's own ``condition``: false finishes it as succeeded without running it."""
    try:
        passed = expressions.truthy(expressions.evaluate(step.condition, a.scope()))
    except expressions.ExpressionError as exc:
        a.note("step_condition_failed", step.id, message=str(exc))
        fail(a, step, sr, StepStatus.FAILED,
             {"code": "step_condition_failed", "message": str(exc)}, event="")
        return False
    if passed:
        a.note("step_condition_evaluated", step.id, status="true")
        return True
    sr.skip_reason = "condition evaluated false"
    complete(a, step, sr, None, event="step_condition_skipped", message=step.condition)
    return False


def _condition_step(a: Advance, step: Step, sr: StepRun) -> None:
    try:
        value = expressions.truthy(expressions.evaluate(step.condition or "true", a.scope()))
    except expressions.ExpressionError as exc:
        a.note("step_condition_failed", step.id, message=str(exc))
        fail(a, step, sr, StepStatus.FAILED,
             {"code": "step_condition_failed", "message": str(exc)}, event="")
        return
    a.note("step_condition_evaluated", step.id, status=str(value).lower(),
           message=step.condition)
    complete(a, step, sr, value)


def _delay_step(a: Advance, step: Step, sr: StepRun) -> None:
    """``delay_sec``, else ``delay_until``, else ``timeout_sec``; no delay at all ends it."""
    if step.delay_sec > 0:
        due = a.now + timedelta(seconds=step.delay_sec)
    elif step.delay_until:
        try:
            due = parse_time(str(expressions.render(step.delay_until, a.scope())))
        except (ValueError, expressions.ExpressionError):
            fail(a, step, sr, StepStatus.FAILED, {
                "code": "delay_until_invalid",
                "message": f"delay_until {step.delay_until!r} is not an RFC 3339 time"})
            return
    else:
        due = a.now + timedelta(seconds=max(step.timeout_sec, 0))
    sr.status = StepStatus.RUNNING
    sr.next_attempt_at = format_time(due)
    a.note("step_delay_started", step.id, status=sr.status, message=sr.next_attempt_at,
           data={"fires_at": sr.next_attempt_at})
    if due <= a.now:
        fire_delay(a, step, sr)


def _notify_step(a: Advance, step: Step, sr: StepRun, payload: Any) -> None:
    """A SystemAlert for ``sys.workflow.event``; the step does not wait for anyone."""
    body = payload if isinstance(payload, dict) else {}
    level = str(body.get("level") or "INFO").strip().upper()
    details = body.get("details")
    message = _text(body.get("message")) or step.name or step.id
    severity = SEVERITIES.get(level, 1)
    alert: dict[str, Any] = {
        "message": message,
        "severity": severity,
        "source_component": _text(body.get("component")) or NOTIFY_SOURCE,
        "details": ({str(k): _text(v) for k, v in details.items()}
                    if isinstance(details, dict) else {}),
        "trace_id": _text(body.get("trace_id")) or a.run.id,
    }
    a.alerts.append(alert)
    a.note("step_event_emitted", step.id, message=message, data={"severity": severity})
    complete(a, step, sr, alert)


def _dispatch(a: Advance, step: Step, sr: StepRun, payload: Any, *, approval: bool) -> None:
    """The step's job goes out; the step is stored running (a gate: waiting) with it."""
    run, wf = a.run, a.wf
    jid = job_id(run.id, step.id, sr.attempts)
    env = {"workflow_id": wf.id, "run_id": run.id, "step_id": step.id,
           "tenant_id": run.org_id, "team_id": run.team_id or "",
           "memory_id": f"run:{run.id}", "context_mode": "raw"}
    if run.dry_run:
        env["dry_run"] = "true"
    labels = _route_labels(a, step)
    labels.update({"workflow_id": wf.id, "run_id": run.id, "step_id": step.id,
                   "_source": SOURCE_LABEL})
    if approval:
        labels["gate_type"] = "workflow_approval"
        body: Any = {"kind": "workflow_approval_context", "version": 1, "workflow": {
            "workflow_id": wf.id, "workflow_name": wf.name, "run_id": run.id,
            "step_id": step.id, "step_name": step.name, "requested_at": a.stamp,
            "triggered_by": run.triggered_by, "tenant_id": run.org_id,
            "team_id": run.team_id or ""}, "decision": payload}
        key = f"wf:{run.id}:{step.id}:{sr.attempts}:approval"
    else:
        body = payload
        key = f"wf:{run.id}:{step.id}:{sr.attempts}"
    a.jobs.append(StepJob(
        job_id=jid, step_id=step.id,
        topic=APPROVAL_GATE_TOPIC if approval else (step.topic or f"job.workflow.{wf.id}"),
        input=body, env=env, labels=labels,
        priority="interactive" if approval else "batch",
        deadline_ms=max(step.timeout_sec, 0) * 1000, idempotency_key=key, meta=step.meta,
        kind="approval" if approval else "job"))
    sr.job_id = jid
    sr.error = None
    sr.status = StepStatus.WAITING if approval else StepStatus.RUNNING
    a.note("step_dispatched", step.id, job_id=jid, status=sr.status,
           data={"attempt": sr.attempts, "topic": a.jobs[-1].topic})
    if approval:
        a.note("step_waiting", step.id, job_id=jid, status=sr.status,
               message="waiting for approval")


def _route_labels(a: Advance, step: Step) -> dict[str, str]:
    """``route_labels`` templates; a label that cannot render or renders nil is left out,
    so a routing hint never costs the step its run."""
    labels: dict[str, str] = {}
    for key, template in (step.route_labels or {}).items():
        try:
            value = expressions.render(template, a.scope())
        except expressions.ExpressionError:
            continue
        if value is not None:
            labels[str(key)] = _text(value)
    return labels


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), default=str)


def _inline(output: Any) -> Any:
    if output is None:
        return None
    size = len(json.dumps(output, separators=(",", ":"), default=str))
    return output if size <= MAX_INLINE_OUTPUT else None


def _copy(value: Any) -> Any:
    """The run input handed to a step is a copy: a step never edits the run's."""
    return json.loads(json.dumps(value, default=str)) if value is not None else None


def _set_path(doc: dict[str, Any], path: str, value: Any) -> None:
    """``a.b.c`` in the run context, creating maps on the way (Cordum's setContextPath)."""
    parts = [p.strip() for p in path.split(".")]
    if not all(parts):
        return
    current = doc
    for part in parts[:-1]:
        nxt = current.get(part)
        if not isinstance(nxt, dict):
            nxt = current[part] = {}
        current = nxt
    current[parts[-1]] = value


def _schema_problem(value: Any, schema: dict[str, Any]) -> str:
    """The first reason ``value`` breaks ``schema``, or ""; jsonschema loads on first use."""
    import jsonschema

    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        return exc.message
    except jsonschema.SchemaError as exc:
        return f"invalid schema: {exc.message}"
    return ""
