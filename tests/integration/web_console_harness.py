"""What tests/integration/test_console_server.py starts: the console server
(localstack/web_console.py) in front of real aiohttp servers of its own, a REST API
behind LocalStack's stage prefix and a live stream that speaks Server-Sent Events and
WebSocket, with a dist/ made per test; and the clients that read what comes back."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "localstack"))

from console_proxy import ProxyLimits  # noqa: E402  (localstack/console_proxy.py)
from web_console import (  # noqa: E402  (localstack/web_console.py)
    ConsoleSettings,
    build_app,
    security_headers,
)

STAGE = "/restapis/r1/local/_user_request_"
"""LocalStack's path form of the REST API (stack.api_url)."""
SECRET = "TOP-SECRET-NEXT-TO-DIST"
INDEX = "<!doctype html><title>Cordum</title><script type=module src=/assets/app-1.js></script>"
EXPECTED_HEADERS = {k: v for k, v in json.loads(
    (ROOT / "dashboard" / "security-headers.json").read_text()).items()
    if not k.startswith("_") and k != "Strict-Transport-Security"}
TEST_TIMEOUT_S = 20.0


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, TEST_TIMEOUT_S))


# ---------------------------------------------------------------- the upstreams


@dataclass
class Upstreams:
    """What the fake REST API and stream saw, and what the tests make them do."""

    rest_calls: list[dict[str, Any]] = field(default_factory=list)
    offered_protocols: list[str] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)


def rest_app(seen: Upstreams) -> web.Application:
    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        call = {"method": request.method, "path": request.raw_path,
                "query": dict(request.query), "body": body.decode(errors="replace"),
                "headers": {k.lower(): v for k, v in request.headers.items()}}
        seen.rest_calls.append(call)
        if request.path.endswith("/slow"):
            await asyncio.sleep(2)
        response = web.json_response(call, status=int(request.query.get("status", "200")))
        response.headers["X-Upstream"] = "rest"
        response.headers.add("Set-Cookie", "a=1; Path=/")
        response.headers.add("Set-Cookie", "b=2; Path=/")
        return response

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", STAGE + "/{tail:.*}", echo)
    return app


def stream_app(seen: Upstreams) -> web.Application:
    async def stream(request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(protocols=("cordum-api-key",))
        if ws.can_prepare(request).ok:
            seen.offered_protocols.append(request.headers.get("Sec-WebSocket-Protocol", ""))
            await ws.prepare(request)
            await ws.send_str(json.dumps({"hello": request.path}))
            async for msg in ws:
                if msg.type is aiohttp.WSMsgType.TEXT and msg.data == "close-me":
                    await ws.close(code=4001, message=b"bye")
                elif msg.type is aiohttp.WSMsgType.TEXT:
                    await ws.send_str("echo:" + msg.data)
                elif msg.type is aiohttp.WSMsgType.BINARY:
                    await ws.send_bytes(msg.data[::-1])
            return ws
        if request.headers.get("X-API-Key") != "k1":
            return web.json_response({"error": "no key", "code": "unauthorized",
                                      "status": 401}, status=401)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        await response.write(f"id: 1\nevent: first\ndata: {request.path}\n\n".encode())
        await seen.release.wait()  # the next event, and the end, only when the test says
        await response.write(b"id: 2\nevent: second\ndata: {}\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/api/v1/stream", stream)
    app.router.add_get("/api/v1/jobs/{id}/stream", stream)
    return app


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


def free_url() -> str:
    """A loopback URL where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def make_dist(tmp_path: Path) -> Path:
    (tmp_path / "secret.txt").write_text(SECRET)
    dist = tmp_path / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text(INDEX)
    (dist / "assets" / "app-1.js").write_text("console.log(1)")
    (dist / "favicon.svg").write_text("<svg/>")
    (dist / "leak.txt").symlink_to(tmp_path / "secret.txt")
    return dist


@dataclass
class Console:
    url: str
    seen: Upstreams
    http: aiohttp.ClientSession


@asynccontextmanager
async def console(tmp_path: Path, *, dist: Path | None = None, api_down: bool = False,
                  stream_down: bool = False) -> AsyncIterator[Console]:
    seen = Upstreams()
    rest_runner, rest_url = await serve(rest_app(seen))
    stream_runner, stream_url = await serve(stream_app(seen))
    settings = ConsoleSettings(
        api_url=(free_url() if api_down else rest_url) + STAGE,
        stream_url=free_url() if stream_down else stream_url,
        dist=make_dist(tmp_path) if dist is None else dist,
        headers=security_headers(),
        limits=ProxyLimits(timeout_s=0.5, connect_timeout_s=1.0),
    )
    runner, url = await serve(build_app(settings))
    try:
        async with aiohttp.ClientSession() as http:
            yield Console(url, seen, http)
    finally:
        seen.release.set()
        for each in (runner, stream_runner, rest_runner):
            await each.cleanup()


def assert_security_headers(headers: Any) -> None:
    for name, value in EXPECTED_HEADERS.items():
        assert headers.get(name) == value, name
    assert "Strict-Transport-Security" not in headers


async def raw_get(url: str, target: str) -> tuple[int, str]:
    """A request line sent as written (a client library would normalise the path)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, body = raw.decode(errors="replace").partition("\r\n\r\n")
    return int(head.split()[1]), body


async def next_event(content: aiohttp.StreamReader) -> dict[str, str]:
    """The next event's fields (a ``retry:`` alone, or a comment, is no event)."""
    fields: dict[str, str] = {}
    while True:
        line = (await asyncio.wait_for(content.readline(), 5)).decode().rstrip("\n")
        if not line:
            if "data" in fields:
                return fields
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = value
