"""A stream's limits: a client that stops reading is closed (1013) and counted, a key
that is revoked is cut off (1008 "credential revoked"; an SSE stream ends), and the
counters go out as EMF lines."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json

import aiohttp

from cordum.metrics import Metrics
from cordum.stream.counters import MetricsReporter, StreamCounters
from cordum.stream.keys import ApiKey, KeyRefreshPolicy, KeyRing, StreamAuth
from tests.helpers import eventually, run
from tests.integration.test_stream_harness import (
    Sse,
    Tenants,
    stream_service,
    world,
    ws_open,
)

TEST_TIMEOUT_S = 40.0
BIG_MESSAGE = "x" * 32 * 1024
"""A progress message this large fills socket buffers within a few hundred events."""


def test_a_client_that_stops_reading_is_closed_with_1013(unique):
    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario():
        async with stream_service(unique, client_buffer=64) as svc, world() as w, \
                aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            await w.run(job)
            ws = await ws_open(http, svc, t.user_a)
            reader = await ws_open(http, svc, t.admin_a)  # reads along: not closed
            got: list = []

            async def keep_reading():
                async for msg in reader:
                    got.append(msg.type)

            follower = asyncio.create_task(keep_reading())
            from cordum import protocol

            for n in range(300):
                msg = protocol.JobProgress(job_id=job, percent=n % 100, message=BIG_MESSAGE)
                await w.nc.publish(protocol.SUBJECT_PROGRESS, protocol.packet(
                    trace_id=job, sender_id="w-1", job_progress=msg).SerializeToString())
            await w.nc.flush()
            await eventually(lambda: svc.counters.slow_closed >= 1, timeout=15)
            while True:  # what was in flight, then the close
                msg = await ws.receive(timeout=10)
                if msg.type != aiohttp.WSMsgType.TEXT:
                    break
            assert msg.type == aiohttp.WSMsgType.CLOSE
            assert (msg.data, msg.extra) == (1013, "client too slow")
            await eventually(lambda: len(got) >= 300, timeout=15)
            assert set(got) == {aiohttp.WSMsgType.TEXT} and not reader.closed
            assert svc.counters.slow_closed == 1
            await reader.close()
            follower.cancel()

    run(scenario(), TEST_TIMEOUT_S)


def test_a_revoked_key_is_cut_off(unique):
    t = Tenants(unique)
    keys = t.keys()
    ring = KeyRing(lambda: list(keys), KeyRefreshPolicy(ttl_s=0.2))

    async def scenario():
        async with stream_service(unique, auth=StreamAuth(ring), key_recheck_s=1.0) as svc, \
                aiohttp.ClientSession() as http:
            ws = await ws_open(http, svc, t.user_a)
            sse = await Sse.open(http, svc, t.user_a)
            kept = await ws_open(http, svc, t.user_b)
            keys[:] = [k for k in keys if k.key != t.user_a]
            msg = await ws.receive(timeout=5)
            assert msg.type == aiohttp.WSMsgType.CLOSE
            assert (msg.data, msg.extra) == (1008, "credential revoked")
            assert await sse.ended(timeout=5)
            await asyncio.sleep(1.2)  # another recheck: the other key stays
            assert not kept.closed
            await kept.close()

    run(scenario(), TEST_TIMEOUT_S)


def test_a_changed_role_or_tenant_is_a_revocation_too(unique):
    t = Tenants(unique)
    keys = t.keys()
    ring = KeyRing(lambda: list(keys), KeyRefreshPolicy(ttl_s=0.2))

    async def scenario():
        async with stream_service(unique, auth=StreamAuth(ring), key_recheck_s=1.0) as svc, \
                aiohttp.ClientSession() as http:
            ws = await ws_open(http, svc, t.admin_a)
            keys[:] = [ApiKey(key=t.admin_a, tenant=t.a, role="user")]
            msg = await ws.receive(timeout=5)
            assert (msg.type, msg.data) == (aiohttp.WSMsgType.CLOSE, 1008)

    run(scenario(), TEST_TIMEOUT_S)


def test_a_quiet_event_stream_is_kept_alive_with_ping_comments(unique):
    t = Tenants(unique)

    async def scenario():
        async with stream_service(unique) as svc, aiohttp.ClientSession() as http:
            # The interval is PING_INTERVAL_S (30 s); this test's streams ping faster.
            svc._ctx.limits = dataclasses.replace(svc._ctx.limits, ping_s=0.2)
            sse = await Sse.open(http, svc, t.user_a)
            lines = [await sse.response.content.readline() for _ in range(4)]
            assert lines == [b"retry: 2000\n", b"\n", b": ping\n", b"\n"]
            sse.close()

    run(scenario(), TEST_TIMEOUT_S)


def test_the_counters_go_out_as_emf():
    counters = StreamCounters(connections=3, frames_sent=10, slow_closed=1)
    out = io.StringIO()
    metrics = Metrics(service="cordum-stream")
    reporter = MetricsReporter(counters, metrics)
    metrics.flush = lambda stream=None, _flush=metrics.flush: _flush(out)  # type: ignore[method-assign]
    reporter.report()
    counters.frames_sent = 15
    counters.connections = 2
    reporter.report()
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    names = {m["Name"] for m in first["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert {"StreamConnections", "StreamSlowClientsClosed", "StreamFramesSent"} <= names
    assert (first["StreamConnections"], first["StreamFramesSent"],
            first["StreamSlowClientsClosed"]) == (3, 10, 1)
    assert (second["StreamConnections"], second["StreamFramesSent"],
            second["StreamSlowClientsClosed"]) == (2, 5, 0)
    assert first["service"] == "cordum-stream"
