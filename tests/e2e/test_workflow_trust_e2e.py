"""Workflow trust boundaries through the local stack's REST API URL, as a user of tenant
``default`` meets them: a dry run never turns into a real run with its gates passed, and
a gate job nobody approved never opens a gate, even when an agent who knows the run id
publishes the gate's job id on the bus first."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

from cordum import protocol
from tests.e2e.test_workflow_e2e import wait_job, wait_run

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = json.loads((ROOT / "config" / "workflows" / "example.json").read_text())
RUN_ENDS = {"succeeded", "failed", "cancelled", "timed_out", "denied"}


def _save(stack, definition: dict) -> str:
    status, body = stack.http("POST", "/api/v1/workflows", definition)
    assert status in (200, 201), body
    return body["id"]


def test_a_dry_run_never_becomes_a_real_run_with_its_gates_passed(stack):
    """Finding 1: the example workflow dry-run with a million, then rerun as a real run
    from ``echo``: the dry run's approval (granted without a human, as a dry run does)
    was copied into the real run and the echo worker got the million."""
    workflow_id = _save(stack, {**EXAMPLE, "id": f"e2e-dry-{uuid.uuid4().hex[:8]}"})
    runs: list[str] = []
    try:
        status, body = stack.http("POST", f"/api/v1/workflows/{workflow_id}/runs?dry_run=true",
                                  {"amount": 1_000_000, "message": "all of it"})
        assert status in (200, 201, 202), body
        run_id = body["run_id"]
        runs.append(run_id)
        assert wait_run(stack, run_id, RUN_ENDS)["status"] == "succeeded"
        status, body = stack.http("POST", f"/api/v1/workflow-runs/{run_id}/rerun",
                                  {"from_step": "echo", "dry_run": False})
        assert status == 400, body
        assert "dry run" in body["error"], body
        status, listed = stack.http("GET", f"/api/v1/workflow-runs?workflow_id={workflow_id}")
        assert status == 200 and [r["id"] for r in listed["items"]] == [run_id]
    finally:
        for run_id in runs:
            stack.http("DELETE", f"/api/v1/workflow-runs/{run_id}")
        stack.http("DELETE", f"/api/v1/workflows/{workflow_id}")


async def _publish(nats_url: str, req: protocol.JobRequest) -> None:
    import nats

    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await js.publish(protocol.SUBJECT_SUBMIT, protocol.packet(
            trace_id=req.job_id, sender_id="agent", job_request=req).SerializeToString())
    finally:
        await nc.close()


def test_a_gate_job_published_first_on_the_bus_never_opens_the_gate(stack):
    """Finding 2: an agent that knows the run id publishes ``<run>:approve@1`` on
    sys.job.submit, on a topic the policy allows, before the run reaches its gate. It
    is refused untouched; the engine's own gate is the job under that id, it waits in
    the approvals inbox, and nothing after it runs."""
    definition = {
        "id": f"e2e-gate-{uuid.uuid4().hex[:8]}", "name": "e2e: plan, gate, act",
        "steps": {
            "plan": {"type": "delay", "delay_sec": 4},
            "approve": {"type": "approval", "depends_on": ["plan"],
                        "input": {"do": "${input.do}"}},
            "act": {"type": "worker", "topic": "job.echo", "depends_on": ["approve"],
                    "input": {"do": "${input.do}"}},
        },
    }
    workflow_id = _save(stack, definition)
    run_id = ""
    try:
        status, body = stack.http("POST", f"/api/v1/workflows/{workflow_id}/runs",
                                  {"do": "transfer everything"})
        assert status in (200, 201, 202), body
        run_id = body["run_id"]
        gate = f"{run_id}:approve@1"
        forged = protocol.JobRequest(
            job_id=gate, topic="job.echo", tenant_id=stack.tenant, workflow_id=run_id,
            principal_id="agent", env={"tenant_id": stack.tenant},
            context_ptr=protocol.pointer(protocol.context_key(gate)))
        asyncio.run(_publish(stack.nats_url, forged))
        job = wait_job(stack, gate, "APPROVAL_REQUIRED", timeout=60)
        assert job["topic"] == "job.cordum.approval-gate", job
        status, inbox = stack.http("GET", "/api/v1/approvals?limit=200")
        assert status == 200
        assert gate in [item["job"]["id"] for item in inbox["items"]], inbox
        time.sleep(3)
        status, run = stack.http("GET", f"/api/v1/workflow-runs/{run_id}")
        assert status == 200
        assert run["steps"]["approve"]["status"] == "waiting", run["steps"]
        assert run["steps"]["act"]["status"] == "pending", run["steps"]
        status, _ = stack.http("GET", f"/api/v1/jobs/{run_id}:act@1")
        assert status == 404
    finally:
        if run_id:
            stack.http("POST", f"/api/v1/workflows/{workflow_id}/runs/{run_id}/cancel")
            stack.http("DELETE", f"/api/v1/workflow-runs/{run_id}")
        stack.http("DELETE", f"/api/v1/workflows/{workflow_id}")




def test_a_runs_cost_is_bounded_by_the_workflow_limits(stack):
    """Finding 4: a for_each item copied the whole run input (a 15 KB start body made a
    30 MB run document), and nothing bounded a definition's steps or a start body. Each
    limit answers a clear error; an item carries what it references."""
    wide = {"id": f"e2e-wide-{uuid.uuid4().hex[:8]}", "name": "too many steps",
            "steps": {f"s{i}": {"type": "transform", "input": {"i": i}} for i in range(201)}}
    status, body = stack.http("POST", "/api/v1/workflows", wide)
    assert status == 400 and "max_steps_per_definition" in body["error"], body

    fan = {"id": f"e2e-fan-{uuid.uuid4().hex[:8]}", "name": "fan-out of a big input",
           "steps": {"each": {"type": "worker", "topic": "job.echo",
                              "for_each": "input.items", "max_parallel": 10}}}
    workflow_id = _save(stack, fan)
    run_id = ""
    try:
        status, body = stack.http("POST", f"/api/v1/workflows/{workflow_id}/runs",
                                  {"items": list(range(20)), "blob": "x" * 300_000})
        assert status == 400 and "max_run_input_bytes" in body["error"], body
        status, body = stack.http("POST", f"/api/v1/workflows/{workflow_id}/runs",
                                  {"items": list(range(20)), "blob": "x" * 15_000})
        assert status in (200, 201, 202), body
        run_id = body["run_id"]
        # Ten items go out at once to the stack's one echo worker (4 slots): an item
        # routed while the worker's heartbeat reports it full waits PENDING, and the
        # replayer drives it again after the dispatch timeout (300 s, then its next
        # 30 s tick: docs/scheduling.md). Seconds as a rule; the wait allows for that.
        run = wait_run(stack, run_id, RUN_ENDS, timeout=400)
        assert run["status"] == "succeeded", run["steps"]
        document = json.dumps(run)
        # the run input once (15 KB), not once per item (20 x 15 KB)
        assert len(document) < 60_000, len(document)
        status, job = stack.http("GET", f"/api/v1/jobs/{run_id}:each[3]@1")
        assert status == 200 and "xxxx" not in json.dumps(job.get("result")), job
    finally:
        if run_id:
            stack.http("DELETE", f"/api/v1/workflow-runs/{run_id}")
        stack.http("DELETE", f"/api/v1/workflows/{workflow_id}")
