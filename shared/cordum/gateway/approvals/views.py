"""How approvals look in API answers: ApprovalItem (docs/http-api.md) and a decision."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cordum.approval import APPROVAL_GATE_TOPICS, APPROVED, REJECTED, STATUS_FIELD
from cordum.gateway.core.times import rfc3339_us
from cordum.step_job_ids import parse_step_job_id
from cordum.store.jobs import JobState, decode_labels
from cordum.store.json_docs import json_object

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cordum.gateway.core.auth import Principal

PENDING = "PENDING"

APPROVAL_ITEM_FIELDS = ("tenant", "state", "topic", "updated_at", STATUS_FIELD,
                        "safety_snapshot", "safety_rule_id", "safety_reason",
                        "safety_constraints", "safety_checked_at", "approval_decided_at",
                        "approved_by", "safety_decision", "labels", "principal")
"""The meta fields :func:`approval_item` reads: all a list page fetches of a job."""


def self_decision(who: Principal, meta: Mapping[str, str]) -> bool:
    """Separation of duties: whoever submitted a job cannot decide about it.

    The gateway names every key (principal_id, else key:<key id>) and records the
    submitter's name in the job's meta; a caller without a name could be anyone,
    the submitter included.
    """
    return not who.principal_id or who.principal_id == meta.get("principal", "")


def caller_may_decide(who: Principal, meta: Mapping[str, str]) -> dict[str, Any]:
    """``may_decide`` and ``may_not_decide_reason`` of an item, for the caller (so a
    dashboard shows why before anyone tries)."""
    if self_decision(who, meta):
        return {"may_decide": False, "may_not_decide_reason":
                "self_approval_denied: the signed-in key submitted this job; "
                "another identity must decide"}
    return {"may_decide": True, "may_not_decide_reason": None}


def decision_of(meta: Mapping[str, str]) -> str:
    """PENDING while the job waits in APPROVAL_REQUIRED, else the recorded decision."""
    status = meta.get(STATUS_FIELD, "")
    if meta.get("state") == JobState.APPROVAL_REQUIRED or status not in (APPROVED, REJECTED):
        return PENDING
    return status


def approval_item(job_id: str, meta: Mapping[str, str], gated_at_us: int) -> dict[str, Any]:
    """An ApprovalItem, plus the kernel's verdict as ``safety_decision``."""
    decision = decision_of(meta)
    decided = decision != PENDING
    return {
        "job": {
            "id": job_id,
            "state": meta.get("state", ""),
            "topic": meta.get("topic", ""),
            "tenant": meta.get("tenant", ""),
            "updated_at": rfc3339_us(meta.get("updated_at") or str(gated_at_us)),
        },
        "decision": decision,
        "policy_snapshot": meta.get("safety_snapshot") or None,
        "policy_rule_id": meta.get("safety_rule_id") or None,
        "policy_reason": meta.get("safety_reason") or None,
        "constraints": json_object(meta.get("safety_constraints", "")),
        "approval_required": True,
        "requested_at": rfc3339_us(meta.get("safety_checked_at") or str(gated_at_us)),
        "decided_at": rfc3339_us(meta.get("approval_decided_at")) if decided else None,
        "decided_by": (meta.get("approved_by") or None) if decided else None,
        "safety_decision": meta.get("safety_decision", ""),
        **_workflow_of(job_id, meta),
    }


def _workflow_of(job_id: str, meta: Mapping[str, str]) -> dict[str, Any]:
    """``{"workflow": {workflow_id, run_id, step_id}}`` for a workflow's approval gate, else
    nothing. The gate's job id (``<run>:<step>@<attempt>``) must agree with its labels."""
    if meta.get("topic", "") not in APPROVAL_GATE_TOPICS:
        return {}
    labels = decode_labels(meta)
    run_id, step_id = labels.get("run_id", ""), labels.get("step_id", "")
    named = parse_step_job_id(job_id)
    if named is None or not run_id or (named.run_id, named.path) != (run_id, step_id):
        return {}
    return {"workflow": {"workflow_id": labels.get("workflow_id", ""), "run_id": run_id,
                         "step_id": step_id}}


def decided(job_id: str, meta: Mapping[str, str], status: str) -> dict[str, Any]:
    """The answer to a decision that was already made (``already_approved`` ...)."""
    return {"job_id": job_id, "trace_id": meta.get("trace_id", ""), "status": status,
            "decided_by": meta.get("approved_by", ""),
            "decided_at": rfc3339_us(meta.get("approval_decided_at"))}
