"""cordum-sdk 0.1.0 against the workflow API: the published client's own calls, through an
HTTP transport that hands each request to the gateway function as API Gateway would,
on the real Redis.

Every answer is parsed by the client's generated models (WorkflowDefinition, RunDetail,
RunSummary, TimelineEvent, StartWorkflowRunResponse200, RerunWorkflowResponse200,
DryRunResult, ...), which crash on shapes the
spec forbids (a null ``started_at``, a null ``config``, an unknown status). Each 2xx
answer is also checked, strictly, against the model the OpenAPI document names for it.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import httpx
import pytest
from cordum_sdk import CordumClient
from cordum_sdk._generated.models import (
    CreateWorkflowResponse201,
    DryRunResult,
    DryRunWorkflowBody,
    ListAllWorkflowRunsResponse200,
    RerunWorkflowBody,
    RerunWorkflowResponse200,
    RunDetail,
    RunSummary,
    RunSummaryStatus,
    StartWorkflowRunBody,
    StartWorkflowRunResponse200,
    TimelineEvent,
    WorkflowDefinition,
    WorkflowDefinitionSteps,
    WorkflowStep,
    WorkflowStepRetry,
)
from cordum_sdk._retry import RetryPolicy
from cordum_sdk.errors import ConflictError, NotFoundError, RateLimitError, ValidationError
from pydantic import TypeAdapter

from cordum import config, runtime
from cordum.gateway import app as gateway
from cordum.gateway.docs import openapi
from cordum.workflow import keys
from cordum.workflow import model as stored
from cordum.workflow.model import RunStatus, StepRun, StepStatus, format_time
from tests import helpers
from tests.integration.workflow_api import ADMIN, Api, world


class Gateway:
    """The gateway function behind an httpx transport; checks each answer it gives."""

    def __init__(self) -> None:
        self.answers: list[tuple[str, str, int]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = request.content.decode() or None
        query = dict(request.url.params) or None
        ev = helpers.event(request.method, request.url.path, body, content_type=None,
                           headers=dict(request.headers), query=query)
        resp = gateway.handle(ev, None)
        headers = {**(resp.get("headers") or {}),
                   **{k: v[-1] for k, v in (resp.get("multiValueHeaders") or {}).items()}}
        status = resp["statusCode"]
        self.answers.append((request.method, request.url.path, status))
        if 200 <= status < 300:
            check_documented(request.method, request.url.path, status, resp["body"])
        return httpx.Response(status, headers=headers, content=resp["body"].encode())


def check_documented(method: str, path: str, status: int, body: str) -> None:
    """The answer is what the OpenAPI document says this operation answers."""
    for op in openapi.OPERATIONS:
        pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", op.path) + "$"
        if op.method == method.lower() and re.match(pattern, path):
            assert status == op.ok_status, (method, path, status)
            if op.ok is None:
                assert body == "", (method, path)
            else:
                TypeAdapter(op.ok).validate_json(body, strict=True)
            return
    raise AssertionError(f"{method} {path} is not documented")


class Env:
    """The workflow API's test world, reached through cordum-sdk's client."""

    def __init__(self, api: Api) -> None:
        self.unique, self.tenant = api.unique, api.tenant
        self.redis, self.store, self.runner = api.redis, api.store, api.runner
        self.gateway = Gateway()
        self.client = CordumClient("https://gateway.test", ADMIN, tenant_id=api.tenant,
                                   transport=httpx.MockTransport(self.gateway),
                                   retry_policy=RetryPolicy(max_retries=0))

    def definition(self, name: str = "flow") -> WorkflowDefinition:
        steps = WorkflowDefinitionSteps.from_dict({
            "fetch": WorkflowStep(id="fetch", type="worker",
                                  retry=WorkflowStepRetry(max_attempts=2, backoff_sec=1)
                                  ).to_dict(),
            "store": WorkflowStep(id="store", type="worker", depends_on=["fetch"],
                                  timeout_sec=30).to_dict()})
        return WorkflowDefinition(id=f"wf-{self.unique}-{name}", name=name, steps=steps,
                                  description="made by cordum-sdk", version="1")


@pytest.fixture
def env(unique, monkeypatch):
    for api in world(unique, monkeypatch):
        e = Env(api)
        try:
            yield e
        finally:
            e.client.close()


def test_definitions_round_trip_through_the_client(env):
    wf = env.client.workflows
    created = wf.create_workflow(body=env.definition())
    assert isinstance(created, CreateWorkflowResponse201) and created.id == f"wf-{env.unique}-flow"
    got = wf.get_workflow(id=created.id)
    assert isinstance(got, WorkflowDefinition)
    assert (got.id, got.name, got.org_id, got.description, got.version) == \
        (created.id, "flow", env.tenant, "made by cordum-sdk", "1")
    steps = got.steps.additional_properties
    assert sorted(steps) == ["fetch", "store"]
    assert (steps["store"].id, steps["store"].type, steps["store"].depends_on,
            steps["store"].timeout_sec) == ("store", "worker", ["fetch"], 30)
    assert steps["fetch"].retry.additional_properties["max_retries"] == 1
    listed = wf.list_workflows()
    assert [w.id for w in listed] == [created.id]
    assert all(isinstance(w, WorkflowDefinition) for w in listed)
    # What the client read back, it can save again unchanged.
    assert wf.create_workflow(body=got).id == created.id
    assert wf.delete_workflow(id=created.id) is None
    with pytest.raises(NotFoundError) as missing:
        wf.get_workflow(id=created.id)
    assert (missing.value.status_code, missing.value.code) == (404, "not_found")
    with pytest.raises(ValidationError) as invalid:
        wf.create_workflow(body=WorkflowDefinition(
            id="bad id", name="x", steps=WorkflowDefinitionSteps.from_dict({})))
    assert invalid.value.code == "invalid_json"


def test_runs_read_through_the_client(env):
    wf = env.client.workflows
    workflow_id = wf.create_workflow(body=env.definition()).id
    started = wf.start_workflow_run(id=workflow_id,
                                    body=StartWorkflowRunBody.from_dict({"city": "Oslo"}))
    assert isinstance(started, StartWorkflowRunResponse200) and started.run_id
    run_id = started.run_id
    assert [r.id for r in env.runner.started] == [run_id]

    detail = wf.get_workflow_run(id=run_id)
    assert isinstance(detail, RunDetail)
    assert (detail.id, detail.workflow_id, detail.status) == \
        (run_id, workflow_id, RunSummaryStatus.PENDING)
    assert isinstance(detail.started_at, datetime) and detail.completed_at is None
    assert detail.input_.additional_properties == {"city": "Oslo"}
    assert (detail.created_by, detail.dry_run) == ("ada", False)
    assert detail.additional_properties["timers"] == []

    (summary,) = wf.list_workflow_runs(id=workflow_id)
    assert isinstance(summary, RunSummary) and summary.id == run_id
    page = wf.list_all_workflow_runs(limit=10)
    assert isinstance(page, ListAllWorkflowRunsResponse200)
    assert [r.id for r in page.items] == [run_id] and page.next_cursor is None
    assert wf.get_run_timeline(id=run_id) == []


def test_a_run_with_steps_a_timer_and_a_timeline_parses(env):
    wf = env.client.workflows
    workflow_id = wf.create_workflow(body=env.definition()).id
    run_id = wf.start_workflow_run(id=workflow_id, body=StartWorkflowRunBody()).run_id
    # The run as the engine leaves it mid-way: one step done, one failed and backing off.
    run = runtime.run(env.store.get_run(env.tenant, run_id))
    now = format_time(datetime.now(UTC))
    run.status = RunStatus.RUNNING
    run.steps = {
        "fetch": StepRun("fetch", StepStatus.SUCCEEDED, started_at=now, completed_at=now,
                         attempts=1, output={"rows": 3}, job_id=f"{run_id}:fetch@1"),
        "store": StepRun("store", StepStatus.RUNNING, started_at=now, next_attempt_at=now,
                         attempts=1, error={"code": "FAILED", "message": "disk full"},
                         job_id=f"{run_id}:store@1"),
        # A for_each step with its items, and a step behind a policy gate it passed.
        "fan": StepRun("fan", StepStatus.RUNNING, started_at=now, attempts=1,
                       resolved_items=["a", 2], children={
                           "fan[0]": StepRun("fan[0]", StepStatus.SUCCEEDED, attempts=1,
                                             item="a", output={"ok": True},
                                             job_id=f"{run_id}:fan[0]@1"),
                           "fan[1]": StepRun("fan[1]", StepStatus.PENDING, item=2)}),
        "pay": StepRun("pay", StepStatus.RUNNING, started_at=now, attempts=2, gate="passed",
                       job_id=f"{run_id}:pay@2"),
    }
    run.context = {"steps": {"fetch": {"output": {"rows": 3}, "result_ptr": ""}}}
    events = [stored.TimelineEvent(time=now, type="step_completed", run_id=run_id,
                          workflow_id=workflow_id, step_id="fetch", status="succeeded"),
              stored.TimelineEvent(time=now, type="run_status", run_id=run_id,
                          workflow_id=workflow_id, status="running", data={"from": "pending"})]
    runtime.run(env.store.save(run, timeline=events, outbox=None, timer_at=time.time() + 5))

    detail = wf.get_workflow_run(id=run_id)
    assert detail.status is RunSummaryStatus.RUNNING
    steps = detail.steps.additional_properties
    assert steps["fetch"].status == "succeeded" and isinstance(steps["fetch"].completed_at,
                                                                datetime)
    assert steps["fetch"].output.additional_properties == {"rows": 3}
    assert steps["store"].job_id == f"{run_id}:store@1" and steps["store"].completed_at is None
    children = steps["fan"].additional_properties["children"]
    assert children["fan[0]"]["item"] == "a" and children["fan[1]"]["status"] == "pending"
    assert steps["pay"].additional_properties["gate"] == "passed"
    (timer,) = detail.additional_properties["timers"]
    assert timer["run_id"] == run_id and 0 < timer["remaining_ms"] <= 5000
    timeline = wf.get_run_timeline(id=run_id)
    assert all(isinstance(e, TimelineEvent) for e in timeline)
    assert [(e.type, e.step_id) for e in timeline] == \
        [("step_completed", "fetch"), ("run_status", "")]
    assert isinstance(timeline[0].timestamp, datetime)
    assert timeline[1].data.additional_properties == {"from": "pending"}


def test_the_clients_paging_follows_the_string_cursor(env):
    wf = env.client.workflows
    workflow_id = wf.create_workflow(body=env.definition()).id
    ids = []
    for n in range(3):
        ids.append(wf.start_workflow_run(id=workflow_id,
                                         body=StartWorkflowRunBody.from_dict({"n": n})).run_id)
        time.sleep(0.002)
    seen = [r.id for r in wf.paginate("list_all_workflow_runs", limit=1)]
    assert seen == ids[::-1]
    # One request per page; the last page knows it is the last.
    assert sum(1 for m, p, _ in env.gateway.answers
               if (m, p) == ("GET", "/api/v1/workflow-runs")) == 3
    done = wf.list_all_workflow_runs(status="succeeded")
    assert done.items == [] and done.next_cursor is None


def test_cancel_and_delete_through_the_client(env):
    wf = env.client.workflows
    workflow_id = wf.create_workflow(body=env.definition()).id
    run_id = wf.start_workflow_run(id=workflow_id, body=StartWorkflowRunBody()).run_id
    assert wf.cancel_workflow_run(id=workflow_id, run_id=run_id) is None
    detail = wf.get_workflow_run(id=run_id)
    assert detail.status is RunSummaryStatus.CANCELLED
    assert isinstance(detail.completed_at, datetime)
    assert wf.delete_workflow_run(id=run_id) is None
    with pytest.raises(NotFoundError):
        wf.get_workflow_run(id=run_id)
    with pytest.raises(NotFoundError):
        wf.cancel_workflow_run(id=workflow_id, run_id=run_id)


def test_refusals_reach_the_client_as_its_errors(env, monkeypatch):
    wf = env.client.workflows
    workflow_id = wf.create_workflow(body=env.definition()).id
    run_id = wf.start_workflow_run(id=workflow_id, body=StartWorkflowRunBody()).run_id
    runtime.run(env.redis.set(keys.run_lock_key(run_id), "someone-else", px=30_000))
    with pytest.raises(ConflictError) as busy:
        wf.cancel_workflow_run(id=workflow_id, run_id=run_id)
    assert busy.value.code == "RUN_NOT_CANCELLABLE"
    runtime.run(env.redis.delete(keys.run_lock_key(run_id)))
    monkeypatch.setenv("CORDUM_WORKFLOW_MAX_ACTIVE_RUNS", "1")
    config.settings.cache_clear()
    with pytest.raises(RateLimitError) as limited:
        wf.start_workflow_run(id=workflow_id, body=StartWorkflowRunBody())
    assert (limited.value.code, limited.value.retry_after) == ("RUN_NOT_RUNNABLE", 1)
    with pytest.raises(NotFoundError):
        wf.start_workflow_run(id=f"wf-{env.unique}-none", body=StartWorkflowRunBody())


def test_a_rerun_through_the_client(env):
    wf = env.client.workflows
    workflow_id = wf.create_workflow(body=env.definition()).id
    run_id = wf.start_workflow_run(id=workflow_id, body=StartWorkflowRunBody.from_dict(
        {"city": "Oslo"})).run_id
    run = runtime.run(env.store.get_run(env.tenant, run_id))
    now = format_time(datetime.now(UTC))
    run.status, run.completed_at = RunStatus.FAILED, now
    run.steps = {
        "fetch": StepRun("fetch", StepStatus.SUCCEEDED, started_at=now, completed_at=now,
                         attempts=1, output={"rows": 3}, job_id=f"{run_id}:fetch@1"),
        "store": StepRun("store", StepStatus.FAILED, started_at=now, completed_at=now,
                         attempts=2, error={"code": "FAILED"}, job_id=f"{run_id}:store@2")}
    run.context = {"steps": {"fetch": {"output": {"rows": 3}, "result_ptr": ""}}}
    runtime.run(env.store.save(run, timeline=[], outbox=None, timer_at=None))

    again = wf.rerun_workflow(id=run_id, body=RerunWorkflowBody(from_step="store"))
    assert isinstance(again, RerunWorkflowResponse200) and again.run_id not in ("", run_id)
    detail = wf.get_workflow_run(id=again.run_id)
    assert (detail.status, detail.dry_run) == (RunSummaryStatus.PENDING, False)
    assert detail.additional_properties["rerun_of"] == run_id
    steps = detail.steps.additional_properties
    assert list(steps) == ["fetch"] and steps["fetch"].status == "succeeded"
    dry = wf.rerun_workflow(id=run_id, body=RerunWorkflowBody(dry_run=True))
    assert wf.get_workflow_run(id=dry.run_id).dry_run is True
    with pytest.raises(ValidationError) as refused:
        wf.rerun_workflow(id=dry.run_id, body=RerunWorkflowBody(from_step="store"))
    assert refused.value.code == "RUN_NOT_RUNNABLE"  # its fetch has not run yet
    with pytest.raises(NotFoundError):
        wf.rerun_workflow(id="no-such-run", body=RerunWorkflowBody())


def test_a_dry_run_through_the_client(env, kernel, monkeypatch):
    monkeypatch.setenv("SAFETY_KERNEL_ADDR", kernel)
    config.settings.cache_clear()
    wf = env.client.workflows
    workflow_id = wf.create_workflow(body=env.definition()).id
    body = DryRunWorkflowBody.from_dict({"input": {"city": "Oslo"},
                                         "environment": {"name": "staging"}})
    result = wf.dry_run_workflow(id=workflow_id, body=body)
    assert isinstance(result, DryRunResult)
    assert result.additional_properties["workflow_id"] == workflow_id
    # Steps without a topic go to job.workflow.<id>, which the shipped policy does not
    # name: its default, deny.
    assert [(s.step_id, s.additional_properties["decision"]) for s in result.steps] == \
        [("fetch", "DENY"), ("store", "DENY")]
    assert all(s.additional_properties["step_type"] == "worker" for s in result.steps)
    with pytest.raises(NotFoundError):
        wf.dry_run_workflow(id=f"wf-{env.unique}-none", body=DryRunWorkflowBody())
