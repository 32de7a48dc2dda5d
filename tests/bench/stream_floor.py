"""The floor of ``bench_stream``'s fan-out: the least a server can do to put the same
events in front of the same clients.

A bare aiohttp server: ``GET /api/v1/stream`` upgrades to a WebSocket (answering the
``cordum-api-key`` subprotocol, no key checked) or answers Server-Sent Events, and keeps
the connection in a set. A NATS subscriber on ``sys.job.submit`` turns each packet of the
benchmark's tenant into its protojson text once and writes it to every connection in
turn, from the NATS callback: no job meta read, no tenant log, no per-client queue or
task, no filters. ``GET /health`` answers 200.

    python -m tests.bench.stream_floor --port N --tenant T --nats-url URL
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
from typing import Any

from aiohttp import web

SUBPROTOCOL = "cordum-api-key"


class Floor:
    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        self.sockets: set[web.WebSocketResponse] = set()
        self.streams: set[web.StreamResponse] = set()

    async def stream(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(protocols=(SUBPROTOCOL,))
        if not ws.can_prepare(request).ok:
            return await self.sse(request)
        await ws.prepare(request)
        self.sockets.add(ws)
        try:
            async for _ in ws:
                pass
        finally:
            self.sockets.discard(ws)
        return ws

    async def sse(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        self.streams.add(response)
        try:
            await asyncio.Event().wait()  # until the client leaves (handler cancelled)
        finally:
            self.streams.discard(response)
        return response

    async def on_msg(self, msg: Any) -> None:
        from google.protobuf import json_format

        from cordum import protocol

        packet = protocol.BusPacket.FromString(msg.data)
        if packet.job_request.tenant_id != self.tenant:
            return
        text = json.dumps(json_format.MessageToDict(packet), separators=(",", ":"))
        sse = f"event: job.submit\ndata: {text}\n\n".encode()
        for ws in list(self.sockets):
            with contextlib.suppress(ConnectionError, RuntimeError):
                await ws.send_str(text)
        for response in list(self.streams):
            with contextlib.suppress(ConnectionError, RuntimeError):
                await response.write(sse)


async def serve(port: int, tenant: str, nats_url: str) -> None:
    import nats

    floor = Floor(tenant)
    nc = await nats.connect(nats_url, name="cordum-bench-stream-floor-server")
    await nc.subscribe("sys.job.submit", cb=floor.on_msg)
    app = web.Application()
    app.router.add_get("/api/v1/stream", floor.stream)

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app.router.add_get("/health", health)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()
    await nc.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--nats-url", required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.tenant, args.nats_url))


if __name__ == "__main__":
    main()
