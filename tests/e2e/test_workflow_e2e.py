"""A workflow through the local stack's REST API URL: a condition, an approval granted by a
second key, a delay of a few seconds and two job steps the echo worker serves, with a
notify step; the run's timeline, its jobs and its notify event are checked."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis

from cordum import protocol

WORKFLOW = {
    "name": "e2e: approve, pause, echo twice",
    "input_schema": {"type": "object", "required": ["amount"],
                     "properties": {"amount": {"type": "integer"}}},
    "steps": {
        "large": {"type": "condition", "condition": "input.amount >= 100"},
        "approve": {"type": "approval", "depends_on": ["large"],
                    "condition": "steps.large.output == true",
                    "input": {"amount": "${input.amount}"}},
        "pause": {"type": "delay", "delay_sec": 3, "depends_on": ["approve"]},
        "first": {"type": "worker", "topic": "job.echo", "depends_on": ["pause"],
                  "input": {"prompt": "first ${input.amount}"}},
        "second": {"type": "worker", "topic": "job.echo", "depends_on": ["first"],
                   "input": {"prompt": "second", "before": "${steps.first.output}"}},
        "tell": {"type": "notify", "depends_on": ["second"],
                 "input": {"message": "e2e run done", "level": "INFO"}},
    },
}


def wait_run(stack, run_id: str, want: set[str], timeout: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout
    run: dict = {}
    while time.monotonic() < deadline:
        status, run = stack.http("GET", f"/api/v1/workflow-runs/{run_id}")
        assert status == 200, run
        if run["status"] in want:
            return run
        time.sleep(0.5)
    pytest.fail(f"run {run_id} not {want} after {timeout}s: {run}")


def wait_job(stack, job_id: str, state: str, timeout: float = 30.0) -> dict:
    """The step's job once the submit path stored it in ``state`` (the run marks the step
    as soon as the job is published; the job is stored a hop later)."""
    deadline = time.monotonic() + timeout
    job: dict = {}
    while time.monotonic() < deadline:
        status, job = stack.http("GET", f"/api/v1/jobs/{job_id}")
        if status == 200 and job.get("state") == state:
            return job
        time.sleep(0.3)
    pytest.fail(f"job {job_id} not {state} after {timeout}s: {job}")


def test_a_workflow_with_a_condition_an_approval_a_delay_and_two_jobs_succeeds(stack):
    workflow_id = f"e2e-{uuid.uuid4().hex[:8]}"
    alerts: list[protocol.BusPacket] = []
    loop = asyncio.new_event_loop()

    async def listen():
        import nats

        nc = await nats.connect(stack.nats_url)

        async def on_alert(msg):
            alerts.append(protocol.decode(msg.data).packet)

        await nc.subscribe(protocol.SUBJECT_WORKFLOW_EVENT, cb=on_alert)
        return nc

    nc = loop.run_until_complete(listen())
    try:
        status, body = stack.http("POST", "/api/v1/workflows", {"id": workflow_id, **WORKFLOW})
        assert (status, body) == (201, {"id": workflow_id})
        # A body the input schema refuses starts nothing.
        status, body = stack.http("POST", f"/api/v1/workflows/{workflow_id}/runs",
                                  {"amount": "lots"})
        assert (status, body["code"]) == (400, "invalid_input"), body
        key = uuid.uuid4().hex
        status, body = stack.http("POST", f"/api/v1/workflows/{workflow_id}/runs",
                                  {"amount": 250}, headers={"Idempotency-Key": key})
        assert status == 200, body
        run_id = body["run_id"]
        status, again = stack.http("POST", f"/api/v1/workflows/{workflow_id}/runs",
                                   {"amount": 250}, headers={"Idempotency-Key": key})
        assert (status, again["run_id"]) == (200, run_id)

        # The run waits on its gate, a job on the approval-gate topic.
        run = wait_run(stack, run_id, {"waiting"})
        gate = run["steps"]["approve"]["job_id"]
        assert gate == f"{run_id}:approve@1"
        job = wait_job(stack, gate, "APPROVAL_REQUIRED")
        assert job["topic"] == "job.cordum.approval-gate"
        # The approver sees which run and step the gate holds, and what it decides on.
        status, listed = stack.http("GET", "/api/v1/approvals?limit=200")
        mine = [i for i in listed["items"] if i["job"]["id"] == gate]
        assert mine and mine[0]["workflow"] == {"workflow_id": workflow_id, "run_id": run_id,
                                                "step_id": "approve"}, listed
        status, context = stack.http("GET", f"/api/v1/approvals/{gate}/context")
        assert status == 200 and context["kind"] == "workflow_approval_context", context
        assert context["decision"] == {"amount": 250}
        # The run's starter cannot approve its own gate; a second key can.
        status, body = stack.http("POST", f"/api/v1/approvals/{gate}/approve", {"reason": "me"})
        assert (status, body["code"]) == (403, "self_approval_denied"), body
        status, body = stack.http("POST", f"/api/v1/approvals/{gate}/approve",
                                  {"reason": "looks fine"},
                                  headers={"X-API-Key": stack.approver_key})
        assert status == 200, body
        approved_at = time.monotonic()

        run = wait_run(stack, run_id, {"succeeded", "failed", "cancelled", "timed_out"})
        assert run["status"] == "succeeded", run
        assert time.monotonic() - approved_at >= 3  # the pause held the run
        steps = run["steps"]
        assert {k: v["status"] for k, v in steps.items()} == dict.fromkeys(steps, "succeeded")
        for name in ("first", "second"):
            status, job = stack.http("GET", f"/api/v1/jobs/{run_id}:{name}@1")
            assert (status, job["state"], job["topic"]) == (200, "SUCCEEDED", "job.echo"), job
        status, timeline = stack.http("GET", f"/api/v1/workflow-runs/{run_id}/timeline")
        assert status == 200
        kinds = [e["type"] for e in timeline]
        for kind in ("step_dispatched", "step_waiting", "step_delay_started",
                     "step_delay_completed", "step_completed", "step_event_emitted"):
            assert kind in kinds, kinds
        assert kinds[-1] == "run_status" and timeline[-1]["status"] == "succeeded"
        loop.run_until_complete(asyncio.sleep(0.5))
        mine = [p for p in alerts if p.trace_id == run_id]
        assert [p.alert.message for p in mine] == ["e2e run done"]
        assert mine[0].alert.source_component == "workflow-engine"
        status, listed = stack.http("GET", f"/api/v1/workflow-runs?workflow_id={workflow_id}")
        assert status == 200 and [r["id"] for r in listed["items"]] == [run_id]
    finally:
        loop.run_until_complete(nc.close())
        loop.close()
        stack.http("DELETE", f"/api/v1/workflows/{workflow_id}")


def test_cancelling_a_run_cancels_its_running_job(stack):
    workflow_id = f"e2e-{uuid.uuid4().hex[:8]}"
    definition = {"name": "e2e cancel", "steps": {
        "hold": {"type": "approval", "input": {"why": "never approved"}}}}
    status, _ = stack.http("POST", "/api/v1/workflows", {"id": workflow_id, **definition})
    assert status == 201
    status, body = stack.http("POST", f"/api/v1/workflows/{workflow_id}/runs", {})
    run_id = body["run_id"]
    run = wait_run(stack, run_id, {"waiting"})
    gate = run["steps"]["hold"]["job_id"]
    status, _ = stack.http("POST", f"/api/v1/workflows/{workflow_id}/runs/{run_id}/cancel")
    assert status == 204
    run = wait_run(stack, run_id, {"cancelled"}, timeout=10)
    assert run["steps"]["hold"]["status"] == "cancelled"
    # The gate's job ends CANCELLED, whether the cancel reached it waiting for a human or
    # overtook its request on the way (then the request finds it over): never left open.
    r = redis.Redis.from_url(stack.redis_url)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and r.hget(f"job:meta:{gate}", "state") != b"CANCELLED":
        time.sleep(0.3)
    assert r.hget(f"job:meta:{gate}", "state") == b"CANCELLED"
    time.sleep(2)  # a request still on its way would have been applied by now
    assert r.hget(f"job:meta:{gate}", "state") == b"CANCELLED"
    r.close()
    stack.http("DELETE", f"/api/v1/workflows/{workflow_id}")
