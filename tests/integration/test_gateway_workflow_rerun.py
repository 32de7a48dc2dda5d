"""POST /api/v1/workflow-runs/{id}/rerun on the real Redis (API Gateway proxy events into
the gateway), and one rerun driven to its end through the in-process stack
(tests/workflow_harness: runner, scheduler, worker and safety kernel).

In the API tests the runner is the real one with ``announce_start`` recorded instead of
queued, so a new run stays ``pending`` where the test can look at it; the old run is
written as the engine leaves a failed one.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from cordum import config, runtime
from cordum.workflow import engine, keys
from cordum.workflow.model import RunStatus, StepRun, StepStatus, WorkflowRun, format_time
from tests.integration.workflow_api import OUTSIDER, VIEWER, WRITER, Api, world

FLOW = {
    "fetch": {"type": "worker", "topic": "job.default"},
    "approve": {"type": "approval", "depends_on": ["fetch"]},
    "shape": {"type": "transform", "depends_on": ["approve"], "output_path": "shaped",
              "input": {"rows": "${steps.fetch.output.rows}"}},
    "store": {"type": "worker", "topic": "job.default", "depends_on": ["shape"]},
    "tell": {"type": "notify", "depends_on": ["store"]},
    "side": {"type": "worker", "topic": "job.default", "output_path": "side"},
}
KEPT = ("fetch", "approve", "shape")
"""What a rerun from ``store`` keeps."""


@pytest.fixture
def api(unique, monkeypatch):
    yield from world(unique, monkeypatch)


def failed_run(api: Api, workflow_id: str) -> WorkflowRun:
    """A run of ``FLOW`` whose ``store`` step failed after its upstream succeeded."""
    run_id = api.start(workflow_id, {"city": "Oslo"})
    run = api.run(run_id)
    now = format_time(datetime.now(UTC))

    def ok(step_id: str, output: Any) -> StepRun:
        return StepRun(step_id, StepStatus.SUCCEEDED, started_at=now, completed_at=now,
                       attempts=1, output=output, job_id=f"{run_id}:{step_id}@1")

    approved = ok("approve", None)
    approved.input = {"city": "Oslo"}  # what the approver saw: the run's input
    run.steps = {"fetch": ok("fetch", {"rows": 3}), "approve": approved,
                 "shape": ok("shape", {"rows": 3}), "side": ok("side", "s"),
                 "store": StepRun("store", StepStatus.FAILED, started_at=now,
                                  completed_at=now, attempts=2, job_id=f"{run_id}:store@2",
                                  error={"code": "FAILED", "message": "disk full"}),
                 "tell": StepRun("tell", StepStatus.SKIPPED,
                                 skip_reason="dependency store failed")}
    run.context = {"steps": {s: {"output": run.steps[s].output,
                                 "result_ptr": f"redis://res:{run_id}:{s}@1"}
                             for s in (*KEPT, "side")},
                   "shaped": {"rows": 3}, "side": "s"}
    run.status, run.completed_at, run.updated_at = RunStatus.FAILED, now, now
    run.labels = {"team": "blue"}
    runtime.run(api.store.save(run, timeline=[], outbox=None, timer_at=None))
    return run


def rerun(api: Api, run_id: str, body: Any = None, **kw: Any) -> tuple[int, Any, dict]:
    return api.call("POST", f"/api/v1/workflow-runs/{run_id}/rerun", body, **kw)


def test_a_rerun_keeps_the_upstream_steps_and_runs_the_rest_again(api):
    workflow_id = api.saved(steps=FLOW)
    old = failed_run(api, workflow_id)
    started = len(api.runner.started)
    status, body, headers = rerun(api, old.id, {"from_step": "store"}, key=WRITER)
    assert status == 200 and set(body) == {"run_id"}, body
    new_id = body["run_id"]
    assert new_id != old.id and headers["X-Trace-Id"] == new_id
    # Started as any run: stored pending, indexed, open, its start queued.
    assert [r.id for r in api.runner.started[started:]] == [new_id]
    assert runtime.run(api.redis.zscore(keys.OPEN_RUNS_KEY, new_id)) is not None
    listed = api.call("GET", f"/api/v1/workflows/{workflow_id}/runs")[1]
    assert [r["id"] for r in listed] == [new_id, old.id]
    assert listed[0]["rerun_of"] == old.id and listed[0]["rerun_step"] == "store"

    run = api.call("GET", f"/api/v1/workflow-runs/{new_id}")[1]
    assert (run["status"], run["workflow_id"], run["org_id"], run["input"]) == \
        ("pending", workflow_id, api.tenant, {"city": "Oslo"})
    assert (run["rerun_of"], run["rerun_step"], run["dry_run"]) == (old.id, "store", False)
    assert run["triggered_by"] == run["created_by"] == "wes"
    assert run["labels"] == {"team": "blue"}
    assert run["metadata"] == {"rerun_of": old.id, "rerun_step": "store",
                               "rerun_by": run["triggered_by"]}
    assert sorted(run["steps"]) == sorted(KEPT)
    for step_id in KEPT:
        assert run["steps"][step_id] == {**old.steps[step_id].to_json(), "step_id": step_id}
    assert run["context"] == {"steps": {s: old.context["steps"][s] for s in KEPT},
                              "shaped": {"rows": 3}}


def test_an_approved_gate_upstream_is_not_asked_again(api):
    workflow_id = api.saved(steps=FLOW)
    old = failed_run(api, workflow_id)
    new_id = rerun(api, old.id, {"from_step": "store"})[1]["run_id"]
    loaded = runtime.run(api.store.load(new_id))
    assert loaded is not None
    new, wf, _ = loaded
    gate = new.steps["approve"]
    assert (gate.status, gate.job_id) == (StepStatus.SUCCEEDED, f"{old.id}:approve@1")
    # What the engine does when the run starts: the gate is done, so no gate job; only
    # the step rerun from and the step outside the kept ones go out.
    effects = engine.start(new, wf, datetime.now(UTC))
    assert sorted(j.job_id for j in effects.jobs) == [f"{new_id}:side@1", f"{new_id}:store@1"]
    assert all(j.kind == "job" for j in effects.jobs)


def test_an_upstream_step_that_did_not_succeed_refuses_the_rerun(api):
    workflow_id = api.saved(steps=FLOW)
    old = failed_run(api, workflow_id)
    started = len(api.runner.started)
    status, body, _ = rerun(api, old.id, {"from_step": "tell"})
    assert (status, body["code"], body["status"]) == (400, "RUN_NOT_RUNNABLE", 400)
    assert body["error"] == (f"cannot rerun from step 'tell': its dependency 'store' is "
                             f"failed in run {old.id}, not succeeded")
    assert "retryable" not in body
    assert len(api.runner.started) == started
    assert [r["id"] for r in api.call("GET", "/api/v1/workflow-runs")[1]["items"]] == [old.id]


@pytest.mark.parametrize(("body", "message"), [
    ({"from_step": "nope"}, "from_step 'nope' is not a step of workflow '{wf}'"),
    ("[]", "request body must be a JSON object"),
    ("{", "request body is not valid JSON"),
    ({"from_step": 5}, "from_step: Input should be a valid string"),
    ({"dry_run": "yes"}, "dry_run: Input should be a valid boolean"),
])
def test_a_bad_rerun_request_is_400(api, body, message):
    workflow_id = api.saved(steps=FLOW)
    old = failed_run(api, workflow_id)
    started = len(api.runner.started)
    status, answer, _ = rerun(api, old.id, body)
    assert (status, answer["error"]) == (400, message.format(wf=workflow_id)), answer
    assert len(api.runner.started) == started


def test_another_tenants_run_is_not_found_and_a_viewer_may_not_rerun(api):
    workflow_id = api.saved(steps=FLOW)
    old = failed_run(api, workflow_id)
    not_found = (404, {"error": "run not found", "code": "not_found", "status": 404})
    assert rerun(api, old.id, {"from_step": "store"}, key=OUTSIDER)[:2] == not_found
    assert rerun(api, "no-such-run", {})[:2] == not_found
    assert rerun(api, old.id, {}, key=VIEWER)[0] == 403
    assert len(api.runner.started) == 1  # the old run's own start


def test_without_a_step_the_whole_workflow_runs_again_and_dry_run_is_marked(api):
    workflow_id = api.saved(steps=FLOW)
    old = failed_run(api, workflow_id)
    for body in (None, {}, {"from_step": ""}, {"from_step": None, "dry_run": None}):
        run_id = rerun(api, old.id, body)[1]["run_id"]
        run = api.call("GET", f"/api/v1/workflow-runs/{run_id}")[1]
        assert (run["steps"], run["context"], run["rerun_step"], run["dry_run"]) == \
            ({}, {"steps": {}}, "", False), body
        assert run["input"] == {"city": "Oslo"} and run["rerun_of"] == old.id
    dry_id = rerun(api, old.id, {"from_step": "store", "dry_run": True})[1]["run_id"]
    dry = api.call("GET", f"/api/v1/workflow-runs/{dry_id}")[1]
    assert dry["dry_run"] is True and dry["labels"] == {"team": "blue", "dry_run": "true"}
    assert dry["metadata"] == {"rerun_of": old.id, "rerun_step": "store", "dry_run": "true",
                               "rerun_by": dry["triggered_by"]}
    # Rerunning the dry run for real drops its mark.
    real = api.call("GET", "/api/v1/workflow-runs/" + rerun(api, dry_id, {})[1]["run_id"])[1]
    assert real["dry_run"] is False and real["labels"] == {"team": "blue"}


def test_a_rerun_runs_the_definition_the_old_run_ran(api):
    workflow_id = api.saved(steps=FLOW)
    old = failed_run(api, workflow_id)
    # The definition changes, then goes: the old run's snapshot still has its steps.
    assert api.call("POST", "/api/v1/workflows", api.definition(
        steps={"fetch": {"type": "worker", "topic": "job.default"}}))[0] == 201
    api.call("DELETE", f"/api/v1/workflows/{workflow_id}")
    new_id = rerun(api, old.id, {"from_step": "store"})[1]["run_id"]
    loaded = runtime.run(api.store.load(new_id))
    assert loaded is not None and sorted(loaded[1].steps) == sorted(FLOW)


def test_a_rerun_counts_against_the_tenants_open_run_limit(api, monkeypatch):
    monkeypatch.setenv("CORDUM_WORKFLOW_MAX_ACTIVE_RUNS", "1")
    config.settings.cache_clear()
    workflow_id = api.saved(steps=FLOW)
    old = failed_run(api, workflow_id)
    first = rerun(api, old.id, {"from_step": "store"})
    assert first[0] == 200
    status, body, headers = rerun(api, old.id, {"from_step": "store"})
    assert (status, body["code"], body["retryable"]) == (429, "RUN_NOT_RUNNABLE", True)
    assert headers["Retry-After"] == "1"
    api.finish(first[1]["run_id"])
    assert rerun(api, old.id, {"from_step": "store"})[0] == 200


# --------------------------------------------------------------------------- end to end


def test_a_rerun_after_an_approved_gate_runs_only_the_failed_step_again(stack, kernel):
    from cordum.gateway.approvals.models import ApprovalDecisionRequest
    from cordum.gateway.approvals.service import ApprovalService
    from cordum.gateway.core.auth import Principal
    from cordum.gateway.workflows.service import WorkflowService
    from cordum.safety.snapshots import KernelSnapshots
    from cordum.store.jobs import JobStore, meta_key

    loop, s = stack
    s.worker.script["job.echo"] = ["FAILED", "SUCCEEDED"]
    owner = Principal(tenant=s.tenant, role="admin", principal_id=f"p-{s.unique}")
    approver = Principal(tenant=s.tenant, role="admin", principal_id=f"a-{s.unique}")
    service = WorkflowService(s.definitions, s.store, s.runner)
    definition = {"id": f"wf-{s.unique}", "name": "rerun", "steps": {
        "gate": {"type": "approval"},
        "work": {"type": "worker", "topic": "job.echo", "depends_on": ["gate"],
                 "input": {"amount": "${input.amount}"}},
        "done": {"type": "transform", "depends_on": ["work"],
                 "input": {"echo": "${steps.work.output.echo.amount}"}}}}

    async def status_is(run_id: str, want: str) -> None:
        async def there() -> bool:
            return await s.run_status(run_id) == want

        await s.pump(there)

    async def scenario() -> tuple[WorkflowRun, WorkflowRun]:
        await service.save_definition(owner, definition)
        old_id = await service.start_run(owner, definition["id"], {"amount": 7})
        s.run_ids.add(old_id)
        gate = f"{old_id}:gate@1"

        async def gated() -> bool:
            return (await s.redis.hget(meta_key(gate), "state")) == b"APPROVAL_REQUIRED"

        await s.pump(gated)
        approvals = ApprovalService(JobStore(s.redis), s.redis, s.publisher,
                                    KernelSnapshots(kernel, 2.0))
        await approvals.approve(approver, gate, ApprovalDecisionRequest(reason="checked"))
        await status_is(old_id, "failed")
        new_id = await service.rerun(owner, old_id, from_step="work", dry_run=False)
        s.run_ids.add(new_id)
        await status_is(new_id, "succeeded")
        old = await s.store.get_run(s.tenant, old_id)
        new = await s.store.get_run(s.tenant, new_id)
        assert old is not None and new is not None
        assert not await s.redis.exists(meta_key(f"{new_id}:gate@1"))
        return old, new

    old, new = loop.run_until_complete(asyncio.wait_for(scenario(), 60))
    assert s.worker.received == [f"{old.id}:work@1", f"{new.id}:work@1"]
    assert (new.steps["gate"].status, new.steps["gate"].job_id) == \
        ("succeeded", f"{old.id}:gate@1")
    assert new.steps["work"].output == {"echo": {"amount": 7}}
    assert new.steps["done"].output == {"echo": 7}
    assert new.context["steps"]["gate"] == old.context["steps"]["gate"]
    assert (old.status, new.status, new.rerun_of) == ("failed", "succeeded", old.id)
