"""One stream event: its type, frame and tenant, its id in the tenant's log, the
facts the filters read, and its three encodings (the internal NATS message, the log
entry, the filters' view).

Event ids are the Redis stream ids of the tenant's log (``<ms>-<seq>``), increasing
within a tenant; an event of no tenant (a heartbeat, an alert of no tenant) has none
and is never resumed.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from cordum.step_job_ids import parse_step_job_id
from cordum.stream.errors import InvalidRequest

if TYPE_CHECKING:
    from collections.abc import Mapping

JOB_SUBMIT = "job.submit"
JOB_RESULT = "job.result"
JOB_PROGRESS = "job.progress"
JOB_CANCEL = "job.cancel"
JOB_DLQ = "job.dlq"
WORKER_HEARTBEAT = "worker.heartbeat"
SYSTEM_ALERT = "system.alert"
AUDIT_OUTPUT = "audit.output_policy"
WORKFLOW_RUN = "workflow.run"
JOB_STATE = "job.state"
"""The per-job stream's first event: the job as ``GET /api/v1/jobs/{id}`` serves it."""
STREAM_TRUNCATED = "stream.truncated"
"""A resume that could not replay everything since the client's id says so."""

PACKET_TYPES = frozenset({JOB_SUBMIT, JOB_RESULT, JOB_PROGRESS, JOB_CANCEL, JOB_DLQ,
                          WORKER_HEARTBEAT, SYSTEM_ALERT, AUDIT_OUTPUT})
"""Types whose frame is a BusPacket in protojson."""
EVENT_TYPES = PACKET_TYPES | {WORKFLOW_RUN}
"""What the taps produce; the ``types`` filter accepts these (and the two notices)."""
NOTICE_TYPES = frozenset({JOB_STATE, STREAM_TRUNCATED})
"""Made by the service for one client; no filter removes them."""

MAX_FILTER_CHARS = 256
"""A filter value longer than this is refused (a glob is matched per event)."""
MAX_TYPES = 32
ID_PATTERN = re.compile(r"^(\d{1,20})(?:-(\d{1,20}))?$")
ADMIN_TOKEN = "_admin"
"""The subject token of events of no tenant (they go to admin keys only)."""
_SAFE_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


def parse_id(value: str) -> tuple[int, int]:
    """``<ms>-<seq>`` (or ``<ms>``) as a pair that orders like the log; ValueError else."""
    found = ID_PATTERN.match(value.strip())
    if found is None:
        raise ValueError(f"not an event id: {value[:40]!r}")
    return int(found.group(1)), int(found.group(2) or 0)


def id_after(a: str, b: str) -> bool:
    """Whether id ``a`` comes after id ``b`` in a tenant's log ('' is before all)."""
    if not a:
        return False
    if not b:
        return True
    return parse_id(a) > parse_id(b)


def subject_token(tenant: str | None) -> str:
    """A NATS subject token naming ``tenant``: the name when it is a plain token, else
    ``~`` and its hex (a '.', '*', '>' or space cannot go in a token). Receivers read the
    tenant from the message; the token only lets an operator watch one tenant."""
    if tenant is None:
        return ADMIN_TOKEN
    if _SAFE_TOKEN.match(tenant):
        return tenant
    return "~" + tenant.encode().hex()[:200]


def run_of(job_id: str) -> str:
    """The run a step job belongs to ('' for any other job)."""
    parsed = parse_step_job_id(job_id) if job_id else None
    return parsed.run_id if parsed is not None else ""


