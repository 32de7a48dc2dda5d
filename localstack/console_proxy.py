"""The console server's proxies (web_console.py): a request passed on to the REST API,
or to the live event stream as Server-Sent Events or a WebSocket, as CloudFront passes
it on AWS.

What is passed: method, path and query as the browser encoded them, the body, and the
headers less the hop-by-hop ones (RFC 9110, 7.6.1), those ``Connection`` names, and
``Host`` (the upstream's own is sent), with ``X-Forwarded-For/Host/Proto`` added;
back: status, headers (less the same) and body. A refusal of the console itself is
a JSON answer in the API's error shape (``{"error", "code", "status"}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

import aiohttp
from aiohttp import WSMsgType, web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
    "proxy-connection", "te", "trailer", "trailers", "transfer-encoding", "upgrade",
})
"""Headers of one connection, never passed on."""
WEBSOCKET_HANDSHAKE = frozenset({
    "sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
    "sec-websocket-protocol", "sec-websocket-accept",
})
"""Each side of a proxied WebSocket makes its own handshake (the offered subprotocols
are passed on as such)."""

log = logging.getLogger("web_console")


@dataclass(frozen=True, slots=True)
class ProxyLimits:
    """What the console allows a proxied request, as API Gateway does on AWS."""

    max_body_bytes: int = 6 * 1024 * 1024
    """A request body over this is refused with 413 (API Gateway's payload limit)."""
    timeout_s: float = 29.0
    """A REST answer not complete after this is a 504 (API Gateway's integration limit)."""
    connect_timeout_s: float = 5.0
    """An upstream that does not accept a connection within this is down (502)."""
    ws_heartbeat_s: float = 30.0
    """The browser side of a WebSocket is pinged this often, so a browser gone without a
    word frees its stream."""


def passed_headers(headers: CIMultiDictProxy[str] | CIMultiDict[str],
                   drop: frozenset[str] = frozenset()) -> CIMultiDict[str]:
    """``headers`` less the hop-by-hop ones, those ``Connection`` names, ``Host`` and
    ``Content-Length`` (the sender sets both again), and ``drop``."""
    named = {token.strip().lower() for value in headers.getall("Connection", [])
             for token in value.split(",")}
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        lower = name.lower()
        if lower in HOP_BY_HOP or lower in named or lower in drop \
                or lower in ("host", "content-length"):
            continue
        out.add(name, value)
    return out


def upstream_headers(request: web.Request, drop: frozenset[str] = frozenset()
                     ) -> CIMultiDict[str]:
    headers = passed_headers(request.headers, drop)
    if request.remote:
        previous = request.headers.get("X-Forwarded-For")
        headers["X-Forwarded-For"] = f"{previous}, {request.remote}" if previous \
            else request.remote
    headers["X-Forwarded-Host"] = request.host
    headers["X-Forwarded-Proto"] = request.scheme
    return headers


def error(status: int, message: str, code: str) -> web.Response:
    return web.json_response({"error": message, "code": code, "status": status}, status=status)


def unavailable(what: str) -> web.Response:
    return error(502, f"the {what} does not answer", "upstream_unavailable")


def too_large(limits: ProxyLimits) -> web.Response:
    return error(413, f"the request body is over {limits.max_body_bytes} bytes",
                 "payload_too_large")


class BodyTooLarge(Exception):
    pass


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole body, refused (BodyTooLarge) past ``limit`` bytes, whether it was
    announced (``Content-Length``) or sent in chunks."""
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge
    chunks, size = [], 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def target(base: str, request: web.Request) -> URL:
    """``base`` + the request's path and query, as the browser encoded them."""
    return URL(base + request.raw_path, encoded=True)


async def proxy_rest(request: web.Request, client: aiohttp.ClientSession, base: str,
                     limits: ProxyLimits) -> web.StreamResponse:
    """The REST API's answer, whole (API Gateway buffers it too)."""
    try:
        body = await read_body(request, limits.max_body_bytes)
    except BodyTooLarge:
        return too_large(limits)
    timeout = aiohttp.ClientTimeout(total=limits.timeout_s, sock_connect=limits.connect_timeout_s)
    try:
        async with client.request(request.method, target(base, request),
                                  headers=upstream_headers(request), data=body or None,
                                  timeout=timeout, allow_redirects=False) as answer:
            raw = await answer.read()
            return web.Response(status=answer.status, reason=answer.reason, body=raw,
                                headers=passed_headers(answer.headers))
    except aiohttp.ConnectionTimeoutError:
        return unavailable("REST API")
    except TimeoutError:
        return error(504, f"the REST API did not answer within {limits.timeout_s:g} s",
                     "upstream_timeout")
    except aiohttp.ClientError as exc:
        log.warning("REST API %s: %s", base, exc)
        return unavailable("REST API")


async def proxy_stream(request: web.Request, client: aiohttp.ClientSession, base: str,
                       limits: ProxyLimits) -> web.StreamResponse:
    """The stream's answer, passed on chunk by chunk; a WebSocket upgrade is relayed."""
    if is_websocket(request):
        return await proxy_websocket(request, client, base, limits)
    try:
        body = await read_body(request, limits.max_body_bytes)
    except BodyTooLarge:
        return too_large(limits)
    # No total timeout: a stream lasts as long as the browser keeps it.
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=limits.connect_timeout_s)
    try:
        answer = await client.request(request.method, target(base, request),
                                      headers=upstream_headers(request), data=body or None,
                                      timeout=timeout, allow_redirects=False)
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.warning("stream %s: %s", base, exc)
        return unavailable("live event stream")
    response = web.StreamResponse(status=answer.status, reason=answer.reason,
                                  headers=passed_headers(answer.headers))
    try:
        await response.prepare(request)
        # Each chunk is written as it arrives: an event must not wait for the next one.
        async for chunk in answer.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
    except (ConnectionResetError, aiohttp.ClientPayloadError):
        pass  # the browser or the stream went away: the other side is closed here
    finally:
        answer.close()
    return response


