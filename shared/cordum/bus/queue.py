"""The queue port of the bridge: what a forwarded message is, and who takes it.

The SQS body is the base64 of the NATS payload, forwarded as is (a packet that
does not parse still goes: the Lambda on the other side reports it failed and
the queue's redrive policy parks it in the DLQ). Three string attributes travel
with it: the NATS subject, the job id when the packet names one, and
``bus_msg_id``, the same on every redelivery of one NATS message.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from cordum.protocol import BusPacket

ATTR_SUBJECT = "subject"
ATTR_JOB_ID = "job_id"
ATTR_BUS_MSG_ID = "bus_msg_id"
"""``<stream>:<stream sequence>``: the same value on every redelivery of one NATS message."""

MAX_BATCH_ENTRIES = 10
"""SendMessageBatch takes at most this many messages."""


@dataclass(frozen=True, slots=True)
class QueueMessage:
    """One message for the queue. ``id`` is unique within one batch."""

    id: str
    body: str
    attributes: Mapping[str, str]
    """Message attributes, all of SQS type ``String``."""

    def size(self) -> int:
        """Bytes SQS counts against its message size limit (body and attributes)."""
        total = len(self.body.encode())
        for name, value in self.attributes.items():
            total += len(name.encode()) + len("String") + len(value.encode())
        return total


@dataclass(frozen=True, slots=True)
class BatchReport:
    accepted: frozenset[str]
    """Ids the queue stored."""
    refused: Mapping[str, str]
    """Id -> reason, for the ones it did not."""


class QueueUnavailable(RuntimeError):
    """The queue could not be reached or refused the whole call; every message is retried."""

    retryable = True


class QueueSink(Protocol):
    """Where the forwarder puts messages (SQS in production)."""

    async def send_batch(self, messages: Sequence[QueueMessage]) -> BatchReport:
        """Send up to 10 messages; raise ``QueueUnavailable`` when none could be sent."""
        ...



# SQS refuses attribute values outside these characters; such a job_id is left out
# rather than letting it get the whole message refused forever.
_SQS_BAD_CHARS = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def packet_job_id(data: bytes) -> str:
    """The job id the packet carries, or "" when it does not parse or has none."""
    msg = BusPacket()
    try:
        msg.ParseFromString(data)
    except Exception:
        return ""
    kind = msg.WhichOneof("payload")
    if kind is None:
        return ""
    job_id = getattr(getattr(msg, kind), "job_id", "")
    return job_id if isinstance(job_id, str) else ""


def queue_message(
    index: int, subject: str, data: bytes, *, stream: str = "", seq: int = 0
) -> QueueMessage:
    attributes = {ATTR_SUBJECT: subject}
    job_id = packet_job_id(data)
    if job_id and not _SQS_BAD_CHARS.search(job_id):
        attributes[ATTR_JOB_ID] = job_id
    if stream and seq:
        attributes[ATTR_BUS_MSG_ID] = f"{stream}:{seq}"
    return QueueMessage(
        id=str(index), body=base64.b64encode(data).decode("ascii"), attributes=attributes
    )


def chunks(messages: Sequence[QueueMessage], max_bytes: int) -> list[list[QueueMessage]]:
    """Split so that no SQS call goes over the batch size limit."""
    chunks: list[list[QueueMessage]] = []
    current: list[QueueMessage] = []
    size = 0
    for m in messages:
        if current and size + m.size() > max_bytes:
            chunks.append(current)
            current, size = [], 0
        current.append(m)
        size += m.size()
    if current:
        chunks.append(current)
    return chunks

