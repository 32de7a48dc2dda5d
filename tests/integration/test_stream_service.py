"""cordum-stream end to end on the real Redis and NATS: a job's packets published on the
bus reach WebSocket and SSE clients of its tenant as Cordum's frames, and nobody else's;
the refusals before a stream starts; the health check."""

from __future__ import annotations

import asyncio
import re

import aiohttp
import pytest

from cordum.store.results import result_pointer
from tests.helpers import run
from tests.integration.test_stream_harness import (
    Sse,
    Tenants,
    b64url,
    stream_service,
    url,
    world,
    ws_next,
    ws_open,
    ws_quiet,
    ws_until,
)

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
TEST_TIMEOUT_S = 30.0


def test_a_websocket_with_the_subprotocol_receives_a_jobs_submit_and_result(unique):
    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario():
        async with stream_service(unique) as svc, world() as w, \
                aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            ws = await ws_open(http, svc, t.user_a, as_protocols=True)
            assert ws.protocol == "cordum-api-key"  # the identifier, never the token
            await w.submit(job, t.a)
            submit = await ws_next(ws)
            assert submit["jobRequest"]["jobId"] == job
            assert submit["jobRequest"]["tenantId"] == t.a
            assert RFC3339.match(submit["createdAt"]) and "authToken" not in submit
            await w.run(job)
            await w.result(job)
            await asyncio.sleep(0.3)  # the platform decides after the worker reported
            await w.finish(job)
            result = await ws_next(ws)
            assert result["jobResult"]["jobId"] == job
            assert result["jobResult"]["status"] == "JOB_STATUS_SUCCEEDED"
            assert result["jobResult"]["resultPtr"] == result_pointer(job)
            assert result["jobResult"]["artifactPtrs"] == [f"redis://art:{job}"]
            await ws.close()

    run(scenario(), TEST_TIMEOUT_S)


def test_an_sse_client_receives_them_with_ids(unique):
    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario():
        async with stream_service(unique) as svc, world() as w, \
                aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            sse = await Sse.open(http, svc, t.user_a)
            await w.submit(job, t.a)
            first = await sse.next()
            assert sse.retry == 2000
            assert first["event"] == "job.submit" and first["id"]
            assert first["data"]["jobRequest"]["jobId"] == job
            await w.run(job)
            await w.finish(job)
            await w.result(job)
            second = await sse.next()
            assert second["event"] == "job.result"
            assert second["data"]["jobResult"]["resultPtr"] == result_pointer(job)
            assert second["id"] > first["id"] or len(second["id"]) > len(first["id"])
            sse.close()

    run(scenario(), TEST_TIMEOUT_S)


def test_cordum_sdks_stream_receives_them(unique):
    cordum_sdk = pytest.importorskip("cordum_sdk")
    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario():
        async with stream_service(unique) as svc, world() as w:
            await w.create(job, t.a)
            client = cordum_sdk.AsyncCordumClient(f"http://127.0.0.1:{svc.port}",
                                                  auth=t.user_a, tenant_id=t.a)
            got: list = []

            async def follow():
                async for item in client.stream():
                    # The SDK makes a "message" with no data of any block without data
                    # (the opening ``retry:``, a ``: ping``); the SSE spec drops those.
                    if item.event == "message" and not item.raw_data:
                        continue
                    got.append(item)
                    if len(got) == 2:
                        return

            reader = asyncio.create_task(follow())
            await asyncio.sleep(0.5)  # the SDK gives no hook for "connected"
            await w.submit(job, t.a)
            await w.run(job)
            await w.finish(job)
            await w.result(job)
            await asyncio.wait_for(reader, 5)
            assert [e.event for e in got] == ["job.submit", "job.result"]
            assert got[0].data["jobRequest"]["jobId"] == job and got[0].id
            await client.aclose()

    run(scenario(), TEST_TIMEOUT_S)


