"""A job.result frame shows what the platform decided, not what the worker said: the
pointer the API serves (none after a quarantine, the redacted copy after a REDACT),
and the platform's state as its status; a decision that does not come in time leaves
the frame without a pointer."""

from __future__ import annotations

import asyncio

import aiohttp

from cordum.safety.output_wire import OutputDecision
from cordum.scheduler.output_check import OutputVerdict
from cordum.store.jobs import JobState
from cordum.store.results import redacted_pointer, result_pointer
from tests.helpers import run
from tests.integration.test_stream_harness import (
    Tenants,
    stream_service,
    world,
    ws_next,
    ws_open,
)

TEST_TIMEOUT_S = 30.0


def record(decision: OutputDecision, *, quarantine: bool = False, ptr: str = "") -> str:
    return OutputVerdict(decision=decision, phase="async", quarantine=quarantine,
                         result_ptr=ptr).record_json()


def test_a_quarantined_jobs_result_frame_has_no_pointer(unique):
    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario():
        async with stream_service(unique, output_policy=True) as svc, world() as w, \
                aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            await w.run(job)
            ws = await ws_open(http, svc, t.user_a, query={"types": "job.result"})
            await w.result(job)  # the worker says SUCCEEDED, with its pointer
            await asyncio.sleep(0.3)
            await w.finish(job)  # SUCCEEDED, the output not scanned yet
            await asyncio.sleep(0.3)
            await w.store.transition(job, [JobState.OUTPUT_QUARANTINED], fields={
                "result_ptr": "", "output_safety": record(OutputDecision.QUARANTINE,
                                                          quarantine=True)})
            frame = (await ws_next(ws))["jobResult"]
            assert frame["jobId"] == job and frame["status"] == "JOB_STATUS_DENIED"
            assert "resultPtr" not in frame and "artifactPtrs" not in frame
            await ws.close()

    run(scenario(), TEST_TIMEOUT_S)


def test_a_redacted_jobs_result_frame_points_at_the_redacted_copy(unique):
    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario():
        async with stream_service(unique, output_policy=True) as svc, world() as w, \
                aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            await w.run(job)
            ws = await ws_open(http, svc, t.user_a, query={"types": "job.result"})
            await w.result(job)
            await asyncio.sleep(0.3)
            await w.finish(job, result_ptr=redacted_pointer(job), output_safety=record(
                OutputDecision.REDACT, ptr=redacted_pointer(job)))
            frame = (await ws_next(ws))["jobResult"]
            assert frame["status"] == "JOB_STATUS_SUCCEEDED"
            assert frame["resultPtr"] == redacted_pointer(job)
            await ws.close()

    run(scenario(), TEST_TIMEOUT_S)


def test_an_allowed_output_shows_the_workers_pointer_once_decided(unique):
    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario():
        async with stream_service(unique, output_policy=True) as svc, world() as w, \
                aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            await w.run(job)
            ws = await ws_open(http, svc, t.user_a, query={"types": "job.result"})
            await w.result(job)
            await w.finish(job)  # SUCCEEDED but the output decision still pending
            await asyncio.sleep(0.6)
            await w.store.put_records(job, {"output_safety": record(OutputDecision.ALLOW)},
                                      {})
            frame = (await ws_next(ws))["jobResult"]
            assert frame["resultPtr"] == result_pointer(job)
            assert frame["artifactPtrs"] == [f"redis://art:{job}"]
            await ws.close()

    run(scenario(), TEST_TIMEOUT_S)


def test_a_result_the_platform_never_decides_goes_out_without_a_pointer(unique):
    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario():
        async with stream_service(unique, result_settle_s=1.0) as svc, world() as w, \
                aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            await w.run(job)
            ws = await ws_open(http, svc, t.user_a, query={"types": "job.result"})
            started = asyncio.get_running_loop().time()
            await w.result(job)
            frame = (await ws_next(ws))["jobResult"]
            assert asyncio.get_running_loop().time() - started >= 1.0
            assert frame["status"] == "JOB_STATUS_SUCCEEDED"  # the worker's word
            assert "resultPtr" not in frame and "artifactPtrs" not in frame
            await ws.close()

    run(scenario(), TEST_TIMEOUT_S)


def test_a_failed_job_shows_the_platforms_state(unique):
    t = Tenants(unique)
    job = f"job-{unique}"

    async def scenario():
        async with stream_service(unique) as svc, world() as w, \
                aiohttp.ClientSession() as http:
            await w.create(job, t.a)
            await w.run(job)
            ws = await ws_open(http, svc, t.user_a, query={"types": "job.result"})
            await w.result(job)  # the worker claims success ...
            await w.store.transition(job, [JobState.TIMEOUT])  # ... too late
            frame = (await ws_next(ws))["jobResult"]
            assert frame["status"] == "JOB_STATUS_TIMEOUT" and "resultPtr" not in frame
            await ws.close()

    run(scenario(), TEST_TIMEOUT_S)
