"""Workflows through the local stack's REST API URL: a condition, an approval granted by a
second key, a delay of a few seconds and two job steps the echo worker serves, with a
notify step (the run's timeline, its jobs and its notify event are checked); a cancel; and
a for_each fan-out, a switch and a subworkflow, rerun from the fan-out and dry-run."""

from __future__ import annotations

import asyncio
import re
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


ITEMS = ["SKU-1", "SKU-2", "SKU-3"]
RUN_ENDS = {"succeeded", "failed", "denied", "cancelled", "timed_out"}


def child_workflow() -> dict:
    return {"name": "e2e child: label, echo", "steps": {
        "label": {"type": "transform",
                  "input": {"text": "order ${input.order}: ${input.count} items"}},
        "send": {"type": "worker", "topic": "job.echo", "depends_on": ["label"],
                 "input": {"text": "${steps.label.output.text}"}},
    }}


def parent_workflow(child_id: str) -> dict:
    return {"name": "e2e parent: fan out, switch, subworkflow", "steps": {
        "prepare": {"type": "transform",
                    "input": {"order": "${input.order}", "count": "${length(input.items)}"}},
        "fan": {"type": "worker", "topic": "job.echo", "depends_on": ["prepare"],
                "for_each": "input.items", "max_parallel": 2,
                "input": {"sku": "${item}", "order": "${steps.prepare.output.order}"}},
        "pick": {"type": "switch", "depends_on": ["fan"],
                 "condition": "length(steps.fan.output)",
                 "input": {"cases": {"3": "three"}, "default": "other"}},
        "three": {"type": "transform", "depends_on": ["pick"], "input": {"branch": "three"}},
        "other": {"type": "transform", "depends_on": ["pick"], "input": {"branch": "other"}},
        "sub": {"type": "subworkflow", "depends_on": ["three"], "input": {
            "workflow_id": child_id,
            "input_mapping": {"order": "${input.order}",
                              "count": "${length(steps.fan.output)}"},
            "output_mapping": {"sent": "${child.output.send.echo.text}",
                               "child_status": "${child.status}"}}},
    }}


def most_items_out(timeline: list[dict], step_id: str) -> int:
    """Most items of a for_each step out at the same time, read from the run's timeline:
    an item is out from its ``step_dispatched`` to its end (each event names the item by
    its path, ``<step>[i]``). Ignoring max_parallel would dispatch every item in the
    start's own events, before any of them ended."""
    item = re.compile(rf"^{re.escape(step_id)}\[\d+\]$")
    out: set[str] = set()
    most = 0
    for event in timeline:
        path = event.get("step_id") or ""
        if not item.match(path):
            continue
        if event["type"] == "step_dispatched":
            out.add(path)
        elif event["type"] in ("step_completed", "step_failed",
                               "step_foreach_orphan_cancelled"):
            out.discard(path)
        most = max(most, len(out))
    return most


