"""How jobs and their decisions look in API answers.

Cordum's field names, shaped so Cordum's published client parses them: times are
RFC 3339 strings in UTC; a time that is unknown is left out rather than sent as
``null``, except where the schema allows ``null`` (``started_at``,
``completed_at``); maps (``labels``, ``delegation``) are ``{}`` when empty, never
``null``; ``priority`` is an integer; a safety action is one of six upper-case words.
Pure functions of what the store returned: reading is ``cordum.gateway.jobs.queries``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cordum import protocol
from cordum.gateway.core.times import rfc3339_us
from cordum.store.jobs import TERMINAL_STATES, JobState, decode_labels
from cordum.store.json_docs import json_object, json_value

if TYPE_CHECKING:
    from collections.abc import Mapping

SAFETY_ACTIONS = ("ALLOW", "DENY", "REQUIRE_APPROVAL", "THROTTLE", "ALLOW_WITH_CONSTRAINTS",
                  "UNAVAILABLE")
"""SafetyDecision.action: exactly these (the client's enum rejects anything else)."""

_ACTION_ALIASES = {
    "PERMIT": "ALLOW",
    "BLOCK": "DENY",
    "REQUIRE_HUMAN": "REQUIRE_APPROVAL",
    "APPROVAL_REQUIRED": "REQUIRE_APPROVAL",
    "CONSTRAIN": "ALLOW_WITH_CONSTRAINTS",
}

PRIORITY_NAMES = {"interactive": 1, "batch": 2, "critical": 3}

MAX_INLINE_RESULT_BYTES = 512 * 1024
"""Largest stored result (bytes of ``res:<id>``) a job's detail carries inline.
Lambda answers at most 6 MB (6,291,456 bytes) to API Gateway, and a result grows
on the way out: it is JSON in the body, and the body is a JSON string in the
proxy response, so each byte may be escaped twice: a control character takes 6
bytes in the body (a \\u escape) and 7 in the response, a quote 2 and then 4. At
the worst, 7 times, 512 KiB is 3.5 MiB, with room for the rest of the job.
Above it the detail leaves ``result`` out (null) and says so
(``result_too_large``, ``result_size_bytes``); ``result_ptr`` names where the
result is (Redis, ``res:<id>``), for a worker or operator to read there. Without
the limit such a GET answered 502, every time."""

# Cordum's extra detail fields copied from job:meta as they are, when present.
_META_TEXT_FIELDS = ("actor_id", "actor_type", "idempotency_key", "pack_id", "agent_id",
                     "agent_name", "agent_risk_tier", "principal", "team", "memory_id",
                     "safety_snapshot", "safety_job_hash")
_APPROVAL_FIELDS = ("approval_status", "approval_actionability", "approval_revision",
                    "approval_decision", "approval_by", "approval_role", "approval_reason",
                    "approval_note", "approval_policy_snapshot", "approval_job_hash",
                    "approval_publish_status", "approval_publish_target")
_APPROVAL_TIMES = ("approval_at", "approval_published_at")


def json_or_text(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return {"text": raw}


def _put_time(out: dict[str, Any], name: str, us: str | int | None) -> None:
    # A non-nullable time that is unknown is left out, not sent as null.
    value = rfc3339_us(us)
    if value is not None:
        out[name] = value


def _json_list(raw: str | None) -> list[Any]:
    value = json_value(raw)
    return value if isinstance(value, list) else []


def priority(raw: str | None) -> int:
    """The stored priority as the integer the schema wants (names tolerated)."""
    if not raw:
        return 1
    try:
        return int(raw)
    except ValueError:
        return PRIORITY_NAMES.get(raw.strip().lower(), 1)


def safety_action(raw: str | None) -> str | None:
    """One of :data:`SAFETY_ACTIONS`, or None when ``raw`` names none of them."""
    word = (raw or "").strip().upper().replace("-", "_")
    word = word.removeprefix("DECISION_TYPE_")
    word = _ACTION_ALIASES.get(word, word)
    return word if word in SAFETY_ACTIONS else None


def safety_decisions(meta: Mapping[str, str]) -> list[dict[str, Any]]:
    """The job's policy decisions as SafetyDecision objects ([] when none).

    The engine keeps one decision per job in its meta (``safety_*``, rewritten at
    every check), so there is at most one; a value outside the enum is left out.
    """
    action = safety_action(meta.get("safety_decision"))
    if action is None:
        return []
    decision: dict[str, Any] = {
        "rule_id": meta.get("safety_rule_id", ""),
        "action": action,
        "reason": meta.get("safety_reason", ""),
        "constraints": json_object(meta.get("safety_constraints")),
    }
    _put_time(decision, "evaluated_at", meta.get("safety_checked_at"))
    return [decision]


def job_summary(job_id: str, meta: Mapping[str, str]) -> dict[str, Any]:
    """JobSummary (plus ``trace_id``)."""
    out: dict[str, Any] = {
        "id": job_id,
        "state": meta.get("state", ""),
        "topic": meta.get("topic", ""),
        "tenant": meta.get("tenant", ""),
        "trace_id": meta.get("trace_id", ""),
    }
    _put_time(out, "updated_at", meta.get("updated_at"))
    return out


@dataclass(frozen=True, slots=True)
class DetailExtras:
    """What a job's detail shows beyond its meta, read from the job's other keys."""

    events: list[tuple[int, str]] = field(default_factory=list)
    """``job:events:<id>`` as (µs, state), oldest first."""
    dlq: dict[str, Any] | None = None
    """The job's ``dlq:entry:<id>``, when it has one."""
    output_decision: dict[str, Any] | None = None
    """The output policy record ``job:<id>:output_decision``, when there is one."""
    prompt: str | None = None
    """From the context payload ``ctx:<id>`` (kept 24 hours)."""
    adapter_id: str = ""
    """From the stored JobRequest ``job:req:<id>``."""
    effective_config: dict[str, Any] | None = None
    """The effective config the job carries (its request's env), when it has one."""


def _first_event(events: list[tuple[int, str]], states: frozenset[str]) -> int | None:
    return next((ts for ts, state in events if state in states), None)


_RUNNING = frozenset({JobState.RUNNING.value})
_TERMINAL = frozenset(s.value for s in TERMINAL_STATES)


def job_detail(job_id: str, meta: dict[str, str], result_ptr: str | None,
               result: Any, extras: DetailExtras | None = None, *,
               result_size: int | None = None) -> dict[str, Any]:
    """JobDetail plus Cordum's extra fields.

    Without ``extras`` only the meta speaks: ``started_at`` is null and
    ``completed_at`` is the time a terminal job reached its current state.
    ``result_ptr`` and ``result`` are what :func:`served_result_ptr` allowed; a job
    that is not SUCCEEDED shows neither, whatever is passed. ``result_size`` is the
    stored result's size in bytes when known: past :data:`MAX_INLINE_RESULT_BYTES`
    the result is left out, by pointer only.
    """
    state = meta.get("state", "")
    if state != JobState.SUCCEEDED:
        result_ptr, result, result_size = None, None, None
    too_large = result_size is not None and result_size > MAX_INLINE_RESULT_BYTES
    if too_large:
        result = None
    attempts = int(meta.get("attempts") or 0)
    labels = decode_labels(meta)
    out: dict[str, Any] = {
        **job_summary(job_id, meta),
        "prompt": "",
        "context_ptr": protocol.pointer(protocol.context_key(job_id)),
        "result_ptr": result_ptr,
        "result": result if isinstance(result, dict) or result is None else {"value": result},
        "capability": meta.get("capability", ""),
        "risk_tags": [str(v) for v in _json_list(meta.get("risk_tags"))],
        "requires": [str(v) for v in _json_list(meta.get("requires"))],
        "labels": labels,
        "adapter_id": meta.get("adapter_id", ""),
        "priority": priority(meta.get("priority")),
        "started_at": None,
        "completed_at": rfc3339_us(meta.get("updated_at")) if state in _TERMINAL else None,
        "error": meta.get("failure_reason") or None,
        "attempts": attempts,
        "retry_count": max(0, attempts - 1),
        "worker_id": meta.get("worker_id", ""),
        "decisions": safety_decisions(meta),
        "delegation": json_object(meta.get("delegation_lineage")) or {},
        # What the platform recorded, never a label: labels are the submitter's words.
        "workflow_id": meta.get("workflow_id", ""),
        "run_id": meta.get("run_id", ""),
        "step_id": meta.get("step_id", ""),
        "safety_decision": meta.get("safety_decision", ""),
        "safety_reason": meta.get("safety_reason", ""),
        "safety_rule_id": meta.get("safety_rule_id", ""),
        "safety_constraints": json_object(meta.get("safety_constraints")),
        "safety_remediations": _json_list(meta.get("safety_remediations")),
        "approval_required": meta.get("safety_approval_required") == "true",
        "approval_ref": meta.get("safety_approval_ref", ""),
    }
    if too_large:
        out["result_too_large"] = True
        out["result_size_bytes"] = result_size
    _put_time(out, "created_at", meta.get("created_at"))
    for name in _META_TEXT_FIELDS:
        out[name] = meta.get(name, "")
    for name in _APPROVAL_FIELDS:
        if meta.get(name):
            out[name] = meta[name]
    for name in _APPROVAL_TIMES:
        if meta.get(name):
            out[name] = rfc3339_us(meta[name]) or meta[name]
    output = json_object(meta.get("output_safety"))
    if extras is not None:
        _apply_extras(out, extras, state)
        output = output or extras.output_decision
    if output is not None:
        out["output_safety"] = output
        out["output_decision"] = str(output.get("decision", ""))
    return out


def _apply_extras(out: dict[str, Any], extras: DetailExtras, state: str) -> None:
    if extras.prompt is not None:
        out["prompt"] = extras.prompt
    if extras.adapter_id and not out["adapter_id"]:
        out["adapter_id"] = extras.adapter_id
    if extras.effective_config is not None:
        out["effective_config"] = extras.effective_config
    started = _first_event(extras.events, _RUNNING)
    if started is not None:
        out["started_at"] = rfc3339_us(started)
    completed = _first_event(extras.events, _TERMINAL)
    if completed is not None and state in _TERMINAL:
        out["completed_at"] = rfc3339_us(completed)
    entry = extras.dlq
    if entry is not None:
        out["error_message"] = str(entry.get("reason") or "")
        out["error_code"] = str(entry.get("reason_code") or "")
        out["error_status"] = str(entry.get("status") or "")
        out["last_state"] = str(entry.get("last_state") or "")
        if out["error"] is None and out["error_message"]:
            out["error"] = out["error_message"]
