"""cordum-bridge: JetStream job subjects to SQS, heartbeats to the worker snapshot.

The one long-running process of the deployment (``python -m cordum.bus.bridge``).

Forwarding. Three durable pull consumers on the job stream feed two SQS
queues: ``sys.job.submit`` to the submit queue, ``sys.job.result`` and
``sys.job.cancel`` to the result queue. The SQS body is the base64 of the NATS
payload, forwarded as is (a packet that does not parse still goes: the Lambda
on the other side reports it failed and the queue's redrive policy parks it in
the DLQ). A JetStream message is acked only once SQS accepted it; refused ones
are NAKed with a delay and come back.

Crash safety (``cordum.bus.guard``). Before a send each message is claimed in
Redis: one already forwarded (its ack was lost) is acked without a second send,
one another replica is sending is NAKed. A message that cannot be forwarded any
more (too large for SQS, delivery limit, poison threshold) gets a Redis DLQ
record first and is terminated only once that record is stored; otherwise it is
NAKed and comes back. Without Redis forwarding goes on, at least once.

Heartbeats. Every replica subscribes ``sys.heartbeat`` (core NATS, no queue
group), keeps the live workers in memory and, holding the snapshot writer lock,
writes Cordum's ``sys:workers:snapshot`` every few seconds and as soon as a new
worker shows up. A heartbeat that brings a pool from no fresh worker to one
starts a background flush (``cordum.bus.flush``): that pool's waiting jobs go
back on ``sys.job.submit`` instead of waiting for the pending replayer.

Replicas: the pull consumers share work between them, and the writer lock
keeps one snapshot write at a time.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import re
import signal
import socket
import struct
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cordum import runtime
from cordum.bus.flush import JetStreamPublisher, PoolFlusher
from cordum.bus.guard import BusGuard, ClaimStatus, DeadLetter
from cordum.config import ConfigError, PoolsConfig
from cordum.logs import parse_level
from cordum.protocol import (
    SUBJECT_CANCEL,
    SUBJECT_HEARTBEAT,
    SUBJECT_RESULT,
    SUBJECT_SUBMIT,
    BusPacket,
    Heartbeat,
    InvalidPacket,
    decode,
)

if TYPE_CHECKING:
    import nats.aio.client
    import nats.aio.msg
    import nats.aio.subscription
    import nats.js
    import redis.asyncio

    from cordum.config import Settings

log = logging.getLogger("cordum.bus.bridge")
T = TypeVar("T")

ENV_SUBMIT_QUEUE_URL = "SUBMIT_QUEUE_URL"
ENV_RESULT_QUEUE_URL = "RESULT_QUEUE_URL"
ENV_SNAPSHOT_INTERVAL = "WORKER_SNAPSHOT_INTERVAL"
ENV_LOG_LEVEL = "LOG_LEVEL"

CONSUMER_SUBMIT = "cordum-bridge-submit"
CONSUMER_RESULT = "cordum-bridge-result"
CONSUMER_CANCEL = "cordum-bridge-cancel"

ATTR_SUBJECT = "subject"
ATTR_JOB_ID = "job_id"
ATTR_BUS_MSG_ID = "bus_msg_id"
"""``<stream>:<stream sequence>``: the same value on every redelivery of one NATS message."""

SNAPSHOT_KEY = "sys:workers:snapshot"
SNAPSHOT_LOCK_KEY = "cordum:scheduler:snapshot:writer"


# --------------------------------------------------------------------------- settings


class BridgeSettings(BaseModel):
    """What the bridge reads from the environment besides the common ``Settings``."""

    model_config = ConfigDict(frozen=True)

    submit_queue_url: str = Field(min_length=1)
    result_queue_url: str = Field(min_length=1)
    snapshot_interval_s: float = Field(default=5.0, gt=0)
    log_level: str = "INFO"

    @field_validator("log_level")
    @classmethod
    def _level(cls, v: str) -> str:
        return parse_level(v)


_BRIDGE_ENV = {
    "submit_queue_url": ENV_SUBMIT_QUEUE_URL,
    "result_queue_url": ENV_RESULT_QUEUE_URL,
    "snapshot_interval_s": ENV_SNAPSHOT_INTERVAL,
    "log_level": ENV_LOG_LEVEL,
}


def load_bridge_settings(env: Mapping[str, str] | None = None, **overrides: Any) -> BridgeSettings:
    env = os.environ if env is None else env
    values: dict[str, Any] = {f: env[v] for f, v in _BRIDGE_ENV.items() if env.get(v)}
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return BridgeSettings(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else "?"
        raise ConfigError(f"{_BRIDGE_ENV.get(name, name)}: {first['msg']}") from exc


# --------------------------------------------------------------------------- queue port


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


class SqsClientProtocol(Protocol):
    def send_message_batch(self, **kwargs: Any) -> dict[str, Any]: ...


def sqs_client(env: Mapping[str, str] | None = None) -> SqsClientProtocol:
    """An SQS client (LocalStack is reached through AWS_ENDPOINT_URL(_SQS)). Worst case
    for one call: 2 x (1 s connect + 3 s read), inside the bridge's stop window."""
    from cordum import aws

    client: SqsClientProtocol = aws.client("sqs", env)
    return client


