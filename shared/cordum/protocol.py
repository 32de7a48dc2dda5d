"""CAP wire types, subjects and packet helpers.

The protobuf classes come from ``cap-sdk-python``. Its package ``__init__``
imports the whole SDK (runtime, redis.asyncio, nats, cryptography), about
500 ms of cold start that a Lambda function never uses, so only the
generated ``*_pb2`` modules are loaded, and ``cap`` itself is never imported.
"""

from __future__ import annotations

import importlib.util
import os
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any


def _attach_cap_stubs() -> None:
    # The generated modules import each other as ``cordum.agent.v1.*``: CAP's
    # SDK puts its ``pb`` folder on sys.path for that, which would shadow this
    # very package. Instead, its ``pb/cordum`` folder joins our package path,
    # so ``cordum.agent`` resolves to the stubs and ``cap/__init__`` never runs.
    spec = importlib.util.find_spec("cap")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("cap-sdk-python is not installed (package 'cap' not found)")
    import cordum

    for location in spec.submodule_search_locations:
        stubs = os.path.join(location, "pb", "cordum")
        if os.path.isdir(stubs) and stubs not in cordum.__path__:
            cordum.__path__.append(stubs)


_attach_cap_stubs()

from cordum.agent.v1 import alert_pb2, buspacket_pb2, heartbeat_pb2, job_pb2  # noqa: E402

if TYPE_CHECKING:
    # The generated modules ship without stubs: the type checker sees open
    # message classes (any field, any method).
    class _Message:
        def __init__(self, **fields: Any) -> None: ...
        def __getattr__(self, name: str) -> Any: ...
        def __setattr__(self, name: str, value: Any) -> None: ...

    class BusPacket(_Message): ...

    class JobRequest(_Message): ...

    class JobResult(_Message): ...

    class JobCancel(_Message): ...

    class Heartbeat(_Message): ...

    class JobProgress(_Message): ...

    class SystemAlert(_Message): ...

else:
    BusPacket = buspacket_pb2.BusPacket
    JobRequest = job_pb2.JobRequest
    JobResult = job_pb2.JobResult
    JobCancel = job_pb2.JobCancel
    Heartbeat = heartbeat_pb2.Heartbeat
    JobProgress = job_pb2.JobProgress
    SystemAlert = alert_pb2.SystemAlert
JobStatus = job_pb2.JobStatus
JobPriority = job_pb2.JobPriority

PROTOCOL_VERSION = 1

SUBJECT_SUBMIT = "sys.job.submit"
SUBJECT_RESULT = "sys.job.result"
SUBJECT_CANCEL = "sys.job.cancel"
SUBJECT_HEARTBEAT = "sys.heartbeat"
SUBJECT_DLQ = "sys.job.dlq"
SUBJECT_PROGRESS = "sys.job.progress"
SUBJECT_AUDIT_OUTPUT = "sys.audit.output_policy"
SUBJECT_WORKFLOW_EVENT = "sys.workflow.event"
SUBJECT_WORKFLOW_RUN = "sys.workflow.run"
"""Our own: a run's status and timeline after each change, as JSON (not a BusPacket:
Cordum sends no run events), for the live stream (cordum.stream)."""

SENDER_GATEWAY = "api-gateway-http"
SENDER_SCHEDULER = "cordum-scheduler"
SENDER_WORKFLOW = "workflow-engine"
"""Sender of what the workflow engine publishes, and requester of its JobCancels."""

CONTEXT_PREFIX = "ctx:"
RESULT_PREFIX = "res:"
POINTER_SCHEME = "redis://"


def direct_subject(worker_id: str) -> str:
    """The subject a single worker receives its jobs on."""
    return f"worker.{worker_id}.jobs"


def worker_of_subject(subject: str) -> str:
    """``worker.<id>.jobs`` -> ``<id>``; "" for any other subject."""
    if subject.startswith("worker.") and subject.endswith(".jobs"):
        return subject[len("worker.") : -len(".jobs")]
    return ""


def context_key(job_id: str) -> str:
    return CONTEXT_PREFIX + job_id


def result_key(job_id: str) -> str:
    return RESULT_PREFIX + job_id


def pointer(key: str) -> str:
    return POINTER_SCHEME + key


