"""How an event is written to a client: WebSocket messages or Server-Sent Events.

WebSocket: one text message per event. By default the frame alone, as Cordum's
stream sends it (a BusPacket's protojson; an event that is no packet is a JSON object
whose ``type`` names it: ``workflow.run`` as published, ``job.state`` and
``stream.truncated`` with ``type`` added). With ``?envelope=1``,
``{"id", "type", "data"}``: how a WebSocket client learns the ids it resumes from.

SSE: ``id: <event id>`` (for a stream of one tenant, whose ids order), ``event:
<type>``, ``data: <frame>``, a blank line; ``retry: 2000`` first, and ``: ping``
comments as keepalive.

Every write has WRITE_TIMEOUT_S: a client that stops reading is closed like one whose
buffer filled (1013), not waited for.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from cordum.stream import events as ev
from cordum.stream.session import ClientGone, Close

if TYPE_CHECKING:
    from aiohttp import web

    from cordum.stream.events import Event

WRITE_TIMEOUT_S = 5.0
"""One frame's write: Cordum's write deadline."""
SSE_RETRY_MS = 2000
"""What an EventSource waits before it reconnects (sending Last-Event-ID)."""


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def raw_frame(event: Event) -> dict[str, Any]:
    """The frame a Cordum client expects: the packet's protojson, or a typed object."""
    if event.type in ev.PACKET_TYPES or event.data.get("type") == event.type:
        return event.data
    return {"type": event.type, **event.data}


def ws_text(event: Event, *, envelope: bool) -> str:
    """The WebSocket frame of ``event`` (encoded once per event, kept on it)."""
    kind = "ws-envelope" if envelope else "ws"
    text = event.texts.get(kind)
    if text is None:
        if envelope:
            text = _json({"id": event.id or None, "type": event.type, "data": event.data})
        else:
            text = _json(raw_frame(event))
        event.texts[kind] = text
    return text


def sse_text(event: Event, *, with_id: bool) -> str:
    head = f"id: {event.id}\n" if with_id and event.id else ""
    data = event.texts.get("data")
    if data is None:
        data = event.texts["data"] = _json(event.data)
    return f"{head}event: {event.type}\ndata: {data}\n\n"


async def _bounded(write: Any) -> None:
    try:
        await asyncio.wait_for(write, WRITE_TIMEOUT_S)
    except TimeoutError as exc:
        raise ClientGone("write timed out", slow=True) from exc
    except (ConnectionError, RuntimeError) as exc:
        # RuntimeError: aiohttp's "cannot write to closing transport".
        raise ClientGone(type(exc).__name__, slow=False) from exc


class WebSocketTransport:
    def __init__(self, ws: web.WebSocketResponse, *, envelope: bool) -> None:
        self._ws = ws
        self._envelope = envelope

    async def send(self, event: Event) -> None:
        await _bounded(self._ws.send_str(ws_text(event, envelope=self._envelope)))

    async def ping(self) -> None:
        """aiohttp's heartbeat pings the client (and closes it when no pong comes)."""

    async def close(self, why: Close) -> None:
        try:
            await asyncio.wait_for(self._ws.close(code=why.code, message=why.reason.encode()),
                                   WRITE_TIMEOUT_S)
        except (TimeoutError, ConnectionError, RuntimeError):
            pass


class SseTransport:
    def __init__(self, response: web.StreamResponse, *, with_ids: bool) -> None:
        self._response = response
        self._with_ids = with_ids

    async def start(self) -> None:
        await _bounded(self._response.write(f"retry: {SSE_RETRY_MS}\n\n".encode()))

    async def send(self, event: Event) -> None:
        await _bounded(self._response.write(sse_text(event, with_id=self._with_ids).encode()))

    async def ping(self) -> None:
        await _bounded(self._response.write(b": ping\n\n"))

    async def close(self, why: Close) -> None:
        """An event stream has no close code: it ends (the reason is logged)."""
        try:
            await asyncio.wait_for(self._response.write_eof(), WRITE_TIMEOUT_S)
        except (TimeoutError, ConnectionError, RuntimeError):
            pass
