"""The workflow engine wired as the stack wires it, in one process, on the real Redis,
NATS and safety kernel: what the bridge and the functions do, done by tasks here.

- step jobs published on ``sys.job.submit`` go to the scheduler engine's request path;
- a worker (``Worker``) answers jobs on its subject with results it is told to give;
- results and cancels (``sys.job.result``, ``sys.job.cancel``) go to the result path;
- run events the engine and the scheduler send are queued in memory (SQS is what
  cannot run here: ``EventQueue`` stands for the two workflow queues) and applied by
  ``pump`` through the real ``WorkflowRunner``, timers once their delay has passed.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import nats
import redis.asyncio as aioredis

from cordum import protocol
from cordum.bus.publisher import NatsPublisher
from cordum.bus.streams import ensure_stream
from cordum.bus.workflow_events import RunEvent
from cordum.config import PoolsConfig, load_settings
from cordum.errors import RetryAfter
from cordum.registry.reader import SnapshotReader
from cordum.safety.client import SafetyClient
from cordum.scheduler.backoff import BackoffPolicy
from cordum.scheduler.engine import Engine
from cordum.scheduler.saga import Saga
from cordum.scheduler.strategy import LeastLoadedStrategy
from cordum.store.indexes import JobIndexes
from cordum.store.jobs import JobStore
from cordum.store.locks import JobLocks
from cordum.workflow.definition_store import DefinitionStore
from cordum.workflow.runner import WorkflowRunner
from cordum.workflow.store import WorkflowStore
from tests import conftest
from tests.conftest import NATS_URL


@dataclass
class EventQueue:
    """The two workflow queues: events in order, timers with their due time."""

    events: list[RunEvent] = field(default_factory=list)
    timers: list[tuple[float, RunEvent]] = field(default_factory=list)
    sent: list[RunEvent] = field(default_factory=list)

    async def send(self, event: RunEvent) -> None:
        self.events.append(event)
        self.sent.append(event)

    async def send_timer(self, event: RunEvent, delay_s: float) -> None:
        self.timers.append((time.monotonic() + delay_s, event))
        self.sent.append(event)

    def take(self) -> list[RunEvent]:
        now = time.monotonic()
        due = [e for t, e in self.timers if t <= now]
        self.timers = [(t, e) for t, e in self.timers if t > now]
        out, self.events = self.events + due, []
        return out


@dataclass
class Worker:
    """Answers step jobs: by topic, SUCCEEDED with ``{"echo": input}``, or what
    ``script`` says for a topic: a list of statuses used one per attempt, "hold"
    never answering."""

    worker_id: str
    script: dict[str, list[str]] = field(default_factory=dict)
    received: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    """Jobs received and not answered (``hold``), oldest first."""

    def status_for(self, topic: str) -> str:
        queue = self.script.get(topic)
        if queue:
            return queue.pop(0) if len(queue) > 1 else queue[0]
        return "SUCCEEDED"


@dataclass
class Rollbacks:
    """The saga-rollback function's trigger (an async Lambda invoke): what was asked."""

    asked: list[tuple[str, str]] = field(default_factory=list)

    async def trigger(self, tenant: str, workflow_id: str) -> None:
        self.asked.append((tenant, workflow_id))


