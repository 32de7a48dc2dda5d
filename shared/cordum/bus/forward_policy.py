"""How the forwarder pulls, acks and retries, and which consumer feeds which queue."""

from __future__ import annotations

from dataclasses import dataclass

from cordum.bus.queue import MAX_BATCH_ENTRIES, QueueSink
from cordum.protocol import SUBJECT_CANCEL, SUBJECT_RESULT, SUBJECT_SUBMIT

CONSUMER_SUBMIT = "cordum-bridge-submit"
CONSUMER_RESULT = "cordum-bridge-result"
CONSUMER_CANCEL = "cordum-bridge-cancel"


@dataclass(frozen=True, slots=True)
class ForwardPolicy:
    """How the forwarder pulls, acks and retries."""

    batch_size: int = 10
    """Messages per pull and per SQS call (SendMessageBatch takes at most 10)."""
    fetch_wait_s: float = 1.0
    """How long one pull waits for a first message; also how late a stop is noticed."""
    ack_wait_s: float = 60.0
    """JetStream redelivers a message left unacked this long (a replica died mid-forward)."""
    max_deliver: int = 100
    """Deliveries of one message before JetStream stops trying (Cordum's MaxDeliver)."""
    nak_delay_s: float = 1.0
    """Redelivery delay after the first refusal; doubles per delivery up to ``nak_delay_max_s``."""
    nak_delay_max_s: float = 30.0
    """Longest redelivery delay."""
    max_message_bytes: int = 262_144
    """SQS limit for one message and for one batch call, body plus attributes."""
    error_pause_s: float = 1.0
    """Pause after a failed pull (NATS reconnecting, consumer gone) before the next one."""
    dead_letter_after: int = 0
    """Deliveries after which a message that still could not be forwarded is
    dead-lettered (DLQ record, then terminated). 0 means ``max_deliver - 1``: the
    last delivery stays in reserve for a DLQ write that failed and was NAKed."""
    poison_after: int = 0
    """Deliveries after which a message the queue refused entry by entry (not a
    queue outage) is dead-lettered before the delivery limit; 0 turns this off.
    JetStream's delivery count is the refusal count that survives a restart."""
    dlq_retry_delay_s: float = 5.0
    """NAK delay of a message whose DLQ record could not be written (Cordum's 5 s)."""
    busy_nak_min_s: float = 0.05
    """Shortest NAK delay of a message another replica is sending."""

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= MAX_BATCH_ENTRIES:
            raise ValueError("batch_size must be 1..10 (SendMessageBatch limit)")
        if self.max_deliver < 1 or self.dead_letter_after < 0 or self.poison_after < 0:
            raise ValueError("max_deliver must be >= 1, dead_letter_after and poison_after >= 0")

    def nak_delay(self, delivered: int) -> float:
        shift = min(max(delivered - 1, 0), 10)
        return min(self.nak_delay_s * (1 << shift), self.nak_delay_max_s)

    @property
    def dead_letter_at(self) -> int:
        return self.dead_letter_after or max(self.max_deliver - 1, 1)

    def gives_up(self, delivered: int, *, refused: bool) -> bool:
        """Whether a message that failed on its ``delivered``-th delivery is dead-lettered."""
        if delivered >= self.dead_letter_at:
            return True
        return refused and self.poison_after > 0 and delivered >= self.poison_after


@dataclass(frozen=True, slots=True)
class Route:
    """One durable consumer and the queue its messages go to."""

    durable: str
    subject: str
    sink: QueueSink
    queue_name: str = ""
    """For log lines only."""


def default_routes(submit: QueueSink, result: QueueSink) -> list[Route]:
    return [
        Route(CONSUMER_SUBMIT, SUBJECT_SUBMIT, submit, "submit"),
        Route(CONSUMER_RESULT, SUBJECT_RESULT, result, "result"),
        Route(CONSUMER_CANCEL, SUBJECT_CANCEL, result, "result"),
    ]


FORWARD_COUNTERS = (
    "forwarded",
    "duplicates_skipped",
    "inflight_busy",
    "dlq_terminated",
    "redis_degraded",
)
"""``JobForwarder.counters`` keys: messages the queue accepted; messages acked unsent
because they had been forwarded already; messages NAKed because another replica
was sending them; messages terminated after their DLQ record was stored; guard
steps (claim, settle, DLQ write: one Redis round trip each) done without Redis."""
