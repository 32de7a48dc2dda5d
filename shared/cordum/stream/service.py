"""cordum-stream: live job, worker and workflow events over WebSocket and SSE.

``python -m cordum.stream``. Built like the bridge: settings read at start (bad ones
exit 2), a NATS connection that waits for its server (a SIGTERM during that wait is
heard), the process's Redis client, SIGTERM/SIGINT to stop. Several replicas run
behind one load balancer: the taps' queue group makes one of them write each event,
the hub of each serves its own clients (``writer``, ``hub``).

Stopping: no new streams; each open one is ended (WebSocket 1001, SSE ends; a client
resumes elsewhere from its last id), the writes in flight get ``writer.STOP_TIMEOUT_S``,
then NATS is drained.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import TYPE_CHECKING, Any

from aiohttp import web

from cordum import runtime
from cordum.config import ConfigError
from cordum.stream.app import StreamContext, build_app
from cordum.stream.counters import MetricsReporter, StreamCounters
from cordum.stream.eventlog import EventLog
from cordum.stream.hub import Hub
from cordum.stream.jobmeta import JobMeta
from cordum.stream.keys import StreamAuth
from cordum.stream.session import Close, SessionLimits
from cordum.stream.settings import StreamSettings, load_stream_settings
from cordum.stream.writer import TapWriter

if TYPE_CHECKING:
    from cordum.config import Settings

log = logging.getLogger("cordum.stream")

SHUTDOWN_GRACE_S = 2.0
"""After the open streams are told to end, how long their handlers get to finish."""
DRAIN_TIMEOUT_S = 1.5
SERVICE_NAME = "cordum-stream"


def configure_logging(level: str) -> None:
    """``level`` (LOG_LEVEL) for our loggers; libraries (aiohttp, nats) at INFO or above."""
    wanted = logging.getLevelName(level)
    logging.basicConfig(level=max(wanted, logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("cordum").setLevel(wanted)


class StreamService:
    """One replica. ``redis`` and ``auth`` default to the process's own (the runtime's
    client, the gateway's key sources); a test passes its own."""

    def __init__(self, settings: Settings, stream: StreamSettings, *, redis: Any = None,
                 auth: StreamAuth | None = None) -> None:
        self.settings = settings
        self.stream = stream
        self.counters = StreamCounters()
        self._redis = redis
        self._own_redis = redis is None
        self._auth = auth
        self._nc: Any = None
        self._runner: web.AppRunner | None = None
        self._ctx: StreamContext | None = None
        self._writer: TapWriter | None = None
        self._hub: Hub | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = False
        self.port = 0
        """The port it listens on (the one the OS picked when ``stream.port`` is 0)."""

    async def start(self) -> None:
        settings, stream = self.settings, self.stream
        self._nc = await runtime.connect_nats(settings, name=SERVICE_NAME,
                                              reconnect=runtime.SERVICE_RECONNECT)
        if self._redis is None:
            self._redis = runtime.redis_client(settings)
        auth = self._auth or StreamAuth.from_env()
        event_log = EventLog(self._redis, max_events=stream.log_max_events,
                             max_age_s=stream.log_max_age_s)
        meta = JobMeta(self._redis, output_policy=settings.output_policy_enabled)
        self._hub = Hub(self._nc, event_log, subject_prefix=stream.subject_prefix)
        await self._hub.start()
        self._writer = TapWriter(self._nc, event_log, meta, self.counters,
                                 queue_group=stream.queue_group,
                                 subject_prefix=stream.subject_prefix,
                                 settle_s=stream.result_settle_s)
        await self._writer.start()
        await self._nc.flush()
        self._ctx = StreamContext(
            auth=auth, hub=self._hub, log=event_log, meta=meta, redis=self._redis,
            nc=self._nc, counters=self.counters,
            limits=SessionLimits(buffer=stream.client_buffer, replay_max=stream.replay_max,
                                 key_recheck_s=stream.key_recheck_s),
            max_per_key=stream.max_connections_per_key)
        # handler_cancellation: an SSE client that goes away ends its handler at once,
        # not at the next keepalive write (its slot counts against its key till then).
        self._runner = web.AppRunner(build_app(self._ctx), access_log=None,
                                     handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, stream.host, stream.port)
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        self.port = int(sockets[0].getsockname()[1]) if sockets else stream.port
        if stream.emf_metrics:
            self._tasks.append(asyncio.create_task(MetricsReporter(self.counters).run()))
        log.info("%s listening on %s:%d (queue group %s)", SERVICE_NAME, stream.host,
                 self.port, stream.queue_group)

    async def stop(self) -> None:
        """End the streams, the taps and the connections (a second call does nothing)."""
        if self._stopped:
            return
        self._stopped = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._ctx is not None:
            for session in list(self._ctx.sessions):
                session.shut(Close.SHUTDOWN)
            deadline = asyncio.get_running_loop().time() + SHUTDOWN_GRACE_S
            while self._ctx.sessions and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
        if self._runner is not None:
            await self._runner.cleanup()
        if self._writer is not None:
            await self._writer.close()
        if self._hub is not None:
            await self._hub.close()
        if self._nc is not None:
            try:
                await asyncio.wait_for(self._nc.drain(), timeout=DRAIN_TIMEOUT_S)
            except Exception as exc:
                log.error("nats drain: %s: %s", type(exc).__name__, exc)
                with contextlib.suppress(Exception):
                    await self._nc.close()
        if self._own_redis and self._redis is not None:
            await self._redis.aclose()
            runtime.reset()


async def serve(settings: Settings, stream: StreamSettings,
                stop: asyncio.Event | None = None) -> int:
    """Run one replica until ``stop`` is set. Returns an exit code."""
    stop = stop or asyncio.Event()
    service = StreamService(settings, stream)
    starting = asyncio.create_task(service.start())
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({starting, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():  # stopped while NATS had not answered yet
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await service.stop()
        return 0
    code = 0
    if starting.exception() is not None:
        log.error("%s failed to start: %r", SERVICE_NAME, starting.exception())
        code = 1
    else:
        await stopper
    stopper.cancel()
    await service.stop()
    log.info("%s stopped: exit=%d", SERVICE_NAME, code)
    return code


async def _main_async(settings: Settings, stream: StreamSettings) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return await serve(settings, stream, stop)


def main() -> None:
    from cordum.config import load_settings

    try:
        stream = load_stream_settings()
        configure_logging(stream.log_level)
        settings = load_settings()
    except ConfigError as exc:
        logging.basicConfig()
        log.error("%s: bad configuration: %s", SERVICE_NAME, exc)
        raise SystemExit(2) from exc
    try:
        code = asyncio.run(_main_async(settings, stream))
    except Exception as exc:
        log.error("%s failed: %s: %s", SERVICE_NAME, type(exc).__name__, exc)
        code = 1
    raise SystemExit(code)