class WorkflowStack:
    def __init__(self, kernel_addr: str, *, topics: tuple[str, ...] = (),
                 redis_url: str | None = None) -> None:
        """On ``redis_url``, else the tests' own Redis database (tests/conftest.py)."""
        self.unique = uuid.uuid4().hex[:10]
        self.tenant = f"t-{self.unique}"
        redis_url = redis_url or conftest.REDIS_URL
        self.redis = aioredis.Redis.from_url(redis_url)
        cfg = load_settings(env={"REDIS_URL": redis_url, "NATS_URL": NATS_URL})
        self.publisher = NatsPublisher(cfg)
        self.queue = EventQueue()
        self.snapshot_key = f"test:snapshot:{self.unique}"
        self.worker = Worker(f"w-{self.unique}")
        self.rollbacks = Rollbacks()
        all_topics = ("job.default", "job.echo", *topics)
        self.engine = Engine(
            store=JobStore(self.redis),
            registry=SnapshotReader(self.redis, key=self.snapshot_key, max_age_s=0),
            strategy=LeastLoadedStrategy(
                PoolsConfig(topics={t: ["default"] for t in all_topics}, pools={})),
            safety=SafetyClient(kernel_addr, 2.0),
            publisher=self.publisher,
            locks=JobLocks(self.redis),
            backoff=BackoffPolicy(),
            runs=self.queue,
            saga=Saga(self.redis, self.publisher),
            requests=JobIndexes(self.redis),
            rollback=self.rollbacks,
        )
        self.definitions = DefinitionStore(self.redis)
        self.store = WorkflowStore(self.redis)
        self.runner = WorkflowRunner(self.store, self.redis, self.publisher, self.queue)
        self.applied: list[str] = []
        self.run_ids: set[str] = set()
        self.lose_submits: set[str] = set()
        self.stored_ids: set[str] = set()
        """Job ids whose next sys.job.submit message is dropped (once each)."""
        self._nc: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stream = ""
        self._first_seq = 1

    async def start(self) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        doc = {"captured_at": now, "writer_id": "t", "pools": {}, "topics": {},
               "workers": [{"worker_id": self.worker.worker_id, "pool": "default",
                            "active_jobs": 0, "max_parallel_jobs": 64}]}
        await self.redis.set(self.snapshot_key, json.dumps(doc), ex=600)
        self._nc = await nats.connect(NATS_URL)
        js = self._nc.jetstream()
        # The job stream, as the bridge makes it (a fresh NATS has none, and step jobs
        # are published to it durably).
        self._stream = await ensure_stream(js)
        self._first_seq = (await js.stream_info(self._stream)).state.last_seq + 1
        await self._nc.subscribe(protocol.SUBJECT_SUBMIT, cb=self._on_submit)
        await self._nc.subscribe(protocol.SUBJECT_RESULT, cb=self._on_result)
        await self._nc.subscribe(protocol.SUBJECT_CANCEL, cb=self._on_result)
        await self._nc.subscribe(protocol.direct_subject(self.worker.worker_id),
                                 cb=self._on_job)
        self.alerts: list[Any] = []
        await self._nc.subscribe(protocol.SUBJECT_WORKFLOW_EVENT, cb=self._on_alert)

    def ours(self, job_id: str) -> bool:
        return job_id.partition(":")[0] in self.run_ids

    async def _on_submit(self, msg: Any) -> None:
        # The job stream stores one message per Nats-Msg-Id in its duplicate window
        # (two minutes, longer than any test): a repeat never reaches the bridge.
        msg_id = (msg.headers or {}).get("Nats-Msg-Id", "")
        if msg_id in self.stored_ids:
            return
        if msg_id:
            self.stored_ids.add(msg_id)
        decoded = protocol.decode(msg.data)
        job_id = decoded.packet.job_request.job_id if decoded.kind == "job_request" else ""
        if job_id in self.lose_submits:  # its message lost on the way: never stored
            self.lose_submits.discard(job_id)
            return
        if decoded.kind == "job_request" and self.ours(decoded.packet.job_request.job_id):
            await self._retrying(self.engine.handle_request, msg.data)

    async def _on_result(self, msg: Any) -> None:
        decoded = protocol.decode(msg.data)
        job_id = (decoded.packet.job_result.job_id if decoded.kind == "job_result"
                  else decoded.packet.job_cancel.job_id)
        if self.ours(job_id):
            await self._retrying(self.engine.handle_result, msg.data)

    async def _retrying(self, handle: Any, data: bytes) -> None:
        for _ in range(20):
            try:
                await handle(data)
                return
            except RetryAfter:
                await asyncio.sleep(0.1)

    async def _on_alert(self, msg: Any) -> None:
        decoded = protocol.decode(msg.data)
        if decoded.packet.trace_id in self.run_ids:
            self.alerts.append(decoded.packet.alert)

    async def _on_job(self, msg: Any) -> None:
        req = protocol.decode(msg.data).packet.job_request
        self.worker.received.append(req.job_id)
        status = self.worker.status_for(req.topic)
        if status == "hold":
            self.worker.held.append(req.job_id)
            return
        await self.answer(req.job_id, status)

    async def answer(self, job_id: str, status: str = "SUCCEEDED") -> None:
        """The worker's result for a job (one it held, or one it just received)."""
        ctx = await self.redis.get(protocol.context_key(job_id))
        res = protocol.JobResult(job_id=job_id, worker_id=self.worker.worker_id,
                                 status=getattr(protocol.JobStatus, f"JOB_STATUS_{status}"))
        if status == "SUCCEEDED":
            body = {"echo": json.loads(ctx) if ctx else None}
            await self.redis.set(protocol.result_key(job_id), json.dumps(body), ex=600)
            res.result_ptr = protocol.pointer(protocol.result_key(job_id))
        else:
            res.error_message = f"worker said {status}"
        await self._nc.publish(protocol.SUBJECT_RESULT, protocol.packet(
            trace_id=job_id, sender_id=self.worker.worker_id,
            job_result=res).SerializeToString())

    async def pump(self, until: Any, timeout_s: float = 15.0) -> None:
        """Apply queued run events until ``until()`` (async) is true."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            for event in self.queue.take():
                if event.kind == "start":  # a subworkflow's child run is ours too
                    self.run_ids.add(event.run_id)
                try:
                    self.applied.append(await self.runner.apply(event))
                except RetryAfter:
                    self.queue.events.append(event)
            if await until():
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the run did not get there in time")

    async def settle(self, seconds: float) -> None:
        """Applies events for ``seconds`` with nothing to wait for (to see what happens,
        or that nothing more does)."""

        async def never() -> bool:
            return False

        try:
            await self.pump(never, seconds)
        except AssertionError:
            pass

    async def run_status(self, run_id: str) -> str:
        run = await self.store.get_run(self.tenant, run_id)
        return run.status if run is not None else ""

    async def close(self) -> None:
        from tests.helpers import forget_jobs

        if self._nc is not None:
            await self._drop_own_packets()
            await self._nc.close()
        await forget_jobs(self.redis, sorted(set(self.worker.received) | self.job_ids()),
                          tombstone=False)
        for run_id in self.run_ids:
            await self.store.delete_run(self.tenant, run_id)
        await self.redis.delete(self.snapshot_key)
        from cordum.store.saga import saga_key

        for run_id in self.run_ids:
            await self.redis.delete(*(saga_key(self.tenant, run_id, part)
                                      for part in ("stack", "lock", "recorded")))
        for wf in await self.definitions.list_definitions(self.tenant):
            await self.definitions.delete_definition(self.tenant, wf.id)
        await self.redis.aclose()

    async def _drop_own_packets(self) -> None:
        """Take this test's step jobs, results and cancels off the job stream: a stack
        consuming it later (the e2e suite's) must never work on a test's packets, which
        it would refuse (their runs are gone) into its submit DLQ."""
        from tests.helpers import drop_from_stream

        def ours(packet: protocol.BusPacket) -> bool:
            job_id = (packet.job_request.job_id or packet.job_result.job_id
                      or packet.job_cancel.job_id)
            return self.ours(job_id) or packet.trace_id in self.run_ids

        js = self._nc.jetstream()
        try:
            stream = self._stream or await js.find_stream_name_by_subject(
                protocol.SUBJECT_SUBMIT)
            await drop_from_stream(js, stream, self._first_seq, ours)
        except Exception:  # no stream: nothing was kept
            return

    def job_ids(self) -> set[str]:
        return {e.job_id for e in self.queue.sent if e.job_id}
