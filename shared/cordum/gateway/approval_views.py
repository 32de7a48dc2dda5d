"""How approvals look in API answers: ApprovalItem (gateway-api.md) and a decision."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cordum.gateway.views import json_object, rfc3339_us
from cordum.scheduler.approval import APPROVED, REJECTED, STATUS_FIELD
from cordum.store.jobs import JobState

if TYPE_CHECKING:
    from collections.abc import Mapping

PENDING = "PENDING"

APPROVAL_ITEM_FIELDS = ("tenant", "state", "topic", "updated_at", STATUS_FIELD,
                        "safety_snapshot", "safety_rule_id", "safety_reason",
                        "safety_constraints", "safety_checked_at", "approval_decided_at",
                        "approved_by", "safety_decision")
"""The meta fields :func:`approval_item` reads: all a list page fetches of a job."""


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
    }


def decided(job_id: str, meta: Mapping[str, str], status: str) -> dict[str, Any]:
    """The answer to a decision that was already made (``already_approved`` ...)."""
    return {"job_id": job_id, "trace_id": meta.get("trace_id", ""), "status": status,
            "decided_by": meta.get("approved_by", ""),
            "decided_at": rfc3339_us(meta.get("approval_decided_at"))}
