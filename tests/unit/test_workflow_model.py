"""Workflow definitions (Cordum's save rules, cordum-sdk 0.1.0's shapes) and run JSON."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from cordum_sdk._generated.models.run_detail import RunDetail
from cordum_sdk._generated.models.run_summary import RunSummary
from cordum_sdk._generated.models.timeline_event import TimelineEvent as SdkTimelineEvent
from cordum_sdk._generated.models.workflow_definition import WorkflowDefinition
from cordum_sdk._generated.models.workflow_definition_steps import WorkflowDefinitionSteps
from cordum_sdk._generated.models.workflow_step import WorkflowStep
from cordum_sdk._generated.models.workflow_step_config import WorkflowStepConfig
from cordum_sdk._generated.models.workflow_step_retry import WorkflowStepRetry

from cordum.workflow import keys
from cordum.workflow.definition import RetryPolicy, Step, Workflow, check_graph, parse_workflow
from cordum.workflow.errors import (
    IdempotencyConflict,
    InvalidDefinition,
    InvalidInput,
    RunNotCancellable,
    RunNotFound,
    RunNotRunnable,
    WorkflowError,
    WorkflowNotFound,
)
from cordum.workflow.model import (
    OPEN_RUN,
    TERMINAL_RUN,
    RunStatus,
    StepRun,
    StepStatus,
    TimelineEvent,
    WorkflowRun,
    format_time,
    parse_time,
)

NOW = "2026-11-26T08:00:00.123456Z"


def parse(doc: dict[str, Any]) -> Workflow:
    return parse_workflow(doc, tenant="acme", principal="alice", now=NOW)


def refused(doc: dict[str, Any]) -> str:
    with pytest.raises(InvalidDefinition) as caught:
        parse(doc)
    return caught.value.message


def chain(**deps: list[str]) -> dict[str, Any]:
    return {"id": "wf", "steps": {k: {"depends_on": v} for k, v in deps.items()}}


# --------------------------------------------------------------------------- accepted shapes


def test_cordum_sdk_definition_is_accepted_with_its_retry_and_step_config():
    # Given what cordum-sdk 0.1.0 sends: ids inside the steps, retry as
    # {max_attempts, backoff_sec}, a step "config" Cordum has no field for
    step = WorkflowStep(id="ignored", type="job", name="Fetch", depends_on=[], timeout_sec=30,
                        retry=WorkflowStepRetry(max_attempts=3, backoff_sec=5),
                        config=WorkflowStepConfig.from_dict({"topic": "job.x"}))
    later = WorkflowStep(id="report", type="notify", depends_on=["fetch"])
    steps = WorkflowDefinitionSteps.from_dict({})
    steps["fetch"], steps["report"] = step, later
    doc = WorkflowDefinition(id="daily", name="Daily", steps=steps, version="2",
                             timeout_sec=600).to_dict()

    wf = parse(doc)

    # Then the map key names the step and the retry reads in Cordum's terms
    assert list(wf.steps) == ["fetch", "report"]
    assert wf.steps["fetch"].id == "fetch"
    assert wf.steps["fetch"].retry == RetryPolicy(max_retries=2, initial_backoff_sec=5)
    assert wf.steps["report"].depends_on == ["fetch"]
    assert wf.timeout_sec == 600 and wf.version == "2"


def test_cordum_retry_spelling_is_kept_and_zero_values_read_as_defaults():
    wf = parse({"id": "w", "steps": {"a": {"retry": {
        "max_retries": 4, "initial_backoff_sec": 0.5, "max_backoff_sec": 30, "multiplier": 3}},
        "b": {"retry": {"max_retries": 1, "initial_backoff_sec": 0, "multiplier": 0}}}})
    assert wf.steps["a"].retry == RetryPolicy(max_retries=4, initial_backoff_sec=0.5,
                                              max_backoff_sec=30, multiplier=3)
    assert wf.steps["b"].retry == RetryPolicy(max_retries=1, initial_backoff_sec=1,
                                              multiplier=2)


def test_max_attempts_of_one_or_zero_means_no_retry():
    wf = parse({"id": "w", "steps": {"a": {"retry": {"max_attempts": 1}},
                                     "b": {"retry": {"max_attempts": 0}}}})
    assert wf.steps["a"].retry is not None and wf.steps["a"].retry.max_retries == 0
    assert wf.steps["b"].retry is not None and wf.steps["b"].retry.max_retries == 0


def test_steps_may_be_a_list_of_steps_with_ids():
    wf = parse({"id": "w", "steps": [{"id": "a"}, {"id": "b", "depends_on": ["a"]}]})
    assert list(wf.steps) == ["a", "b"]
    assert "needs an id" in refused({"id": "w", "steps": [{"type": "worker"}]})
    assert "duplicate step id 'a'" in refused({"id": "w", "steps": [{"id": "a"}, {"id": "a"}]})


def test_server_owns_tenant_author_and_times():
    wf = parse({"id": "w", "org_id": "other", "created_by": "mallory",
                "created_at": "2000-01-01T00:00:00Z", "steps": {}})
    assert (wf.org_id, wf.created_by, wf.created_at, wf.updated_at) == (
        "acme", "alice", NOW, NOW)


def test_a_definition_without_id_gets_a_uuid():
    first, second = parse({"steps": {}}), parse({"id": "", "steps": {}})
    assert len(first.id) == 36 and first.id != second.id


def test_empty_step_type_is_a_worker():
    assert parse({"id": "w", "steps": {"a": {"type": ""}}}).steps["a"].type == "worker"
    assert parse({"id": "w", "steps": {"a": {}}}).steps["a"].type == "worker"


def test_saved_json_parses_back_the_same_and_leaves_out_nulls():
    wf = parse({"id": "w", "name": "n", "input_schema": {"type": "object"}, "steps": {
        "a": {"type": "approval", "meta": {"risk_tags": ["pii"], "labels": {"k": "v"}},
              "compensation": {"topic": "job.undo", "input": {"x": "${input.x}"}},
              "route_labels": {"region": "eu"}, "policy_gate": "require_approval"},
        "b": {"depends_on": ["a"], "delay_until": "2026-12-01T00:00:00Z"}}})
    doc = wf.to_json()
    assert "config" not in doc and "retry" not in doc["steps"]["a"]
    assert parse_workflow(doc, tenant="acme", principal="alice", now=NOW) == wf
    # cordum-sdk reads the answer back without failing on a missing or null field
    back = WorkflowDefinition.from_dict(doc)
    assert back.id == "w" and back.steps["a"].type == "approval"


# --------------------------------------------------------------------------- refused


def test_unknown_keys_are_refused_at_every_level():
    assert refused({"id": "w", "colour": "red", "steps": {}}) == "unknown field colour"
    assert refused({"id": "w", "steps": {"a": {"colour": 1}}}) == "unknown field steps.a.colour"
    assert "steps.a.retry.jitter" in refused({"id": "w", "steps": {"a": {"retry": {"jitter": 1}}}})
    assert "steps.a.meta.x" in refused({"id": "w", "steps": {"a": {"meta": {"x": 1}}}})


def test_a_definition_must_be_an_object():
    with pytest.raises(InvalidDefinition):
        parse_workflow([], tenant="acme", principal="alice", now=NOW)  # type: ignore[arg-type]


@pytest.mark.parametrize("step_id", ["-a", ".a", "a b", "a:b", "ä", "a" * 65, ""])
def test_step_ids_follow_cordums_pattern(step_id):
    assert "must match" in refused({"id": "w", "steps": {step_id: {}}})


@pytest.mark.parametrize("step_id", ["a", "A9", "fetch.v2", "x_y-z", "a" * 64])
def test_step_ids_that_are_accepted(step_id):
    assert list(parse({"id": "w", "steps": {step_id: {}}}).steps) == [step_id]


def test_workflow_id_follows_the_same_pattern():
    assert "workflow id" in refused({"id": "a:b", "steps": {}})
    assert "workflow id" in refused({"id": "w" * 65, "steps": {}})


def test_names_are_at_most_256_characters():
    parse({"id": "w", "name": "n" * 256, "steps": {"a": {"name": "s" * 256}}})
    assert refused({"id": "w", "name": "n" * 257, "steps": {}}).startswith("name:")
    assert refused({"id": "w", "steps": {"a": {"name": "s" * 257}}}).startswith("steps.a.name:")


@pytest.mark.parametrize("timeout", [-1, 604801])
def test_timeouts_are_within_a_week(timeout):
    assert refused({"id": "w", "timeout_sec": timeout, "steps": {}}).startswith("timeout_sec:")
    assert refused({"id": "w", "steps": {"a": {"timeout_sec": timeout}}}).startswith(
        "steps.a.timeout_sec:")


@pytest.mark.parametrize("timeout", [0, 604800])
def test_timeout_bounds_are_accepted(timeout):
    wf = parse({"id": "w", "timeout_sec": timeout, "steps": {"a": {"timeout_sec": timeout}}})
    assert wf.timeout_sec == timeout
    assert wf.steps["a"].timeout_sec == timeout


@pytest.mark.parametrize("gate", ["", "allow", "deny", "require_approval"])
def test_policy_gates_that_are_accepted(gate):
    assert parse({"id": "w", "steps": {"a": {"policy_gate": gate}}}).steps["a"].policy_gate == gate


def test_other_policy_gates_are_refused():
    assert "policy_gate" in refused({"id": "w", "steps": {"a": {"policy_gate": "ALLOW"}}})


def test_negative_counts_and_a_bad_delay_time_are_refused():
    assert "max_parallel" in refused({"id": "w", "steps": {"a": {"max_parallel": -1}}})
    assert "delay_sec" in refused({"id": "w", "steps": {"a": {"delay_sec": -5}}})
    assert "max_retries" in refused({"id": "w", "steps": {"a": {"retry": {"max_retries": -1}}}})
    assert "RFC 3339" in refused({"id": "w", "steps": {"a": {"delay_until": "tomorrow"}}})
    # a template is only known when the step runs
    parse({"id": "w", "steps": {"a": {"type": "delay", "delay_until": "${input.when}"}}})


def test_dependencies_and_error_handlers_must_be_steps():
    assert "depends_on 'b' is not a step" in refused(chain(a=["b"]))
    assert "on_error 'h' is not a step" in refused({"id": "w", "steps": {"a": {"on_error": "h"}}})
    assert "names the step itself" in refused({"id": "w", "steps": {"a": {"on_error": "a"}}})


def test_dependency_cycles_are_refused():
    assert "a -> a" in refused(chain(a=["a"]))
    assert "cycle" in refused(chain(a=["c"], b=["a"], c=["b"]))
    assert "cycle" in refused(chain(root=[], a=["root", "b"], b=["a"]))


def test_a_diamond_is_no_cycle():
    wf = parse(chain(a=[], b=["a"], c=["a"], d=["b", "c"]))
    assert wf.steps["d"].depends_on == ["b", "c"]


def test_error_handler_chains_may_not_loop():
    assert "loops" in refused({"id": "w", "steps": {
        "a": {"on_error": "b"}, "b": {"on_error": "c"}, "c": {"on_error": "b"}}})
    parse({"id": "w", "steps": {"a": {"on_error": "b"}, "b": {"on_error": "c"}, "c": {}}})


def test_check_graph_on_its_own():
    check_graph({"a": Step(id="a"), "b": Step(id="b", depends_on=["a"])})
    with pytest.raises(InvalidDefinition):
        check_graph({"a": Step(id="a", depends_on=["b"]), "b": Step(id="b", depends_on=["a"])})


def test_a_long_chain_is_checked_without_recursion():
    steps = {f"s{i}": {"depends_on": [f"s{i - 1}"] if i else []} for i in range(5000)}
    assert len(parse({"id": "w", "steps": steps}).steps) == 5000


# --------------------------------------------------------------------------- runs


def sample_run() -> WorkflowRun:
    child = StepRun("fan[0]", status=StepStatus.SUCCEEDED, item={"n": 1}, attempts=1,
                    job_id="r1:fan[0]@1", output={"ok": True})
    return WorkflowRun(
        id="r1", workflow_id="w", org_id="acme", team_id="t", input={"x": 1},
        context={"steps": {"a": {"result_ptr": "redis://res:r1:a@1", "output": 3}}},
        status=RunStatus.RUNNING, started_at=NOW, created_at=NOW, updated_at=NOW,
        steps={"a": StepRun("a", status=StepStatus.SUCCEEDED, attempts=1, output=3,
                            job_id="r1:a@1", started_at=NOW, completed_at=NOW),
               "fan": StepRun("fan", status=StepStatus.RUNNING, resolved_items=[{"n": 1}],
                              children={"fan[0]": child}),
               "b": StepRun("b", status=StepStatus.SKIPPED, skip_reason="dependency a failed",
                            error={"message": "x"}, next_attempt_at=NOW)},
        total_cost=0.25, triggered_by="alice", labels={"k": "v"}, metadata={"call_stack": []},
        idempotency_key="key-1", rerun_of="r0", rerun_step="a", dry_run=True)


def test_run_json_round_trips():
    run = sample_run()
    doc = run.to_json()
    assert doc["status"] == "running" and doc["steps"]["fan"]["children"]["fan[0]"]["item"]
    assert WorkflowRun.from_json(doc) == run


def test_run_json_reads_missing_fields_as_defaults():
    run = WorkflowRun.from_json({"id": "r", "workflow_id": "w", "org_id": "acme",
                                 "steps": {"a": {"step_id": "a", "job_id": None}},
                                 "written_by_a_later_version": 1})
    assert run.status is RunStatus.PENDING and run.context == {"steps": {}}
    assert run.steps["a"] == StepRun("a")


def test_run_json_leaves_out_what_cordum_sdk_cannot_read():
    doc = WorkflowRun(id="r", workflow_id="w", org_id="acme").to_json()
    assert "input" not in doc and "started_at" not in doc
    assert WorkflowRun.from_json(doc).input is None


def test_cordum_sdk_reads_runs_and_timeline_events():
    doc = sample_run().to_json()
    detail = RunDetail.from_dict(doc)
    assert detail.status.value == "running" and detail.steps["a"].job_id == "r1:a@1"
    assert RunSummary.from_dict(doc).started_at == parse_time(NOW)
    event = TimelineEvent(time=NOW, type="step_dispatched", run_id="r1", workflow_id="w",
                          step_id="a", job_id="r1:a@1", data={"attempt": 1})
    doc = event.to_json()
    assert doc["time"] == doc["timestamp"] == NOW
    assert SdkTimelineEvent.from_dict(doc).timestamp == parse_time(NOW)
    assert TimelineEvent.from_json(doc) == event


def test_run_statuses_split_into_open_and_terminal():
    assert OPEN_RUN | TERMINAL_RUN == set(RunStatus) and not OPEN_RUN & TERMINAL_RUN
    assert OPEN_RUN == {RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING}
    assert {s.value for s in StepStatus} == {s.value for s in RunStatus} | {"skipped"}
    assert sample_run().terminal is False


def test_times_are_rfc3339_utc_with_z():
    instant = datetime(2026, 11, 26, 9, 0, 0, 123456, tzinfo=timezone(timedelta(hours=1)))
    assert format_time(instant) == NOW
    assert format_time(datetime(2026, 11, 26, 8)) == "2026-11-26T08:00:00.000000Z"
    assert parse_time(NOW) == instant
    assert parse_time("2026-11-26T08:00:00").tzinfo == UTC


# --------------------------------------------------------------------------- errors, keys


@pytest.mark.parametrize(("kind", "status", "code"), [
    (InvalidDefinition, 400, "invalid_json"),
    (InvalidInput, 400, "invalid_input"),
    (WorkflowNotFound, 404, "not_found"),
    (RunNotFound, 404, "not_found"),
    (IdempotencyConflict, 409, "RUN_IDEMPOTENCY_CONFLICT"),
    (RunNotRunnable, 429, "RUN_NOT_RUNNABLE"),
    (RunNotCancellable, 409, "RUN_NOT_CANCELLABLE"),
])
def test_each_error_names_its_status_and_code(kind, status, code):
    err = kind("why")
    assert isinstance(err, WorkflowError)
    assert (err.status, err.code, err.message) == (status, code, "why")


def test_timer_members_name_workflow_and_run():
    member = keys.timer_member("daily.v2", "6f1c2f1e-0000-4000-8000-000000000000")
    assert member == "daily.v2:6f1c2f1e-0000-4000-8000-000000000000"
    assert keys.parse_timer_member(member) == ("daily.v2", "6f1c2f1e-0000-4000-8000-000000000000")
