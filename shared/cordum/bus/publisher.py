"""Publishing packets on NATS: the publishers' shapes, and the runtime's publisher.

The shapes are what a caller asks of a publisher, so the scheduler, the workflow
outbox and the bridge's pool flush each take what they need (a test hands in
anything of the same shape) and none of them names another's type.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from cordum import runtime

if TYPE_CHECKING:
    from cordum.config import Settings
    from cordum.protocol import BusPacket


class BusPublisher(Protocol):
    """Publishes on core NATS, for subjects workers listen on directly: dispatches,
    cancels, DLQ notices (``NatsPublisher``)."""

    async def publish(self, subject: str, msg: BusPacket) -> None: ...


class DurablePublisher(Protocol):
    """Publishes on a JetStream subject, stored once per message id (``NatsPublisher``;
    the bridge's ``bus.flush.JetStreamPublisher``)."""

    async def publish_durable(self, subject: str, msg: BusPacket, *, msg_id: str) -> None: ...


class JobPublisher(BusPublisher, DurablePublisher, Protocol):
    """Both: new jobs go out durably, the notices about jobs on core NATS. What the saga
    (compensation jobs, DLQ entries) and the workflow outbox (step jobs, cancels) take
    (``NatsPublisher``)."""


@runtime_checkable
class NewsPublisher(Protocol):
    """Publishes plain bytes: what the workflow engine tells the live stream."""

    async def publish_bytes(self, subject: str, data: bytes) -> None: ...


class PublishError(RuntimeError):
    """NATS did not take the packet; the caller may retry."""

    retryable = True


class NatsPublisher:
    """JetStream publishes wait for the stream's ack: only then is a packet accepted."""

    def __init__(self, cfg: Settings) -> None:
        self._cfg = cfg

    async def publish_durable(self, subject: str, msg: BusPacket, *, msg_id: str) -> None:
        try:
            js = await runtime.jetstream(self._cfg)
            await js.publish(
                subject,
                msg.SerializeToString(),
                timeout=self._cfg.publish_timeout_s,
                headers={"Nats-Msg-Id": msg_id},
            )
        except Exception as exc:
            raise PublishError(f"publish {subject}: {type(exc).__name__}: {exc}") from exc

    async def publish_bytes(self, subject: str, data: bytes) -> None:
        """Core NATS publish of a message that is no BusPacket (a run's news), flushed."""
        try:
            nc = await runtime.nats_client(self._cfg)
            await nc.publish(subject, data)
            await asyncio.wait_for(nc.flush(), timeout=self._cfg.publish_timeout_s)
        except Exception as exc:
            raise PublishError(f"publish {subject}: {type(exc).__name__}: {exc}") from exc

    async def publish(self, subject: str, msg: BusPacket) -> None:
        """Core NATS publish, flushed, for subjects workers listen on directly."""
        try:
            nc = await runtime.nats_client(self._cfg)
            await nc.publish(subject, msg.SerializeToString())
            await asyncio.wait_for(nc.flush(), timeout=self._cfg.publish_timeout_s)
        except Exception as exc:
            raise PublishError(f"publish {subject}: {type(exc).__name__}: {exc}") from exc
