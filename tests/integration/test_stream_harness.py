"""What the stream's integration tests share (no tests of its own but one self-check):
a cordum-stream service started in this process on a free port, on the real Redis and
NATS; tenants and keys of the test's own; jobs written with the real job store; packets
published on the real bus (and taken out of the job stream after); WebSocket and SSE
clients (aiohttp's).

Each service joins a queue group and a subject prefix named after the test, so a
cordum-stream of a local stack on the same NATS never takes the test's events.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import redis.asyncio as aioredis

from cordum import protocol
from cordum.config import load_settings
from cordum.store.jobs import JobState, JobStore, NewJob
from cordum.store.results import result_pointer
from cordum.stream.keys import ApiKey, StreamAuth
from cordum.stream.service import StreamService
from cordum.stream.settings import StreamSettings
from tests.conftest import NATS_URL
from tests.helpers import drop_from_stream

TOPIC = "job.stream-test"
"""No worker serves it: a local stack sharing this NATS takes the tests' requests
(its submit path sees sys.job.submit) but never answers them."""
FRAME_TIMEOUT_S = 5.0
"""How long a client waits for the next frame before the test fails."""
QUIET_S = 0.6
"""How long a client listens to show that nothing (more) arrives."""


@dataclass(frozen=True)
class Tenants:
    """Two tenants of the test's own, and keys: a user and an admin of A, a user of B,
    an admin of every tenant."""

    tag: str

    @property
    def a(self) -> str:
        return f"acme-{self.tag}"

    @property
    def b(self) -> str:
        return f"beta-{self.tag}"

    @property
    def user_a(self) -> str:
        return f"key-a-{self.tag}"

    @property
    def admin_a(self) -> str:
        return f"key-a-admin-{self.tag}"

    @property
    def user_b(self) -> str:
        return f"key-b-{self.tag}"

    @property
    def any_admin(self) -> str:
        return f"key-any-{self.tag}"

    def keys(self) -> list[ApiKey]:
        return [ApiKey(key=self.user_a, tenant=self.a, role="user"),
                ApiKey(key=self.admin_a, tenant=self.a, role="admin"),
                ApiKey(key=self.user_b, tenant=self.b, role="user"),
                ApiKey(key=self.any_admin, tenant="*", role="admin")]


def redis_url() -> str:
    return os.environ["REDIS_URL"]  # the tests' own database (own_redis_env)


@asynccontextmanager
async def stream_service(tag: str, *, auth: StreamAuth | None = None,
                         output_policy: bool = False, **overrides: Any
                         ) -> AsyncIterator[StreamService]:
    """A replica on a free port; ``tag`` names its queue group and prefix (two replicas
    of one test pass the same)."""
    settings = load_settings(output_policy_enabled=output_policy, nats_url=NATS_URL)
    stream = StreamSettings(**{"port": 0, "host": "127.0.0.1",
                               "queue_group": f"cordum-stream-test-{tag}",
                               "subject_prefix": f"cordum.stream.test{tag}",
                               "result_settle_s": 3.0, **overrides})
    redis = aioredis.from_url(redis_url())
    service = StreamService(settings, stream, redis=redis,
                            auth=auth or StreamAuth.fixed(Tenants(tag).keys()))
    await service.start()
    try:
        yield service
    finally:
        await service.stop()
        await redis.aclose()


@dataclass
class World:
    """The bus and the job store, as the platform's parts would use them."""

    nc: Any
    js: Any
    redis: Any
    store: JobStore
    stream: str | None
    first_seq: int
    jobs: set[str] = field(default_factory=set)

    async def publish(self, subject: str, packet: protocol.BusPacket) -> None:
        await self.nc.publish(subject, packet.SerializeToString())
        await self.nc.flush()

    async def create(self, job_id: str, tenant: str, topic: str = TOPIC) -> None:
        self.jobs.add(job_id)
        await self.store.create(NewJob(job_id=job_id, trace_id=f"trace-{job_id}",
                                       tenant=tenant, topic=topic, context="{}",
                                       request="{}", meta={}))

    async def run(self, job_id: str) -> None:
        await self.store.transition(job_id, [JobState.SCHEDULED, JobState.DISPATCHED,
                                             JobState.RUNNING], fields={"worker_id": "w-1"})

    async def finish(self, job_id: str, state: JobState = JobState.SUCCEEDED,
                     **fields: str) -> None:
        await self.store.transition(job_id, [state], fields={
            "result_ptr": result_pointer(job_id), **fields})

    async def submit(self, job_id: str, tenant: str, topic: str = TOPIC) -> None:
        req = protocol.JobRequest(job_id=job_id, topic=topic, tenant_id=tenant)
        await self.publish(protocol.SUBJECT_SUBMIT, protocol.packet(
            trace_id=f"trace-{job_id}", sender_id=protocol.SENDER_GATEWAY, job_request=req))

    async def result(self, job_id: str,
                     status: int = protocol.JobStatus.JOB_STATUS_SUCCEEDED) -> None:
        res = protocol.JobResult(job_id=job_id, status=status, worker_id="w-1",
                                 result_ptr=result_pointer(job_id), execution_ms=5)
        res.artifact_ptrs.append(f"redis://art:{job_id}")
        await self.publish(protocol.SUBJECT_RESULT, protocol.packet(
            trace_id=f"trace-{job_id}", sender_id="w-1", job_result=res))

    async def progress(self, job_id: str, percent: int) -> None:
        msg = protocol.JobProgress(job_id=job_id, percent=percent, message=f"{percent}%")
        await self.publish(protocol.SUBJECT_PROGRESS, protocol.packet(
            trace_id=f"trace-{job_id}", sender_id="w-1", job_progress=msg))

    async def heartbeat(self, worker_id: str) -> None:
        await self.publish(protocol.SUBJECT_HEARTBEAT, protocol.packet(
            trace_id=worker_id, sender_id=worker_id,
            heartbeat=protocol.Heartbeat(worker_id=worker_id, pool="p")))


