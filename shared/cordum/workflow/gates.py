"""What opens a workflow gate: the approve endpoint's record on its gate job, nothing else.

An approval step, and the gate a ``policy_gate: require_approval`` puts in front of a
job step, each send a gate job (topic ``job.cordum.approval-gate``). Its SUCCEEDED
state alone proves nothing: a job's state is written by whoever ran it. The gate
opens only when the job's meta holds the record the approve endpoint writes under
the job lock (``cordum.gateway.approvals``), and that record:

- is on a gate topic (the scheduler never lets a gate topic through without one);
- says ``approval_status`` APPROVED;
- names an approver (``approved_by``) who is not the run's starter;
- was made for the request the engine sent: its ``approval_job_hash`` is the hash
  the engine recorded for the job when it sent it (:mod:`cordum.store.step_jobs`).

A policy gate also binds the input: the gate job carries the SHA-256 of the step's
rendered input (label :data:`INPUT_HASH_LABEL`, part of the hash the approval
binds), the step keeps that input, and its job carries exactly it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cordum.approval import APPROVAL_GATE_TOPICS, APPROVED

if TYPE_CHECKING:
    from cordum.workflow.model import WorkflowRun

INPUT_HASH_LABEL = "input_sha256"
"""The gate job's label with the SHA-256 of the input the approval is for."""
NOT_RECORDED = "approval_not_recorded"
"""The step error code of a gate job that ended SUCCEEDED without a valid approval."""
INPUT_CHANGED = "approval_input_changed"
"""The step error code of a gated step whose input is not the one approved."""


@dataclass(frozen=True, slots=True)
class GateRecord:
    """A gate job's approval as the job store holds it."""

    topic: str
    status: str
    approved_by: str
    approved_hash: str
    sent_hash: str
    """The hash of the request the engine sent under the job's id ('' when the
    engine's record of the job predates recorded hashes)."""


def refusal(record: GateRecord | None, run: WorkflowRun) -> str:
    """Why ``record`` does not open a gate of ``run`` ('' when it does)."""
    if record is None:
        return "the gate job's record could not be read"
    if record.topic not in APPROVAL_GATE_TOPICS:
        return f"the job under the gate's id has topic {record.topic!r}, not a gate topic"
    if record.status != APPROVED:
        return "no approval was recorded on the gate job"
    if not record.approved_by:
        return "the approval names no approver"
    if record.approved_by == run.triggered_by:
        return "the run's starter approved their own gate"
    if not record.approved_hash or (record.sent_hash
                                    and record.approved_hash != record.sent_hash):
        return "the approval was not made for the gate job the engine sent"
    return ""


def input_hash(value: Any) -> str:
    """SHA-256 hex of ``value`` as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
