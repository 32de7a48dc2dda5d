"""The per-job stream: first the job as the API serves it (``job.state``), then that
job's events only, ended after the event that reports its end; another tenant's job
and an unknown one are 404."""

from __future__ import annotations

import aiohttp

from cordum.store.results import result_pointer
from tests.helpers import run
from tests.integration.test_stream_harness import (
    Sse,
    Tenants,
    stream_service,
    url,
    world,
    ws_next,
    ws_open,
)

TEST_TIMEOUT_S = 30.0


def path(job: str) -> str:
    return f"/api/v1/jobs/{job}/stream"


def test_a_websocket_follows_one_job_and_is_closed_after_its_result(unique):
    t = Tenants(unique)
    job, other = f"job-{unique}", f"other-{unique}"

    async def scenario():
        async with stream_service(unique) as svc, world() as w, \
                aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            await w.create(other, t.a)
            await w.run(job)
            ws = await ws_open(http, svc, t.user_a, path=path(job))
            state = await ws_next(ws)
            assert state["type"] == "job.state"
            assert (state["id"], state["state"], state["tenant"]) == (job, "RUNNING", t.a)
            assert state["result_ptr"] is None and "context_ptr" in state
            await w.progress(other, 10)  # another job of the tenant: not on this stream
            await w.progress(job, 50)
            progress = await ws_next(ws)
            assert progress["jobProgress"] == {"jobId": job, "percent": 50,
                                               "message": "50%"}
            await w.finish(job)
            await w.result(job)
            result = await ws_next(ws)
            assert result["jobResult"]["resultPtr"] == result_pointer(job)
            closed = await ws.receive(timeout=5)
            assert (closed.type, closed.data, closed.extra) == (
                aiohttp.WSMsgType.CLOSE, 1000, "job finished")

    run(scenario(), TEST_TIMEOUT_S)


def test_an_sse_client_gets_an_ended_jobs_state_and_the_stream_ends(unique):
    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario():
        async with stream_service(unique) as svc, world() as w, \
                aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            await w.run(job)
            await w.redis.set(f"res:{job}", '{"answer": 42}')
            await w.finish(job)
            sse = await Sse.open(http, svc, t.user_a, path=path(job))
            state = await sse.next()
            assert state["event"] == "job.state"
            assert state["data"]["state"] == "SUCCEEDED"
            assert state["data"]["result"] == {"answer": 42}
            assert state["data"]["result_ptr"] == result_pointer(job)
            assert await sse.ended(timeout=3)

    run(scenario(), TEST_TIMEOUT_S)


def test_a_running_jobs_sse_stream_ends_after_its_result(unique):
    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario():
        async with stream_service(unique) as svc, world() as w, \
                aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            await w.run(job)
            sse = await Sse.open(http, svc, t.user_a, path=path(job))
            assert (await sse.next())["data"]["state"] == "RUNNING"
            await w.result(job)
            await w.finish(job)
            result = await sse.next()
            assert result["event"] == "job.result" and result["id"]
            assert await sse.ended(timeout=3)

    run(scenario(), TEST_TIMEOUT_S)


def test_another_tenants_job_and_an_unknown_one_are_404(unique):
    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario():
        async with stream_service(unique) as svc, world() as w, \
                aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            for key, target in ((t.user_b, job), (t.user_a, f"unknown-{unique}")):
                async with http.get(url(svc, path(target)), headers={
                        "X-API-Key": key, "Accept": "text/event-stream"}) as r:
                    assert r.status == 404
                    assert (await r.json())["code"] == "job_not_found"
            # A key of every tenant follows any tenant's job.
            sse = await Sse.open(http, svc, t.any_admin, path=path(job))
            assert (await sse.next())["data"]["tenant"] == t.a
            sse.close()

    run(scenario(), TEST_TIMEOUT_S)
