"""What a result's output checks read before they ask the kernel, read once.

:func:`prefetch` reads, in one script call (``OutputRecords.read``), the stored
JobRequest (topic, tenant, labels), the result's size and its first
:data:`PREFETCH_BYTES` (the whole of most results), so neither phase reads again.

The checks need three fields of the request. They are taken from its JSON with
``json.loads`` (a few microseconds) instead of a protojson parse of the whole
message (tens of microseconds, more with an effective config in ``env``): the
request is the gateway's own ``MessageToJson`` output. When one of the three is
not plainly shaped (a field of another type, both spellings of a name) the document
is parsed as protojson as before and read from the message. One difference is left:
a document whose *other* fields the parse would reject (the gateway never writes
one) is checked under its own topic and tenant instead of as "unknown". The
JobRequest itself is parsed only when asked for (the saga records a workflow
step's compensation from it).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cordum import protocol
from cordum.scheduler.packets import tenant_of
from cordum.text import as_text

if TYPE_CHECKING:
    from cordum.store.output_records import OutputRecords

log = logging.getLogger("cordum.scheduler.output_check")

PREFETCH_BYTES = 64 * 1024
UNKNOWN_TOPIC = "unknown"


@dataclass(frozen=True, slots=True)
class Prefetched:
    """What one read gave for a result (see :func:`prefetch`)."""

    raw_request: Any
    """The stored JobRequest as protojson, None when absent."""
    size: int
    head: bytes | None
    """The result's first bytes (all of it when ``size <= PREFETCH_BYTES``; empty
    when there is no result); None when the result was not read."""
    topic: str = UNKNOWN_TOPIC
    """The stored request's topic ("unknown" without a readable request)."""
    tenant: str = ""
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def request(self) -> protocol.JobRequest | None:
        """The stored JobRequest, None when absent or unreadable (parsed on each call)."""
        return _parse(self.raw_request)

    def asked(self) -> tuple[str, str, dict[str, str]]:
        """The topic, tenant and labels a result is checked with: its stored request's."""
        return self.topic, self.tenant, dict(self.labels)

    @property
    def content(self) -> bytes | None:
        """The whole result when the prefetch holds it (None: read it yourself)."""
        if self.head is not None and len(self.head) >= self.size:
            return self.head or None
        return None

    @property
    def missing(self) -> bool:
        """The result was read and is not there."""
        return self.head == b"" and self.size == 0


EMPTY = Prefetched(None, 0, None)


async def prefetch(reads: OutputRecords, job_id: str, result_ptr: str) -> Prefetched:
    """The stored request, the result's size and head, in one round trip.

    A failed read gives an empty prefetch (the checks then see no request and
    read the result themselves), never an error.
    """
    key = protocol.key_from_pointer(result_ptr) if result_ptr else ""
    try:
        raw, size, head = await reads.read(job_id, key, PREFETCH_BYTES)
    except Exception as exc:
        log.warning("job %s: output prefetch failed: %s", job_id, exc)
        return EMPTY
    topic, tenant, labels = _asked(job_id, raw)
    if result_ptr:
        head = head or b""
        head = head.encode() if isinstance(head, str) else head
    return Prefetched(raw, size, head, topic, tenant, labels)


def _asked(job_id: str, raw: Any) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    if raw is None:
        return UNKNOWN_TOPIC, "", ()
    asked = _plain_fields(raw)
    if asked is not None:
        return asked
    req = _parse(raw, job_id)
    if req is None:
        return UNKNOWN_TOPIC, "", ()
    return req.topic or UNKNOWN_TOPIC, tenant_of(req), tuple(req.labels.items())


def _plain_fields(raw: Any) -> tuple[str, str, tuple[tuple[str, str], ...]] | None:
    """topic, tenant and labels of a plainly shaped request document; None when the
    document needs the protojson parse to be read as it reads it."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    topic = doc.get("topic", "")
    tenant = _one_of(doc, "tenantId", "tenant_id")
    env = doc.get("env", {})
    labels = doc.get("labels", {})
    if not (isinstance(topic, str) and isinstance(tenant, str) and _strings(env)
            and _strings(labels)):
        return None
    return (topic or UNKNOWN_TOPIC, tenant or env.get("tenant_id", "") or "default",
            tuple(labels.items()))


def _one_of(doc: dict[str, Any], camel: str, snake: str) -> Any:
    """The field under either spelling; a non-text marker when both are given."""
    if camel in doc:
        return None if snake in doc else doc[camel]
    return doc.get(snake, "")


def _strings(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _parse(raw: Any, job_id: str = "") -> protocol.JobRequest | None:
    if raw is None:
        return None
    from google.protobuf import json_format

    try:
        return json_format.Parse(as_text(raw, "replace"), protocol.JobRequest(),
                                 ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        log.warning("job %s: stored request unreadable: %s", job_id, exc)
        return None
