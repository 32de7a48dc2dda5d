"""The job hash that binds an approval to the exact request that was approved.

Approval bookkeeping (``approval_*`` labels, the bus message id, the policy
attachment) and the effective config injected by the scheduler are left out,
so approving a job does not change its hash, while any change to what the
job does (topic, payload pointer, other labels, budget, ...) does.
"""

from __future__ import annotations

import hashlib

from cordum import protocol

IGNORED_LABELS = ("cordum.bus_msg_id", "policy.attachment_id")
IGNORED_ENV = ("CORDUM_EFFECTIVE_CONFIG",)


def job_hash(req: protocol.JobRequest) -> str:
    clone = protocol.JobRequest()
    clone.CopyFrom(req)
    for key in list(clone.labels):
        if key.lower().startswith("approval_") or key in IGNORED_LABELS:
            del clone.labels[key]
    for key in IGNORED_ENV:
        clone.env.pop(key, None)
    return hashlib.sha256(clone.SerializeToString(deterministic=True)).hexdigest()


def snapshot_base(snapshot: str) -> str:
    """A policy snapshot id up to its first ``|`` (the part that names the policy)."""
    return snapshot.split("|", 1)[0]


APPROVAL_GATE_TOPICS = frozenset({"sys.approval.gate", "job.cordum.approval-gate"})