def test_another_tenants_key_receives_none_of_them(unique):
    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario():
        async with stream_service(unique) as svc, world() as w, \
                aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            other = await ws_open(http, svc, t.user_b)
            mine = await ws_open(http, svc, t.user_a)
            everyone = await ws_open(http, svc, t.any_admin)
            await w.submit(job, t.a)
            await w.run(job)
            await w.finish(job)
            await w.result(job)
            await w.heartbeat(f"w-{unique}")
            assert (await ws_next(mine))["jobRequest"]["jobId"] == job
            assert (await ws_next(mine))["jobResult"]["jobId"] == job

            def ours(frame):
                body = frame.get("jobRequest") or frame.get("jobResult") \
                    or frame.get("heartbeat") or {}
                return body.get("jobId") == job or body.get("workerId") == f"w-{unique}"

            seen = set()
            for _ in range(3):  # a heartbeat is not held back like a result: any order
                frame = await ws_until(everyone, ours)
                seen |= {"jobRequest", "jobResult", "heartbeat"} & set(frame)
            # Heartbeats go to admin keys only (here: the every-tenant admin).
            assert seen == {"jobRequest", "jobResult", "heartbeat"}
            await ws_quiet(mine)
            await ws_quiet(other)
            for ws in (other, mine, everyone):
                await ws.close()

    run(scenario(), TEST_TIMEOUT_S)


def test_a_tenant_claimed_by_a_request_does_not_beat_the_stored_one(unique):
    """A request that names tenant B for a job stored as A's goes to A's clients only."""
    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario():
        async with stream_service(unique) as svc, world() as w, \
                aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            other = await ws_open(http, svc, t.user_b)
            mine = await ws_open(http, svc, t.user_a)
            await w.submit(job, t.b)
            assert (await ws_next(mine))["jobRequest"]["jobId"] == job
            await ws_quiet(other)

    run(scenario(), TEST_TIMEOUT_S)


def test_the_refusals_before_a_stream_starts(unique):
    t = Tenants(unique)

    async def scenario():
        async with stream_service(unique, max_connections_per_key=2) as svc, \
                aiohttp.ClientSession() as http:
            sse = {"Accept": "text/event-stream"}

            async def answer(headers, path="/api/v1/stream", **params):
                async with http.get(url(svc, path), headers=headers, params=params) as r:
                    return r.status, await r.json(), r.headers

            status, body, _ = await answer(sse)
            assert (status, body) == (401, {"error": "unauthorized", "code": "unauthorized",
                                            "status": 401})
            status, body, _ = await answer({**sse, "X-API-Key": t.user_a,
                                            "X-Tenant-ID": t.b})
            assert status == 403 and body["code"] == "tenant_access_denied"
            status, body, _ = await answer({"X-API-Key": t.user_a})
            assert status == 406
            assert "websocket" in body["error"].lower() and "text/event-stream" in body["error"]
            status, body, _ = await answer({**sse, "X-API-Key": t.user_a}, types="job.nope")
            assert status == 400 and body["code"] == "invalid_types"
            status, body, _ = await answer({**sse, "X-API-Key": t.user_a}, since="yesterday")
            assert status == 400 and body["code"] == "invalid_since"
            status, body, _ = await answer({**sse, "X-API-Key": t.any_admin}, since="1-0")
            assert status == 400 and body["code"] == "resume_needs_tenant"
            status, body, _ = await answer({**sse, "X-API-Key": t.user_a},
                                           path=f"/api/v1/jobs/nope-{unique}/stream")
            assert status == 404 and body["code"] == "job_not_found"
            status, body, _ = await answer({}, path="/api/v1/nothing")
            assert status == 404 and body["status"] == 404

            first = await Sse.open(http, svc, t.user_a)
            second = await ws_open(http, svc, t.user_a)
            status, body, headers = await answer({**sse, "X-API-Key": t.user_a})
            assert status == 429 and body["code"] == "too_many_streams"
            assert headers["Retry-After"]
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(url(svc), headers={
                    "Sec-WebSocket-Protocol": f"cordum-api-key, {b64url(t.user_a)}"})
            assert refused.value.status == 429
            # Another key is not held back by this one's streams.
            (await Sse.open(http, svc, t.admin_a)).close()
            first.close()
            await second.close()
            await asyncio.sleep(0.2)
            (await Sse.open(http, svc, t.user_a)).close()

    run(scenario(), TEST_TIMEOUT_S)


def test_health_says_ok_while_redis_and_nats_answer(unique):
    async def scenario():
        async with stream_service(unique) as svc, aiohttp.ClientSession() as http:
            async with http.get(url(svc, "/health")) as r:
                assert (r.status, await r.json()) == (200, {"status": "ok"})
            await svc._nc.close()
            async with http.get(url(svc, "/health")) as r:
                assert r.status == 503
                assert await r.json() == {"status": "unavailable", "redis": "ok",
                                          "nats": "unavailable"}

    run(scenario(), TEST_TIMEOUT_S)