class SqsQueueSink:
    """``QueueSink`` over SQS SendMessageBatch, run off the event loop."""

    def __init__(self, queue_url: str, client: SqsClientProtocol | None = None) -> None:
        self.queue_url = queue_url
        self._client = client if client is not None else sqs_client()

    async def send_batch(self, messages: Sequence[QueueMessage]) -> BatchReport:
        entries = [
            {
                "Id": m.id,
                "MessageBody": m.body,
                "MessageAttributes": {
                    name: {"DataType": "String", "StringValue": value}
                    for name, value in m.attributes.items()
                },
            }
            for m in messages
        ]
        try:
            response = await asyncio.to_thread(
                self._client.send_message_batch, QueueUrl=self.queue_url, Entries=entries
            )
        except Exception as exc:  # ClientError, EndpointConnectionError, timeouts
            raise QueueUnavailable(f"SendMessageBatch {self.queue_url}: {exc}") from exc
        accepted = frozenset(item["Id"] for item in response.get("Successful", []))
        refused = {
            item["Id"]: f"{item.get('Code', '?')}: {item.get('Message', '')}".strip()
            for item in response.get("Failed", [])
        }
        return BatchReport(accepted=accepted, refused=refused)


# --------------------------------------------------------------------------- forwarding


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
        if not 1 <= self.batch_size <= 10:
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


def _chunks(messages: Sequence[QueueMessage], max_bytes: int) -> list[list[QueueMessage]]:
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


@dataclass(slots=True)
class _Pulled:
    """One message of a pull, with what the forward path needs of its metadata."""

    msg: nats.aio.msg.Msg
    qm: QueueMessage
    seq: int
    """Stream sequence: the same on every redelivery."""
    delivered: int


@dataclass(slots=True)
class _Failure:
    item: _Pulled
    reason: str
    refused: bool
    """The queue refused this entry (as opposed to the whole call failing)."""
    permanent: bool = False
    """It can never be forwarded: dead-letter it now."""