def is_websocket(request: web.Request) -> bool:
    """Whether ``request`` asks for a WebSocket (its handshake is checked when answered)."""
    connection = {t.strip().lower() for t in request.headers.get("Connection", "").split(",")}
    return request.method == "GET" and "upgrade" in connection \
        and request.headers.get("Upgrade", "").lower() == "websocket"


async def proxy_websocket(request: web.Request, client: aiohttp.ClientSession, base: str,
                          limits: ProxyLimits) -> web.StreamResponse:
    """The stream's WebSocket, opened first with the browser's offered subprotocols; the
    browser's handshake answers the one the stream chose."""
    offered = [p.strip() for value in request.headers.getall("Sec-WebSocket-Protocol", [])
               for p in value.split(",") if p.strip()]
    url = target(base, request).with_scheme("wss" if base.startswith("https:") else "ws")
    try:
        upstream = await client.ws_connect(
            url, protocols=offered, headers=upstream_headers(request, WEBSOCKET_HANDSHAKE),
            timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=limits.connect_timeout_s),
        )
    except aiohttp.WSServerHandshakeError as exc:
        status = exc.status if exc.status >= 400 else 502
        return error(status, f"the live event stream refused the WebSocket ({exc.status})",
                     "upstream_refused")
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.warning("stream %s: %s", base, exc)
        return unavailable("live event stream")
    browser = web.WebSocketResponse(
        protocols=(upstream.protocol,) if upstream.protocol else (), compress=False,
        heartbeat=limits.ws_heartbeat_s)
    try:
        await browser.prepare(request)
        await relay(browser, upstream)
    finally:
        await upstream.close()
    return browser


async def relay(browser: web.WebSocketResponse, upstream: aiohttp.ClientWebSocketResponse
                ) -> None:
    """Frames both ways until one side closes; the other is closed with its code and
    reason."""

    async def pump(source: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
                   sink: web.WebSocketResponse | aiohttp.ClientWebSocketResponse) -> None:
        while True:
            msg = await source.receive()
            if msg.type is WSMsgType.TEXT:
                await sink.send_str(msg.data)
            elif msg.type is WSMsgType.BINARY:
                await sink.send_bytes(msg.data)
            else:  # CLOSE, CLOSING, CLOSED, ERROR
                reason = msg.extra if msg.type is WSMsgType.CLOSE and msg.extra else ""
                # A close frame's reason is at most 123 bytes.
                await sink.close(code=close_code(source.close_code),
                                 message=str(reason).encode()[:123])
                return

    tasks = [asyncio.ensure_future(pump(upstream, browser)),
             asyncio.ensure_future(pump(browser, upstream))]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, ConnectionResetError,
                                     aiohttp.ClientError):
                await task


def close_code(code: int | None) -> int:
    """A code one may send: 1005 (none given) is a normal close, 1006 (dropped) an error."""
    if code is None or code == 1005:
        return 1000
    return 1011 if code == 1006 else code
