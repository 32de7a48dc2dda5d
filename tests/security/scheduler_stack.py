"""The scheduler engine as the submit and result functions run it, for security tests.

Built on the process's own Redis and NATS clients (``runtime``), so it shares
the event loop of the ``gateway`` fixture; a real safety kernel answers, one
worker is registered under a snapshot key of the test's own. Compensation jobs
are published on sys.job.submit; :class:`Submitted` watches that subject with a
core subscription (a consumer of the work-queue stream may take them first).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats

from cordum import protocol, runtime
from cordum.bus.publisher import NatsPublisher
from cordum.config import PoolsConfig, settings
from cordum.registry.reader import SnapshotReader
from cordum.safety.client import SafetyClient
from cordum.scheduler.backoff import BackoffPolicy
from cordum.scheduler.engine import Engine
from cordum.scheduler.saga import Saga
from cordum.scheduler.saga_trigger import InProcessRollbackTrigger
from cordum.scheduler.strategy import LeastLoadedStrategy
from cordum.store.indexes import JobIndexes
from cordum.store.jobs import JobStore
from cordum.store.locks import JobLocks
from tests.conftest import NATS_URL
from tests.helpers import drop_from_stream, forget_jobs

CONFIG = Path(__file__).resolve().parents[2] / "config"
TOPIC = "job.default"
"""Allowed by the example policy, served by the test's worker."""


class Scheduler:
    """Engine, saga and an in-process rollback trigger on the runtime's clients."""

    def __init__(self, kernel_addr: str) -> None:
        self.unique = uuid.uuid4().hex[:10]
        self.worker_id = f"w-{self.unique}"
        self.snapshot_key = f"test:snapshot:{self.unique}"
        cfg = settings()
        self.redis = runtime.redis_client(cfg)
        self.store = JobStore(self.redis)
        self.saga = Saga(self.redis, NatsPublisher(cfg))
        self.engine = Engine(
            store=self.store,
            registry=SnapshotReader(self.redis, key=self.snapshot_key, max_age_s=0),
            strategy=LeastLoadedStrategy(PoolsConfig(topics={TOPIC: ["default"]}, pools={})),
            safety=SafetyClient(kernel_addr, 1.0),
            publisher=NatsPublisher(cfg),
            locks=JobLocks(self.redis),
            backoff=BackoffPolicy(),
            saga=self.saga,
            rollback=InProcessRollbackTrigger(self.saga),
            requests=JobIndexes(self.redis),
        )
        self.job_ids: list[str] = []

    async def add_worker(self) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        doc = {"captured_at": now, "writer_id": "t", "pools": {}, "topics": {},
               "workers": [{"worker_id": self.worker_id, "pool": "default",
                            "active_jobs": 0, "max_parallel_jobs": 64}]}
        await self.redis.set(self.snapshot_key, json.dumps(doc), ex=120)

    def request_packet(self, req: protocol.JobRequest) -> bytes:
        self.job_ids.append(req.job_id)
        return protocol.packet(trace_id=f"tr-{req.job_id}", sender_id="test",
                               job_request=req).SerializeToString()

    def result_packet(self, job_id: str, status: Any) -> bytes:
        res = protocol.JobResult(job_id=job_id, status=status, worker_id=self.worker_id)
        return protocol.packet(trace_id=f"tr-{job_id}", sender_id=self.worker_id,
                               job_result=res).SerializeToString()

    async def saga_keys(self, workflow_id: str) -> dict[str, list[bytes]]:
        """Every saga stack of ``workflow_id``, whatever tenant its key names."""
        out: dict[str, list[bytes]] = {}
        for key in await self.redis.keys(f"saga:*{workflow_id}:stack"):
            out[key.decode()] = await self.redis.lrange(key, 0, -1)
        return out

    async def cleanup(self, *patterns: str) -> None:
        keys: list[Any] = [self.snapshot_key]
        for pattern in patterns:
            keys += await self.redis.keys(pattern)
        await self.redis.delete(*keys)
        await forget_jobs(self.redis, self.job_ids)


class Submitted:
    """What is published on sys.job.submit while the watch is on."""

    def __init__(self) -> None:
        self.nc: Any = None
        self.sub: Any = None
        self.packets: list[protocol.BusPacket] = []
        self.stream = ""
        self.first_seq = 0

    async def start(self) -> Submitted:
        self.nc = await nats.connect(NATS_URL)
        js = self.nc.jetstream()
        self.stream = await js.find_stream_name_by_subject(protocol.SUBJECT_SUBMIT)
        self.first_seq = (await js.stream_info(self.stream)).state.last_seq + 1
        self.sub = await self.nc.subscribe(protocol.SUBJECT_SUBMIT)
        await self.nc.flush()
        return self

    async def collect(self) -> list[protocol.BusPacket]:
        """The packets so far. The publishes awaited their stream ack, so the server has
        queued them for us: a round trip on this connection brings them in ahead of its
        answer, and the read takes what is queued."""
        await self.nc.flush()
        for _ in range(self.sub.pending_msgs):
            self.packets.append(protocol.decode((await self.sub.next_msg()).data).packet)
        return self.packets

    async def compensations(self, workflow_id: str) -> list[protocol.JobRequest]:
        return [p.job_request for p in await self.collect()
                if p.job_request.labels.get("saga_workflow_id") == workflow_id]

    async def close(self, job_ids: list[str], workflow_ids: list[str]) -> None:
        """Take the test's own jobs and compensations off the stream, then disconnect."""
        def ours(packet: protocol.BusPacket) -> bool:
            req = packet.job_request
            return req.job_id in job_ids or req.labels.get("saga_workflow_id") in workflow_ids

        await drop_from_stream(self.nc.jetstream(), self.stream, self.first_seq, ours)
        await self.nc.close()
