"""Workflow definitions, runs and timeline events as the HTTP API serves them.

The stored documents are Cordum's; the answers are also what cordum-sdk 0.1.0
parses, and its parsers are strict in a few places: a nested object that is
``null`` (a definition's ``config``, a step's ``retry``) crashes them, a
definition and each of its steps must carry their ids, a run's ``started_at``
is never null, and a timeline event's time is read as ``timestamp``. So an
empty optional field is left out rather than sent as ``null``, except where the
spec marks it nullable (``completed_at``, ``error``, ``output``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cordum.workflow.model import format_time

if TYPE_CHECKING:
    from cordum.workflow.definition import Workflow
    from cordum.workflow.model import WorkflowRun

SUMMARY_FIELDS = ("id", "workflow_id", "org_id", "team_id", "status", "started_at",
                  "completed_at", "error", "triggered_by", "created_at", "updated_at",
                  "total_cost", "labels", "idempotency_key", "rerun_of", "rerun_step",
                  "dry_run")
"""What a run list shows of each run: everything but the input, output, context and steps."""


def definition(wf: Workflow) -> dict[str, Any]:
    doc = wf.to_json()
    # The client requires the name, the steps, and each step's id and type.
    doc.setdefault("name", "")
    doc["steps"] = {step_id: {**step, "id": step_id, "type": step.get("type") or "worker"}
                    for step_id, step in (doc.get("steps") or {}).items()}
    return doc


def run_summary(run: WorkflowRun) -> dict[str, Any]:
    doc = run.to_json()
    return {k: doc[k] for k in SUMMARY_FIELDS if k in doc}


def run_detail(run: WorkflowRun, timer_at: float | None, now: float) -> dict[str, Any]:
    """The whole run, plus ``created_by`` (the client's name for ``triggered_by``) and the
    pending timer, if any."""
    doc = run.to_json()
    if doc.get("input") is None:
        doc["input"] = {}
    doc["steps"] = {step_id: {**step, "step_id": step_id}
                    for step_id, step in (doc.get("steps") or {}).items()}
    doc["created_by"] = doc.get("triggered_by") or ""
    doc["timers"] = [] if timer_at is None else [timer(run, timer_at, now)]
    return doc


def timer(run: WorkflowRun, fires_at: float, now: float) -> dict[str, Any]:
    return {"workflow_id": run.workflow_id, "run_id": run.id,
            "fires_at": format_time(datetime.fromtimestamp(fires_at, UTC)),
            "remaining_ms": max(0, int((fires_at - now) * 1000))}


def timeline_event(event: dict[str, Any]) -> dict[str, Any]:
    """An event as stored, with its time under both names."""
    when = event.get("timestamp") or event.get("time")
    if not when:
        return event
    return {**event, "time": event.get("time") or when, "timestamp": when}