class JobForwarder:
    """Moves job packets from JetStream durable consumers to queues, ack after accept.

    ``guard`` adds the Redis dedup, in-flight claims and DLQ-first termination;
    without one the forwarder has JetStream's at-least-once alone and never
    terminates a message (there is nowhere to record it).
    """

    def __init__(
        self,
        js: nats.js.JetStreamContext,
        stream: str,
        routes: Sequence[Route],
        policy: ForwardPolicy | None = None,
        guard: BusGuard | None = None,
    ) -> None:
        self._js = js
        self._stream = stream
        self._routes = list(routes)
        self._policy = policy or ForwardPolicy()
        self._guard = guard
        self._subs: dict[str, nats.js.JetStreamContext.PullSubscription] = {}
        self._stopping = asyncio.Event()
        self.counters: dict[str, int] = dict.fromkeys(FORWARD_COUNTERS, 0)

    @property
    def stream(self) -> str:
        return self._stream

    @property
    def guard(self) -> BusGuard | None:
        return self._guard

    async def start(self) -> None:
        """Create (or update) the durable consumers and bind to them; errors surface here."""
        for route in self._routes:
            self._subs[route.durable] = await self._bind(route)

    async def _bind(self, route: Route) -> nats.js.JetStreamContext.PullSubscription:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
        from nats.js.errors import BadRequestError

        config = ConsumerConfig(
            durable_name=route.durable,
            filter_subject=route.subject,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            ack_wait=self._policy.ack_wait_s,
            max_deliver=self._policy.max_deliver,
        )
        try:
            await self._js.add_consumer(self._stream, config=config)
        except BadRequestError as exc:
            # An existing consumer whose settings the server will not change in
            # place: keep it, it still delivers.
            log.warning("consumer %s kept as is: %s", route.durable, exc)
        return await self._js.pull_subscribe_bind(durable=route.durable, stream=self._stream)

    def stop(self) -> None:
        """Stop pulling; the forward in flight finishes and is acked."""
        self._stopping.set()

    async def close(self) -> None:
        """Drop the pull subscriptions (after ``run`` returned).

        Their inboxes have no callback, so a connection drain would wait on
        them until its timeout.
        """
        for sub in self._subs.values():
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._subs.clear()

    async def run(self) -> None:
        if not self._subs:
            await self.start()
        await asyncio.gather(*(self._pump(route) for route in self._routes))

    async def _pump(self, route: Route) -> None:
        while not self._stopping.is_set():
            try:
                sub = self._subs.get(route.durable) or await self._rebind(route)
                msgs = await sub.fetch(self._policy.batch_size, timeout=self._policy.fetch_wait_s)
            except TimeoutError:  # nats' TimeoutError and FetchTimeoutError included
                continue
            except Exception as exc:
                log.error("pull %s failed: %s: %s", route.durable, type(exc).__name__, exc)
                # The consumer may be gone (stream recreated): bind afresh next time.
                stale = self._subs.pop(route.durable, None)
                if stale is not None:
                    with contextlib.suppress(Exception):
                        await stale.unsubscribe()
                await self._pause(self._policy.error_pause_s)
                continue
            await self.forward(route, msgs)

    async def _rebind(self, route: Route) -> nats.js.JetStreamContext.PullSubscription:
        sub = await self._bind(route)
        self._subs[route.durable] = sub
        log.info("consumer %s bound again", route.durable)
        return sub

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
        except TimeoutError:
            pass

    async def forward(self, route: Route, msgs: Sequence[nats.aio.msg.Msg]) -> None:
        """Send one pulled batch to the route's queue; ack what it took, NAK the rest.

        Per message: already forwarded -> ack, not sent; another replica sending
        it -> NAK; otherwise sent, then marked processed and acked, or NAKed. One
        that can no longer be forwarded is dead-lettered, then terminated.
        """
        pulled: list[_Pulled] = []
        oversize: list[_Failure] = []
        for index, msg in enumerate(msgs):
            meta = msg.metadata
            seq = meta.sequence.stream
            qm = queue_message(index, msg.subject, msg.data, stream=meta.stream, seq=seq)
            item = _Pulled(msg, qm, seq, meta.num_delivered or 1)
            if qm.size() > self._policy.max_message_bytes:
                reason = f"too large for the queue: {qm.size()} bytes"
                oversize.append(_Failure(item, reason, refused=True, permanent=True))
            else:
                pulled.append(item)
        # Never sent, so not claimed: two replicas dead-lettering one of these at
        # once write the same record under the same key, which is harmless.
        await self._retry_or_dead_letter(route, oversize)

        sendable = await self._claim(pulled)
        by_id = {item.qm.id: item for item in sendable}
        for chunk in _chunks([item.qm for item in sendable], self._policy.max_message_bytes):
            accepted: list[_Pulled] = []
            failed: list[_Failure] = []
            try:
                report = await route.sink.send_batch(chunk)
            except Exception as exc:
                log.error(
                    "queue %s unavailable, %d message(s) not sent: %s",
                    route.queue_name or route.durable,
                    len(chunk),
                    exc,
                )
                failed = [_Failure(by_id[qm.id], str(exc), refused=False) for qm in chunk]
            else:
                for qm in chunk:
                    if qm.id in report.accepted:
                        accepted.append(by_id[qm.id])
                        continue
                    reason = report.refused.get(qm.id, "no answer for this entry")
                    log.warning("queue refused subject=%s: %s", by_id[qm.id].msg.subject, reason)
                    failed.append(_Failure(by_id[qm.id], reason, refused=True))
            self.counters["forwarded"] += len(accepted)
            # The processed keys go in before the acks: an ack lost from here on
            # comes back as a redelivery that the claim answers with "processed".
            await self._settle(accepted, [f.item for f in failed])
            for item in accepted:
                await self._ack(item, route)
            await self._retry_or_dead_letter(route, failed)

    async def _claim(self, items: list[_Pulled]) -> list[_Pulled]:
        """The items this forwarder may send; the others are acked or NAKed here."""
        if self._guard is None or not items:
            return items
        claims = await self._guard.claim(self._stream, [item.seq for item in items])
        if claims is None:
            self.counters["redis_degraded"] += 1
            return items
        mine: list[_Pulled] = []
        for item, claim in zip(items, claims, strict=True):
            if claim.status is ClaimStatus.CLAIMED:
                mine.append(item)
            elif claim.status is ClaimStatus.PROCESSED:
                self.counters["duplicates_skipped"] += 1
                log.info(
                    "already forwarded, acked without sending: subject=%s bus_msg_id=%s",
                    item.msg.subject,
                    item.qm.attributes.get(ATTR_BUS_MSG_ID, ""),
                )
                await self._ack_only(item.msg)
            else:
                self.counters["inflight_busy"] += 1
                # The usual backoff, but no later than the other claim runs out
                # (its holder may have died).
                delay = min(claim.held_for_s, self._policy.nak_delay(item.delivered))
                log.debug(
                    "being forwarded by another replica, NAKed: bus_msg_id=%s delay=%.2fs",
                    item.qm.attributes.get(ATTR_BUS_MSG_ID, ""),
                    delay,
                )
                await self._nak(item.msg, max(delay, self._policy.busy_nak_min_s))
        return mine

    async def _settle(self, accepted: list[_Pulled], returned: list[_Pulled]) -> None:
        if self._guard is None or not (accepted or returned):
            return
        done = await self._guard.settle(
            self._stream, [i.seq for i in accepted], [i.seq for i in returned]
        )
        if not done:
            self.counters["redis_degraded"] += 1

    async def _ack(self, item: _Pulled, route: Route) -> None:
        if not await self._ack_only(item.msg):
            return
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "forwarded subject=%s job_id=%s bus_msg_id=%s queue=%s",
                item.msg.subject,
                item.qm.attributes.get(ATTR_JOB_ID, ""),
                item.qm.attributes.get(ATTR_BUS_MSG_ID, ""),
                route.queue_name or route.durable,
            )

    @staticmethod
    async def _ack_only(msg: nats.aio.msg.Msg) -> bool:
        try:
            await msg.ack()
        except Exception as exc:
            # SQS has it already; JetStream redelivers after ack_wait, and the
            # processed key (when Redis had it) turns that into an ack.
            log.error("ack failed after send, redelivery follows: %s", exc)
            return False
        return True

    async def _retry_or_dead_letter(self, route: Route, failed: list[_Failure]) -> None:
        """NAK what may still go through; dead-letter the rest."""
        doomed: list[_Failure] = []
        for failure in failed:
            item = failure.item
            if failure.permanent or self._policy.gives_up(item.delivered, refused=failure.refused):
                doomed.append(failure)
            else:
                await self._nak(item.msg, self._policy.nak_delay(item.delivered))
        if doomed:
            await self._dead_letter(route, doomed)

    async def _dead_letter(self, route: Route, doomed: list[_Failure]) -> None:
        """DLQ record first, then ``term``; a message whose record was not stored is NAKed.

        Terminating first would lose the message for good if the record then
        failed (or the replica died in between).
        """
        letters = [
            DeadLetter(
                stream=self._stream,
                seq=f.item.seq,
                subject=f.item.msg.subject,
                payload=f.item.msg.data,
                reason=f.reason,
                deliveries=f.item.delivered,
                consumer=route.durable,
                headers=dict(f.item.msg.headers or {}),
            )
            for f in doomed
        ]
        stored = False
        if self._guard is not None:
            stored = await self._guard.dead_letter(letters)
            if not stored:
                self.counters["redis_degraded"] += 1
        if not stored:
            for f in doomed:
                last = f.item.delivered >= self._policy.max_deliver
                log.error(
                    "could not dead-letter (no DLQ record stored), NAKed instead of "
                    "terminated%s: subject=%s bus_msg_id=%s deliveries=%d reason=%s",
                    ", no delivery left: it stays in the stream" if last else "",
                    f.item.msg.subject,
                    f.item.qm.attributes.get(ATTR_BUS_MSG_ID, ""),
                    f.item.delivered,
                    f.reason,
                )
                await self._nak(f.item.msg, self._policy.dlq_retry_delay_s)
            return
        for f in doomed:
            try:
                await f.item.msg.term()
            except Exception as exc:
                # The record is stored; the redelivery is dead-lettered again
                # under the same key.
                log.error("term failed after the DLQ write: %s", exc)
                continue
            self.counters["dlq_terminated"] += 1
            log.error(
                "dead-lettered and terminated: subject=%s bus_msg_id=%s deliveries=%d reason=%s",
                f.item.msg.subject,
                f.item.qm.attributes.get(ATTR_BUS_MSG_ID, ""),
                f.item.delivered,
                f.reason,
            )

    @staticmethod
    async def _nak(msg: nats.aio.msg.Msg, delay: float) -> None:
        try:
            await msg.nak(delay=delay)
        except Exception as exc:
            log.error("nak failed (redelivery after ack_wait): %s", exc)