def _job_of(packet: protocol.BusPacket) -> str:
    kind = packet.WhichOneof("payload")
    return str(getattr(getattr(packet, kind), "job_id", "")) if kind else ""


@asynccontextmanager
async def world() -> AsyncIterator[World]:
    """A NATS connection and the job store; after the test, its packets are taken out of
    the job stream (a stack's bridge must never work on them) and its jobs out of Redis."""
    import nats
    from nats.js.errors import NotFoundError

    from tests.helpers import forget_jobs

    nc = await nats.connect(NATS_URL)
    js = nc.jetstream()
    try:
        stream: str | None = await js.find_stream_name_by_subject(protocol.SUBJECT_SUBMIT)
        first = (await js.stream_info(stream)).state.last_seq + 1
    except NotFoundError:
        stream, first = None, 0
    redis = aioredis.from_url(redis_url())
    w = World(nc, js, redis, JobStore(redis, retention_s=3600), stream, first)
    try:
        yield w
    finally:
        if stream is not None:
            await drop_from_stream(js, stream, first, lambda p: _job_of(p) in w.jobs)
        await forget_jobs(redis, sorted(w.jobs), tombstone=False)
        await redis.aclose()
        await nc.close()


def b64url(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def url(service: StreamService, path: str = "/api/v1/stream") -> str:
    return f"http://127.0.0.1:{service.port}{path}"


async def ws_open(http: aiohttp.ClientSession, service: StreamService, key: str, *,
                  path: str = "/api/v1/stream", query: dict[str, str] | None = None,
                  headers: dict[str, str] | None = None, as_protocols: bool = False,
                  ) -> aiohttp.ClientWebSocketResponse:
    """A WebSocket that sends its key as a browser does: the subprotocol header
    ``cordum-api-key, <base64url key>``. ``as_protocols``: offered as aiohttp's list of
    subprotocols instead (``cordum-api-key,<token>``), so the client checks the answer."""
    if as_protocols:
        return await http.ws_connect(url(service, path), params=query or {},
                                     headers=headers or {},
                                     protocols=("cordum-api-key", b64url(key)))
    hdrs = {"Sec-WebSocket-Protocol": f"cordum-api-key, {b64url(key)}", **(headers or {})}
    return await http.ws_connect(url(service, path), params=query or {}, headers=hdrs)


async def ws_next(ws: aiohttp.ClientWebSocketResponse,
                  timeout: float = FRAME_TIMEOUT_S) -> dict[str, Any]:
    msg = await ws.receive(timeout=timeout)
    assert msg.type == aiohttp.WSMsgType.TEXT, (msg.type, msg.data, msg.extra)
    value = json.loads(msg.data)
    assert isinstance(value, dict)
    return value


async def ws_until(ws: aiohttp.ClientWebSocketResponse, wanted: Any,
                   timeout: float = FRAME_TIMEOUT_S) -> dict[str, Any]:
    """The next frame ``wanted`` accepts, others skipped: a client of every tenant also
    gets what other tests (and a local stack) publish on the same bus."""
    async with asyncio.timeout(timeout):
        while True:
            frame = await ws_next(ws, timeout)
            if wanted(frame):
                return frame


async def ws_quiet(ws: aiohttp.ClientWebSocketResponse, within: float = QUIET_S) -> None:
    """Nothing arrives within ``within`` seconds."""
    try:
        msg = await ws.receive(timeout=within)
    except TimeoutError:
        return
    raise AssertionError(f"unexpected frame: {msg.type} {msg.data!r}")


class Sse:
    """An SSE client over aiohttp: reads events as the EventSource spec splits them."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.last_id = ""
        self.retry: int | None = None

    @classmethod
    async def open(cls, http: aiohttp.ClientSession, service: StreamService, key: str, *,
                   path: str = "/api/v1/stream", query: dict[str, str] | None = None,
                   headers: dict[str, str] | None = None) -> Sse:
        response = await http.get(url(service, path), params=query or {}, headers={
            "Accept": "text/event-stream", "X-API-Key": key, **(headers or {})})
        assert response.status == 200, await response.text()
        return cls(response)

    async def next(self, timeout: float = FRAME_TIMEOUT_S) -> dict[str, Any]:
        """The next event: {"id", "event", "data"} (data parsed); comments skipped."""
        async with asyncio.timeout(timeout):
            fields: dict[str, str] = {}
            while True:
                raw = await self.response.content.readline()
                if not raw:
                    raise EOFError("the event stream ended")
                line = raw.decode().rstrip("\n")
                if line == "":
                    if "data" in fields:
                        if fields.get("id"):
                            self.last_id = fields["id"]
                        return {"id": fields.get("id"), "event": fields.get("event"),
                                "data": json.loads(fields["data"])}
                    fields = {}
                    continue
                if line.startswith(":"):
                    continue
                name, _, value = line.partition(": ")
                if name == "retry":
                    self.retry = int(value)
                else:
                    fields[name] = value

    async def ended(self, timeout: float = FRAME_TIMEOUT_S) -> bool:
        """Whether the server ends the stream within ``timeout`` (events before are
        skipped)."""
        try:
            while True:
                await self.next(timeout)
        except EOFError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.response.close()


def test_the_tenants_of_two_tests_differ() -> None:
    assert Tenants("x").a != Tenants("y").a
