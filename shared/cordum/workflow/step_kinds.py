"""Starting a step, per step kind (docs/workflows.md, "How the step kinds behave").

A worker step (and any type this engine does not know) and an approval gate become a
job for the caller to publish; condition, transform and notify steps finish at once;
a delay waits on a timer; a storage step reads or writes the run context at once; a
switch picks a branch. Steps made of steps (for_each, parallel, loop) are
:mod:`cordum.workflow.composite`, a child run :mod:`cordum.workflow.subworkflow`. How a
step ends is :mod:`cordum.workflow.steps`.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from cordum.labels import is_reserved_label
from cordum.step_job_ids import step_job_id
from cordum.workflow import composite, expressions, gates, parallel, subworkflow
from cordum.workflow.input_refs import is_pointer, kept_input
from cordum.workflow.model import GATE_PASSED, GATE_WAITING, StepStatus, format_time, parse_time
from cordum.workflow.status import NO_JOB_KINDS
from cordum.workflow.steps import (
    StepJob,
    complete,
    copy_value,
    fail,
    fire_delay,
    is_child,
    schema_problem,
)
from cordum.workflow.storage_step import storage_step
from cordum.workflow.switch import switch_step

if TYPE_CHECKING:
    from cordum.workflow.definition import Step
    from cordum.workflow.model import StepRun
    from cordum.workflow.steps import Advance

APPROVAL_GATE_TOPIC = "job.cordum.approval-gate"
"""The gate topic workflow approvals use (one of ``cordum.approval.APPROVAL_GATE_TOPICS``)."""
SOURCE_LABEL = "workflow"
COMPOSITE_KINDS = {"parallel": parallel.begin_parallel, "loop": composite.begin_loop}
NOT_CHILD_KINDS = frozenset({"condition", "switch", "parallel", "loop", "subworkflow", "delay"})
"""Kinds a for_each item or a loop iteration cannot be."""
SEVERITIES = {"INFO": 1, "WARN": 2, "WARNING": 2, "ERROR": 3, "CRITICAL": 4}
NOTIFY_SOURCE = "workflow-engine"


def begin(a: Advance, step: Step, sr: StepRun) -> None:
    """Starts a pending step whose dependencies are satisfied (or an activated handler,
    a parallel's child, a for_each item or a loop iteration)."""
    sr.attempts += 1
    sr.started_at = sr.started_at or a.stamp
    sr.next_attempt_at = None
    kind = (step.type or "worker").strip().lower()
    if is_child(step, sr):
        if kind in NOT_CHILD_KINDS:
            fail(a, step, sr, StepStatus.FAILED, {
                "code": "step_type_unsupported",
                "message": f"a {kind} step cannot run as a for_each item or loop iteration"})
            return
    else:
        if kind == "condition":
            _condition_step(a, step, sr)
            return
        if kind == "switch":
            switch_step(a, step, sr)
            return
        if step.condition and not _gate(a, step, sr):
            return
        if not _policy_gate(a, step, sr, kind):
            return
        if step.for_each:
            composite.begin_for_each(a, step, sr, begin)
            return
        if kind in COMPOSITE_KINDS:
            COMPOSITE_KINDS[kind](a, step, sr, begin)
            return
        if kind == "subworkflow":
            subworkflow.begin_subworkflow(a, step, sr)
            return
    if kind == "delay":
        _delay_step(a, step, sr)
        return
    payload = (_approved_payload(a, step, sr) if sr.gate == GATE_PASSED and sr.gate_input_hash
               else _payload(a, step, sr))
    if payload is _INVALID:
        return
    if kind == "notify":
        _notify_step(a, step, sr, payload)
    elif kind == "transform":
        complete(a, step, sr, payload)
    elif kind == "storage":
        storage_step(a, step, sr, payload)
    elif kind == "approval":
        _dispatch(a, step, sr, payload, approval=True)
    else:
        _dispatch(a, step, sr, payload, approval=False)


def _policy_gate(a: Advance, step: Step, sr: StepRun, kind: str) -> bool:
    """A job step's ``policy_gate``: ``deny`` refuses it; ``require_approval`` first sends
    an approval gate (once: a retry is not asked again) and starts the step when it is
    granted. True when the step may start now."""
    if kind in NO_JOB_KINDS:
        return True  # nothing goes out to guard (the definition dry-run says N/A too)
    if step.policy_gate == "deny":
        fail(a, step, sr, StepStatus.DENIED, {"code": "policy_gate_denied",
                                              "message": "the step's policy_gate is deny"},
             event="step_rejected")
        return False
    if (step.policy_gate != "require_approval" or kind == "approval" or sr.gate == GATE_PASSED
            or a.run.dry_run):
        return True
    sr.gate = GATE_WAITING
    if step.for_each:
        # Asked once for the fan-out, on the step's input; each item renders its own.
        try:
            shown = None if step.input is None else expressions.render(step.input, a.scope())
        except expressions.ExpressionError:
            shown = None
        _dispatch(a, step, sr, {"policy_gate": "require_approval", "step_type": kind,
                                "input": shown}, approval=True)
        return False
    # The input is rendered once, here: the approver decides on it, the gate job's
    # hash binds it, and the step's job carries it as it was (never rendered again).
    payload = _payload(a, step, sr)
    if payload is _INVALID:
        sr.gate = ""
        return False
    sr.gate_input_hash = gates.input_hash(payload)
    _dispatch(a, step, sr, {"policy_gate": "require_approval", "step_type": kind,
                            "input": payload}, approval=True,
              labels={gates.INPUT_HASH_LABEL: sr.gate_input_hash})
    return False


def _approved_payload(a: Advance, step: Step, sr: StepRun) -> Any:
    """The input a policy gate's approver approved (kept in ``sr.input``); the step fails
    when it is no longer that input."""
    if gates.input_hash(sr.input) != sr.gate_input_hash:
        fail(a, step, sr, StepStatus.FAILED, {
            "code": gates.INPUT_CHANGED,
            "message": "the step's input is not the one its approval gate approved"})
        return _INVALID
    return sr.input


_INVALID = object()
"""The payload of a step whose input could not be built (the step has failed)."""


def _payload(a: Advance, step: Step, sr: StepRun) -> Any:
    """The rendered ``input`` templates, else the run input (a for_each item or loop
    iteration: nothing, never a copy each), plus ``item``/``loop`` for a child and
    ``error`` for an activated handler. ``sr.input`` keeps it (see ``kept_input``)."""
    handler = any(other.on_error == step.id for other in a.wf.steps.values())
    error = sr.input.get("error") if handler and isinstance(sr.input, dict) else None
    try:
        payload = (expressions.render(step.input, a.scope()) if step.input is not None
                   else {} if a.extra else copy_value(a.run.input))
    except expressions.ExpressionError as exc:
        fail(a, step, sr, StepStatus.FAILED,
             {"code": "step_input_invalid", "message": f"input template: {exc}"})
        return _INVALID
    if error is not None:
        payload = ({**payload, "error": error} if isinstance(payload, dict)
                   else {"input": payload, "error": error})
    if a.extra and isinstance(payload, dict):  # a for_each item, a loop iteration
        payload = {**_extra_payload(a.extra), **payload}
    if step.input_schema:
        problem = schema_problem(payload, step.input_schema)
        if problem:
            fail(a, step, sr, StepStatus.FAILED, {"code": "step_input_invalid",
                                                  "message": problem})
            return _INVALID
    sr.input = kept_input(a, step, sr, payload)
    return payload


def _extra_payload(extra: dict[str, Any]) -> dict[str, Any]:
    """``item`` and ``loop`` for a child's payload. A loop's ``previous_output`` stays
    out (templates and ``loop_previous_output`` reach it): carried in every payload, it
    would nest each iteration's output in the next."""
    out = {k: copy_value(v) for k, v in extra.items() if k != "loop"}
    if isinstance(extra.get("loop"), dict):
        out["loop"] = {k: v for k, v in extra["loop"].items() if k != "previous_output"}
    return out


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
    if due <= a.now or a.run.dry_run:
        fire_delay(a, step, sr)


def _notify_step(a: Advance, step: Step, sr: StepRun, payload: Any) -> None:
    """A SystemAlert for ``sys.workflow.event``; the step does not wait for anyone."""
    body = payload if isinstance(payload, dict) else {}
    level = str(body.get("level") or "INFO").strip().upper()
    details = body.get("details")
    message = _json_text(body.get("message")) or step.name or step.id
    severity = SEVERITIES.get(level, 1)
    alert: dict[str, Any] = {
        "message": message,
        "severity": severity,
        "source_component": _json_text(body.get("component")) or NOTIFY_SOURCE,
        "details": ({str(k): _json_text(v) for k, v in details.items()}
                    if isinstance(details, dict) else {}),
        "trace_id": _json_text(body.get("trace_id")) or a.run.id,
    }
    if a.run.dry_run:
        a.note("step_event_emitted", step.id, message=message,
               data={"severity": severity, "dry_run": True})
    else:
        a.alerts.append(alert)
        a.note("step_event_emitted", step.id, message=message, data={"severity": severity})
    complete(a, step, sr, alert)


def _dispatch(a: Advance, step: Step, sr: StepRun, payload: Any, *, approval: bool,
              labels: dict[str, str] | None = None) -> None:
    """The step's job goes out; the step is stored running (a gate: waiting) with it. In
    a dry run nothing goes out: the step succeeds with the job it would have sent.
    ``labels``: the engine's own labels for the job, beside its routing labels."""
    run, wf = a.run, a.wf
    path = sr.step_id
    jid = step_job_id(run.id, path, sr.attempts)
    env = {"workflow_id": wf.id, "run_id": run.id, "step_id": path,
           "tenant_id": run.org_id, "team_id": run.team_id or "",
           "memory_id": f"run:{run.id}", "context_mode": "raw"}
    env.update(_child_env(a, path))
    extra = labels or {}
    labels = _route_labels(a, step)
    labels.update({**extra, "workflow_id": wf.id, "run_id": run.id, "step_id": path,
                   "_source": SOURCE_LABEL})
    if run.dry_run:
        env["dry_run"] = labels["dry_run"] = "true"
    if approval:
        labels["gate_type"] = "workflow_approval"
        body: Any = {"kind": "workflow_approval_context", "version": 1, "workflow": {
            "workflow_id": wf.id, "workflow_name": wf.name, "run_id": run.id,
            "step_id": path, "step_name": step.name, "requested_at": a.stamp,
            "triggered_by": run.triggered_by, "tenant_id": run.org_id,
            "team_id": run.team_id or ""}, "decision": payload}
        key = f"wf:{run.id}:{path}:{sr.attempts}:approval"
    else:
        body = payload
        key = f"wf:{run.id}:{path}:{sr.attempts}"
    job = StepJob(
        job_id=jid, step_id=path,
        topic=APPROVAL_GATE_TOPIC if approval else (step.topic or f"job.workflow.{wf.id}"),
        input=body, env=env, labels=labels,
        priority="interactive" if approval else "batch",
        deadline_ms=max(step.timeout_sec, 0) * 1000, idempotency_key=key, meta=step.meta,
        kind="approval" if approval else "job", definition_step=step.id)
    sr.job_id = jid
    sr.error = None
    if run.dry_run:
        a.note("step_dispatched", path, job_id=jid, status=StepStatus.RUNNING,
               message="dry run: not dispatched",
               data={"attempt": sr.attempts, "topic": job.topic, "dry_run": True})
        complete(a, step, sr, {"dry_run": True, "job_id": jid, "topic": job.topic,
                               "input": body}, message="dry run")
        return
    a.jobs.append(job)
    sr.status = StepStatus.WAITING if approval else StepStatus.RUNNING
    a.note("step_dispatched", path, job_id=jid, status=sr.status,
           data={"attempt": sr.attempts, "topic": job.topic})
    if approval:
        a.note("step_waiting", path, job_id=jid, status=sr.status,
               message="waiting for approval")


def resend(a: Advance, step: Step, sr: StepRun) -> None:
    """The step's current job, the same id and input, sent again: the job store never
    saw it (its message was lost). The submit path runs a job id once, so a send that
    was only late cannot make it run twice."""
    approval = (step.type or "").strip().lower() == "approval"
    # An input too large to keep in the run is built again, as it was.
    payload = _payload(a, step, sr) if is_pointer(sr.input) else sr.input
    if payload is not _INVALID:
        _dispatch(a, step, sr, payload, approval=approval)
    if a.jobs and a.jobs[-1].job_id == sr.job_id:
        a.jobs[-1].resend = sr.resends


def _child_env(a: Advance, path: str) -> dict[str, str]:
    """A for_each item's ``foreach_index`` / ``foreach_item``, a loop iteration's
    ``loop_index`` / ``loop_iteration`` / ``loop_previous_output``."""
    found = composite.parent_of(path)
    if found is None:
        return {}
    if "item" in a.extra:
        return composite.item_env(found[1], a.extra["item"])
    loop = a.extra.get("loop") or {}
    return {"loop_index": str(found[1]), "loop_iteration": str(found[1] + 1),
            "loop_previous_output": _json_text(loop.get("previous_output"))}


def _route_labels(a: Advance, step: Step) -> dict[str, str]:
    """``route_labels`` templates; a label that cannot render or renders nil is left out,
    so a routing hint never costs the step its run. A label only the platform may set
    is never taken (a definition with one is refused on save)."""
    labels: dict[str, str] = {}
    for key, template in (step.route_labels or {}).items():
        if is_reserved_label(str(key)):
            continue
        try:
            value = expressions.render(template, a.scope())
        except expressions.ExpressionError:
            continue
        if value is not None:
            labels[str(key)] = _json_text(value)
    return labels


def _json_text(value: Any) -> str:
    """A rendered value as text: a str as it is, None as "", anything else as compact
    JSON (so an object or a list reads as JSON, not as Python's repr)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), default=str)
