"""Scheduler behaviour through the deployed stack: DLQ, deadlines, saga compensation."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import boto3
import nats
import pytest
import redis

from cordum import protocol

pytestmark = pytest.mark.e2e


def test_failed_result_reaches_the_dlq(stack):
    status, body = stack.http("POST", "/api/v1/jobs", {
        "topic": "job.echo", "prompt": "fail please", "labels": {"echo.fail": "fatal"}})
    assert status == 200, body
    job = stack.wait_terminal(body["job_id"])
    assert job["state"] == "FAILED"
    entry = redis.Redis.from_url(stack.redis_url).get(f"dlq:entry:{body['job_id']}")
    assert entry is not None
    entry = json.loads(entry)
    assert entry["status"] == "FAILED_FATAL" and entry["last_state"] == "RUNNING"


def test_deadline_becomes_timeout_through_the_reconciler_function(stack):
    status, body = stack.http("POST", "/api/v1/jobs", {
        "topic": "job.echo", "prompt": "slow", "deadline_ms": 1000,
        "labels": {"echo.sleep_ms": "90000"}})
    assert status == 200, body
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        _, job = stack.http("GET", f"/api/v1/jobs/{body['job_id']}")
        if job.get("state") == "RUNNING":
            break
        time.sleep(0.5)
    time.sleep(1.5)  # past the 1 s deadline
    lam = boto3.client("lambda", endpoint_url=stack.localstack, region_name="us-east-1",
                       aws_access_key_id="test", aws_secret_access_key="test")
    # Asynchronous, as EventBridge invokes it. A scheduled run may hold the tick lock
    # (this one then skips); its next tick, at most 30 s on, finds the job instead.
    # The worker sleeps 90 s, so only the reconciler can end the job in time.
    lam.invoke(FunctionName=stack.outputs["ReconcilerTickFunctionName"], InvocationType="Event",
               Payload=b"{}")
    job = stack.wait_terminal(body["job_id"], timeout=120)
    assert job["state"] == "TIMEOUT", job
    assert job["error"] == "timeout: deadline expired"


def test_fatal_failure_in_a_workflow_runs_the_compensation(stack):
    wf = f"wf-e2e-{uuid.uuid4().hex[:8]}"
    r = redis.Redis.from_url(stack.redis_url)

    def step(n: int, **labels: str) -> protocol.JobRequest:
        job_id = f"{wf}-s{n}"
        r.set(f"ctx:{job_id}", json.dumps({"prompt": f"step {n}"}), ex=600)
        req = protocol.JobRequest(job_id=job_id, topic="job.echo", tenant_id=stack.tenant,
                                  workflow_id=wf, context_ptr=f"redis://ctx:{job_id}")
        req.labels.update(labels)
        return req

    first = step(1)
    first.compensation.topic = "job.echo"
    second = step(2, **{"echo.fail": "fatal"})

    async def scenario() -> list[protocol.JobRequest]:
        nc = await nats.connect(stack.nats_url)
        seen: list[protocol.JobRequest] = []

        async def on_submit(msg):
            req = protocol.decode(msg.data).packet.job_request
            if req.labels.get("saga_workflow_id") == wf:
                seen.append(req)

        await nc.subscribe(protocol.SUBJECT_SUBMIT, cb=on_submit)
        js = nc.jetstream()
        for req in (first,):
            await js.publish(protocol.SUBJECT_SUBMIT, protocol.packet(
                trace_id=wf, sender_id="e2e", job_request=req).SerializeToString())
        job = await asyncio.to_thread(stack.wait_terminal, first.job_id, 90)
        assert job["state"] == "SUCCEEDED", job
        await js.publish(protocol.SUBJECT_SUBMIT, protocol.packet(
            trace_id=wf, sender_id="e2e", job_request=second).SerializeToString())
        job = await asyncio.to_thread(stack.wait_terminal, second.job_id, 90)
        assert job["state"] == "FAILED", job
        deadline = time.monotonic() + 90
        while not seen and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        await nc.close()
        return seen

    comps = asyncio.new_event_loop().run_until_complete(scenario())
    assert len(comps) == 1, comps
    comp = comps[0]
    assert comp.job_id.startswith("comp-") and comp.topic == "job.echo"
    assert comp.labels["saga_compensation"] == "true"
    # The compensation itself runs like any job.
    assert stack.wait_terminal(comp.job_id, 90)["state"] == "SUCCEEDED"


def test_denied_job_is_refused_at_submit_and_stored_denied(stack):
    status, body = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo.denied",
                                                       "prompt": "not allowed"})
    # Denied by the kernel before anything is announced: 403, the job kept as DENIED.
    assert status == 403, body
    assert body["error"] == "denied by example policy" and body["status"] == 403
    job = stack.wait_terminal(body["job_id"])
    assert job["state"] == "DENIED"
    assert job["safety_rule_id"] == "example-echo-denied"
    entry = json.loads(redis.Redis.from_url(stack.redis_url).get(f"dlq:entry:{body['job_id']}"))
    assert entry["reason_code"] == "safety_denied"


def test_cancel_a_running_job_over_http(stack):
    status, body = stack.http("POST", "/api/v1/jobs", {
        "topic": "job.echo", "prompt": "long", "labels": {"echo.sleep_ms": "30000"}})
    assert status == 200, body
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if stack.http("GET", f"/api/v1/jobs/{body['job_id']}")[1].get("state") == "RUNNING":
            break
        time.sleep(0.5)
    status, out = stack.http("POST", f"/api/v1/jobs/{body['job_id']}/cancel")
    assert (status, out) == (200, {"id": body["job_id"], "state": "CANCELLED"})
    # The CANCELLED result and the cancel notice travel through the bus and the
    # result function; neither moves the job again.
    time.sleep(5)
    assert stack.http("GET", f"/api/v1/jobs/{body['job_id']}")[1]["state"] == "CANCELLED"
