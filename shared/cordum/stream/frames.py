"""What a tapped bus message becomes on the stream: its type and its frame.

Frames are Cordum's: a BusPacket in protojson with ``json_format.MessageToDict``'s
defaults (lowerCamelCase, the payload's key at the top level, ``createdAt`` in RFC
3339, int64 as strings, enum names), after ``authToken`` and ``signature`` are cleared:
a stream client is no party to the bus's credentials.

Pointers: a frame shows a result pointer only where the API would
(``cordum.store.results.served_result_ptr``). A ``jobResult`` carries the pointer
the platform serves for the job, or none (with no ``artifactPtrs``/``artifactRefs``);
its ``resultRef`` (a CAP resource ref the platform never checks) never goes out. A
``jobProgress`` carries no pointer at all: progress output is never scanned.

Pure functions; the writer (``cordum.stream.writer``) reads the job's meta and calls
them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format

from cordum import protocol
from cordum.store.jobs import JobState
from cordum.stream import events as ev

if TYPE_CHECKING:
    from collections.abc import Mapping

SUBJECT_WORKFLOW_RUN = protocol.SUBJECT_WORKFLOW_RUN
"""Workflow run status events (JSON, published by the workflow engine's outbox)."""
SUBJECT_AUDIT = "sys.audit"

TAP_SUBJECTS = ("sys.job.>", protocol.SUBJECT_HEARTBEAT, f"{SUBJECT_AUDIT}.>",
                protocol.SUBJECT_WORKFLOW_EVENT, SUBJECT_WORKFLOW_RUN)

MAX_RUN_EVENT_BYTES = 256 * 1024
"""A workflow run event larger than this is dropped. The engine's carry at most 50
timeline events (a few hundred bytes each); the bound keeps one event's copy in each
tenant log entry and in the message between replicas far under NATS's 1 MiB payload."""

SUBJECT_TYPES = {
    protocol.SUBJECT_SUBMIT: ev.JOB_SUBMIT,
    protocol.SUBJECT_RESULT: ev.JOB_RESULT,
    protocol.SUBJECT_PROGRESS: ev.JOB_PROGRESS,
    protocol.SUBJECT_CANCEL: ev.JOB_CANCEL,
    protocol.SUBJECT_DLQ: ev.JOB_DLQ,
    protocol.SUBJECT_HEARTBEAT: ev.WORKER_HEARTBEAT,
    protocol.SUBJECT_WORKFLOW_EVENT: ev.SYSTEM_ALERT,
    protocol.SUBJECT_AUDIT_OUTPUT: ev.AUDIT_OUTPUT,
}
PAYLOADS = {
    ev.JOB_SUBMIT: "job_request",
    ev.JOB_RESULT: "job_result",
    ev.JOB_PROGRESS: "job_progress",
    ev.JOB_CANCEL: "job_cancel",
    ev.JOB_DLQ: "job_result",
    ev.WORKER_HEARTBEAT: "heartbeat",
    ev.SYSTEM_ALERT: "alert",
    ev.AUDIT_OUTPUT: "job_progress",
}
"""The payload each type must carry; a packet with another is dropped."""
JOB_TYPES = frozenset({ev.JOB_SUBMIT, ev.JOB_RESULT, ev.JOB_PROGRESS, ev.JOB_CANCEL,
                       ev.JOB_DLQ, ev.AUDIT_OUTPUT})

STATUS_OF_STATE = {
    JobState.SUCCEEDED: "JOB_STATUS_SUCCEEDED",
    JobState.FAILED: "JOB_STATUS_FAILED",
    JobState.CANCELLED: "JOB_STATUS_CANCELLED",
    JobState.TIMEOUT: "JOB_STATUS_TIMEOUT",
    JobState.DENIED: "JOB_STATUS_DENIED",
    JobState.OUTPUT_QUARANTINED: "JOB_STATUS_DENIED",
}
"""A terminal state as CAP's JobStatus (CAP has no quarantine status: its output policy
reports a withheld output as DENIED)."""

_POINTER_FIELDS = ("resultPtr", "artifactPtrs", "resultRef", "artifactRefs")
_PAYLOAD_KEYS = {"job_result": "jobResult", "job_progress": "jobProgress"}


@dataclass(frozen=True, slots=True)
class Tapped:
    """A bus message read: its type and frame, and what the packet itself claims."""

    type: str
    frame: dict[str, Any]
    job_id: str = ""
    claimed_tenant: str = ""
    """The packet's own word: a request's tenantId (or meta.tenantId), a workflow run
    event's tenantId, an alert's envelope identity. The writer checks a job's against
    the job's meta."""
    topic: str = ""
    run_id: str = ""


def event_type(subject: str, kind: str) -> str | None:
    """The stream type of a message on ``subject`` with payload ``kind``; None: not ours."""
    found = SUBJECT_TYPES.get(subject)
    if found is None and subject.startswith(SUBJECT_AUDIT + ".") and kind == "alert":
        found = ev.SYSTEM_ALERT  # other audit streams (Cordum's SIEM export) are alerts
    if found is None or PAYLOADS[found] != kind:
        return None
    return found


def packet_frame(packet: protocol.BusPacket) -> dict[str, Any]:
    clean = protocol.BusPacket()
    clean.CopyFrom(packet)
    clean.ClearField("auth_token")
    clean.ClearField("signature")
    return json_format.MessageToDict(clean)


def read_packet(subject: str, data: bytes) -> Tapped | None:
    """A tapped BusPacket as a frame; None for anything that is not one of ours
    (``protocol.InvalidPacket`` for a malformed one)."""
    decoded = protocol.decode(data)
    kind = decoded.kind
    type_ = event_type(subject, kind)
    if type_ is None:
        return None
    packet = decoded.packet
    frame = packet_frame(packet)
    if type_ == ev.JOB_SUBMIT:
        req = packet.job_request
        return Tapped(type_, frame, job_id=req.job_id, topic=req.topic,
                      claimed_tenant=req.tenant_id or req.meta.tenant_id,
                      run_id=ev.run_of(req.job_id))
    if type_ in JOB_TYPES:
        job_id = getattr(packet, kind).job_id
        if type_ in (ev.JOB_PROGRESS, ev.AUDIT_OUTPUT):
            strip_pointers(frame, kind)
        return Tapped(type_, frame, job_id=job_id, run_id=ev.run_of(job_id))
    if type_ == ev.SYSTEM_ALERT:
        return Tapped(type_, frame, claimed_tenant=packet.identity.tenant_id)
    return Tapped(type_, frame)


def read_run_event(data: bytes) -> Tapped | None:
    """A workflow run event (JSON), forwarded as it is; None when it is not one."""
    if len(data) > MAX_RUN_EVENT_BYTES:
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("type") != ev.WORKFLOW_RUN:
        return None
    tenant, run_id = doc.get("tenantId"), doc.get("runId")
    if not isinstance(tenant, str) or not isinstance(run_id, str) or not run_id:
        return None
    return Tapped(ev.WORKFLOW_RUN, doc, claimed_tenant=tenant, run_id=run_id)


def strip_pointers(frame: dict[str, Any], kind: str) -> None:
    payload = frame.get(_PAYLOAD_KEYS.get(kind, ""))
    if isinstance(payload, dict):
        for name in _POINTER_FIELDS:
            payload.pop(name, None)


def settle_result(frame: dict[str, Any], state: str | None, served: str | None) -> None:
    """A ``jobResult`` frame as the platform decided it: ``state`` (a terminal state,
    None when it is not known yet) as its status, ``served`` as its only pointer."""
    payload = frame.get("jobResult")
    if not isinstance(payload, dict):
        return
    payload.pop("resultRef", None)
    if state is not None and state in STATUS_OF_STATE:
        payload["status"] = STATUS_OF_STATE[JobState(state)]
    if served is None:
        strip_pointers(frame, "job_result")
    else:
        payload["resultPtr"] = served


def is_terminal(meta: Mapping[str, str]) -> bool:
    try:
        return JobState(meta.get("state", "")).terminal
    except ValueError:
        return False
