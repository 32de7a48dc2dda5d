"""Response bodies of the approval routes, as Cordum's spec has them (the conventions
of ``cordum.gateway.core.schemas`` hold here too)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AwareDatetime

from cordum.gateway.core.schemas import Body, JobSummary, PaginatedResponse, optional

ApprovalDecision = Literal["PENDING", "APPROVED", "REJECTED"]
ApprovalStatus = Literal["pending", "approved", "rejected", "expired"]


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


class ApprovalContextApproval(Body):
    """The approval record (Cordum's ``approval``)."""

    job_id: str = optional()
    state: str = optional()
    decision: str = optional()
    """The kernel's verdict, e.g. ``REQUIRE_APPROVAL`` ('' when none is recorded)."""
    policy_snapshot: str | None = optional()
    policy_rule_id: str | None = optional()
    policy_reason: str | None = optional()
    constraints: dict[str, Any] | None = optional()
    approval_required: bool = optional()
    approval_ref: str = optional()
    """The job's id: what approve and reject take."""
    approval_status: ApprovalStatus | None = optional()
    """``null`` for a job that never waited for a person."""
    resolved_by: str = optional()
    resolved_comment: str = optional()
    """The decision's note."""
    resolution: str = optional()
    """The decision's reason."""
    resolved_at: int = optional()
    """When it was decided, µs since the epoch."""
    workflow_id: str = optional()
    workflow_run_id: str = optional()
    workflow_step_id: str = optional()
    job_input: Any = optional()
    """The job's input as JSON when whole (see ``what_will_run``), else the preview
    text; ``null`` when withheld or absent."""


class ApprovalContextMatchedRule(Body):
    id: str = optional()
    description: str = optional()
    decision: str = optional()
    constraints_summary: str = optional()
    """e.g. ``max_retries=3, timeout=1000ms, sandboxed``."""


class ApprovalContextPolicySummary(Body):
    matched_rule: ApprovalContextMatchedRule = optional()
    policy_version: str = optional()
    """The policy snapshot the verdict was made under."""


class ApprovalContextBlastRadius(Body):
    systems: list[str] = optional()
    namespaces: list[str] = optional()
    resources: list[str] = optional()
    scope_description: str = optional()


class ApprovalContextPriorApproval(Body):
    job_id: str = optional()
    topic: str = optional()
    tenant: str = optional()
    decision: Literal["APPROVED", "REJECTED"] = optional()
    resolved_by: str = optional()
    resolved_at: int = optional()
    """µs since the epoch."""
    was_approved: bool = optional()


class ApprovalContextDecisionSummary(Body):
    source: Literal["policy_only", "workflow_payload"] = optional()
    title: str = optional()
    subject: str = optional()
    why: str = optional()


class ApprovalContextWhatWillRun(Body):
    topic: str = optional()
    capability: str = optional()
    principal: str = optional()
    """The submitter."""
    priority: int = optional()
    labels: dict[str, str] = optional()
    """At most 64, values cut to 256 characters."""
    labels_truncated: bool = optional()
    input_preview: str | None = optional()
    """The job's ``ctx:`` payload, at most 4096 bytes of it; ``null`` when withheld."""
    input_truncated: bool = optional()
    input_size_bytes: int = optional()
    input_withheld: bool = optional()
    input_withheld_reason: str | None = optional()
    workflow_id: str = optional()
    run_id: str = optional()
    step_id: str = optional()


class ApprovalContextWhyGated(Body):
    rule_id: str | None = optional()
    reason: str | None = optional()
    snapshot: str | None = optional()
    decision: str | None = optional()
    constraints: dict[str, Any] | None = optional()


class ApprovalContextRisk(Body):
    risk_tags: list[str] = optional()
    requires: list[str] = optional()
    capability: str = optional()


class ApprovalContextCompensation(Body):
    """The saga compensation of a workflow step's job."""

    topic: str = optional()
    context_ptr: str | None = optional()


class ApprovalContextRollback(Body):
    hint: str | None = optional()
    compensation: ApprovalContextCompensation | None = optional()


class ApprovalContextTimeLeft(Body):
    expires_at: AwareDatetime | None = optional()
    remaining_ms: int | None = optional()


class ApprovalContext(Body):
    """What an approver needs about one job. A workflow approval gate's job also has its
    context document's fields (``kind`` workflow_approval_context, ``version``,
    ``workflow``, ``decision``)."""

    kind: str = optional()
    version: int = optional()
    workflow: ApprovalContextWorkflow = optional()
    decision: Any = optional()
    approval: ApprovalContextApproval = optional()
    policy_snapshot_summary: ApprovalContextPolicySummary = optional()
    blast_radius: ApprovalContextBlastRadius = optional()
    prior_approvals: list[ApprovalContextPriorApproval] = optional()
    """At most 10: the same topic, submitter and tenant, newest first."""
    rollback_hint: str | None = optional()
    time_remaining_ms: int | None = optional()
    """Until the job's deadline; ``null`` when it has none."""
    constraints: dict[str, Any] | None = optional()
    decision_summary: ApprovalContextDecisionSummary = optional()
    what_will_run: ApprovalContextWhatWillRun = optional()
    why_gated: ApprovalContextWhyGated = optional()
    risk: ApprovalContextRisk = optional()
    rollback: ApprovalContextRollback = optional()
    time_left: ApprovalContextTimeLeft = optional()


class ApprovalList(PaginatedResponse):
    items: list[ApprovalItem] = optional()
