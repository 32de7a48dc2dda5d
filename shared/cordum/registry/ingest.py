"""Heartbeat ingest: ``sys.heartbeat`` -> ``LiveRegistry`` -> ``SnapshotWriter``.

Every bridge replica subscribes ``sys.heartbeat`` (core NATS, no queue group),
keeps the live workers in memory and, holding the snapshot writer lock, writes
``sys:workers:snapshot`` every interval and as soon as a new worker shows up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from cordum.protocol import SUBJECT_HEARTBEAT, InvalidPacket, decode
from cordum.registry.live import LiveRegistry
from cordum.registry.snapshot import SNAPSHOT_INTERVAL_S
from cordum.registry.writer import new_writer_id

if TYPE_CHECKING:
    import nats.aio.client
    import nats.aio.msg
    import nats.aio.subscription

    from cordum.registry.writer import SnapshotWriter

log = logging.getLogger(__name__)


class HeartbeatIngest:
    """sys.heartbeat -> ``LiveRegistry`` -> ``SnapshotWriter``, every interval and on news."""

    def __init__(
        self,
        nc: nats.aio.client.Client,
        writer: SnapshotWriter,
        topics: Mapping[str, str],
        *,
        subject: str = SUBJECT_HEARTBEAT,
        interval_s: float = SNAPSHOT_INTERVAL_S,
        registry: LiveRegistry | None = None,
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
        self.registry = registry if registry is not None else LiveRegistry()
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
