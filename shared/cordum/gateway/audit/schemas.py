"""Response bodies of the audit routes (the conventions of
``cordum.gateway.core.schemas`` hold here too)."""

from __future__ import annotations

from typing import Any

from pydantic import AwareDatetime

from cordum.gateway.core.schemas import Body, PaginatedResponse, optional


class AuditEvent(Body):
    """One entry of the chain: its event's fields, ``seq`` and ``hash``."""

    seq: int = optional()
    hash: str = optional()
    """The entry's hash, lowercase hex (``""`` in a malformed entry)."""
    type: str = optional()
    """What happened, dotted (``approval.approve``, ``audit.read``)."""
    severity: str = optional()
    """CRITICAL, HIGH, MEDIUM, LOW or INFO."""
    tenant: str = optional()
    actor: str = optional()
    """The principal that acted."""
    actor_key: str = optional()
    """The id of the key it acted with."""
    at: int = optional()
    """µs since the epoch."""
    occurred_at: AwareDatetime = optional()
    """``at`` as RFC 3339."""
    job_id: str = optional()
    run_id: str = optional()
    workflow_id: str = optional()
    reason: str = optional()
    snapshot: Any = optional()
    extra: dict[str, Any] = optional()
    """Without the keys that name a secret (secret, token, password, api_key, private_key)."""
    malformed: bool = optional()
    """True when the stored event is not a JSON object (see the verify route)."""


class AuditEventPage(PaginatedResponse):
    items: list[AuditEvent] = optional()
    returned: int = optional()
    """How many items this page holds (it may be short of ``limit`` with a
    ``next_cursor``: the scan bound)."""


class AuditGap(Body):
    at_seq: int = optional()
    type: str = optional()
    """missing, out_of_order, duplicate, hash_mismatch, hmac_mismatch, hmac_missing,
    broken_link, bad_genesis, malformed, head_missing or head_mismatch."""
    count: int = optional()
    """How many seqs from ``at_seq`` on (a range of missing entries)."""


class AuditVerifyResult(Body):
    status: str = optional()
    """ok, partial (checked from an export mark) or compromised."""
    tenant: str = optional()
    total_events: int = optional()
    verified_events: int = optional()
    first_seq: int = optional()
    last_seq: int = optional()
    gaps: list[AuditGap] = optional()
    gaps_truncated: bool = optional()
    hmac_verified: bool = optional()
    exported_through_seq: int | None = optional()
    """The export mark the check started from; null when it started at seq 1."""
    exported: dict[str, Any] | None = optional()
    """The check of the exported objects; null while it is not made here."""
    checked_at: AwareDatetime = optional()


class AuditHold(Body):
    tenant: str = optional()
    held: bool = optional()
    by: str = optional()
    """The principal that set the hold."""
    at: str = optional()
    """When it was set, RFC 3339."""
    reason: str = optional()
    cleared: bool = optional()
    """On DELETE: whether a hold was there to clear."""
