"""cordum-bridge: JetStream job subjects to SQS, heartbeats to the worker snapshot.

The one long-running process of the deployment (``python -m cordum.bus.bridge``),
wiring four parts together:

- the forwarder (``cordum.bus.forwarder``): durable pull consumers on
  sys.job.submit, sys.job.result and sys.job.cancel to the submit and result
  queues (``cordum.bus.sqs``), acked only once SQS accepted a message;
- the heartbeat ingest (``cordum.registry.ingest``): sys.heartbeat to the live
  registry, written as ``sys:workers:snapshot`` under the writer lock;
- the pool flush (``cordum.bus.flush``): a heartbeat that brings a pool from no
  fresh worker to one puts that pool's waiting jobs back on sys.job.submit;
- the forwarding monitor (``cordum.bus.health``): the consumers' lag, as a
  liveness file for the container's health check and as metrics.

Several replicas may run: the pull consumers share the work, the writer lock
keeps one snapshot write at a time.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

from cordum import runtime
from cordum.bus.flush import JetStreamPublisher, PoolFlusher
from cordum.bus.forward_policy import default_routes
from cordum.bus.forwarder import JobForwarder
from cordum.bus.guard import BusGuard
from cordum.bus.health import ForwardingMonitor, mark_starting
from cordum.bus.settings import BridgeSettings, load_bridge_settings
from cordum.bus.sqs import SqsClient, SqsQueueSink
from cordum.config import ConfigError
from cordum.registry.ingest import HeartbeatIngest
from cordum.registry.pools import pool_serves, topic_pools
from cordum.registry.writer import SnapshotWriter

if TYPE_CHECKING:
    import nats.js

    from cordum.bus.queue import QueueSink
    from cordum.config import Settings

log = logging.getLogger("cordum.bus.bridge")
T = TypeVar("T")

STOP_TIMEOUT_S = 8.0
"""In-flight forwards and the last snapshot get this long after SIGTERM; NATS drain follows."""
DRAIN_TIMEOUT_S = 1.5
STREAM_RETRY_S = 2.0
"""Pause between two attempts at the job stream while JetStream has no answer (a
cluster that is still electing its meta leader, within seconds of its nodes' start)."""


def configure_logging(level: str) -> None:
    """``level`` applies to our loggers; libraries (botocore, nats) stay at INFO or above."""
    wanted = logging.getLevelName(level.upper())
    logging.basicConfig(
        level=max(wanted, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("cordum").setLevel(wanted)


async def until_stopped(work: Awaitable[T], stop: asyncio.Event) -> T | None:
    """``work``'s result, or None when ``stop`` is set first (``work`` is then cancelled).

    The first NATS connect retries forever; without this a SIGTERM during it
    would go unheard.
    """
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return None


async def ensure_stream_when_ready(js: nats.js.JetStreamContext, *, replicas: int = 1) -> str:
    """The job stream, asked for again every STREAM_RETRY_S until JetStream answers.

    The bridge may start with its NATS (a stack's first deploy): a connected server
    whose JetStream cannot answer yet is a wait, not a crash that would count
    against the deployment. The health check's start-up grace bounds the wait.
    """
    from cordum.bus.streams import ensure_stream

    while True:
        try:
            return await ensure_stream(js, replicas=replicas)
        except Exception as exc:
            log.warning("job stream not ready, retrying: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(STREAM_RETRY_S)


async def serve(
    settings: Settings,
    bridge: BridgeSettings,
    *,
    submit_sink: QueueSink | None = None,
    result_sink: QueueSink | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """Run the bridge until ``stop`` is set (SIGTERM/SIGINT in ``main``). Returns an exit code."""
    from cordum.config import load_pools

    pools = load_pools(settings.config_dir)
    stop = stop or asyncio.Event()
    sqs: SqsClient | None = None
    if submit_sink is None or result_sink is None:
        sqs = SqsClient.from_env()
        submit_sink = submit_sink or SqsQueueSink(bridge.submit_queue_url, sqs)
        result_sink = result_sink or SqsQueueSink(bridge.result_queue_url, sqs)

    # Until its first answered probe, the health check counts from here.
    mark_starting(bridge.health_file)
    nc = await until_stopped(
        runtime.connect_nats(settings, name="cordum-bridge", reconnect=runtime.SERVICE_RECONNECT),
        stop,
    )
    if nc is None:
        log.info("cordum-bridge stopped before NATS answered: exit=0")
        return 0
    js = nc.jetstream(timeout=settings.publish_timeout_s)
    found = await until_stopped(
        ensure_stream_when_ready(js, replicas=bridge.stream_replicas), stop)
    if found is None:
        log.info("cordum-bridge stopped before JetStream answered: exit=0")
        await nc.close()
        return 0
    stream = found
    redis = runtime.redis_client(settings)
    routes = default_routes(submit_sink, result_sink)
    forwarder = JobForwarder(js, stream, routes, guard=BusGuard(redis))
    await forwarder.start()
    monitor = ForwardingMonitor.for_bridge(
        js,
        stream,
        routes,
        forwarder.counters,
        health_file=bridge.health_file,
        emf_metrics=bridge.emf_metrics,
    )
    flusher = PoolFlusher(
        redis,
        JetStreamPublisher(js, timeout_s=settings.publish_timeout_s),
        functools.partial(pool_serves, pools),
    )
    ingest = HeartbeatIngest(
        nc,
        SnapshotWriter(redis),
        topic_pools(pools),
        interval_s=bridge.snapshot_interval_s,
        on_pool_online=flusher.trigger,
    )
    await ingest.start()
    log.info(
        "cordum-bridge started: stream=%s writer_id=%s submit=%s result=%s",
        stream,
        ingest.writer_id,
        bridge.submit_queue_url,
        bridge.result_queue_url,
    )

    tasks = [
        asyncio.create_task(forwarder.run()),
        asyncio.create_task(ingest.run()),
        asyncio.create_task(monitor.run()),
    ]
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
    code = 0
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            log.error("cordum-bridge task failed: %r", task.exception())
            code = 1
    stopper.cancel()

    forwarder.stop()
    ingest.stop()
    monitor.stop()
    _, pending = await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S)
    for task in pending:
        task.cancel()
    await forwarder.close()
    await ingest.close()
    await flusher.close()
    try:
        await asyncio.wait_for(nc.drain(), timeout=DRAIN_TIMEOUT_S)
    except Exception as exc:
        log.error("nats drain: %s: %s", type(exc).__name__, exc)
        await nc.close()
    if sqs is not None:
        await sqs.close()
    await redis.aclose()
    runtime.reset()
    log.info("cordum-bridge stopped: exit=%d", code)
    return code


async def _main_async(settings: Settings, bridge: BridgeSettings) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return await serve(settings, bridge, stop=stop)


def main() -> None:
    from cordum.config import load_settings

    try:
        bridge = load_bridge_settings()
        configure_logging(bridge.log_level)
        settings = load_settings()
    except ConfigError as exc:
        logging.basicConfig()
        log.error("cordum-bridge: bad configuration: %s", exc)
        raise SystemExit(2) from exc
    try:
        code = asyncio.run(_main_async(settings, bridge))
    except Exception as exc:
        log.error("cordum-bridge failed: %s: %s", type(exc).__name__, exc)
        code = 1
    raise SystemExit(code)


if __name__ == "__main__":
    main()