@dataclass(frozen=True, slots=True)
class Event:
    type: str
    data: dict[str, Any]
    tenant: str | None
    """None: an event of no tenant, sent live to admin keys only and never logged."""
    id: str = ""
    """Its id in the tenant's log; '' when it is not logged."""
    prev: str = ""
    """The id before it in the tenant's log when it was written ('0-0' for the first):
    a receiver that has not seen that one yet reads the gap from the log."""
    job_id: str = ""
    run_id: str = ""
    topic: str = ""
    final: bool = False
    """It reports the job's end (its stored state was terminal): a per-job stream ends."""
    texts: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    """Its encodings as sent (cordum.stream.transports), made once for all its clients:
    1,000 clients of one event cost one encoding, not 1,000."""

    def with_ids(self, id: str, prev: str) -> Event:
        return replace(self, id=id, prev=prev, texts={})

    def to_wire(self) -> bytes:
        """The message on ``<prefix>.<tenant>`` between replicas."""
        return json.dumps({"type": self.type, "tenant": self.tenant, "id": self.id,
                           "prev": self.prev, "job_id": self.job_id, "run_id": self.run_id,
                           "topic": self.topic, "final": self.final, "data": self.data},
                          separators=(",", ":")).encode()

    @classmethod
    def from_wire(cls, raw: bytes) -> Event:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict):
            raise ValueError("not a stream event")
        tenant = doc.get("tenant")
        return cls(type=str(doc.get("type", "")), data=doc["data"],
                   tenant=None if tenant is None else str(tenant), id=str(doc.get("id") or ""),
                   prev=str(doc.get("prev") or ""), job_id=str(doc.get("job_id") or ""),
                   run_id=str(doc.get("run_id") or ""), topic=str(doc.get("topic") or ""),
                   final=bool(doc.get("final")))

    def log_fields(self) -> dict[str, str]:
        """The entry the tenant's log stores (tenant and id are the log's own)."""
        return {"type": self.type, "data": json.dumps(self.data, separators=(",", ":")),
                "job_id": self.job_id, "run_id": self.run_id, "topic": self.topic,
                "final": "1" if self.final else ""}

    @classmethod
    def from_log(cls, tenant: str, entry_id: str, fields: Mapping[str, str]) -> Event:
        data = json.loads(fields.get("data") or "{}")
        return cls(type=fields.get("type", ""), data=data if isinstance(data, dict) else {},
                   tenant=tenant, id=entry_id, prev=fields.get("prev", ""),
                   job_id=fields.get("job_id", ""),
                   run_id=fields.get("run_id", ""), topic=fields.get("topic", ""),
                   final=fields.get("final") == "1")


def _bounded(query: Mapping[str, str], name: str) -> str:
    value = query.get(name, "").strip()
    if len(value) > MAX_FILTER_CHARS:
        raise InvalidRequest(f"{name} is longer than {MAX_FILTER_CHARS} characters")
    return value


@dataclass(frozen=True, slots=True)
class Filters:
    """What a client asked to see. Each filter given keeps only the events it can be
    checked against that match it; the notices (``job.state``, ``stream.truncated``)
    always pass."""

    types: frozenset[str] = field(default_factory=frozenset)
    topic: str = ""
    """A glob (``fnmatch``, case-sensitive) on the job's topic: job events only."""
    job_id: str = ""
    run_id: str = ""
    """A run's events (``workflow.run``) and its step jobs' (``<run>:<path>@<n>``)."""

    @classmethod
    def from_query(cls, query: Mapping[str, str], *, job_id: str = "") -> Filters:
        raw_types = _bounded(query, "types")
        types = frozenset(t.strip() for t in raw_types.split(",") if t.strip())
        unknown = sorted(types - EVENT_TYPES - NOTICE_TYPES)
        if unknown or len(types) > MAX_TYPES:
            raise InvalidRequest(f"unknown event types: {', '.join(unknown)[:200]}; known: "
                                 f"{', '.join(sorted(EVENT_TYPES))}", "invalid_types")
        asked = _bounded(query, "job_id")
        if job_id and asked and asked != job_id:
            raise InvalidRequest("job_id names another job than the path", "invalid_job_id")
        return cls(types=types, topic=_bounded(query, "topic"), job_id=job_id or asked,
                   run_id=_bounded(query, "run_id"))

    def matches(self, event: Event) -> bool:
        if event.type in NOTICE_TYPES:
            return True
        if self.types and event.type not in self.types:
            return False
        if self.job_id and event.job_id != self.job_id:
            return False
        if self.run_id and event.run_id != self.run_id:
            return False
        return not self.topic or bool(event.topic) and fnmatch.fnmatchcase(event.topic,
                                                                           self.topic)
