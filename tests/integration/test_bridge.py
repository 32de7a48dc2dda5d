"""cordum-bridge: forwarding on a real JetStream stream, snapshot on real Redis.

SQS does not run here (outside LocalStack), so the forwarder sends to a small
in-memory ``QueueSink``; the SQS adapter is checked against moto, served on a
local port. Each test makes its own stream, subjects, consumers and Redis keys,
and removes them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import replace
from typing import Any

import boto3
import nats
import pytest
import redis.asyncio as aioredis
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from moto import mock_aws
from nats.aio.msg import Msg
from nats.js.api import RetentionPolicy, StreamConfig

from cordum.bus.forward_policy import FORWARD_COUNTERS, ForwardPolicy, Route
from cordum.bus.forwarder import JobForwarder
from cordum.bus.guard import BusGuard, DeadLetter, GuardKeys, GuardPolicy
from cordum.bus.queue import BatchReport, QueueMessage, QueueUnavailable
from cordum.bus.settings import load_bridge_settings
from cordum.bus.sqs import SqsClient, SqsQueueSink
from cordum.config import ConfigError, load_settings
from cordum.protocol import Heartbeat, JobRequest, JobResult, JobStatus, packet
from cordum.registry.ingest import HeartbeatIngest
from cordum.registry.live import LiveRegistry
from cordum.registry.writer import SnapshotWriter
from tests.conftest import NATS_URL, REDIS_URL
from tests.helpers import eventually, run

SETTINGS = load_settings(env={"REDIS_URL": REDIS_URL, "NATS_URL": NATS_URL})
FAST = ForwardPolicy(fetch_wait_s=0.2, nak_delay_s=0.3, nak_delay_max_s=0.3, error_pause_s=0.1)


class MemorySink:
    """QueueSink that keeps what it accepted; can refuse or be unreachable for a while."""

    def __init__(
        self, refuse_calls: int = 0, unreachable_calls: int = 0, delay_s: float = 0.0
    ) -> None:
        self.calls: list[list[QueueMessage]] = []
        self.accepted: list[QueueMessage] = []
        self._refuse = refuse_calls
        self._unreachable = unreachable_calls
        self._delay_s = delay_s

    async def send_batch(self, messages: Sequence[QueueMessage]) -> BatchReport:
        self.calls.append(list(messages))
        await asyncio.sleep(self._delay_s)  # the stand-in's latency, as a slow queue's
        if self._unreachable:
            self._unreachable -= 1
            raise QueueUnavailable("queue down for the test")
        if self._refuse:
            self._refuse -= 1
            return BatchReport(frozenset(), {m.id: "InternalError: test" for m in messages})
        self.accepted.extend(messages)
        return BatchReport(frozenset(m.id for m in messages), {})


DOWN_REDIS_URL = "redis://127.0.0.1:1"
"""Nothing listens there: the guard sees a Redis outage."""


class StreamEnv:
    def __init__(self, nc: Any, redis: Any) -> None:
        tag = uuid.uuid4().hex[:8]
        self.nc = nc
        self.js = nc.jetstream()
        self.redis = redis
        self.stream = f"TEST_BRIDGE_{tag}"
        self.submit = f"test.{tag}.job.submit"
        self.result = f"test.{tag}.job.result"
        self.cancel = f"test.{tag}.job.cancel"
        self.prefix = f"test-{tag}"
        self.keys = GuardKeys(prefix=f"test:{tag}:")
        """Every guard key of the test lives under this prefix, away from a live stack."""
        self.start: Any = None
        self.forwarder: Any = None
        self.task: Any = None
        self._running: list[tuple[JobForwarder, asyncio.Task[None]]] = []

    def routes(self, submit: MemorySink, result: MemorySink) -> list[Route]:
        return [
            Route(f"{self.prefix}-submit", self.submit, submit, "submit"),
            Route(f"{self.prefix}-result", self.result, result, "result"),
            Route(f"{self.prefix}-cancel", self.cancel, result, "result"),
        ]

    def guard(self, redis: Any = None, policy: GuardPolicy | None = None) -> BusGuard:
        return BusGuard(redis or self.redis, keys=self.keys, policy=policy)

    def forwarder_for(
        self,
        submit: MemorySink,
        result: MemorySink | None = None,
        policy: ForwardPolicy = FAST,
        guard: BusGuard | None = None,
    ) -> JobForwarder:
        """Another replica on the same durable consumers, with its own guard owner."""
        return JobForwarder(
            self.js, self.stream, self.routes(submit, result or MemorySink()), policy, guard
        )

    async def launch(self, forwarder: JobForwarder) -> asyncio.Task[None]:
        await forwarder.start()
        task = asyncio.create_task(forwarder.run())
        self._running.append((forwarder, task))
        return task

    async def halt(self) -> None:
        for forwarder, task in self._running:
            forwarder.stop()
            if not task.done():
                await asyncio.wait_for(task, 2.0)
            await forwarder.close()
        self._running.clear()

    async def stored(self) -> int:
        """Messages still in the work-queue stream (acked ones are removed)."""
        return (await self.js.stream_info(self.stream)).state.messages

    async def ack_pending(self, durable: str) -> int:
        return (await self.js.consumer_info(self.stream, durable)).num_ack_pending

    async def drop_keys(self) -> None:
        async for key in self.redis.scan_iter(match=f"{self.keys.prefix}*", count=500):
            await self.redis.delete(key)


@contextlib.asynccontextmanager
async def forwarding(
    submit: MemorySink,
    result: MemorySink | None = None,
    *,
    autostart: bool = True,
    policy: ForwardPolicy = FAST,
    redis_url: str | None = None,
    guard_policy: GuardPolicy | None = None,
) -> AsyncIterator[StreamEnv]:
    """A test stream and one forwarder on it, guarded by Redis under a test prefix.

    ``redis_url`` points that forwarder's guard elsewhere (an unreachable Redis).
    """
    nc = await nats.connect(SETTINGS.nats_url)
    redis = aioredis.Redis.from_url(SETTINGS.redis_url)
    guard_redis = (
        aioredis.Redis.from_url(redis_url, socket_connect_timeout=0.5, socket_timeout=0.5)
        if redis_url
        else redis
    )
    env = StreamEnv(nc, redis)
    await env.js.add_stream(
        StreamConfig(
            name=env.stream,
            subjects=[env.submit, env.result, env.cancel],
            retention=RetentionPolicy.WORK_QUEUE,
            max_age=300,
        )
    )
    forwarder = env.forwarder_for(submit, result, policy, env.guard(guard_redis, guard_policy))

    async def start() -> None:
        env.task = await env.launch(forwarder)

    env.start = start
    env.forwarder = forwarder
    try:
        if autostart:
            await start()
        yield env
    finally:
        await env.halt()
        await env.js.delete_stream(env.stream)
        await nc.close()
        await env.drop_keys()
        if guard_redis is not redis:
            await guard_redis.aclose()
        await redis.aclose()


def job_packet(job_id: str) -> bytes:
    req = JobRequest(job_id=job_id, topic="job.default", context_ptr=f"redis://ctx:{job_id}")
    return packet(
        trace_id="trace-1", sender_id="api-gateway-http", job_request=req
    ).SerializeToString()


def test_submit_packet_reaches_queue_base64_with_attributes_and_is_acked() -> None:
    async def scenario() -> None:
        submit = MemorySink()
        async with forwarding(submit) as env:
            # Given a job request published with JetStream, as the gateway does
            data = job_packet("job-42")
            await env.js.publish(env.submit, data, headers={"Nats-Msg-Id": "job-42"})

            # Then the submit queue gets it, byte for byte, with its subject
            await eventually(lambda: submit.accepted)
            (msg,) = submit.accepted
            assert base64.b64decode(msg.body) == data
            assert msg.attributes["subject"] == env.submit
            assert msg.attributes["job_id"] == "job-42"
            assert msg.attributes["bus_msg_id"] == f"{env.stream}:1"

            # And it is acked: nothing pending, nothing left in the work queue
            await eventually(lambda: _zero(env.ack_pending(f"{env.prefix}-submit")))
            await eventually(lambda: _zero(env.stored()))

    run(scenario())


def test_results_and_cancels_go_to_the_result_queue_plain_publish_included() -> None:
    async def scenario() -> None:
        submit, result = MemorySink(), MemorySink()
        async with forwarding(submit, result) as env:
            res = JobResult(job_id="job-7", status=JobStatus.JOB_STATUS_SUCCEEDED, worker_id="w")
            data = packet(trace_id="t", sender_id="w", job_result=res).SerializeToString()
            # A CAP worker publishes results with plain NATS: the stream captures them.
            await env.nc.publish(env.result, data)
            await env.nc.publish(env.cancel, b"cancel-bytes")
            await env.nc.flush()

            await eventually(lambda: len(result.accepted) == 2)
            subjects = {m.attributes["subject"]: m for m in result.accepted}
            assert subjects[env.result].attributes["job_id"] == "job-7"
            assert base64.b64decode(subjects[env.cancel].body) == b"cancel-bytes"
            assert submit.calls == []
            await eventually(lambda: _zero(env.stored()))

    run(scenario())


@pytest.mark.parametrize("failure", ["refused", "unreachable"])
def test_message_the_queue_did_not_take_is_not_acked_and_comes_back(failure: str) -> None:
    async def scenario() -> None:
        submit = MemorySink(
            refuse_calls=1 if failure == "refused" else 0,
            unreachable_calls=1 if failure == "unreachable" else 0,
        )
        async with forwarding(submit) as env:
            data = job_packet("job-r")
            await env.js.publish(env.submit, data)

            # When the first send fails
            await eventually(lambda: submit.calls)
            assert submit.accepted == []
            # Then the message is still in the stream (not acked) ...
            assert await env.stored() == 1

            # ... and is delivered again after the NAK delay, then acked
            await eventually(lambda: submit.accepted)
            assert len(submit.calls) == 2
            assert [base64.b64decode(m.body) for c in submit.calls for m in c] == [data, data]
            await eventually(lambda: _zero(env.stored()))
            assert await env.ack_pending(f"{env.prefix}-submit") == 0

    run(scenario())


def test_unparseable_payload_is_still_forwarded() -> None:
    async def scenario() -> None:
        submit = MemorySink()
        async with forwarding(submit) as env:
            garbage = b"\xff\xff\xff not a BusPacket"
            await env.js.publish(env.submit, garbage)

            await eventually(lambda: submit.accepted)
            (msg,) = submit.accepted
            assert base64.b64decode(msg.body) == garbage
            assert msg.attributes["subject"] == env.submit
            assert "job_id" not in msg.attributes
            await eventually(lambda: _zero(env.stored()))

    run(scenario())


def test_a_pull_returns_up_to_ten_and_one_send_covers_them() -> None:
    async def scenario() -> None:
        submit = MemorySink()
        async with forwarding(submit, autostart=False) as env:
            # Given twelve requests waiting in the stream
            for i in range(12):
                await env.js.publish(env.submit, job_packet(f"job-{i}"))
            # When the forwarder starts
            await env.start()
            # Then two pulls and two SQS calls carry them all
            await eventually(lambda: len(submit.accepted) == 12)
            assert [len(call) for call in submit.calls] == [10, 2]
            ids = sorted(int(m.attributes["job_id"].split("-")[1]) for m in submit.accepted)
            assert ids == list(range(12))

    run(scenario())


def test_stop_lets_the_forward_in_flight_finish_and_ack() -> None:
    async def scenario() -> None:
        submit = MemorySink(delay_s=0.5)
        async with forwarding(submit, autostart=False) as env:
            await env.start()
            await env.js.publish(env.submit, job_packet("job-stop"))
            # Given a send that is under way
            await eventually(lambda: submit.calls)
            # When the forwarder is told to stop
            env.forwarder.stop()
            await asyncio.wait_for(env.task, 2.0)
            # Then the send completed and the message was acked before run() returned
            assert len(submit.accepted) == 1
            await env.nc.flush()
            await eventually(lambda: _zero(env.stored()), timeout=1.0)

    run(scenario())


# --------------------------------------------------------------------------- crash safety


def test_message_already_marked_processed_is_acked_and_not_sent() -> None:
    async def scenario() -> None:
        submit = MemorySink()
        async with forwarding(submit, autostart=False) as env:
            # Given a message whose processed key exists (an earlier replica sent it)
            await env.js.publish(env.submit, job_packet("job-done"))
            await env.redis.set(env.keys.processed(env.stream, 1), "1", ex=60)

            # When the forwarder pulls it
            await env.start()

            # Then it is acked and gone, and the queue never saw it
            await eventually(lambda: _zero(env.stored()))
            assert submit.calls == []
            assert env.forwarder.counters["duplicates_skipped"] == 1
            assert env.forwarder.counters["forwarded"] == 0

    run(scenario())


@pytest.mark.parametrize("crash", ["ack_lost", "replica_died_before_ack"])
def test_message_the_queue_accepted_is_not_sent_again_when_its_ack_never_arrived(
    crash: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_ack = Msg.ack
    dropped: list[int] = []

    async def first_ack_goes_nowhere(msg: Msg) -> None:
        if not dropped:
            dropped.append(msg.metadata.sequence.stream)
            if crash == "ack_lost":
                raise ConnectionError("connection lost before the ack (test)")
            return  # the replica is gone before its ack left
        await real_ack(msg)

    monkeypatch.setattr(Msg, "ack", first_ack_goes_nowhere)
    policy = replace(FAST, ack_wait_s=1.0)

    async def scenario() -> None:
        submit = MemorySink()
        async with forwarding(submit, policy=policy) as env:
            # Given a message the queue accepted and whose ack never reached JetStream
            await env.js.publish(env.submit, job_packet("job-once"))
            await eventually(lambda: dropped)
            assert len(submit.accepted) == 1
            assert await env.redis.exists(env.keys.processed(env.stream, 1)) == 1
            assert await env.redis.exists(env.keys.inflight(env.stream, 1)) == 0
            first = env.forwarder
            if crash == "replica_died_before_ack":
                await env.halt()
                # A new replica (its own guard owner) takes over the consumer
                first = env.forwarder_for(submit, policy=policy, guard=env.guard())
                await env.launch(first)

            # When JetStream redelivers it after ack_wait
            await eventually(lambda: _zero(env.stored()), timeout=4.0)

            # Then it was acked without a second send
            assert len(submit.accepted) == 1
            assert first.counters["duplicates_skipped"] == 1
            ttl = await env.redis.ttl(env.keys.processed(env.stream, 1))
            assert 0 < ttl <= 600

    run(scenario(), timeout=8.0)


def test_two_forwarders_on_one_consumer_never_send_the_same_message_twice() -> None:
    # Sends outlast ack_wait, so JetStream hands every message to the other
    # replica while the first one is still sending it.
    policy = replace(FAST, ack_wait_s=1.0)

    async def scenario() -> None:
        submit = MemorySink(delay_s=1.5)
        async with forwarding(submit, policy=policy) as env:
            other = env.forwarder_for(submit, policy=policy, guard=env.guard())
            await env.launch(other)
            ids = [f"job-pair-{i}" for i in range(6)]
            for job_id in ids:
                await env.js.publish(env.submit, job_packet(job_id))

            await eventually(lambda: _zero(env.stored()), timeout=8.0)

            sent = [m.attributes["job_id"] for m in submit.accepted]
            assert sorted(sent) == sorted(ids)
            replicas = (env.forwarder, other)
            assert sum(f.counters["forwarded"] for f in replicas) == len(ids)
            assert sum(f.counters["inflight_busy"] for f in replicas) >= 1

    run(scenario(), timeout=12.0)


@pytest.mark.parametrize("why", ["delivery_limit", "poison", "too_large"])
def test_message_given_up_is_dead_lettered_then_terminated(why: str) -> None:
    policy = {
        "delivery_limit": replace(FAST, max_deliver=3),
        "poison": replace(FAST, poison_after=2),
        "too_large": replace(FAST, max_message_bytes=400),
    }[why]
    deliveries = 1 if why == "too_large" else 2

    async def scenario() -> None:
        submit = MemorySink(refuse_calls=1000)
        async with forwarding(submit, policy=policy) as env:
            # Given a message the queue will never take
            data = job_packet("job-poison") + (b"x" * 600 if why == "too_large" else b"")
            await env.js.publish(env.submit, data, headers={"Nats-Msg-Id": "job-poison"})

            # When the forwarder gives up on it
            await eventually(lambda: _zero(env.stored()), timeout=4.0)

            # Then the consumer has nothing left of it ...
            info = await env.js.consumer_info(env.stream, f"{env.prefix}-submit")
            assert info.num_ack_pending == 0 and info.num_pending == 0
            assert submit.accepted == []
            assert len(submit.calls) == (0 if why == "too_large" else deliveries)
            # ... and its DLQ record holds what is needed to replay it
            raw = await env.redis.get(env.keys.dead_letter(env.stream, 1))
            record = json.loads(raw)
            assert record["subject"] == env.submit
            assert base64.b64decode(record["payload_b64"]) == data
            assert record["deliveries"] == deliveries
            assert record["stream"] == env.stream and record["seq"] == 1
            assert record["consumer"] == f"{env.prefix}-submit"
            assert record["headers"] == {"Nats-Msg-Id": "job-poison"}
            assert ("too large" if why == "too_large" else "InternalError") in record["reason"]
            assert 0 < await env.redis.ttl(env.keys.dead_letter(env.stream, 1)) <= 30 * 86_400
            score = await env.redis.zscore(env.keys.dead_letter_index, f"{env.stream}:1")
            assert score == record["dead_lettered_at_us"]
            assert abs(score / 1e6 - time.time()) < 30
            assert env.forwarder.counters["dlq_terminated"] == 1

    run(scenario(), timeout=8.0)


def test_dlq_index_keeps_the_newest_entries() -> None:
    async def scenario() -> None:
        keys = GuardKeys(prefix=f"test:{uuid.uuid4().hex[:8]}:")
        redis = aioredis.Redis.from_url(SETTINGS.redis_url)
        guard = BusGuard(redis, keys=keys, policy=GuardPolicy(dlq_index_max=3))
        try:
            for seq in range(1, 6):
                letter = DeadLetter("S", seq, "subj", b"p", "test", 1)
                assert await guard.dead_letter([letter]) is True
            members = await redis.zrange(keys.dead_letter_index, 0, -1)
            assert members == [b"S:3", b"S:4", b"S:5"]
        finally:
            async for key in redis.scan_iter(match=f"{keys.prefix}*"):
                await redis.delete(key)
            await redis.aclose()

    run(scenario())


def kept_without_a_record(caplog: pytest.LogCaptureFixture) -> bool:
    """Whether the forwarder has handled a last delivery it could not dead-letter: it
    NAKs that one (which then stays in the stream) where it would otherwise terminate
    it, and says so."""
    return any("no delivery left" in r.getMessage() for r in caplog.records
               if r.name == "cordum.bus.forwarder")


def test_without_redis_messages_still_flow_and_none_is_terminated(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # (the capture takes the lower of the two levels: the one set last)
    caplog.set_level(logging.ERROR, logger="cordum.bus.forwarder")
    caplog.set_level(logging.WARNING, logger="cordum.bus.guard")
    # No pause between Redis attempts: every step meets the outage.
    policy = replace(FAST, max_deliver=3, dlq_retry_delay_s=0.2)
    guard_policy = GuardPolicy(redis_retry_s=0.0, op_timeout_s=0.5)

    async def scenario() -> None:
        submit, result = MemorySink(), MemorySink(refuse_calls=1000)
        async with forwarding(
            submit, result, policy=policy, redis_url=DOWN_REDIS_URL, guard_policy=guard_policy
        ) as env:
            # Given Redis down, good requests and a result the queue always refuses
            ids = [f"job-nr-{i}" for i in range(3)]
            for job_id in ids:
                await env.js.publish(env.submit, job_packet(job_id))
            await env.js.publish(env.result, b"refused for good")

            # Then the requests are forwarded (at least once) and acked
            await eventually(lambda: len(submit.accepted) >= 3, timeout=4.0)
            assert {m.attributes["job_id"] for m in submit.accepted} == set(ids)
            # And the refused one uses up its deliveries without being terminated:
            # there was no DLQ record to write first
            await eventually(lambda: len(result.calls) >= 3, timeout=4.0)
            await eventually(lambda: kept_without_a_record(caplog), timeout=4.0)
            assert await env.stored() == 1
            assert env.forwarder.counters["dlq_terminated"] == 0
            assert env.forwarder.counters["redis_degraded"] >= 5
            assert env.forwarder.guard.degraded

        # One warning for the outage, not one per message
        warnings = [r for r in caplog.records if r.name == "cordum.bus.guard"]
        assert len(warnings) == 1 and "redis unavailable" in warnings[0].getMessage()

    run(scenario(), timeout=8.0)


def test_forwarder_without_a_guard_never_terminates(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="cordum.bus.forwarder")

    async def scenario() -> None:
        submit = MemorySink(refuse_calls=1000)
        policy = replace(FAST, max_deliver=2, dlq_retry_delay_s=0.2)
        async with forwarding(submit, autostart=False) as env:
            forwarder = env.forwarder_for(submit, policy=policy, guard=None)
            await env.launch(forwarder)
            await env.js.publish(env.submit, job_packet("job-kept"))
            await eventually(lambda: len(submit.calls) >= 2, timeout=3.0)
            await eventually(lambda: kept_without_a_record(caplog), timeout=3.0)
            assert await env.stored() == 1
            assert forwarder.counters["dlq_terminated"] == 0

    run(scenario())


def test_forward_policy_gives_up_at_the_delivery_limit_or_the_poison_threshold() -> None:
    default = ForwardPolicy()
    assert default.dead_letter_at == 99
    assert not default.gives_up(98, refused=True)
    assert default.gives_up(99, refused=False)
    poison = ForwardPolicy(poison_after=5)
    assert poison.gives_up(5, refused=True)
    assert not poison.gives_up(5, refused=False)  # a queue outage is not the message's fault
    assert ForwardPolicy(dead_letter_after=7).dead_letter_at == 7
    assert set(FORWARD_COUNTERS) == set(JobForwarder(None, "S", []).counters)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ForwardPolicy(batch_size=11)


async def _zero(value: Awaitable[int]) -> bool:
    return await value == 0


# --------------------------------------------------------------------------- SQS adapter


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SQS", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


class MotoSqsEndpoint:
    """SQS's JSON protocol on a local port, answered by moto: the adapter's requests
    and moto's answers cross a real socket, and moto checks them as SQS would.

    ``close_after_each`` drops the connection after every answer without saying so,
    as a server whose keep-alive timeout ran out does.
    """

    def __init__(self, client: Any, *, close_after_each: bool = False) -> None:
        self.client = client
        self.close_after_each = close_after_each
        self.requests: list[dict[str, str]] = []
        self.connections = 0
        self.url = ""
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> MotoSqsEndpoint:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self.connections += 1
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
                break
            lines = head.decode().split("\r\n")[1:]
            headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines if h)}
            body = json.loads(await reader.readexactly(int(headers["content-length"])))
            self.requests.append(headers)
            operation = headers["x-amz-target"].removeprefix("AmazonSQS.")
            try:
                answer = getattr(self.client, re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower())(
                    **body)
                answer.pop("ResponseMetadata", None)
                status = 200
            except ClientError as exc:
                error = exc.response["Error"]
                answer = {"__type": f"com.amazonaws.sqs#{error['Code']}",
                          "message": error["Message"]}
                status = 400
            data = json.dumps(answer).encode()
            writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/x-amz-json-1.0\r\n"
                         f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
            await writer.drain()
            if self.close_after_each:
                break
        writer.close()


def sqs_client_for(endpoint: MotoSqsEndpoint) -> SqsClient:
    return SqsClient(endpoint.url, "us-east-1", Credentials("testing", "testing"))


@mock_aws
def test_sqs_sink_sends_a_batch_with_string_attributes(aws_env: None) -> None:
    client = boto3.client("sqs", region_name="us-east-1")
    url = client.create_queue(QueueName="cordum-submit-test")["QueueUrl"]
    messages = [
        QueueMessage(
            "0", base64.b64encode(b"one").decode(), {"subject": "sys.job.submit", "job_id": "a"}
        ),
        QueueMessage("1", base64.b64encode(b"two").decode(), {"subject": "sys.job.submit"}),
    ]

    async def scenario() -> tuple[Any, Any, MotoSqsEndpoint]:
        async with MotoSqsEndpoint(client) as endpoint:
            sqs = sqs_client_for(endpoint)
            sink = SqsQueueSink(url, sqs)
            first = await sink.send_batch(messages)
            second = await sink.send_batch(messages[:1])
            await sqs.close()
            return first, second, endpoint

    report, again, endpoint = asyncio.run(scenario())

    assert report.accepted == {"0", "1"} and not report.refused
    assert again.accepted == {"0"}
    # Signed as SQS wants it, and both calls went over one kept-alive connection
    assert all(r["authorization"].startswith("AWS4-HMAC-SHA256 Credential=testing/")
               and r["x-amz-target"] == "AmazonSQS.SendMessageBatch" for r in endpoint.requests)
    assert endpoint.connections == 1
    got = client.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    )["Messages"]
    by_body = {base64.b64decode(m["Body"]): m["MessageAttributes"] for m in got}
    assert by_body[b"one"]["job_id"] == {"StringValue": "a", "DataType": "String"}
    assert by_body[b"two"]["subject"]["StringValue"] == "sys.job.submit"
    assert "job_id" not in by_body[b"two"]


@mock_aws
def test_sqs_sink_reports_a_missing_queue_as_unavailable(aws_env: None) -> None:
    client = boto3.client("sqs", region_name="us-east-1")
    url = client.create_queue(QueueName="gone")["QueueUrl"]
    client.delete_queue(QueueUrl=url)

    async def scenario() -> None:
        async with MotoSqsEndpoint(client) as endpoint:
            sink = SqsQueueSink(url, sqs_client_for(endpoint))
            await sink.send_batch([QueueMessage("0", "eA==", {"subject": "s"})])

    with pytest.raises(QueueUnavailable, match="does not exist"):
        asyncio.run(scenario())


@mock_aws
def test_sqs_sink_sends_again_on_a_new_connection_when_the_kept_one_was_closed(
    aws_env: None,
) -> None:
    client = boto3.client("sqs", region_name="us-east-1")
    url = client.create_queue(QueueName="cordum-keepalive-test")["QueueUrl"]

    async def scenario() -> tuple[list[Any], MotoSqsEndpoint]:
        async with MotoSqsEndpoint(client, close_after_each=True) as endpoint:
            sqs = sqs_client_for(endpoint)
            sink = SqsQueueSink(url, sqs)
            reports = [await sink.send_batch([QueueMessage("0", "eA==", {"subject": "s"})])
                       for _ in range(3)]
            await sqs.close()
            return reports, endpoint

    reports, endpoint = asyncio.run(scenario())

    assert [r.accepted for r in reports] == [{"0"}] * 3
    assert endpoint.connections == 3 and len(endpoint.requests) == 3


def test_sqs_client_takes_endpoint_and_region_from_the_environment() -> None:
    sqs = SqsClient.from_env({"AWS_ENDPOINT_URL": "http://127.0.0.1:4566",
                              "AWS_REGION": "eu-west-1"})
    assert (sqs.endpoint_url, sqs.region) == ("http://127.0.0.1:4566", "eu-west-1")


def test_bridge_settings_fail_fast_with_the_variable_name() -> None:
    with pytest.raises(ConfigError, match="SUBMIT_QUEUE_URL"):
        load_bridge_settings({"RESULT_QUEUE_URL": "http://q/result"})
    cfg = load_bridge_settings(
        {"SUBMIT_QUEUE_URL": "s", "RESULT_QUEUE_URL": "r", "WORKER_SNAPSHOT_INTERVAL": "2.5"}
    )
    assert cfg.snapshot_interval_s == 2.5


# --------------------------------------------------------------------------- heartbeats


def heartbeat_bytes(hb: Heartbeat) -> bytes:
    return packet(trace_id=hb.worker_id, sender_id=hb.worker_id, heartbeat=hb).SerializeToString()


RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def test_heartbeats_become_the_worker_snapshot_under_the_writer_lock() -> None:
    async def scenario() -> None:
        tag = uuid.uuid4().hex[:8]
        subject = f"test.{tag}.heartbeat"
        key, lock = f"test:{tag}:workers:snapshot", f"test:{tag}:snapshot:writer"
        pool = f"gpu-{tag}"
        topics = {f"job.{tag}.a": pool, f"job.{tag}.idle": f"empty-{tag}"}
        nc = await nats.connect(SETTINGS.nats_url)
        redis = aioredis.Redis.from_url(SETTINGS.redis_url)
        # A long interval: any write after the first one is the "new worker" write.
        ingest = HeartbeatIngest(
            nc,
            SnapshotWriter(redis, key=key, lock_key=lock),
            topics,
            subject=subject,
            interval_s=30.0,
        )
        task = None
        try:
            await ingest.start()
            task = asyncio.create_task(ingest.run())

            # Given two workers of one pool and one without a pool
            beats = [
                Heartbeat(
                    worker_id=f"w1-{tag}",
                    pool=pool,
                    active_jobs=1,
                    max_parallel_jobs=4,
                    cpu_load=12.3,
                    capabilities=["job.a"],
                    region="eu",
                    type="gpu",
                    labels={"zone": "b"},
                    memory_load=40.0,
                    gpu_utilization=55.5,
                ),
                Heartbeat(worker_id=f"w2-{tag}", pool=pool, active_jobs=2, max_parallel_jobs=2),
                Heartbeat(worker_id=f"w3-{tag}", pool="", active_jobs=5, max_parallel_jobs=9),
            ]
            # When their heartbeats arrive
            for hb in beats:
                await nc.publish(subject, heartbeat_bytes(hb))
            await nc.publish(subject, b"not a packet")
            await nc.flush()

            # Then the snapshot lists them, at once rather than at the next tick
            async def three_workers() -> dict[str, Any] | None:
                raw = await redis.get(key)
                doc = json.loads(raw) if raw else None
                return doc if doc and len(doc["workers"]) == 3 else None

            snap = await eventually(three_workers, timeout=2.0)
            ingest.stop()
            await asyncio.wait_for(task, 2.0)

            assert list(snap) == ["captured_at", "writer_id", "pools", "topics", "workers"]
            assert RFC3339.match(snap["captured_at"])
            assert snap["writer_id"] == ingest.writer_id
            assert re.match(r"^.+-[0-9a-f]{8}$", snap["writer_id"])
            assert snap["pools"] == {pool: {"workers": 2, "active_jobs": 3, "capacity": 6}}
            assert snap["topics"] == {
                f"job.{tag}.a": {"pool": pool, "workers": 2, "capacity": 6, "available": True},
                f"job.{tag}.idle": {
                    "pool": f"empty-{tag}",
                    "workers": 0,
                    "capacity": 0,
                    "available": False,
                },
            }
            w1, w2, w3 = snap["workers"]
            last = w1.pop("last_heartbeat")
            assert RFC3339.match(last)
            assert w1 == {
                "worker_id": f"w1-{tag}",
                "pool": pool,
                "active_jobs": 1,
                "max_parallel_jobs": 4,
                "capabilities": ["job.a"],
                "cpu_load": 12.3,
                "gpu_utilization": 55.5,
                "memory_load": 40.0,
                "region": "eu",
                "type": "gpu",
                "labels": {"zone": "b"},
            }
            # Zero values are omitted, as Go's omitempty does (gpu_utilization included)
            assert set(w2) == {
                "worker_id",
                "pool",
                "active_jobs",
                "max_parallel_jobs",
                "last_heartbeat",
            }
            assert w3["pool"] == "" and w3["max_parallel_jobs"] == 9
            assert 0 < await redis.ttl(key) <= 86_400
            # And the writer lock is released after the write
            assert await redis.exists(lock) == 0
        finally:
            ingest.stop()
            if task is not None and not task.done():
                task.cancel()
            await ingest.close()
            await redis.delete(key, lock)
            await redis.aclose()
            await nc.close()

    run(scenario())


def test_snapshot_is_not_written_while_another_writer_holds_the_lock() -> None:
    async def scenario() -> None:
        tag = uuid.uuid4().hex[:8]
        key, lock = f"test:{tag}:workers:snapshot", f"test:{tag}:snapshot:writer"
        redis = aioredis.Redis.from_url(SETTINGS.redis_url)
        try:
            writer = SnapshotWriter(redis, key=key, lock_key=lock)
            await redis.set(lock, "other-replica", px=5000)

            assert await writer.write({"workers": []}) is False
            assert await redis.get(key) is None
            assert await redis.get(lock) == b"other-replica"

            await redis.delete(lock)
            assert await writer.write({"workers": []}) is True
            assert await redis.exists(lock) == 0
        finally:
            await redis.delete(key, lock)
            await redis.aclose()

    run(scenario())


def test_registry_forgets_silent_workers_and_hydrates_fresh_ones() -> None:
    now = [1_000_000.0]
    registry = LiveRegistry(ttl_s=30.0, clock=lambda: now[0])
    assert registry.record(Heartbeat(worker_id="a", pool="p", max_parallel_jobs=1)).joined
    now[0] += 10
    assert not registry.record(Heartbeat(worker_id="a", pool="p", max_parallel_jobs=1)).joined
    now[0] += 31
    assert registry.snapshot({}, writer_id="x")["workers"] == []

    # A snapshot written by another replica: fresh workers are taken, stale ones not
    registry.record(Heartbeat(worker_id="fresh", pool="p", max_parallel_jobs=2, cpu_load=0.5))
    doc = registry.snapshot({"job.t": "p"}, writer_id="x")
    now[0] += 20
    doc["workers"].append(
        {"worker_id": "stale", "pool": "p", "last_heartbeat": "1970-01-01T00:00:00Z"}
    )
    other = LiveRegistry(ttl_s=30.0, clock=lambda: now[0])
    assert other.hydrate(doc) == 1
    assert not other.record(Heartbeat(worker_id="fresh", pool="p")).joined
    assert other.snapshot({}, writer_id="y")["workers"][0]["worker_id"] == "fresh"
