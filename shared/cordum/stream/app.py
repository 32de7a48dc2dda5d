"""The HTTP side of cordum-stream: routes, the checks before a stream starts, and the
one place a refusal becomes an answer (``{"error", "code", "status"}``).

- ``GET /api/v1/stream``: the caller's tenant's events (every tenant's for a ``"*"``
  key that names none);
- ``GET /api/v1/jobs/{id}/stream``: ``job.state``, then that job's events, ended after
  the event that reports its end; 404 for an unknown job or another tenant's;
- ``GET /health``: 200 ``{"status": "ok"}`` while Redis and NATS answer, else 503.

A stream is a WebSocket when the request upgrades, Server-Sent Events when it accepts
``text/event-stream``, else 406. Query: ``types``, ``topic``, ``job_id``, ``run_id``
(``events.Filters``), ``since`` (or SSE's ``Last-Event-ID``) to resume, ``envelope=1``
(WebSocket). Before anything is streamed: the key (401, 403, 503 when no key source was
ever read), the request (400), the job (404), the key's open streams on this replica
(429 past STREAM_MAX_CONNECTIONS_PER_KEY), the tenant's log (503).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

from cordum.store.jobs import meta_key
from cordum.stream.errors import (
    InvalidRequest,
    NotAcceptable,
    NotFound,
    StreamError,
    TooManyStreams,
    Unavailable,
)
from cordum.stream.events import Filters, parse_id
from cordum.stream.job_view import job_view
from cordum.stream.jobmeta import TENANT_LOOKUP_TIMEOUT_S
from cordum.stream.keys import offered_subprotocol
from cordum.stream.session import (
    PING_INTERVAL_S,
    ClientGone,
    Session,
    SessionLimits,
    StreamRequest,
)
from cordum.stream.transports import SseTransport, WebSocketTransport
from cordum.text import as_text

if TYPE_CHECKING:
    from cordum.stream.counters import StreamCounters
    from cordum.stream.eventlog import EventLog
    from cordum.stream.hub import Hub
    from cordum.stream.jobmeta import JobMeta
    from cordum.stream.keys import Caller, StreamAuth

log = logging.getLogger(__name__)

HEALTH_TIMEOUT_S = 2.0
"""Each part's answer to the health check (Redis PING, a NATS round trip)."""
READER_CLOSE_S = 2.0
"""After the server closed a WebSocket, how long the client's close frame is awaited."""
EVENT_STREAM = "text/event-stream"


@dataclass(slots=True)
class StreamContext:
    """What the handlers share: one per service."""

    auth: StreamAuth
    hub: Hub
    log: EventLog
    meta: JobMeta
    redis: Any
    nc: Any
    counters: StreamCounters
    limits: SessionLimits
    max_per_key: int
    sessions: set[Session] = field(default_factory=set)
    per_key: Counter[str] = field(default_factory=Counter)


CONTEXT = web.AppKey("stream", StreamContext)


def error_response(exc: StreamError) -> web.Response:
    headers = {"X-Request-Id": str(uuid.uuid4())}
    if exc.retry_after_s is not None:
        headers["Retry-After"] = str(int(exc.retry_after_s))
    return web.json_response(exc.body(), status=exc.status, headers=headers)


