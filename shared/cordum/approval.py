"""What counts as an approval: the record in the job's meta, bound by the job hash.

The one home of the approval-binding rule, shared by the three parts that meet it: the
approve endpoint writes the record, the scheduler honours it, and the workflow's gates
open on it (none of them owns it; the scheduler and the workflow engine do not import
each other).

The job hash binds an approval to the exact request that was approved. Approval
bookkeeping (``approval_*`` labels, the bus message id, the policy attachment) and the
effective config injected by the scheduler are left out, so approving a job does not
change its hash, while any change to what the job does (topic, payload pointer, other
labels, budget, ...) does.

The approve endpoint (``ApprovalService._grant``) writes the record
(:func:`grant_record`) under the job lock, after checking that the job was gated
(:func:`is_gated`), that the approver is not the submitter and that the request and
policy are those the kernel judged (:func:`same_policy`); the engine's fast path
honours it only while it binds the request (:func:`approval_binds`). A request's
``approval_*`` labels are informational copies for workers; anyone who can publish on
``sys.job.submit`` (or, before they were reserved, submit through the API) could write
them, so they grant nothing.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from cordum import protocol

if TYPE_CHECKING:
    from collections.abc import Mapping

IGNORED_LABELS = ("cordum.bus_msg_id", "policy.attachment_id")
IGNORED_ENV = ("CORDUM_EFFECTIVE_CONFIG",)

APPROVAL_GATE_TOPICS = frozenset({"sys.approval.gate", "job.cordum.approval-gate"})

APPROVED = "APPROVED"
REJECTED = "REJECTED"
STATUS_FIELD = "approval_status"
SNAPSHOT_FIELD = "approval_policy_snapshot"
"""The policy snapshot the approver approved under (Cordum's meta field name)."""
HASH_FIELD = "approval_job_hash"
"""The job hash of the request the approver approved (Cordum's meta field name)."""


def job_hash(req: protocol.JobRequest) -> str:
    clone = protocol.JobRequest()
    clone.CopyFrom(req)
    for key in list(clone.labels):
        if key.lower().startswith("approval_") or key in IGNORED_LABELS:
            del clone.labels[key]
    for key in IGNORED_ENV:
        clone.env.pop(key, None)
    return hashlib.sha256(clone.SerializeToString(deterministic=True)).hexdigest()


def is_gated(meta: Mapping[str, str]) -> bool:
    """Whether the kernel's recorded verdict asked for a human."""
    return (meta.get("safety_decision") == "REQUIRE_APPROVAL"
            or meta.get("safety_approval_required") == "true")


def is_approved(meta: Mapping[str, str]) -> bool:
    """Whether the approve endpoint recorded an approval for the job."""
    return meta.get(STATUS_FIELD) == APPROVED


def same_policy(snapshot: str, other: str) -> bool:
    """Whether two policy snapshots name the same policy in force: the base file and
    the bundles (``<base>|cfg:<hash>``, cordum.safety.bundles). Cordum compares the
    base alone, so a job approved before a bundle denied its topic would still run;
    here a bundle change between the verdict and the approval is a stale snapshot,
    and one after it sends the job back to the kernel at dispatch."""
    return snapshot == other


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