# --------------------------------------------------------------------------- heartbeats


def rfc3339(ts: float) -> str:
    """Go's time.RFC3339 for a UTC instant: second precision, ``Z``."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_rfc3339(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _float32(value: float) -> float:
    """The shortest decimal that reads back as the same float32, as Go prints one."""
    target = struct.pack("<f", value)
    for digits in range(1, 10):
        candidate = round(value, digits)
        if struct.pack("<f", candidate) == target:
            return candidate
    return value


def topic_pools(pools: PoolsConfig) -> dict[str, str]:
    """topic -> its first pool, as Cordum's snapshot maps topics."""
    return {topic: names[0] for topic, names in pools.topics.items() if names}


@dataclass(frozen=True, slots=True)
class Observation:
    """What one heartbeat changed in the registry."""

    joined: bool
    """The worker was not known, or had gone silent past the TTL."""
    pool_online: bool
    """Its pool had no fresh worker before this heartbeat (an empty pool never counts)."""


@dataclass(slots=True)
class _Seen:
    heartbeat: Heartbeat
    last_seen: float


class WorkerRegistry:
    """Live workers by id, from their heartbeats; silent for ``ttl_s`` means gone."""

    def __init__(self, ttl_s: float = 30.0, clock: Callable[[], float] = time.time) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._workers: dict[str, _Seen] = {}

    def __len__(self) -> int:
        return len(self._workers)

    def observe(self, hb: Heartbeat) -> bool:
        """Record a heartbeat; True when the worker was not known (or had expired)."""
        return self.record(hb).joined

    def update_heartbeat_with_transition(self, hb: Heartbeat) -> bool:
        """Record a heartbeat; True iff no worker of its pool, itself included,
        was fresh before it (Cordum's UpdateHeartbeatWithTransition)."""
        return self.record(hb).pool_online

    def record(self, hb: Heartbeat) -> Observation:
        """Record a heartbeat and say what it changed."""
        now = self._clock()
        pool_online = bool(hb.pool) and not self._pool_fresh(hb.pool, now)
        previous = self._workers.get(hb.worker_id)
        self._workers[hb.worker_id] = _Seen(hb, now)
        joined = previous is None or now - previous.last_seen > self._ttl_s
        return Observation(joined=joined, pool_online=pool_online)

    def _pool_fresh(self, pool: str, now: float) -> bool:
        # A scan rather than a per-pool index: a worker may change pools between
        # heartbeats, and the registry holds hundreds of workers, not millions.
        return any(
            seen.heartbeat.pool == pool and now - seen.last_seen <= self._ttl_s
            for seen in self._workers.values()
        )

    def hydrate(self, document: Mapping[str, Any]) -> int:
        """Take the workers of a stored snapshot that are still fresh (Cordum's
        HydrateFromSnapshot), so a replica that just started neither reports them
        as joining nor writes a snapshot without them. Returns how many it took."""
        cutoff = self._clock() - self._ttl_s
        default_seen = _parse_rfc3339(document.get("captured_at"))
        taken = 0
        for item in document.get("workers") or []:
            if not isinstance(item, Mapping) or not item.get("worker_id"):
                continue
            last_seen = _parse_rfc3339(item.get("last_heartbeat"))
            if last_seen is None:
                last_seen = default_seen
            if last_seen is None or last_seen < cutoff or item["worker_id"] in self._workers:
                continue
            try:
                hb = Heartbeat(
                    worker_id=str(item["worker_id"]),
                    pool=str(item.get("pool") or ""),
                    active_jobs=int(item.get("active_jobs") or 0),
                    max_parallel_jobs=int(item.get("max_parallel_jobs") or 0),
                    capabilities=[str(c) for c in item.get("capabilities") or []],
                    cpu_load=float(item.get("cpu_load") or 0),
                    gpu_utilization=float(item.get("gpu_utilization") or 0),
                    memory_load=float(item.get("memory_load") or 0),
                    region=str(item.get("region") or ""),
                    type=str(item.get("type") or ""),
                    labels={str(k): str(v) for k, v in (item.get("labels") or {}).items()},
                )
            except (TypeError, ValueError, AttributeError):
                continue
            self._workers[hb.worker_id] = _Seen(hb, last_seen)
            taken += 1
        return taken

    def prune(self) -> int:
        cutoff = self._clock() - self._ttl_s
        stale = [wid for wid, seen in self._workers.items() if seen.last_seen < cutoff]
        for wid in stale:
            del self._workers[wid]
        return len(stale)

    def snapshot(self, topics: Mapping[str, str], *, writer_id: str) -> dict[str, Any]:
        """Cordum's snapshot document, plus ``last_heartbeat`` on each worker."""
        self.prune()
        pools: dict[str, dict[str, int]] = {}
        workers: list[dict[str, Any]] = []
        for wid in sorted(self._workers):
            seen = self._workers[wid]
            hb = seen.heartbeat
            workers.append(_worker_summary(hb, seen.last_seen))
            if not hb.pool:
                continue
            pool = pools.setdefault(hb.pool, {"workers": 0, "active_jobs": 0, "capacity": 0})
            pool["workers"] += 1
            pool["active_jobs"] += hb.active_jobs
            if hb.max_parallel_jobs > 0:
                pool["capacity"] += hb.max_parallel_jobs
        topic_view = {}
        for topic, pool_name in sorted(topics.items()):
            pool = pools.get(pool_name, {"workers": 0, "capacity": 0})
            topic_view[topic] = {
                "pool": pool_name,
                "workers": pool["workers"],
                "capacity": pool["capacity"],
                "available": pool["workers"] > 0,
            }
        return {
            "captured_at": rfc3339(self._clock()),
            "writer_id": writer_id,
            "pools": pools,
            "topics": topic_view,
            "workers": workers,
        }