@web.middleware
async def errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        return await handler(request)  # type: ignore[no-any-return]
    except StreamError as exc:
        return error_response(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return web.json_response({"error": exc.reason, "code": exc.reason.lower()
                                  .replace(" ", "_"), "status": exc.status},
                                 status=exc.status)
    except Exception:
        log.exception("request %s failed", request.path)
        return web.json_response({"error": "internal error", "code": "internal_error",
                                  "status": 500}, status=500)


async def health(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    parts = {"redis": "ok", "nats": "ok"}
    try:
        await asyncio.wait_for(ctx.redis.ping(), HEALTH_TIMEOUT_S)
    except Exception:
        parts["redis"] = "unavailable"
    try:
        if not ctx.nc.is_connected:
            raise ConnectionError
        await ctx.nc.flush(timeout=HEALTH_TIMEOUT_S)
    except Exception:
        parts["nats"] = "unavailable"
    if all(v == "ok" for v in parts.values()):
        return web.json_response({"status": "ok"})
    return web.json_response({"status": "unavailable", **parts}, status=503)


async def tenant_stream(request: web.Request) -> web.StreamResponse:
    return await _stream(request, "")


async def job_stream(request: web.Request) -> web.StreamResponse:
    return await _stream(request, request.match_info["id"])


def _since(request: web.Request, query: dict[str, str], sse: bool) -> str:
    since = query.get("since", "").strip()
    if not since and sse:
        since = request.headers.get("Last-Event-ID", "").strip()
    if since:
        try:
            parse_id(since)
        except ValueError:
            raise InvalidRequest("since is not an event id", "invalid_since") from None
    return since


async def _job_caller(ctx: StreamContext, caller: Caller, job_id: str) -> Caller:
    """The caller scoped to the job's tenant; 404 when the job is unknown or another
    tenant's (its existence is not told)."""
    try:
        raw = await asyncio.wait_for(ctx.redis.hget(meta_key(job_id), "tenant"),
                                     TENANT_LOOKUP_TIMEOUT_S)
    except Exception:
        raise Unavailable("redis") from None
    tenant = as_text(raw)
    if not tenant or not caller.sees(tenant):
        raise NotFound
    return dataclasses.replace(caller, tenant=tenant)


async def _stream(request: web.Request, job_id: str) -> web.StreamResponse:
    ctx = request.app[CONTEXT]
    query = {name: request.query.get(name, "") for name in request.query}
    caller = await ctx.auth.authenticate(request.headers, query)
    filters = Filters.from_query(query, job_id=job_id)
    answered = offered_subprotocol(request.headers)
    # No permessage-deflate: a compressor is ~210 KiB per connection once it is sent a
    # frame (230 MiB for 1,000 browsers, BENCHMARKS.md) and CPU per frame per client;
    # frames are under 1 KiB of JSON.
    ws = web.WebSocketResponse(protocols=(answered,) if answered else (),
                               heartbeat=PING_INTERVAL_S, compress=False)
    upgrade = ws.can_prepare(request).ok
    if not upgrade and EVENT_STREAM not in request.headers.get("Accept", ""):
        raise NotAcceptable
    since = _since(request, query, sse=not upgrade)
    view: Any = None
    if job_id:
        caller = await _job_caller(ctx, caller, job_id)

        async def view() -> tuple[dict[str, Any], bool]:
            return await job_view(ctx.redis, job_id, output_policy=ctx.meta.output_policy)
    elif since and caller.tenant is None:
        raise InvalidRequest("a stream of every tenant cannot resume: name a tenant "
                             "(X-Tenant-ID) to resume", "resume_needs_tenant")
    if ctx.per_key[caller.key_id] >= ctx.max_per_key:
        raise TooManyStreams(ctx.max_per_key)
    # The slot is taken before the first await, so requests of one key that arrive
    # together cannot all pass the check.
    ctx.per_key[caller.key_id] += 1
    try:
        session = Session(StreamRequest(caller, filters, since, job_id), ctx.hub, ctx.log,
                          ctx.auth, ctx.counters, ctx.limits, job_view=view)
        try:
            await session.open()
        except Exception as exc:
            log.error("stream not opened: %s: %s", type(exc).__name__, exc)
            raise Unavailable("redis") from None
        ctx.counters.connections += 1
        ctx.sessions.add(session)
        try:
            if upgrade:
                return await _websocket(request, ws, session,
                                        envelope=query.get("envelope") == "1")
            return await _event_stream(request, session)
        finally:
            session.abandon()
            ctx.sessions.discard(session)
            ctx.counters.connections -= 1
    finally:
        ctx.per_key[caller.key_id] -= 1
        if ctx.per_key[caller.key_id] <= 0:
            del ctx.per_key[caller.key_id]


async def _drain(ws: web.WebSocketResponse) -> None:
    """Read what the client sends (nothing is expected): pongs and its close frame."""
    async for msg in ws:
        if msg.type == WSMsgType.ERROR:
            return


async def _websocket(request: web.Request, ws: web.WebSocketResponse, session: Session, *,
                     envelope: bool) -> web.StreamResponse:
    await ws.prepare(request)
    reader = asyncio.create_task(_drain(ws))
    runner = asyncio.create_task(session.run(WebSocketTransport(ws, envelope=envelope)))
    try:
        await asyncio.wait({reader, runner}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not runner.done():  # the client left first
            runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        try:
            await asyncio.wait_for(asyncio.shield(reader), READER_CLOSE_S)
        except (TimeoutError, asyncio.CancelledError):
            reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    return ws


async def _event_stream(request: web.Request, session: Session) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": EVENT_STREAM,
                                           "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    transport = SseTransport(response, with_ids=session.caller.tenant is not None)
    try:
        await transport.start()
    except ClientGone:
        return response
    await session.run(transport)
    return response


def build_app(ctx: StreamContext) -> web.Application:
    app = web.Application(middlewares=[errors])
    app[CONTEXT] = ctx
    app.router.add_get("/health", health)
    app.router.add_get("/api/v1/stream", tenant_stream)
    app.router.add_get("/api/v1/jobs/{id}/stream", job_stream)
    return app
