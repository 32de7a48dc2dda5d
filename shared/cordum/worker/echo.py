"""The reference echo worker: speaks CAP over NATS like a cap-sdk-python worker.

``python -m cordum.worker.echo``. It takes job requests on each of its topics
(queue group = topic, as the SDK subscribes) and on ``worker.<id>.jobs``, reads
the job's context JSON behind ``redis://ctx:<id>``, stores
``{"echo": <context>, "worker_id", "job_id"}`` at ``res:<id>`` and publishes the
JobResult on ``sys.job.result`` (``cordum.worker.echo_job``). It heartbeats on
``sys.heartbeat`` every 5 s.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from typing import TYPE_CHECKING

from cordum import runtime
from cordum.config import ConfigError
from cordum.protocol import (
    PROTOCOL_VERSION,
    SUBJECT_HEARTBEAT,
    SUBJECT_RESULT,
    BusPacket,
    Heartbeat,
    InvalidPacket,
    JobRequest,
    JobResult,
    JobStatus,
    decode,
    direct_subject,
    packet,
    validate_job_request,
)
from cordum.registry.workers import STARTED_AT_LABEL
from cordum.worker.echo_job import echo, failed
from cordum.worker.settings import EchoWorkerSettings, load_worker_settings

if TYPE_CHECKING:
    import nats.aio.client
    import nats.aio.msg
    import nats.aio.subscription
    import redis.asyncio

    from cordum.config import Settings

log = logging.getLogger("cordum.worker.echo")

STOP_TIMEOUT_S = 8.0
"""Jobs in flight get this long to finish after SIGTERM; the rest are abandoned unanswered."""


class _CpuMeter:
    """This process's CPU use, in percent, since the previous reading.

    The host's load average would mark the worker overloaded (cpu_load >= 90)
    whenever the machine is busy with something else.
    """

    MIN_WINDOW_S = 1.0
    """Shorter windows are not measured: the start-up burst (connecting, the first
    heartbeat) would read as ~100 % and mark a fresh worker overloaded."""

    def __init__(self) -> None:
        self._wall = time.monotonic()
        self._cpu = time.process_time()
        self._last = 0.0

    def read(self) -> float:
        wall, cpu = time.monotonic(), time.process_time()
        elapsed = wall - self._wall
        if elapsed < self.MIN_WINDOW_S:
            return self._last
        used = cpu - self._cpu
        self._wall, self._cpu = wall, cpu
        self._last = round(min(100.0, max(0.0, 100.0 * used / elapsed)), 1)
        return self._last


class EchoWorker:
    """One echo worker: its NATS connection, Redis client, subscriptions and jobs."""

    def __init__(self, cfg: EchoWorkerSettings, settings: Settings) -> None:
        self.cfg = cfg
        self._settings = settings
        self._nc: nats.aio.client.Client | None = None
        self._redis: redis.asyncio.Redis | None = None
        self._subs: list[nats.aio.subscription.Subscription] = []
        self._slots = asyncio.BoundedSemaphore(cfg.max_parallel)
        self._jobs: set[asyncio.Task[None]] = set()
        self._active = 0
        self._cpu = _CpuMeter()
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._started_at = 0.0

    @property
    def worker_id(self) -> str:
        return self.cfg.worker_id

    @property
    def active_jobs(self) -> int:
        return self._active

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        import redis.asyncio as aioredis

        # Before the subscriptions: no job sent earlier can reach this incarnation.
        self._started_at = time.time()
        # One connection per job slot (a job reads its context, then writes its
        # result), and one to spare: the slots bound the pool, whatever the load.
        self._redis = aioredis.Redis.from_url(
            self._settings.redis_url,
            socket_timeout=self._settings.store_timeout_s,
            socket_connect_timeout=self._settings.store_timeout_s,
            max_connections=self.cfg.max_parallel + 1,
        )

        self._nc = await runtime.connect_nats(
            self._settings, name=self.worker_id, reconnect=runtime.SERVICE_RECONNECT
        )
        for topic in self.cfg.topics:
            self._subs.append(await self._nc.subscribe(topic, queue=topic, cb=self._on_message))
        self._subs.append(
            await self._nc.subscribe(direct_subject(self.worker_id), cb=self._on_message)
        )
        await self._nc.flush()
        await self.send_heartbeat()
        self._heartbeat_task = asyncio.create_task(self._heartbeat_loop())
        log.info(
            "echo worker started: worker_id=%s pool=%s topics=%s max_parallel=%d",
            self.worker_id,
            self.cfg.pool,
            ",".join(self.cfg.topics),
            self.cfg.max_parallel,
        )

    async def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Take no new jobs, let the running ones answer, then drain NATS."""
        self._stopping.set()
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            await asyncio.gather(self._heartbeat_task, return_exceptions=True)
        for sub in self._subs:
            try:
                await sub.drain()
            except Exception as exc:
                log.error("unsubscribe %s: %s", sub.subject, exc)
        self._subs.clear()
        if self._jobs:
            _, pending = await asyncio.wait(set(self._jobs), timeout=timeout_s)
            for task in pending:
                task.cancel()
            if pending:
                log.error("stopped with %d job(s) unanswered", len(pending))
        if self._nc is not None:
            try:
                await asyncio.wait_for(self._nc.drain(), timeout=2.0)
            except Exception:
                await self._nc.close()
        if self._redis is not None:
            await self._redis.aclose()
        log.info("echo worker stopped: worker_id=%s", self.worker_id)

    async def run(self, stop: asyncio.Event) -> None:
        starting = asyncio.ensure_future(self.start())
        stopper = asyncio.ensure_future(stop.wait())
        await asyncio.wait({starting, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            # NATS never answered: the first connect retries forever.
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
        else:
            starting.result()
            await stopper
        stopper.cancel()
        await self.stop()

    # ---------------------------------------------------------------- heartbeats

    def heartbeat(self) -> BusPacket:
        hb = Heartbeat(
            worker_id=self.worker_id,
            pool=self.cfg.pool,
            active_jobs=self._active,
            max_parallel_jobs=self.cfg.max_parallel,
            capabilities=list(self.cfg.topics),
            cpu_load=self._cpu.read(),
            labels={STARTED_AT_LABEL: f"{self._started_at:.3f}"},
        )
        return packet(trace_id=self.worker_id, sender_id=self.worker_id, heartbeat=hb)

    async def send_heartbeat(self) -> None:
        assert self._nc is not None
        await self._nc.publish(SUBJECT_HEARTBEAT, self.heartbeat().SerializeToString())

    async def _heartbeat_loop(self) -> None:
        while not self._stopping.is_set():
            await asyncio.sleep(self.cfg.heartbeat_interval_s)
            try:
                await self.send_heartbeat()
            except Exception as exc:
                log.error("heartbeat failed: %s: %s", type(exc).__name__, exc)

    # ---------------------------------------------------------------- jobs

    def admit(self, data: bytes) -> tuple[BusPacket, JobRequest] | None:
        """The request in a packet a CAP worker would take, or None (dropped with a log line)."""
        try:
            decoded = decode(data)
            if decoded.packet.protocol_version != PROTOCOL_VERSION:
                raise InvalidPacket(
                    f"protocol_version {decoded.packet.protocol_version}, want {PROTOCOL_VERSION}"
                )
            if decoded.kind != "job_request":
                raise InvalidPacket(f"payload is {decoded.kind}, not job_request")
            validate_job_request(decoded.packet.job_request)
        except InvalidPacket as exc:
            log.warning("invalid packet dropped: %s", exc)
            return None
        return decoded.packet, decoded.packet.job_request

    async def _on_message(self, msg: nats.aio.msg.Msg) -> None:
        admitted = self.admit(msg.data)
        if admitted is None:
            return
        self._receipt(admitted[1].job_id)
        # Waiting here holds back this subscription's next message: at most
        # max_parallel jobs run, as with the SDK's handler slots.
        await self._slots.acquire()
        task = asyncio.create_task(self._run_job(*admitted))
        self._jobs.add(task)
        task.add_done_callback(self._job_done)

    def _receipt(self, job_id: str, note: str = "") -> None:
        """Appends the job id to the receipts file, when one is configured: on each
        delivery, and with ``retry`` when the worker answered FAILED_RETRYABLE (its next
        delivery is one it asked for). A line is written whole with one write: a kill
        never leaves half of one."""
        if not self.cfg.receipts_path:
            return
        try:
            with open(self.cfg.receipts_path, "a", encoding="utf-8") as out:
                out.write(f"{job_id} {note}\n" if note else f"{job_id}\n")
        except OSError as exc:
            log.warning("receipt of job %s not written: %s", job_id, exc)

    def _job_done(self, task: asyncio.Task[None]) -> None:
        self._jobs.discard(task)
        self._slots.release()
        if not task.cancelled() and task.exception() is not None:
            log.error("job task failed: %r", task.exception())

    async def _run_job(self, source: BusPacket, req: JobRequest) -> None:
        self._active += 1
        started = time.monotonic()
        try:
            try:
                result = await self.execute(req)
            except Exception as exc:
                log.error("job %s: handler failed: %s: %s", req.job_id, type(exc).__name__, exc)
                result = failed(req, JobStatus.JOB_STATUS_FAILED, "handler_failed", str(exc))
            result.worker_id = self.worker_id
            result.execution_ms = int((time.monotonic() - started) * 1000)
            if result.status == JobStatus.JOB_STATUS_FAILED_RETRYABLE:
                self._receipt(req.job_id, "retry")  # a next delivery is asked for
            await self._publish_result(source, result)
        finally:
            self._active -= 1

    async def _publish_result(self, source: BusPacket, result: JobResult) -> None:
        assert self._nc is not None
        out = packet(trace_id=source.trace_id, sender_id=self.worker_id, job_result=result)
        await self._nc.publish(SUBJECT_RESULT, out.SerializeToString())
        await asyncio.wait_for(self._nc.flush(), timeout=self._settings.publish_timeout_s)
        log.debug(
            "job %s answered: status=%s ms=%d",
            result.job_id,
            JobStatus.Name(result.status),
            result.execution_ms,
        )

    async def execute(self, req: JobRequest) -> JobResult:
        """Echo the job's context back as its result."""
        assert self._redis is not None
        return await echo(req, self._redis, self.worker_id)


def configure_logging(level: str) -> None:
    """``level`` applies to our loggers; libraries stay at INFO or above."""
    wanted = logging.getLevelName(level)
    logging.basicConfig(
        level=max(wanted, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("cordum").setLevel(wanted)


async def _main_async(cfg: EchoWorkerSettings, settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await EchoWorker(cfg, settings).run(stop)


def main() -> None:
    from cordum.config import load_settings

    try:
        cfg = load_worker_settings()
        settings = load_settings()
    except ConfigError as exc:
        logging.basicConfig()
        log.error("echo worker: bad configuration: %s", exc)
        raise SystemExit(2) from exc
    configure_logging(cfg.log_level)
    try:
        asyncio.run(_main_async(cfg, settings))
    except Exception as exc:
        log.error("echo worker failed: %s: %s", type(exc).__name__, exc)
        raise SystemExit(1) from exc


if __name__ == "__main__":
    main()
