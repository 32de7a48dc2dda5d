"""Response bodies of the policy routes (the conventions of
``cordum.gateway.core.schemas`` hold here too). Times are RFC 3339 text as stored;
a kernel decision keeps Cordum's camel-case protojson names beside cordum-sdk's
snake-case ones."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from cordum.gateway.core.models import no_default
from cordum.gateway.core.schemas import Body, optional


class PolicyBundleItem(Body):
    id: str = optional()
    enabled: bool = optional()
    source: str = optional()
    """secops (``secops/*``), pack (another id with ``/``) or core."""
    author: str = optional()
    """The principal id of the key that last wrote the bundle."""
    message: str = optional()
    created_at: str | None = optional()
    updated_at: str | None = optional()
    sha256: str = optional()
    """Hex SHA-256 of the content."""
    rule_count: int = optional()
    """Top-level ``rules`` of the content."""


class PolicyBundle(PolicyBundleItem):
    content: str = optional()
    """The bundle's policy YAML."""


class PolicyBundleList(Body):
    bundles: list[PolicyBundle] = optional()
    """The items with their content (Cordum's server sends a map id -> bundle here,
    which cordum-sdk cannot read)."""
    items: list[PolicyBundleItem] = optional()
    updated_at: str = optional()
    """When the bundles last changed; absent when none was ever written."""


class PolicyBundleWritten(Body):
    id: str = optional()
    updated_at: str = optional()
    enabled: bool = optional()
    """false: stored as a draft, in force once published."""


class PolicySnapshotSummary(Body):
    id: str = optional()
    """``<RFC 3339>-<first 10 hex of the SHA-256 of the bundles' canonical JSON>``."""
    created_at: str = optional()
    note: str = optional()
    author: str = optional()
    bundle_ids: list[str] = optional()


class PolicySnapshotList(Body):
    items: list[PolicySnapshotSummary] = optional()
    """Newest first, at most 10."""


class PolicySnapshot(PolicySnapshotSummary):
    bundles: dict[str, Any] = optional()
    """The bundles map as it was."""


class _InForce(Body):
    """The snapshot in force after the change, as cordum-sdk reads it (a PolicySnapshot)."""

    id: str = optional()
    """= snapshot_after."""
    created_at: str = optional()
    author: str = optional()
    note: str = optional()
    bundle_ids: list[str] = optional()


class PolicyPublishResult(_InForce):
    snapshot_before: str = optional()
    """"" when there were no bundles."""
    snapshot_after: str = optional()
    published: list[str] = optional()


class PolicyRollbackResult(_InForce):
    snapshot_before: str = optional()
    snapshot_after: str = optional()
    rollback_to: str = optional()


class PolicyAuditEntry(Body):
    id: str = optional()
    action: str = optional()
    """edit, delete, snapshot, publish or rollback."""
    resource_type: str = optional()
    resource_id: str = optional()
    actor_id: str = optional()
    """The principal id of the caller's key (never taken from a body)."""
    actor_tenant: str = optional()
    role: str = optional()
    bundle_ids: list[str] = optional()
    message: str = optional()
    snapshot_before: str = optional()
    snapshot_after: str = optional()
    revision: int = optional()
    created_at: str = optional()
    author: str = optional()
    """actor_id again, as cordum-sdk reads it."""
    timestamp: str = optional()
    """created_at again, as cordum-sdk reads it."""
    bundle_id: str | None = optional()
    """The bundle changed, else the first of bundle_ids."""
    snapshot_id: str | None = optional()
    """snapshot_after again; null when none."""


class PolicyProposal(Body):
    """A change of the bundles in force that waits for a second person's confirmation."""

    id: str = optional()
    action: str = optional()
    """edit, delete, publish or rollback."""
    bundle_ids: list[str] = optional()
    snapshot_id: str | None = optional()
    """The snapshot a rollback restores."""
    enabled: bool | None = optional()
    """An edit's ``enabled``, as sent."""
    content_sha256: str | None = optional()
    """The SHA-256 of an edit's content."""
    message: str = optional()
    note: str = optional()
    proposed_by: str = optional()
    """The author's principal id: the one identity that may not confirm it."""
    proposed_at: str = optional()
    expires_at: str = optional()
    base_revision: int = optional()
    """The revision of the policy it was worked out on; confirming needs the same."""
    state: str = optional()


class PolicyProposalPending(Body):
    """202: the change is kept as a proposal until another identity confirms it."""

    proposal: PolicyProposal = optional()
    status: str = optional()
    """pending_confirmation."""


class PolicyProposalList(Body):
    items: list[PolicyProposal] = optional()
    """Oldest first, at most 20."""


class PolicyProposalConfirmed(Body):
    """The confirmed change's own answer (as publish, rollback or PUT answer it), and
    who proposed and who confirmed it."""

    proposal_id: str = optional()
    proposed_by: str = optional()
    confirmed_by: str = optional()


class PolicyProposalRejected(Body):
    id: str = optional()
    state: str = optional()
    rejected_by: str = optional()


class PolicyRuleList(Body):
    items: list[dict[str, Any]] = optional()
    """Each rule as its bundle writes it, with ``source`` {bundle_id, fragment_id,
    enabled, sha256}."""
    errors: list[dict[str, Any]] = optional()
    """Bundles whose content could not be read; absent when there are none."""


class PolicyKernelSnapshot(Body):
    """One of the kernel's policy snapshots (the list is newest first)."""

    id: str = optional()
    """``<base file hash>|cfg:<bundles hash>``, as decisions name it."""
    in_force: bool = optional()
    """The first one: the policy the kernel decides under now."""


def _camel(name: str, description: str) -> Any:
    return Field(default=None, alias=name, json_schema_extra=no_default,
                 description=description)


class PolicyDecision(Body):
    """The kernel's PolicyCheckResponse as protojson (Cordum's names), plus ``rule_id``
    and ``policy_snapshot``."""

    decision: str = optional()
    """ALLOW, DENY, REQUIRE_APPROVAL, THROTTLE or ALLOW_WITH_CONSTRAINTS."""
    decision_type: str = optional()
    """The protojson name: DECISION_TYPE_ALLOW, _DENY, _REQUIRE_HUMAN, _THROTTLE or
    _ALLOW_WITH_CONSTRAINTS."""
    reason: str = optional()
    rule_id_camel: str = _camel("ruleId", "The rule (or gate) that decided.")
    policy_snapshot_camel: str = _camel("policySnapshot", "The policy that decided.")
    approval_required: bool = _camel("approvalRequired", "A person must approve the job.")
    approval_ref: str = _camel("approvalRef", "The job id, when approval is required.")
    redacted_context_ptr: str = _camel("redactedContextPtr", "Unused here.")
    constraints: dict[str, Any] | None = optional()
    remediations: list[dict[str, Any]] = optional()
    rule_id: str = optional()
    """ruleId again, as cordum-sdk reads it."""
    policy_snapshot: str = optional()
    """policySnapshot again, as cordum-sdk reads it."""


# -- replay and analytics ---------------------------------------------------------------

class PolicyTimeRange(Body):
    from_: str = Field(default="", alias="from", json_schema_extra=no_default)
    to: str = optional()


class PolicyReplaySummary(Body):
    total_jobs: int = optional()
    """Jobs of the tenant looked at that passed the filters."""
    evaluated: int = optional()
    escalated: int = optional()
    relaxed: int = optional()
    unchanged: int = optional()
    errored: int = optional()
    """Jobs whose stored request could not be read."""
    scanned: int = optional()
    """Index entries looked at (the max_jobs bound counts these)."""


class PolicyRuleHit(Body):
    rule_id: str = optional()
    decision: str = optional()
    count: int = optional()


class PolicyReplayChange(Body):
    job_id: str = optional()
    topic: str = optional()
    tenant: str = optional()
    original_decision: str = optional()
    """What the policy recorded (empty: ALLOW; an approved job's: REQUIRE_APPROVAL)."""
    new_decision: str = optional()
    new_rule_id: str = optional()
    new_reason: str = optional()
    direction: str = optional()
    """escalated or relaxed."""
    kind: str = optional()
    """allow_to_deny, deny_to_allow, newly_gated (now REQUIRE_APPROVAL) or other."""
    at: str | None = optional()
    """The job's last state change (the window is over these)."""


class PolicyReplayResult(Body):
    replay_id: str = optional()
    policy_snapshot: str = optional()
    tenant: str = optional()
    time_range: PolicyTimeRange = optional()
    summary: PolicyReplaySummary = optional()
    """This call's jobs only: a client sums the pages."""
    rule_hits: list[PolicyRuleHit] = optional()
    """Most hits first."""
    changes: list[PolicyReplayChange] = optional()
    """Newest job first, at most ``limit``."""
    warnings: list[str] = optional()
    errors: list[dict[str, Any]] = optional()
    truncated: bool = optional()
    """A bound stopped the scan: continue with next_cursor."""
    stopped_by: str | None = optional()
    """limit, max_jobs or deadline; null when the window was read to its end."""
    next_cursor: str | None = optional()
    order: str = optional()
    """newest_first."""


class PolicyLatencyBucket(Body):
    le_ms: int | None = optional()
    """The bucket's upper bound; null for +inf."""
    count: int = optional()
    """Answers at or under le_ms (cumulative)."""


class PolicyRuleAnalytics(Body):
    rule_id: str = optional()
    hit_count: int = optional()
    approval_count: int = optional()
    """Jobs the rule sent to a person."""
    approved_count: int = optional()
    rejected_count: int = optional()
    override_count: int = optional()
    """Approvals: a person let run what the policy held back."""
    override_rate: float = optional()
    avg_approval_latency_ms: float | None = optional()
    approval_latency_histogram: list[PolicyLatencyBucket] = optional()
    daily_hits: list[dict[str, Any]] = optional()


class PolicyAnalyticsSummary(Body):
    total_rules: int = optional()
    total_hits: int = optional()
    approvals_asked: int = optional()
    approved: int = optional()
    rejected: int = optional()
    total_overrides: int = optional()
    override_rate: float = optional()
    avg_approval_latency_ms: float | None = optional()
    approval_latency_histogram: list[PolicyLatencyBucket] = optional()
    highest_override_rule_id: str | None = optional()


class PolicyAnalyticsResult(Body):
    tenant: str = optional()
    time_range: PolicyTimeRange = optional()
    rules: list[PolicyRuleAnalytics] = optional()
    """Most hits first."""
    summary: PolicyAnalyticsSummary = optional()
    scanned: int = optional()
    truncated: bool = optional()
    """More than 10,000 jobs, or the time bound: the figures cover the newest ones."""
