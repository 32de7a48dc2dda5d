"""What counts as an approval: the record in the job's meta, never a label.

The one home of the approval-binding rule. The approve endpoint
(``ApprovalService._grant``) writes the record (:func:`grant_record`) under the
job lock, after checking that the job was gated (:func:`is_gated`), that the
approver is not the submitter and that the request and policy are those the
kernel judged (:func:`same_policy`); the engine's fast path honours it only
while it binds the request (:func:`approval_binds`). A request's
``approval_*`` labels are informational copies for workers; anyone who can
publish on ``sys.job.submit`` (or, before they were reserved, submit through
the API) could write them, so they grant nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cordum.scheduler.jobhash import APPROVAL_GATE_TOPICS, snapshot_base

if TYPE_CHECKING:
    from collections.abc import Mapping

APPROVED = "APPROVED"
REJECTED = "REJECTED"
STATUS_FIELD = "approval_status"
SNAPSHOT_FIELD = "approval_policy_snapshot"
"""The policy snapshot the approver approved under (Cordum's meta field name)."""
HASH_FIELD = "approval_job_hash"
"""The job hash of the request the approver approved (Cordum's meta field name)."""


def is_gated(meta: Mapping[str, str]) -> bool:
    """Whether the kernel's recorded verdict asked for a human."""
    return (meta.get("safety_decision") == "REQUIRE_APPROVAL"
            or meta.get("safety_approval_required") == "true")


def is_approved(meta: Mapping[str, str]) -> bool:
    """Whether the approve endpoint recorded an approval for the job."""
    return meta.get(STATUS_FIELD) == APPROVED


def same_policy(snapshot: str, other: str) -> bool:
    """Whether two policy snapshots name the same policy (the part before ``|``)."""
    return snapshot_base(snapshot) == snapshot_base(other)


def grant_record(meta: Mapping[str, str], snapshot: str) -> dict[str, str]:
    """The meta fields of an approval of the gated job whose meta is ``meta``, under
    the policy ``snapshot``: what :func:`approval_binds` checks."""
    return {STATUS_FIELD: APPROVED, SNAPSHOT_FIELD: snapshot,
            HASH_FIELD: meta.get("safety_job_hash", "")}


def approval_binds(meta: Mapping[str, str], topic: str, request_hash: str) -> bool:
    """Whether the job's recorded approval covers the request hashed ``request_hash``.

    It does when the job was gated and approved, the approved hash is the gated
    one and the request's, and (outside the approval-gate topics) the approved
    snapshot names the policy the job was judged under.
    """
    approved_hash = meta.get(HASH_FIELD, "")
    if not (is_approved(meta) and is_gated(meta) and approved_hash):
        return False
    if not approved_hash == meta.get("safety_job_hash") == request_hash:
        return False
    if topic in APPROVAL_GATE_TOPICS:
        return True
    snapshot = meta.get(SNAPSHOT_FIELD, "")
    return bool(snapshot) and same_policy(snapshot, meta.get("safety_snapshot", ""))
