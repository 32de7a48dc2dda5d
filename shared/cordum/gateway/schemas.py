"""Response bodies of the HTTP API, as Cordum's OpenAPI spec has them.

Field names, types, enums and nullability follow Cordum's published spec (the
one cordum-sdk parses). Every field is optional unless the spec requires it;
"optional" means it may be absent, and only the fields the spec marks nullable
may be ``null``. Extra fields are allowed: the gateway serves Cordum's own
extras beside the spec's fields.

Validate an answer with ``Model.model_validate_json(body, strict=True)``: in
strict JSON mode a date-time must be an RFC 3339 string with an offset (no
epoch integers) and an integer field refuses ``1.0``, as the SDK does.
``cordum.gateway.openapi`` builds the OpenAPI document from these models.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from cordum.gateway.models import no_default


def optional() -> Any:
    """May be absent. ``null`` is refused unless the annotation says ``X | None``."""
    return Field(default=None, json_schema_extra=no_default)


class Body(BaseModel):
    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)


class Error(Body):
    """Every 4xx/5xx answer."""

    error: str
    """Human-readable message."""
    code: str = optional()
    """Machine code, e.g. ``tenant_access_denied``, ``IDEMPOTENCY_CONFLICT``."""
    status: int
    """The HTTP status again."""


class SubmitJobResponse(Body):
    job_id: str = optional()
    trace_id: str = optional()


class JobSummary(Body):
    id: str = optional()
    state: str = optional()
    topic: str = optional()
    tenant: str = optional()
    updated_at: AwareDatetime = optional()


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


class CancelJobResponse(Body):
    id: str = optional()
    state: str = optional()
    """``CANCELLED``, or the terminal state the job had already reached."""


class JobIdResponse(Body):
    """Reject answers the job's id; a DLQ retry answers the new job's id."""

    job_id: str = optional()


class PaginatedResponse(Body):
    next_cursor: str | None = optional()
    """Pass as ``cursor`` for the next page; ``null`` when there is none."""


class JobList(PaginatedResponse):
    items: list[JobSummary] = optional()


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


class DLQEntry(Body):
    job_id: str = optional()
    topic: str = optional()
    tenant: str = optional()
    error: str = optional()
    failed_at: AwareDatetime = optional()
    retry_count: int = optional()
    original_state: str = optional()


class DLQPage(PaginatedResponse):
    items: list[DLQEntry] = optional()


class WorkerRuntime(Body):
    worker_id: str
    pool: str = optional()
    region: str = optional()
    type: str = optional()
    active_jobs: int = optional()
    max_parallel_jobs: int = optional()
    capabilities: list[str] = optional()
    cpu_load: float = optional()
    gpu_utilization: float = optional()
    memory_load: float = optional()
    labels: dict[str, str] = optional()
    last_heartbeat: AwareDatetime = optional()


class WorkerList(Body):
    items: list[WorkerRuntime]


class BuildInfo(Body):
    version: str = optional()
    commit: str = optional()
    date: str = optional()
    """A plain string, not a date-time, in the spec."""


class ConnectionStatus(Body):
    connected: bool = optional()
    url: str = optional()


class LicenseInfo(Body):
    valid: bool = optional()
    tier: str = optional()


class StatusResponse(Body):
    time: AwareDatetime = optional()
    uptime_seconds: float = optional()
    build: BuildInfo = optional()
    nats: ConnectionStatus = optional()
    redis: ConnectionStatus = optional()
    workers: int = optional()
    """Number of connected workers."""
    license: LicenseInfo | None = optional()


class HealthResponse(Body):
    """``/health`` and ``/api/v1/health``: JSON, as Cordum's gateway answers (200 or 503)."""

    status: Literal["healthy", "unhealthy"]
    redis: Any = optional()
    nats: Any = optional()
    error: str = optional()
    """What is down, when ``status`` is ``unhealthy``."""