def _worker_summary(hb: Heartbeat, last_seen: float) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "worker_id": hb.worker_id,
        "pool": hb.pool,
        "active_jobs": hb.active_jobs,
        "max_parallel_jobs": hb.max_parallel_jobs,
    }
    # Zero and empty values are left out, as Go's omitempty does; a missing
    # gpu_utilization (the SDK never sends one) therefore reads as 0.
    if hb.capabilities:
        summary["capabilities"] = list(hb.capabilities)
    for name in ("cpu_load", "gpu_utilization", "memory_load"):
        value = getattr(hb, name)
        if value:
            summary[name] = _float32(value)
    if hb.region:
        summary["region"] = hb.region
    if hb.type:
        summary["type"] = hb.type
    if hb.labels:
        summary["labels"] = dict(sorted(hb.labels.items()))
    summary["last_heartbeat"] = rfc3339(last_seen)
    return summary


# KEYS[1] lock key; ARGV[1] token. Deletes the lock only if this writer still
# holds it. Returns 1 when deleted, 0 when it had expired or changed hands.
RELEASE_LOCK_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class SnapshotWriter:
    """Writes the snapshot only while holding the writer lock.

    Timeline of one write, replica A and B both ticking:

        A: SET lock tokA NX PX 30000  -> OK
        B: SET lock tokB NX PX 30000  -> nil, B skips this tick
        A: SET sys:workers:snapshot ... EX 86400
        A: release(lock, tokA)        -> DEL
    If A stalls past 30 s between its SET and its release, the lock expires and B
    may take it: the compare-and-delete keeps A from deleting B's lock.
    """

    def __init__(
        self,
        redis: redis.asyncio.Redis,
        *,
        key: str = SNAPSHOT_KEY,
        lock_key: str = SNAPSHOT_LOCK_KEY,
        lock_ttl_ms: int = 30_000,
        data_ttl_s: int = 86_400,
    ) -> None:
        self._redis = redis
        self.key = key
        self.lock_key = lock_key
        self._lock_ttl_ms = lock_ttl_ms
        self._data_ttl_s = data_ttl_s
        self._release = redis.register_script(RELEASE_LOCK_LUA)

    async def read(self) -> dict[str, Any] | None:
        raw = await self._redis.get(self.key)
        if not raw:
            return None
        document = json.loads(raw)
        return document if isinstance(document, dict) else None

    async def write(self, document: Mapping[str, Any]) -> bool:
        """True when written; False when another writer holds the lock."""
        token = uuid.uuid4().hex
        acquired = await self._redis.set(self.lock_key, token, nx=True, px=self._lock_ttl_ms)
        if not acquired:
            return False
        try:
            body = json.dumps(document, separators=(",", ":"))
            await self._redis.set(self.key, body, ex=self._data_ttl_s)
        finally:
            await self._release(keys=[self.lock_key], args=[token])
        return True


