"""The JetStream -> SQS forwarder: durable pull consumers, ack after the queue accepted.

Three durable pull consumers on the job stream feed two queues:
``sys.job.submit`` to the submit queue, ``sys.job.result`` and ``sys.job.cancel``
to the result queue. A JetStream message is acked only once the queue accepted
it; refused ones are NAKed with a delay and come back.

Crash safety (``cordum.bus.guard``). Before a send each message is claimed in
Redis: one already forwarded (its ack was lost) is acked without a second send,
one another replica is sending is NAKed. A message that cannot be forwarded any
more (too large for SQS, delivery limit, poison threshold) gets a Redis DLQ
record first and is terminated only once that record is stored; otherwise it is
NAKed and comes back. Without Redis forwarding goes on, at least once.

Replicas: the pull consumers share work between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cordum.bus.forward_policy import FORWARD_COUNTERS, ForwardPolicy, Route
from cordum.bus.guard import BusGuard, ClaimStatus, DeadLetter
from cordum.bus.queue import ATTR_BUS_MSG_ID, ATTR_JOB_ID, QueueMessage, chunks, queue_message

if TYPE_CHECKING:
    import nats.aio.msg
    import nats.js

log = logging.getLogger(__name__)


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
        for chunk in chunks([item.qm for item in sendable], self._policy.max_message_bytes):
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

