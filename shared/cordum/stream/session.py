"""One client's stream, whatever carries it (``transports``): the order of what it is
sent, its buffer, its keepalive and its key's recheck.

The order, so that a client that resumes misses nothing and gets nothing twice:

1. register with the hub: live events queue up in the client's buffer from now on;
2. on the per-job stream, ``job.state``: the job as the API serves it;
3. with a resume id, the tenant's log after it (``stream.truncated`` first when not
   all of it can be replayed); the last id sent is remembered;
4. the buffered and then the live events, less those at or before the last id sent.

The buffer holds STREAM_CLIENT_BUFFER events; a client that lets it fill is closed
(1013) rather than slowing anyone else, and counted. Every PING_INTERVAL_S the
transport pings (a WebSocket's own ping is aiohttp's heartbeat); every
STREAM_KEY_RECHECK_S the key is looked up again, and a key no longer configured
ends the stream (1008 "credential revoked").
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from cordum.stream import events as ev
from cordum.stream.events import Event, id_after

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from cordum.stream.counters import StreamCounters
    from cordum.stream.eventlog import EventLog
    from cordum.stream.events import Filters
    from cordum.stream.hub import Hub
    from cordum.stream.keys import Caller, StreamAuth

log = logging.getLogger(__name__)

PING_INTERVAL_S = 30.0
"""A keepalive this often keeps proxies (API Gateway, load balancers: 60 s idle) from
closing a quiet stream."""


class Close(Enum):
    """Why a stream ends: (WebSocket close code, reason)."""

    FINISHED = (1000, "job finished")
    SHUTDOWN = (1001, "server shutting down")
    REVOKED = (1008, "credential revoked")
    UNAVAILABLE = (1011, "stream unavailable")
    SLOW = (1013, "client too slow")

    @property
    def code(self) -> int:
        return self.value[0]

    @property
    def reason(self) -> str:
        return self.value[1]


class ClientGone(Exception):
    """A write failed: the client stopped reading (``slow``: the write timed out) or
    went away."""

    def __init__(self, reason: str, *, slow: bool) -> None:
        super().__init__(reason)
        self.slow = slow


class Transport(Protocol):
    """Raises :class:`ClientGone` when a write fails."""

    async def send(self, event: Event) -> None: ...
    async def ping(self) -> None: ...
    async def close(self, why: Close) -> None: ...


@dataclass(frozen=True, slots=True)
class StreamRequest:
    """What a client asked for, checked."""

    caller: Caller
    filters: Filters
    since: str = ""
    """Resume after this id ('' for live only)."""
    job_id: str = ""
    """The per-job stream's job ('' for the tenant's stream)."""


@dataclass(frozen=True, slots=True)
class SessionLimits:
    buffer: int
    replay_max: int
    key_recheck_s: float
    ping_s: float = PING_INTERVAL_S


class Session:
    """A client of the hub; :meth:`run` drives its transport until the stream ends."""

    def __init__(self, request: StreamRequest, hub: Hub, log_: EventLog, auth: StreamAuth,
                 counters: StreamCounters, limits: SessionLimits, *,
                 job_view: Callable[[], Awaitable[tuple[dict[str, Any], bool]]] | None = None,
                 ) -> None:
        self.request = request
        self.caller = request.caller
        self.filters = request.filters
        self._hub = hub
        self._log = log_
        self._auth = auth
        self._counters = counters
        self._limits = limits
        self._job_view = job_view
        """The per-job stream's job as the API serves it, and whether it has ended."""
        self._queue: collections.deque[Event] = collections.deque()
        self._ready = asyncio.Event()
        self._overflow = False
        self._closing: Close | None = None
        self._last = request.since

    def offer(self, event: Event) -> None:
        if len(self._queue) >= self._limits.buffer:
            self._overflow = True
        else:
            self._queue.append(event)
        self._ready.set()

    def shut(self, why: Close = Close.SHUTDOWN) -> None:
        """End the stream from outside (the service stops)."""
        self._closing = self._closing or why
        self._ready.set()

    async def open(self) -> None:
        """Register with the hub (step 1): live events buffer up from now on. Raises
        when the tenant's log cannot be read; :meth:`run` must follow, else
        :meth:`abandon`."""
        await self._hub.register(self)

    def abandon(self) -> None:
        self._hub.unregister(self)

    async def run(self, transport: Transport) -> Close | None:
        """Stream until the stream ends, and say why (None: the client went away). A
        client that leaves also cancels the task that runs this (the WebSocket's
        reader, aiohttp's handler cancellation)."""
        try:
            try:
                why = await self._stream(transport)
            except ClientGone as exc:
                if not exc.slow:
                    return None
                # Counted with the full buffers: either way the client fell behind.
                self._counters.slow_closed += 1
                log.info("stream of key %s closed: write timed out", self.caller.key_id)
                why = Close.SLOW
            except Exception as exc:  # Redis gone mid-replay, a malformed job: end it
                log.error("stream of key %s failed: %s: %s", self.caller.key_id,
                          type(exc).__name__, exc)
                why = Close.UNAVAILABLE
            await transport.close(why)
            return why
        finally:
            self.abandon()

    async def _send(self, transport: Transport, event: Event) -> None:
        await transport.send(event)
        self._counters.frames_sent += 1
        if event.id and event.tenant is not None and self.caller.tenant is not None:
            self._last = event.id

    async def _stream(self, transport: Transport) -> Close:
        finished = False
        if self._job_view is not None:
            view, finished = await self._job_view()
            await self._send(transport, Event(ev.JOB_STATE, view, self.caller.tenant))
        if self.request.since and self.caller.tenant is not None:
            if await self._replay(transport, self.caller.tenant):
                return Close.FINISHED
        if finished:
            return Close.FINISHED
        return await self._live(transport)

    async def _replay(self, transport: Transport, tenant: str) -> bool:
        """Send the log after the resume id; True when it held the job's end."""
        replay = await self._log.replay(tenant, self.request.since, self._limits.replay_max)
        if replay.truncated:
            await self._send(transport, Event(ev.STREAM_TRUNCATED, {
                "reason": replay.truncated, "since": self.request.since,
                "skipped_to": replay.skipped_to or None, "limit": self._limits.replay_max},
                tenant))
        for event in replay.events:
            if self.filters.matches(event):
                await self._send(transport, event)
                if self.request.job_id and event.final:
                    return True
        self._last = replay.resume_after
        return False

    def _replayed(self, event: Event) -> bool:
        """Sent by the replay already (ids order only within one tenant's log)."""
        return (self.caller.tenant is not None and bool(event.id)
                and event.tenant is not None and not id_after(event.id, self._last))

    async def _live(self, transport: Transport) -> Close:
        now = time.monotonic()
        next_ping = now + self._limits.ping_s
        next_check = now + self._limits.key_recheck_s
        while True:
            if self._closing is not None:
                return self._closing
            if self._overflow:
                self._counters.slow_closed += 1
                log.info("stream of key %s closed: buffer full", self.caller.key_id)
                return Close.SLOW
            now = time.monotonic()
            if now >= next_check:
                if not await self._auth.still_valid(self.caller):
                    log.info("stream of key %s closed: key revoked", self.caller.key_id)
                    return Close.REVOKED
                next_check = time.monotonic() + self._limits.key_recheck_s
            if now >= next_ping:
                await transport.ping()
                next_ping = now + self._limits.ping_s
            if self._queue:
                event = self._queue.popleft()
                if self._replayed(event):
                    continue
                await self._send(transport, event)
                if self.request.job_id and event.final:
                    return Close.FINISHED
                continue
            self._ready.clear()
            wait = min(next_ping, next_check) - time.monotonic()
            try:
                await asyncio.wait_for(self._ready.wait(), max(wait, 0.0))
            except TimeoutError:
                pass