def test_a_fan_out_a_switch_and_a_subworkflow_rerun_from_the_fan_out_and_dry_run(stack):
    suffix = uuid.uuid4().hex[:8]
    child_id, parent_id = f"e2e-child-{suffix}", f"e2e-parent-{suffix}"
    runs: list[str] = []
    try:
        for workflow_id, definition in ((child_id, child_workflow()),
                                        (parent_id, parent_workflow(child_id))):
            status, body = stack.http("POST", "/api/v1/workflows",
                                      {"id": workflow_id, **definition})
            assert (status, body) == (201, {"id": workflow_id})

        status, body = stack.http("POST", f"/api/v1/workflows/{parent_id}/runs",
                                  {"order": "A-7", "items": ITEMS})
        assert status == 200, body
        run_id = body["run_id"]
        runs.append(run_id)
        run = wait_run(stack, run_id, RUN_ENDS, timeout=120)
        assert run["status"] == "succeeded", run
        steps = run["steps"]

        # The fan-out: one echo job per item, outputs in item order, items kept under
        # the step (never in the context's steps), at most two out at a time.
        fan = steps["fan"]["output"]
        assert [o["echo"]["sku"] for o in fan] == ITEMS, fan
        assert [o["echo"]["item"] for o in fan] == ITEMS
        assert {o["echo"]["order"] for o in fan} == {"A-7"}
        assert [o["job_id"] for o in fan] == [f"{run_id}:fan[{i}]@1" for i in range(3)]
        assert sorted(steps["fan"]["children"]) == [f"fan[{i}]" for i in range(3)]
        assert not [k for k in run["context"]["steps"] if k.startswith("fan[")]
        for i in range(len(ITEMS)):
            job = wait_job(stack, f"{run_id}:fan[{i}]@1", "SUCCEEDED")
            assert job["topic"] == "job.echo", job
        status, timeline = stack.http("GET", f"/api/v1/workflow-runs/{run_id}/timeline")
        assert status == 200
        assert most_items_out(timeline, "fan") == 2, timeline

        # The switch took "three"; "other" is a branch not taken, which counts as done.
        assert steps["pick"]["output"]["target_step"] == "three", steps["pick"]
        assert steps["three"]["status"] == "succeeded"
        assert steps["other"]["status"] == "cancelled"
        assert steps["other"]["error"]["reason"] == "switch_branch_not_taken"

        # The subworkflow: a child run of its own, its output mapped into the step's.
        child_run = steps["sub"]["job_id"]
        runs.append(child_run)
        assert steps["sub"]["output"] == {"sent": "order A-7: 3 items",
                                          "child_status": "succeeded"}, steps["sub"]
        status, child = stack.http("GET", f"/api/v1/workflow-runs/{child_run}")
        assert status == 200, child
        assert (child["status"], child["workflow_id"]) == ("succeeded", child_id), child
        assert child["input"] == {"order": "A-7", "count": 3}
        assert child["metadata"]["parent_run_id"] == run_id
        assert child["metadata"]["parent_step_id"] == "sub"
        assert child["metadata"]["call_stack"] == parent_id
        status, job = stack.http("GET", f"/api/v1/jobs/{child_run}:send@1")
        assert (status, job["state"], job["topic"]) == (200, "SUCCEEDED", "job.echo"), job

        # Rerun from the fan-out: "prepare" is copied as it ended, the rest runs again.
        status, body = stack.http("POST", f"/api/v1/workflow-runs/{run_id}/rerun",
                                  {"from_step": "fan"})
        assert status == 200, body
        rerun_id = body["run_id"]
        runs.append(rerun_id)
        assert rerun_id != run_id
        again = wait_run(stack, rerun_id, RUN_ENDS, timeout=120)
        runs.append(again["steps"].get("sub", {}).get("job_id") or "")
        assert again["status"] == "succeeded", again
        assert (again["rerun_of"], again["rerun_step"]) == (run_id, "fan")
        for field in ("status", "output", "started_at", "completed_at", "attempts"):
            assert again["steps"]["prepare"][field] == steps["prepare"][field], field
        assert again["context"]["steps"]["prepare"] == run["context"]["steps"]["prepare"]
        status, timeline = stack.http("GET", f"/api/v1/workflow-runs/{rerun_id}/timeline")
        assert status == 200
        assert not [e for e in timeline if e.get("step_id") == "prepare"], timeline
        assert [o["job_id"] for o in again["steps"]["fan"]["output"]] == \
            [f"{rerun_id}:fan[{i}]@1" for i in range(3)]
        assert again["steps"]["sub"]["job_id"] != child_run
        assert again["steps"]["sub"]["output"] == steps["sub"]["output"]

        # The definition's dry run: the kernel's decision for the fan-out's jobs, N/A for
        # the steps that run no job; no run is made.
        status, body = stack.http("POST", f"/api/v1/workflows/{parent_id}/dry-run",
                                  {"input": {"order": "A-8", "items": ITEMS}})
        assert status == 200, body
        assert body["workflow_id"] == parent_id
        decisions = {s["step_id"]: s["decision"] for s in body["steps"]}
        assert decisions == {"prepare": "N/A", "fan": "ALLOW", "pick": "N/A", "three": "N/A",
                             "other": "N/A", "sub": "N/A"}, body
        [fan_decision] = [s for s in body["steps"] if s["step_id"] == "fan"]
        assert fan_decision["rule_id"] == "default-topic-allow", fan_decision
        status, listed = stack.http("GET", f"/api/v1/workflow-runs?workflow_id={parent_id}")
        assert status == 200
        assert sorted(r["id"] for r in listed["items"]) == sorted([run_id, rerun_id])
    finally:
        for done in reversed([r for r in runs if r]):
            stack.http("DELETE", f"/api/v1/workflow-runs/{done}")
        stack.http("DELETE", f"/api/v1/workflows/{parent_id}")
        stack.http("DELETE", f"/api/v1/workflows/{child_id}")
