"""Response bodies of the job routes, as Cordum's spec has them (the conventions of
``cordum.gateway.core.schemas`` hold here too)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AwareDatetime

from cordum.gateway.core.schemas import Body, JobSummary, PaginatedResponse, optional

SafetyAction = Literal["ALLOW", "DENY", "REQUIRE_APPROVAL", "THROTTLE",
                       "ALLOW_WITH_CONSTRAINTS", "UNAVAILABLE"]


class SafetyDecision(Body):
    rule_id: str = optional()
    action: SafetyAction = optional()
    reason: str = optional()
    constraints: dict[str, Any] | None = optional()
    evaluated_at: AwareDatetime = optional()


class DelegationChainLink(Body):
    agent_id: str = optional()
    issued_at: AwareDatetime = optional()
    expires_at: AwareDatetime = optional()
    jti: str = optional()
    parent_jti: str = optional()


class DelegationLineageView(Body):
    jti: str = optional()
    audience: str = optional()
    root_issuer: str = optional()
    parent_issuer: str = optional()
    chain_depth: int = optional()
    chain: list[DelegationChainLink] = optional()
    scope: list[str] = optional()
    expires_at: AwareDatetime = optional()
    verified_at: int = optional()
    """Epoch (int64), the spec's one integer timestamp."""
    reverified_at_dispatch: bool = optional()


class JobDetail(JobSummary):
    trace_id: str = optional()
    prompt: str = optional()
    context_ptr: str | None = optional()
    result_ptr: str | None = optional()
    result: dict[str, Any] | None = optional()
    capability: str = optional()
    risk_tags: list[str] = optional()
    labels: dict[str, str] = optional()
    adapter_id: str = optional()
    priority: int = optional()
    """1 interactive, 2 batch, 3 critical (the request's string, as stored)."""
    created_at: AwareDatetime = optional()
    started_at: AwareDatetime | None = optional()
    completed_at: AwareDatetime | None = optional()
    error: str | None = optional()
    retry_count: int = optional()
    decisions: list[SafetyDecision] | None = optional()
    delegation: DelegationLineageView = optional()
    effective_config: dict[str, Any] = optional()
    """The effective config the job carries (``{version, hash, data}``), when a config
    document applied to it at submit."""
    safety_remediations: list[dict[str, Any]] = optional()
    """The remediations the policy's decision offered (``{id, title, summary,
    replacement_topic, replacement_capability, add_labels, remove_labels}``); [] when
    it offered none. ``POST /api/v1/jobs/{id}/remediate`` applies one by its id."""


class CancelJobResponse(Body):
    id: str = optional()
    state: str = optional()
    """``CANCELLED``, or the terminal state the job had already reached."""


class JobList(PaginatedResponse):
    items: list[JobSummary] = optional()
