"""The workflow tick's rules with no I/O: failing a run the engine cannot advance, the
error it ends with, each tenant's share of a tick, and a run's tenant read from the
head of its JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from cordum.workflow import engine
from cordum.workflow.definition import Workflow
from cordum.workflow.fairness import RUN_HEAD_BYTES, fair_pick, owner_of_head
from cordum.workflow.model import RunStatus, WorkflowRun, format_time
from cordum.workflow.reconciler import ReconcilerPolicy
from cordum.workflow.run_errors import MAX_MESSAGE, engine_error

NOW = datetime(2026, 11, 26, 8, 0, tzinfo=UTC)


def started() -> tuple[WorkflowRun, Workflow]:
    wf = Workflow.model_validate({"id": "wf1", "org_id": "acme", "name": "demo", "steps": {
        "a": {"topic": "job.default"}, "b": {"topic": "job.default", "depends_on": ["a"]}}})
    stamp = format_time(NOW)
    run = WorkflowRun(id="run-1", workflow_id="wf1", org_id="acme", created_at=stamp,
                      updated_at=stamp)
    engine.start(run, wf, NOW)
    return run, wf


def test_fail_run_fails_an_open_run_and_cancels_its_open_steps_jobs():
    run, wf = started()
    error = engine_error(RuntimeError("boom"))
    effects = engine.fail_run(run, wf, NOW + timedelta(seconds=1), error)
    assert run.status == RunStatus.FAILED and run.error == error
    assert run.steps["a"].status == "cancelled" and run.steps["b"].status == "skipped"
    assert effects.cancels == ["run-1:a@1"] and effects.timer_at is None
    [event] = effects.timeline
    assert (event.type, event.status) == ("run_status", "failed")
    assert event.message == "engine_error: RuntimeError: boom"


def test_fail_run_leaves_a_terminal_run_as_it_is():
    run, wf = started()
    engine.cancel(run, wf, NOW)
    before = run.to_json()
    effects = engine.fail_run(run, wf, NOW, engine_error(RuntimeError("late")))
    assert run.to_json() == before and effects == engine.Effects()


def test_engine_error_names_the_exception_in_bounded_text():
    error = engine_error(ValueError("x" * 5000))
    assert error["code"] == "engine_error" and error["step_id"] == ""
    assert error["message"].startswith("ValueError: xxx")
    assert len(error["message"]) == MAX_MESSAGE and error["message"].endswith("...")


def test_tenants_are_served_in_turn_each_within_its_share():
    tenant = {f"a{i}": "A" for i in range(10)} | {"b0": "B", "c0": "C", "c1": "C"}
    ids = [*(f"a{i}" for i in range(10)), "b0", "c0", "c1"]
    assert fair_pick(ids, tenant.__getitem__, limit=100, per_tenant=3) == [
        "a0", "b0", "c0", "a1", "c1", "a2"]
    assert fair_pick(ids, tenant.__getitem__, limit=4, per_tenant=3) == [
        "a0", "b0", "c0", "a1"]


def test_the_default_shares_are_a_quarter_of_each_budget():
    policy = ReconcilerPolicy()
    assert (policy.runs_per_tenant, policy.timers_per_tenant) == (50, 125)
    assert ReconcilerPolicy(runs_per_tick=3).runs_per_tenant == 1


def test_a_runs_tenant_is_read_from_the_head_of_its_json_not_from_its_input():
    run = WorkflowRun(id="3f1c", workflow_id="wf-1", org_id='ac"me\\x',
                      input={"org_id": "mallory"})
    head = json.dumps(run.to_json(), separators=(",", ":"))[:RUN_HEAD_BYTES]
    assert owner_of_head(head) == ('ac"me\\x', "wf-1")
    # a field order it does not know, or a head cut inside the tenant, does not read
    assert owner_of_head('{"org_id":"mallory","id":"3f1c"}') is None
    assert owner_of_head('{"id":"3f1c","workflow_id":"wf-1","org_id":"acm') is None
