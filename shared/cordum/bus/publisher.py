"""Publishing packets on NATS."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from cordum import runtime

if TYPE_CHECKING:
    from cordum.config import Settings
    from cordum.protocol import BusPacket


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

    async def publish(self, subject: str, msg: BusPacket) -> None:
        """Core NATS publish, flushed, for subjects workers listen on directly."""
        try:
            nc = await runtime.nats_client(self._cfg)
            await nc.publish(subject, msg.SerializeToString())
            await asyncio.wait_for(nc.flush(), timeout=self._cfg.publish_timeout_s)
        except Exception as exc:
            raise PublishError(f"publish {subject}: {type(exc).__name__}: {exc}") from exc