def key_from_pointer(ptr: str) -> str:
    """``redis://ctx:abc`` -> ``ctx:abc``; a bare key is returned as is."""
    return ptr[len(POINTER_SCHEME) :] if ptr.startswith(POINTER_SCHEME) else ptr


def new_id() -> str:
    return str(uuid.uuid4())


def packet(
    *,
    trace_id: str,
    sender_id: str,
    job_request: JobRequest | None = None,
    job_result: JobResult | None = None,
    job_cancel: JobCancel | None = None,
    heartbeat: Heartbeat | None = None,
    job_progress: JobProgress | None = None,
    alert: SystemAlert | None = None,
) -> BusPacket:
    """A BusPacket that CAP workers accept: trace, sender, created_at, version 1."""
    msg = BusPacket(trace_id=trace_id, sender_id=sender_id, protocol_version=PROTOCOL_VERSION)
    msg.created_at.FromNanoseconds(time.time_ns())
    if job_request is not None:
        msg.job_request.CopyFrom(job_request)
    elif job_result is not None:
        msg.job_result.CopyFrom(job_result)
    elif job_cancel is not None:
        msg.job_cancel.CopyFrom(job_cancel)
    elif heartbeat is not None:
        msg.heartbeat.CopyFrom(heartbeat)
    elif job_progress is not None:
        msg.job_progress.CopyFrom(job_progress)
    elif alert is not None:
        msg.alert.CopyFrom(alert)
    return msg


class InvalidPacket(ValueError):
    """A packet that can never be processed: it is dropped (and acked), never retried."""


@dataclass(frozen=True, slots=True)
class Decoded:
    packet: BusPacket
    kind: str  # the payload oneof: job_request, job_result, job_cancel, heartbeat, ...


def decode(data: bytes) -> Decoded:
    """Parse and validate the envelope as Cordum's bus does (trace, sender, version, payload)."""
    msg = BusPacket()
    try:
        msg.ParseFromString(data)
    except Exception as exc:  # protobuf raises DecodeError, sometimes others
        raise InvalidPacket(f"not a BusPacket: {exc}") from exc
    problems = []
    if not msg.trace_id:
        problems.append("trace_id is empty")
    if not msg.sender_id:
        problems.append("sender_id is empty")
    if msg.protocol_version <= 0:
        problems.append("protocol_version must be > 0")
    if not msg.HasField("created_at"):
        problems.append("created_at is missing")
    kind = msg.WhichOneof("payload")
    if kind is None:
        problems.append("payload is empty")
    if problems:
        raise InvalidPacket("; ".join(problems))
    return Decoded(packet=msg, kind=kind or "")


def validate_job_request(req: JobRequest) -> None:
    """Cordum's ValidateJobRequest: raises InvalidPacket naming every problem."""
    problems = []
    if not req.job_id.strip():
        problems.append("job_id is empty")
    if not req.topic.strip():
        problems.append("topic is empty")
    if not 0 <= req.priority <= 3:
        problems.append(f"priority {req.priority} outside 0..3")
    if req.step_index < 0:
        problems.append("step_index < 0")
    for name, size in (
        ("labels", len(req.labels)),
        ("risk_tags", len(req.meta.risk_tags)),
        ("requires", len(req.meta.requires)),
    ):
        if size > 1000:
            problems.append(f"{name} has {size} entries (max 1000)")
    budget = req.budget
    for name in ("max_input_tokens", "max_output_tokens", "max_total_tokens", "deadline_ms"):
        value = getattr(budget, name)
        if value < 0 or value > 10_000_000_000:
            problems.append(f"budget.{name}={value} outside 0..1e10")
    if problems:
        raise InvalidPacket("invalid job request: " + "; ".join(problems))


def validate_job_result(res: JobResult) -> None:
    problems = []
    if not res.job_id:
        problems.append("job_id is empty")
    if res.status == JobStatus.JOB_STATUS_UNSPECIFIED:
        problems.append("status is unspecified")
    if not res.worker_id:
        problems.append("worker_id is empty")
    if res.execution_ms < 0:
        problems.append("execution_ms < 0")
    if problems:
        raise InvalidPacket("invalid job result: " + "; ".join(problems))
