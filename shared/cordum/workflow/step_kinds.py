"""Starting a step, per step kind (reference §2, §3).

A worker step (and any type this engine does not know) and an approval gate become a
job for the caller to publish; condition, transform and notify steps finish at once;
a delay waits on a timer; a storage step reads or writes the run context at once. Part 2
kinds (for_each, parallel, switch, loop, subworkflow) fail with ``step_type_unsupported``
until the engine learns them. How a step
ends is :mod:`cordum.workflow.steps`.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from cordum.workflow import expressions
from cordum.workflow.model import StepStatus, format_time, parse_time
from cordum.workflow.status import BRANCH_NOT_TAKEN
from cordum.workflow.steps import StepJob, complete, fail, fire_delay, job_id, schema_problem

if TYPE_CHECKING:
    from cordum.workflow.definition import Step
    from cordum.workflow.model import StepRun
    from cordum.workflow.steps import Advance

APPROVAL_GATE_TOPIC = "job.cordum.approval-gate"
"""The gate topic workflow approvals use (one of ``scheduler.jobhash.APPROVAL_GATE_TOPICS``)."""
SOURCE_LABEL = "workflow"
UNSUPPORTED_KINDS = frozenset({"parallel", "loop", "subworkflow"})
STORAGE_OPERATIONS = ("read", "write", "delete")
ENGINE_CONTEXT_KEY = "steps"
"""The part of the run context the engine writes (step outputs): storage steps keep off."""
SEVERITIES = {"INFO": 1, "WARN": 2, "WARNING": 2, "ERROR": 3, "CRITICAL": 4}
NOTIFY_SOURCE = "workflow-engine"


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
    if kind == "switch":
        _switch_step(a, step, sr)
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
    elif kind == "storage":
        _storage_step(a, step, sr, payload)
    elif kind == "approval":
        _dispatch(a, step, sr, payload, approval=True)
    else:
        _dispatch(a, step, sr, payload, approval=False)


def _switch_step(a: Advance, step: Step, sr: StepRun) -> None:
    """``condition`` is the value; ``input.cases`` a list of ``{when|match|value: literal,
    next|step|target: step id}`` or a map literal -> step id; ``input.default`` (or
    ``default_step``) the fallback. The chosen step runs on; every other case target
    is cancelled as a branch not taken, which counts as complete."""
    spec = step.input or {}
    try:
        value = expressions.evaluate(step.condition, a.scope()) if step.condition else None
    except expressions.ExpressionError as exc:
        fail(a, step, sr, StepStatus.FAILED, {"code": "switch_invalid", "message": str(exc)})
        return
    cases = _switch_cases(spec.get("cases"))
    default = str(spec.get("default") or spec.get("default_step") or "")
    matched = next((i for i, (when, _) in enumerate(cases) if _same_value(when, value)), None)
    target = cases[matched][1] if matched is not None else default
    targets = {t for _, t in cases} | ({default} if default else set())
    unknown = sorted(t for t in targets if t not in a.wf.steps)
    if unknown:
        fail(a, step, sr, StepStatus.FAILED,
             {"code": "switch_invalid", "message": f"unknown target step(s): {unknown}"})
        return
    a.note("step_switch_evaluated", step.id, status=StepStatus.SUCCEEDED,
           message=f"target {target or 'none'}",
           data={"value": value, "target_step": target})
    for other in sorted(targets - {target}):
        branch = a.run.steps.get(other)
        if branch is not None and branch.status == StepStatus.PENDING:
            branch.status = StepStatus.CANCELLED
            branch.completed_at = a.stamp
            branch.error = {"reason": BRANCH_NOT_TAKEN, "code": BRANCH_NOT_TAKEN,
                            "message": f"switch {step.id} chose {target or 'no branch'}"}
            a.note("step_cancelled", other, status=StepStatus.CANCELLED,
                   message=branch.error["message"], data={"error": branch.error})
    complete(a, step, sr, {"matched_case": matched, "matched_value": value,
                           "target_step": target})


def _switch_cases(raw: Any) -> list[tuple[Any, str]]:
    if isinstance(raw, dict):
        return [(when, str(target)) for when, target in raw.items()]
    out: list[tuple[Any, str]] = []
    for case in raw if isinstance(raw, list) else []:
        if not isinstance(case, dict):
            continue
        when = next((case[k] for k in ("when", "match", "value") if k in case), None)
        target = next((case[k] for k in ("next", "step", "target") if k in case), "")
        if target:
            out.append((when, str(target)))
    return out


def _same_value(when: Any, value: Any) -> bool:
    """A case's literal against the switch value (a map's keys are text: compared as text)."""
    if when == value and type(when) is type(value):
        return True
    if isinstance(when, str) and not isinstance(value, str) and value is not None:
        text = json.dumps(value) if not isinstance(value, bool) else str(value).lower()
        return when == text
    return False


def _storage_step(a: Advance, step: Step, sr: StepRun, payload: Any) -> None:
    """``operation`` read | write | delete of the dot path ``key`` in the run context
    (``value`` for a write). The output is the value at the key: as read, as written,
    or as it was before the delete (nil when there was none)."""
    spec = payload if isinstance(payload, dict) else {}
    operation = str(spec.get("operation", "")).strip().lower()
    path = [part for part in str(spec.get("key", "")).split(".") if part]
    problem = ""
    if operation not in STORAGE_OPERATIONS:
        problem = f"operation must be one of {', '.join(STORAGE_OPERATIONS)}"
    elif not path:
        problem = "key must be a dot path such as 'order.total'"
    elif path[0] == ENGINE_CONTEXT_KEY:
        problem = f"key {spec.get('key')!r} is the engine's own ({ENGINE_CONTEXT_KEY}.*)"
    if problem:
        fail(a, step, sr, StepStatus.FAILED, {"code": "storage_invalid", "message": problem})
        return
    parent: Any = a.run.context
    for part in path[:-1]:
        child = parent.get(part) if isinstance(parent, dict) else None
        if not isinstance(child, dict):
            if operation != "write":
                complete(a, step, sr, None)
                return
            child = parent[part] = {}
        parent = child
    leaf = path[-1]
    if operation == "read":
        value = _copy(parent.get(leaf))
    elif operation == "write":
        parent[leaf] = _copy(spec.get("value"))
        value = _copy(spec.get("value"))
    else:
        value = parent.pop(leaf, None)
    complete(a, step, sr, value)


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
        problem = schema_problem(payload, step.input_schema)
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


def _copy(value: Any) -> Any:
    """The run input handed to a step is a copy: a step never edits the run's."""
    return json.loads(json.dumps(value, default=str)) if value is not None else None