def new_writer_id() -> str:
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


class HeartbeatIngest:
    """sys.heartbeat -> ``WorkerRegistry`` -> ``SnapshotWriter``, every interval and on news."""

    def __init__(
        self,
        nc: nats.aio.client.Client,
        writer: SnapshotWriter,
        topics: Mapping[str, str],
        *,
        subject: str = SUBJECT_HEARTBEAT,
        interval_s: float = 5.0,
        registry: WorkerRegistry | None = None,
        writer_id: str | None = None,
        busy_retries: int = 3,
        busy_retry_s: float = 0.2,
        on_pool_online: Callable[[str], object] | None = None,
    ) -> None:
        """``on_pool_online(pool)`` runs inside the NATS callback when a pool goes
        from no fresh worker to one: it must hand its work to a task and return."""
        self._nc = nc
        self._writer = writer
        self._topics = dict(topics)
        self._subject = subject
        self._interval_s = interval_s
        self.registry = registry if registry is not None else WorkerRegistry()
        self.writer_id = writer_id or new_writer_id()
        self._busy_retries = busy_retries
        self._busy_retry_s = busy_retry_s
        self._on_pool_online = on_pool_online
        self._sub: nats.aio.subscription.Subscription | None = None
        self._news = asyncio.Event()
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        try:
            stored = await self._writer.read()
            if stored:
                taken = self.registry.hydrate(stored)
                log.info("worker registry hydrated from snapshot: workers=%d", taken)
        except Exception as exc:
            log.error("snapshot read failed, starting empty: %s: %s", type(exc).__name__, exc)
        self._sub = await self._nc.subscribe(self._subject, cb=self._on_message)

    async def _on_message(self, msg: nats.aio.msg.Msg) -> None:
        try:
            decoded = decode(msg.data)
        except InvalidPacket as exc:
            log.debug("heartbeat dropped: %s", exc)
            return
        if decoded.kind != "heartbeat" or not decoded.packet.heartbeat.worker_id:
            return
        hb = decoded.packet.heartbeat
        seen = self.registry.record(hb)
        if seen.joined:
            log.info("worker joined: worker_id=%s pool=%s", hb.worker_id, hb.pool)
            self._news.set()
        if seen.pool_online and self._on_pool_online is not None:
            log.info("pool online: pool=%s worker_id=%s", hb.pool, hb.worker_id)
            try:
                self._on_pool_online(hb.pool)
            except Exception as exc:
                log.error("pool online hook: pool=%s %s: %s", hb.pool, type(exc).__name__, exc)

    def stop(self) -> None:
        self._stopping.set()

    async def close(self) -> None:
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:
                pass
            self._sub = None

    async def write_once(self) -> bool:
        """Build and write one snapshot; False when another replica held the lock."""
        document = self.registry.snapshot(self._topics, writer_id=self.writer_id)
        return await self._writer.write(document)

    async def run(self) -> None:
        if self._sub is None:
            await self.start()
        next_tick = time.monotonic()
        busy_left = 0
        while not self._stopping.is_set():
            wait_s = max(0.0, next_tick - time.monotonic())
            if busy_left:
                wait_s = min(wait_s, self._busy_retry_s)
            news = await self._wait(wait_s)
            if self._stopping.is_set():
                break
            now = time.monotonic()
            periodic = now >= next_tick
            if periodic:
                next_tick = max(next_tick + self._interval_s, now)
            if not (periodic or news or busy_left):
                continue
            try:
                written = await self.write_once()
            except Exception as exc:
                log.error("snapshot write failed: %s: %s", type(exc).__name__, exc)
                continue
            if written:
                busy_left = 0
            elif news:
                # The replica holding the lock may have built its snapshot before
                # the new worker's first heartbeat: retry soon, a few times.
                busy_left = self._busy_retries
            else:
                busy_left = max(busy_left - 1, 0)

    async def _wait(self, seconds: float) -> bool:
        """Sleep until the next tick, a new worker, or stop; True on a new worker."""
        news = asyncio.ensure_future(self._news.wait())
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({news, stop}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            news.cancel()
            stop.cancel()
        arrived = self._news.is_set()
        self._news.clear()
        return arrived


# --------------------------------------------------------------------------- process

STOP_TIMEOUT_S = 8.0
"""In-flight forwards and the last snapshot get this long after SIGTERM; NATS drain follows."""
DRAIN_TIMEOUT_S = 1.5


def configure_logging(level: str) -> None:
    """``level`` applies to our loggers; libraries (botocore, nats) stay at INFO or above."""
    wanted = logging.getLevelName(level.upper())
    logging.basicConfig(
        level=max(wanted, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("cordum").setLevel(wanted)


async def connect_nats(cfg: Settings, name: str) -> nats.aio.client.Client:
    """A connection for a long-running process: it keeps reconnecting, never gives up."""
    import nats

    async def on_error(exc: Exception) -> None:
        log.error("nats: %s: %s", type(exc).__name__, exc)

    return await nats.connect(
        servers=[u.strip() for u in cfg.nats_url.split(",")],
        name=name,
        connect_timeout=cfg.publish_timeout_s,
        allow_reconnect=True,
        max_reconnect_attempts=-1,
        reconnect_time_wait=1,
        error_cb=on_error,
        **runtime.nats_options(cfg),
    )


async def until_stopped(work: Awaitable[T], stop: asyncio.Event) -> T | None:
    """``work``'s result, or None when ``stop`` is set first (``work`` is then cancelled).

    The first NATS connect retries forever; without this a SIGTERM during it
    would go unheard.
    """
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return None


async def serve(
    settings: Settings,
    bridge: BridgeSettings,
    *,
    submit_sink: QueueSink | None = None,
    result_sink: QueueSink | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """Run the bridge until ``stop`` is set (SIGTERM/SIGINT in ``main``). Returns an exit code."""
    from cordum import runtime
    from cordum.bus.streams import ensure_stream
    from cordum.config import load_pools

    pools = load_pools(settings.config_dir)
    stop = stop or asyncio.Event()
    if submit_sink is None or result_sink is None:
        client = sqs_client()
        submit_sink = submit_sink or SqsQueueSink(bridge.submit_queue_url, client)
        result_sink = result_sink or SqsQueueSink(bridge.result_queue_url, client)

    nc = await until_stopped(connect_nats(settings, "cordum-bridge"), stop)
    if nc is None:
        log.info("cordum-bridge stopped before NATS answered: exit=0")
        return 0
    js = nc.jetstream(timeout=settings.publish_timeout_s)
    stream = await ensure_stream(js)
    redis = runtime.redis_client(settings)
    forwarder = JobForwarder(
        js, stream, default_routes(submit_sink, result_sink), guard=BusGuard(redis)
    )
    await forwarder.start()
    flusher = PoolFlusher(
        redis, JetStreamPublisher(js, timeout_s=settings.publish_timeout_s), pools
    )
    ingest = HeartbeatIngest(
        nc,
        SnapshotWriter(redis),
        topic_pools(pools),
        interval_s=bridge.snapshot_interval_s,
        on_pool_online=flusher.trigger,
    )
    await ingest.start()
    log.info(
        "cordum-bridge started: stream=%s writer_id=%s submit=%s result=%s",
        stream,
        ingest.writer_id,
        bridge.submit_queue_url,
        bridge.result_queue_url,
    )

    tasks = [asyncio.create_task(forwarder.run()), asyncio.create_task(ingest.run())]
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
    code = 0
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            log.error("cordum-bridge task failed: %r", task.exception())
            code = 1
    stopper.cancel()

    forwarder.stop()
    ingest.stop()
    _, pending = await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S)
    for task in pending:
        task.cancel()
    await forwarder.close()
    await ingest.close()
    await flusher.close()
    try:
        await asyncio.wait_for(nc.drain(), timeout=DRAIN_TIMEOUT_S)
    except Exception as exc:
        log.error("nats drain: %s: %s", type(exc).__name__, exc)
        await nc.close()
    await redis.aclose()
    runtime.reset()
    log.info("cordum-bridge stopped: exit=%d", code)
    return code


async def _main_async(settings: Settings, bridge: BridgeSettings) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return await serve(settings, bridge, stop=stop)


def main() -> None:
    from cordum.config import load_settings

    try:
        bridge = load_bridge_settings()
        configure_logging(bridge.log_level)
        settings = load_settings()
    except ConfigError as exc:
        logging.basicConfig()
        log.error("cordum-bridge: bad configuration: %s", exc)
        raise SystemExit(2) from exc
    try:
        code = asyncio.run(_main_async(settings, bridge))
    except Exception as exc:
        log.error("cordum-bridge failed: %s: %s", type(exc).__name__, exc)
        code = 1
    raise SystemExit(code)


if __name__ == "__main__":
    main()
