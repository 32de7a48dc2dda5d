"""Response bodies of the approval routes, as Cordum's spec has them (the conventions
of ``cordum.gateway.core.schemas`` hold here too)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AwareDatetime

from cordum.gateway.core.schemas import Body, JobSummary, PaginatedResponse, optional

ApprovalDecision = Literal["PENDING", "APPROVED", "REJECTED"]


class GateOwner(Body):
    """The workflow run and step a workflow approval gate belongs to."""

    workflow_id: str = optional()
    run_id: str = optional()
    step_id: str = optional()


class ApprovalItem(Body):
    job: JobSummary = optional()
    decision: ApprovalDecision = optional()
    policy_snapshot: str | None = optional()
    policy_rule_id: str | None = optional()
    policy_reason: str | None = optional()
    constraints: dict[str, Any] | None = optional()
    approval_required: bool = optional()
    requested_at: AwareDatetime = optional()
    decided_at: AwareDatetime | None = optional()
    decided_by: str | None = optional()
    safety_decision: str = optional()
    workflow: GateOwner = optional()
    may_decide: bool = optional()
    """Whether the caller may approve or reject it (not the job's own submitter)."""
    may_not_decide_reason: str | None = optional()


class ApprovalContextWorkflow(Body):
    workflow_id: str = optional()
    workflow_name: str = optional()
    run_id: str = optional()
    step_id: str = optional()
    step_name: str = optional()
    requested_at: str = optional()
    triggered_by: str = optional()
    tenant_id: str = optional()
    team_id: str = optional()


class ApprovalContext(Body):
    """A workflow approval gate's context document (``kind`` workflow_approval_context)."""

    kind: str = optional()
    version: int = optional()
    workflow: ApprovalContextWorkflow = optional()
    decision: Any = optional()


class ApprovalList(PaginatedResponse):
    items: list[ApprovalItem] = optional()
