"""The workflow engine's DAG advance, step kinds, retries and run status, with no I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cordum.workflow import engine
from cordum.workflow.definition import Workflow
from cordum.workflow.gates import GateRecord
from cordum.workflow.model import RunStatus, StepRun, StepStatus, WorkflowRun, format_time
from cordum.workflow.retry import NO_RETRY, StepRetryPolicy
from cordum.workflow.status import run_status

APPROVED_GATE = GateRecord("job.cordum.approval-gate", "APPROVED", "approver", "h", "h")
"""A gate job's approval as the approve endpoint records it (not the starter's)."""

NOW = datetime(2026, 11, 26, 8, 0, tzinfo=UTC)
RUN = "run-1"


def workflow(steps: dict[str, dict[str, Any]], **fields: Any) -> Workflow:
    return Workflow.model_validate({"id": "wf1", "org_id": "acme", "name": "demo",
                                    "steps": steps, **fields})


def new_run(input: Any = None, **fields: Any) -> WorkflowRun:
    stamp = format_time(NOW)
    return WorkflowRun(id=RUN, workflow_id="wf1", org_id="acme", team_id="blue", input=input,
                       started_at=stamp, created_at=stamp, updated_at=stamp,
                       triggered_by="alice", **fields)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def finish(run: WorkflowRun, wf: Workflow, step: str, state: str = "SUCCEEDED", *,
           output: Any = None, when: datetime = NOW, job_id: str | None = None,
           error: dict[str, Any] | None = None) -> engine.Effects:
    jid = run.steps[step].job_id if job_id is None else job_id
    return engine.on_job(run, wf, step, jid, state, output=output,
                         result_ptr=f"redis://res:{jid}", error=error, now=when,
                         gate=APPROVED_GATE)


def error_code(run: WorkflowRun, step: str) -> str:
    error = run.steps[step].error
    assert error is not None
    return str(error["code"])


def statuses(run: WorkflowRun) -> dict[str, str]:
    return {sid: str(sr.status) for sid, sr in run.steps.items()}


def dispatched(effects: engine.Effects) -> list[str]:
    return [job.step_id for job in effects.jobs]


def kinds(effects: engine.Effects) -> list[str]:
    return [event.type for event in effects.timeline]


# --------------------------------------------------------------------------- dispatch


def test_start_dispatches_a_worker_job_with_ids_env_labels_and_keys():
    wf = workflow({"fetch": {"type": "worker", "topic": "job.fetch", "timeout_sec": 30,
                             "input": {"url": "${input.url}", "n": "${input.n}",
                                       "note": "n=${input.n}"},
                             "route_labels": {"region": "${input.region}"}}})
    run = new_run({"url": "https://x", "n": 3, "region": "eu"})

    effects = engine.start(run, wf, NOW)

    [job] = effects.jobs
    assert job.job_id == f"{RUN}:fetch@1"
    assert job.topic == "job.fetch" and job.kind == "job" and job.priority == "batch"
    assert job.deadline_ms == 30_000
    assert job.idempotency_key == f"wf:{RUN}:fetch:1"
    assert job.input == {"url": "https://x", "n": 3, "note": "n=3"}
    assert job.env == {"workflow_id": "wf1", "run_id": RUN, "step_id": "fetch",
                       "tenant_id": "acme", "team_id": "blue", "memory_id": f"run:{RUN}",
                       "context_mode": "raw"}
    assert all(isinstance(v, str) for v in job.env.values())
    assert job.labels == {"workflow_id": "wf1", "run_id": RUN, "step_id": "fetch",
                          "_source": "workflow", "region": "eu"}
    step = run.steps["fetch"]
    assert step.status == StepStatus.RUNNING and step.job_id == job.job_id
    assert step.attempts == 1 and step.input == job.input
    assert run.status == RunStatus.RUNNING
    assert kinds(effects) == ["run_status", "step_dispatched"]
    assert effects.timer_at is None and effects.cancels == []


def test_a_step_without_input_gets_the_whole_run_input_on_the_default_topic():
    wf = workflow({"a": {}})
    run = new_run({"k": [1, 2]})
    [job] = engine.start(run, wf, NOW).jobs
    assert job.topic == "job.workflow.wf1"
    assert job.input == {"k": [1, 2]} and job.deadline_ms == 0
    job.input["k"].append(3)
    assert run.input == {"k": [1, 2]}


def test_route_labels_cannot_override_the_engine_labels():
    wf = workflow({"a": {"route_labels": {"_source": "evil", "run_id": "x", "pool": "gpu"}}})
    [job] = engine.start(new_run(), wf, NOW).jobs
    assert job.labels["_source"] == "workflow" and job.labels["run_id"] == RUN
    assert job.labels["pool"] == "gpu"


def test_dag_runs_in_dependency_order_and_succeeds():
    wf = workflow({"a": {}, "b": {"depends_on": ["a"]}, "c": {"depends_on": ["a"]},
                   "d": {"depends_on": ["b", "c"]}})
    run = new_run({})
    assert dispatched(engine.start(run, wf, NOW)) == ["a"]
    assert dispatched(finish(run, wf, "a", output={"n": 1})) == ["b", "c"]
    assert dispatched(finish(run, wf, "b", output="B")) == []
    assert dispatched(finish(run, wf, "c", output="C")) == ["d"]

    effects = finish(run, wf, "d", output="D", when=at(5))

    assert run.status == RunStatus.SUCCEEDED
    assert run.completed_at == format_time(at(5)) and run.updated_at == run.completed_at
    assert run.output == {"a": {"n": 1}, "b": "B", "c": "C", "d": "D"}
    assert run.context["steps"]["a"] == {"output": {"n": 1},
                                         "result_ptr": f"redis://res:{RUN}:a@1"}
    assert kinds(effects) == ["step_completed", "run_status"]
    assert effects.timer_at is None


def test_templates_read_earlier_outputs_and_output_path_writes_the_context():
    wf = workflow({"a": {"output_path": "results.first"},
                   "b": {"depends_on": ["a"],
                         "input": {"total": "${steps.a.output.total}",
                                   "same": "${ctx.results.first.total}",
                                   "missing": "${steps.a.output.nope}"}}})
    run = new_run()
    engine.start(run, wf, NOW)
    [job] = finish(run, wf, "a", output={"total": 42}).jobs
    assert run.context["results"] == {"first": {"total": 42}}
    assert job.input == {"total": 42, "same": 42}


def test_a_template_error_fails_the_step():
    wf = workflow({"a": {"input": {"x": "${input.a +}"}}})
    run = new_run({"a": 1})
    effects = engine.start(run, wf, NOW)
    assert effects.jobs == []
    assert error_code(run, "a") == "step_input_invalid"
    assert run.status == RunStatus.FAILED


# --------------------------------------------------------------------------- skips, status


def test_a_failed_dependency_skips_its_dependents_and_cancels_other_branches():
    wf = workflow({"a": {}, "x": {}, "b": {"depends_on": ["a"]}, "c": {"depends_on": ["b"]}})
    run = new_run()
    engine.start(run, wf, NOW)
    effects = finish(run, wf, "a", "FAILED", error={"message": "boom"})
    assert statuses(run) == {"a": "failed", "x": "cancelled", "b": "skipped",
                             "c": "skipped"}
    assert run.steps["b"].skip_reason == "dependency a failed"
    assert run.steps["c"].skip_reason == "dependency b skipped"
    assert run.status == RunStatus.FAILED
    assert run.error["step_id"] == "a" and run.error["message"] == "boom"
    assert effects.cancels == [f"{RUN}:x@1"]


def steps_wf(**extra: dict[str, Any]) -> Workflow:
    return workflow({"a": {}, "b": {}, **extra})


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("succeeded", "succeeded", "succeeded"),
    ("succeeded", "skipped", "succeeded"),
    ("succeeded", "running", "running"),
    ("succeeded", "pending", "running"),
    ("failed", "running", "failed"),
    ("cancelled", "succeeded", "failed"),
    ("denied", "succeeded", "denied"),
    ("timed_out", "succeeded", "timed_out"),
    ("waiting", "running", "waiting"),
    ("failed", "denied", "failed"),
    ("denied", "timed_out", "denied"),
    ("timed_out", "waiting", "timed_out"),
])
def test_run_status_aggregation(a: str, b: str, expected: str):
    run = new_run(status=RunStatus.RUNNING)
    run.steps = {"a": StepRun("a", StepStatus(a)), "b": StepRun("b", StepStatus(b))}
    assert run_status(run, steps_wf()) == RunStatus(expected)


@pytest.mark.parametrize(("a", "handler", "expected"), [
    ("failed", "succeeded", "succeeded"),
    ("failed", "running", "running"),
    ("failed", "failed", "failed"),
    ("denied", "succeeded", "succeeded"),
    ("succeeded", "pending", "succeeded"),  # an unused handler does not count
    ("running", "pending", "running"),
])
def test_run_status_with_an_error_handler(a: str, handler: str, expected: str):
    wf = workflow({"a": {"on_error": "h"}, "h": {}})
    run = new_run(status=RunStatus.RUNNING)
    run.steps = {"a": StepRun("a", StepStatus(a)), "h": StepRun("h", StepStatus(handler))}
    assert run_status(run, wf) == RunStatus(expected)


# --------------------------------------------------------------------------- retries


def test_retry_policy_arithmetic():
    policy = StepRetryPolicy(max_retries=5, initial_backoff_sec=2, multiplier=3)
    assert [policy.delay_s(n) for n in (1, 2, 3, 4)] == [2, 6, 18, 54]
    capped = StepRetryPolicy(initial_backoff_sec=1, multiplier=2, max_backoff_sec=10)
    assert [capped.delay_s(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    fractional = StepRetryPolicy(initial_backoff_sec=1.5, multiplier=1.5)
    assert [fractional.delay_s(n) for n in (1, 2, 3)] == [1, 2, 3]  # 1.5, 2.25, 3.375
    assert StepRetryPolicy().delay_s(1) == 1 and StepRetryPolicy().delay_s(3) == 4
    assert StepRetryPolicy().delay_s(10_000) == 604_800  # bounded, never overflows
    assert policy.allows(5, "FAILED") and not policy.allows(6, "FAILED")
    assert policy.allows(1, "TIMEOUT") and policy.allows(1, "FAILED_RETRYABLE")
    assert not policy.allows(1, "FAILED_FATAL") and not policy.allows(1, "DENIED")
    with pytest.raises(AttributeError):
        policy.max_retries = 1  # type: ignore[misc]


def test_retry_policy_of_a_step_reads_both_spellings():
    wf = workflow({"a": {"retry": {"max_retries": 2, "initial_backoff_sec": 3,
                                   "max_backoff_sec": 9, "multiplier": 4}},
                   "b": {"retry": {"max_attempts": 3, "backoff_sec": 5}}, "c": {}})
    assert StepRetryPolicy.of(wf.steps["a"]) == StepRetryPolicy(2, 3, 9, 4)
    assert StepRetryPolicy.of(wf.steps["b"]) == StepRetryPolicy(2, 5, 0, 2)
    assert StepRetryPolicy.of(wf.steps["c"]) is NO_RETRY


def test_retries_back_off_then_fail():
    wf = workflow({"a": {"retry": {"max_retries": 2, "initial_backoff_sec": 2,
                                   "multiplier": 3}}})
    run = new_run()
    engine.start(run, wf, NOW)

    effects = finish(run, wf, "a", "FAILED", when=at(1))
    step = run.steps["a"]
    assert step.status == StepStatus.PENDING and step.attempts == 1
    assert step.next_attempt_at == format_time(at(3))
    assert effects.timer_at == at(3).timestamp() and effects.jobs == []
    assert run.status == RunStatus.RUNNING

    assert engine.on_timer(run, wf, at(2)).jobs == []
    [job] = engine.on_timer(run, wf, at(3)).jobs
    assert job.job_id == f"{RUN}:a@2" and job.idempotency_key == f"wf:{RUN}:a:2"
    assert step.status == StepStatus.RUNNING and step.next_attempt_at is None

    finish(run, wf, "a", "TIMEOUT", when=at(4))
    assert step.next_attempt_at == format_time(at(10))  # 2 * 3
    [job] = engine.on_timer(run, wf, at(10)).jobs
    assert job.job_id == f"{RUN}:a@3"

    effects = finish(run, wf, "a", "FAILED_RETRYABLE", when=at(11))
    assert step.status == StepStatus.FAILED and step.attempts == 3
    assert run.status == RunStatus.FAILED and effects.timer_at is None


def test_a_result_of_an_earlier_attempt_is_ignored():
    wf = workflow({"a": {"retry": {"max_retries": 1}}})
    run = new_run()
    engine.start(run, wf, NOW)
    finish(run, wf, "a", "FAILED")
    engine.on_timer(run, wf, at(1))
    effects = finish(run, wf, "a", "SUCCEEDED", job_id=f"{RUN}:a@1")
    assert effects.timeline == [] and run.steps["a"].status == StepStatus.RUNNING


@pytest.mark.parametrize(("state", "step_status", "run_state", "code"), [
    ("FAILED_FATAL", "failed", "failed", "job_failed_fatal"),
    ("DENIED", "denied", "denied", "job_denied"),
    ("OUTPUT_QUARANTINED", "failed", "failed", "output_quarantined"),
    ("CANCELLED", "cancelled", "failed", "job_cancelled"),
])
def test_outcomes_that_are_never_retried(state: str, step_status: str, run_state: str,
                                         code: str):
    wf = workflow({"a": {"retry": {"max_retries": 5}}})
    run = new_run()
    engine.start(run, wf, NOW)
    finish(run, wf, "a", state)
    assert run.steps["a"].status == StepStatus(step_status)
    assert run.steps["a"].attempts == 1 and error_code(run, "a") == code
    assert run.status == RunStatus(run_state)


def test_an_open_job_state_changes_nothing():
    wf = workflow({"a": {}})
    run = new_run()
    engine.start(run, wf, NOW)
    effects = finish(run, wf, "a", "RUNNING")
    assert effects.timeline == [] and run.steps["a"].status == StepStatus.RUNNING


# --------------------------------------------------------------------------- on_error


def test_on_error_runs_the_handler_with_the_error_and_satisfies_dependents():
    wf = workflow({"a": {"on_error": "fix"}, "fix": {"input": {"why": "${input.why}"}},
                   "after": {"depends_on": ["a"]}})
    run = new_run({"why": "because"})
    assert dispatched(engine.start(run, wf, NOW)) == ["a"]

    effects = finish(run, wf, "a", "FAILED", error={"message": "boom"})

    assert "step_error_redirect" in kinds(effects)
    [job] = effects.jobs
    assert job.step_id == "fix"
    assert job.input == {"why": "because", "error": {
        "message": "boom", "code": "job_failed", "state": "FAILED", "step_id": "a"}}
    assert run.status == RunStatus.RUNNING and run.steps["after"].status == StepStatus.PENDING

    assert dispatched(finish(run, wf, "fix")) == ["after"]
    finish(run, wf, "after")
    assert run.status == RunStatus.SUCCEEDED


def test_on_error_chains_are_followed():
    wf = workflow({"a": {"on_error": "h1"}, "h1": {"on_error": "h2"}, "h2": {},
                   "after": {"depends_on": ["a"]}})
    run = new_run()
    engine.start(run, wf, NOW)
    assert dispatched(finish(run, wf, "a", "FAILED")) == ["h1"]
    assert dispatched(finish(run, wf, "h1", "DENIED")) == ["h2"]
    assert dispatched(finish(run, wf, "h2")) == ["after"]
    finish(run, wf, "after")
    assert run.status == RunStatus.SUCCEEDED


def test_a_failing_handler_fails_the_run():
    wf = workflow({"a": {"on_error": "h"}, "h": {}})
    run = new_run()
    engine.start(run, wf, NOW)
    finish(run, wf, "a", "FAILED")
    finish(run, wf, "h", "FAILED")
    assert run.status == RunStatus.FAILED


def test_an_unused_handler_does_not_block_success():
    wf = workflow({"a": {"on_error": "h"}, "h": {}, "b": {"depends_on": ["a"]}})
    run = new_run()
    assert dispatched(engine.start(run, wf, NOW)) == ["a"]
    assert dispatched(finish(run, wf, "a")) == ["b"]
    finish(run, wf, "b")
    assert run.status == RunStatus.SUCCEEDED
    assert run.steps["h"].status == StepStatus.SKIPPED
    assert run.steps["h"].skip_reason == "error handler not needed"


# --------------------------------------------------------------------------- step kinds


def test_approval_gate_waits_and_approval_continues_the_run():
    wf = workflow({"gate": {"type": "approval", "name": "Sign-off", "timeout_sec": 600,
                            "input": {"amount": "${input.amount}"}},
                   "pay": {"depends_on": ["gate"]}})
    run = new_run({"amount": 120})
    effects = engine.start(run, wf, NOW)

    [job] = effects.jobs
    assert job.kind == "approval" and job.topic == "job.cordum.approval-gate"
    assert job.priority == "interactive" and job.deadline_ms == 600_000
    assert job.idempotency_key == f"wf:{RUN}:gate:1:approval"
    assert job.labels["gate_type"] == "workflow_approval"
    assert job.input == {"kind": "workflow_approval_context", "version": 1, "workflow": {
        "workflow_id": "wf1", "workflow_name": "demo", "run_id": RUN, "step_id": "gate",
        "step_name": "Sign-off", "requested_at": format_time(NOW), "triggered_by": "alice",
        "tenant_id": "acme", "team_id": "blue"}, "decision": {"amount": 120}}
    assert run.steps["gate"].status == StepStatus.WAITING
    assert run.status == RunStatus.WAITING
    assert kinds(effects) == ["run_status", "step_dispatched", "step_waiting", "run_status"]

    effects = finish(run, wf, "gate")
    assert "step_approved" in kinds(effects) and dispatched(effects) == ["pay"]
    assert run.status == RunStatus.RUNNING


def test_a_rejected_approval_denies_the_run():
    wf = workflow({"gate": {"type": "approval"}, "pay": {"depends_on": ["gate"]}})
    run = new_run()
    engine.start(run, wf, NOW)
    effects = finish(run, wf, "gate", "DENIED")
    assert "step_rejected" in kinds(effects)
    assert statuses(run) == {"gate": "denied", "pay": "skipped"}
    assert run.status == RunStatus.DENIED


def test_condition_steps_gate_their_dependents_in_the_same_call():
    wf = workflow({
        "check": {"type": "condition", "condition": "input.total > 100"},
        "big": {"depends_on": ["check"], "condition": "steps.check.output == true"},
        "small": {"depends_on": ["check"], "condition": "steps.check.output == false"},
        "after_small": {"depends_on": ["small"]},
    })
    run = new_run({"total": 150})
    effects = engine.start(run, wf, NOW)
    assert run.steps["check"].output is True
    assert run.steps["small"].status == StepStatus.SUCCEEDED
    assert sorted(dispatched(effects)) == ["after_small", "big"]
    assert "step_condition_evaluated" in kinds(effects)
    assert "step_condition_skipped" in kinds(effects)


def test_a_condition_that_cannot_be_evaluated_fails_the_step():
    wf = workflow({"a": {"condition": "input.total >"}})
    run = new_run({"total": 1})
    effects = engine.start(run, wf, NOW)
    assert run.steps["a"].status == StepStatus.FAILED
    assert "step_condition_failed" in kinds(effects)
    assert run.status == RunStatus.FAILED


def test_delay_waits_for_its_timer_then_releases_dependents():
    wf = workflow({"wait": {"type": "delay", "delay_sec": 30}, "b": {"depends_on": ["wait"]}})
    run = new_run()
    effects = engine.start(run, wf, NOW)
    step = run.steps["wait"]
    assert step.status == StepStatus.RUNNING and step.next_attempt_at == format_time(at(30))
    assert effects.timer_at == at(30).timestamp() and effects.jobs == []
    assert "step_delay_started" in kinds(effects)

    assert engine.on_timer(run, wf, at(29)).timeline == []
    effects = engine.on_timer(run, wf, at(30))
    assert step.status == StepStatus.SUCCEEDED and dispatched(effects) == ["b"]
    assert "step_delay_completed" in kinds(effects)


@pytest.mark.parametrize(("fields", "fires"), [
    ({"delay_until": "2026-11-26T09:00:00Z"}, at(3600)),
    ({"delay_until": "${input.when}"}, at(60)),
    ({"timeout_sec": 45}, at(45)),
])
def test_delay_reads_until_then_timeout(fields: dict[str, Any], fires: datetime):
    wf = workflow({"wait": {"type": "delay", **fields}})
    run = new_run({"when": format_time(at(60))})
    assert engine.start(run, wf, NOW).timer_at == fires.timestamp()


def test_a_delay_already_over_succeeds_at_once():
    wf = workflow({"wait": {"type": "delay", "delay_until": "2020-01-01T00:00:00Z"},
                   "b": {"depends_on": ["wait"]}})
    run = new_run()
    assert dispatched(engine.start(run, wf, NOW)) == ["b"]


def test_notify_emits_an_alert_and_succeeds_at_once():
    wf = workflow({"tell": {"type": "notify", "input": {
        "message": "total is ${input.total}", "level": "warning",
        "details": {"total": "${input.total}", "who": "ops"}}},
        "b": {"depends_on": ["tell"]}, "quiet": {"type": "notify", "name": "Quiet"}})
    run = new_run({"total": 7})
    effects = engine.start(run, wf, NOW)
    assert effects.alerts[0] == {"message": "total is 7", "severity": 2,
                                 "source_component": "workflow-engine",
                                 "details": {"total": "7", "who": "ops"}, "trace_id": RUN}
    assert effects.alerts[1]["message"] == "Quiet" and effects.alerts[1]["severity"] == 1
    assert run.steps["tell"].status == StepStatus.SUCCEEDED
    assert dispatched(effects) == ["b"] and "step_event_emitted" in kinds(effects)


def test_transforms_chain_within_one_call():
    wf = workflow({"t1": {"type": "transform", "input": {"double": "${input.n * 2}"}},
                   "t2": {"type": "transform", "depends_on": ["t1"],
                          "input": {"label": "n=${steps.t1.output.double}"}},
                   "w": {"depends_on": ["t2"], "input": {"label": "${steps.t2.output.label}"}}})
    run = new_run({"n": 4})
    [job] = engine.start(run, wf, NOW).jobs
    assert run.steps["t1"].output == {"double": 8}
    assert job.step_id == "w" and job.input == {"label": "n=8"}


def test_unknown_types_run_as_worker_jobs():
    wf = workflow({"a": {"type": "llm"}, "b": {"type": "something-new"}})
    effects = engine.start(new_run(), wf, NOW)
    assert dispatched(effects) == ["a", "b"]
    assert {job.kind for job in effects.jobs} == {"job"}


def test_an_output_that_breaks_its_schema_fails_the_step():
    wf = workflow({"a": {"output_schema": {"type": "object", "required": ["id"]}}})
    run = new_run()
    engine.start(run, wf, NOW)
    effects = finish(run, wf, "a", output={"name": "x"})
    assert "step_output_invalid" in kinds(effects)
    assert error_code(run, "a") == "step_output_invalid"
    assert run.status == RunStatus.FAILED


# --------------------------------------------------------------------------- cancel, timeout


def test_cancel_closes_open_steps_and_cancels_their_jobs():
    wf = workflow({"a": {}, "gate": {"type": "approval"}, "b": {"depends_on": ["a"]}})
    run = new_run()
    engine.start(run, wf, NOW)
    effects = engine.cancel(run, wf, at(1))
    assert statuses(run) == {"a": "cancelled", "gate": "cancelled", "b": "cancelled"}
    assert run.status == RunStatus.CANCELLED and run.completed_at == format_time(at(1))
    assert sorted(effects.cancels) == [f"{RUN}:a@1", f"{RUN}:gate@1"]
    assert kinds(effects) == ["run_status"] and effects.timer_at is None


def test_cancelling_a_terminal_run_changes_nothing():
    wf = workflow({"a": {}})
    run = new_run()
    engine.start(run, wf, NOW)
    finish(run, wf, "a")
    before = run.to_json()
    effects = engine.cancel(run, wf, at(9))
    assert run.to_json() == before
    assert effects == engine.Effects()


def test_results_for_a_terminal_run_or_a_done_step_are_ignored():
    wf = workflow({"a": {}, "b": {}})
    run = new_run()
    engine.start(run, wf, NOW)
    finish(run, wf, "a")
    again = finish(run, wf, "a", "FAILED", when=at(3))
    assert again.timeline == [] and run.steps["a"].status == StepStatus.SUCCEEDED
    unknown = engine.on_job(run, wf, "zzz", f"{RUN}:zzz@1", "SUCCEEDED", output=None,
                            result_ptr="", error=None, now=NOW)
    assert unknown.timeline == []
    engine.cancel(run, wf, at(4))
    late = finish(run, wf, "b", job_id=f"{RUN}:b@1", when=at(5))
    assert late.timeline == [] and run.steps["b"].status == StepStatus.CANCELLED


def test_workflow_timeout_times_out_the_run_and_cancels_running_jobs():
    wf = workflow({"a": {}, "b": {"depends_on": ["a"]}}, timeout_sec=60)
    run = new_run()
    effects = engine.start(run, wf, NOW)
    assert effects.timer_at == at(60).timestamp()
    assert engine.on_timer(run, wf, at(59)).timeline == []

    effects = engine.on_timer(run, wf, at(60))

    assert run.status == RunStatus.TIMED_OUT
    assert statuses(run) == {"a": "timed_out", "b": "timed_out"}
    assert effects.cancels == [f"{RUN}:a@1"] and effects.timer_at is None
    assert run.error["code"] == "run_timed_out"
    assert finish(run, wf, "a", job_id=f"{RUN}:a@1").timeline == []


# --------------------------------------------------------------------------- reconcile


def test_reconcile_applies_lost_results_and_fires_due_timers():
    wf = workflow({"a": {}, "slow": {}, "wait": {"type": "delay", "delay_sec": 5},
                   "b": {"depends_on": ["a", "wait"]}})
    run = new_run()
    engine.start(run, wf, NOW)
    jobs = {f"{RUN}:a@1": "SUCCEEDED", f"{RUN}:slow@1": "RUNNING"}

    effects = engine.reconcile(run, wf, jobs, at(10))

    assert statuses(run) == {"a": "succeeded", "slow": "running", "wait": "succeeded",
                             "b": "running"}
    assert run.context["steps"]["a"]["result_ptr"] == f"redis://res:{RUN}:a@1"
    assert dispatched(effects) == ["b"]


def test_reconcile_of_a_lost_fatal_failure_fails_the_run():
    wf = workflow({"a": {}})
    run = new_run()
    engine.start(run, wf, NOW)
    engine.reconcile(run, wf, {f"{RUN}:a@1": "FAILED_FATAL"}, at(1))
    assert run.status == RunStatus.FAILED and error_code(run, "a") == "job_failed_fatal"


def test_reconcile_starts_a_pending_run_and_recancels_jobs_of_a_cancelled_one():
    wf = workflow({"a": {}})
    run = new_run()
    assert dispatched(engine.reconcile(run, wf, {}, NOW)) == ["a"]
    engine.cancel(run, wf, at(1))
    effects = engine.reconcile(run, wf, {f"{RUN}:a@1": "RUNNING"}, at(2))
    assert effects.cancels == [f"{RUN}:a@1"] and effects.timeline == []
    assert engine.reconcile(run, wf, {f"{RUN}:a@1": "CANCELLED"}, at(3)).cancels == []


# --------------------------------------------------------------------------- sent twice


def test_a_repeated_start_dispatches_nothing_new():
    wf = workflow({"a": {}, "b": {"depends_on": ["a"]}})
    run = new_run()
    engine.start(run, wf, NOW)
    again = engine.start(run, wf, at(1))
    assert again.jobs == [] and again.timeline == []
    assert run.steps["a"].attempts == 1


def test_an_ignored_result_leaves_the_run_untouched():
    wf = workflow({"a": {}, "b": {}})
    run = new_run()
    engine.start(run, wf, NOW)
    finish(run, wf, "a", when=at(1))
    before = run.to_json()
    effects = finish(run, wf, "a", when=at(2), job_id=f"{RUN}:a@1")
    assert run.to_json() == before
    assert effects.jobs == [] and effects.timeline == [] and effects.cancels == []


def test_the_jobs_error_is_kept_beside_the_engines_code():
    wf = workflow({"a": {}})
    run = new_run()
    engine.start(run, wf, NOW)
    finish(run, wf, "a", "FAILED", error={"code": "FAILED", "message": "", "job_id": "j"})
    assert run.steps["a"].error == {"code": "job_failed", "job_code": "FAILED",
                                    "message": "the step's job failed", "job_id": "j",
                                    "state": "FAILED"}


def test_a_fatal_failure_made_good_by_its_handler_lets_the_run_succeed():
    wf = workflow({"a": {"on_error": "h"}, "h": {}})
    run = new_run()
    engine.start(run, wf, NOW)
    finish(run, wf, "a", "FAILED_FATAL")
    assert run.status == RunStatus.RUNNING
    finish(run, wf, "h")
    assert run.status == RunStatus.SUCCEEDED


def test_a_fatal_failure_whose_handler_fails_fails_the_run():
    wf = workflow({"a": {"on_error": "h"}, "h": {}})
    run = new_run()
    engine.start(run, wf, NOW)
    finish(run, wf, "a", "FAILED_FATAL")
    finish(run, wf, "h", "FAILED")
    assert run.status == RunStatus.FAILED


def test_the_timer_is_the_earliest_of_timeout_delay_and_backoff():
    wf = workflow({"a": {"retry": {"max_retries": 1, "initial_backoff_sec": 20}},
                   "wait": {"type": "delay", "delay_sec": 40}}, timeout_sec=90)
    run = new_run()
    assert engine.start(run, wf, NOW).timer_at == at(40).timestamp()
    assert finish(run, wf, "a", "FAILED", when=at(5)).timer_at == at(25).timestamp()


def test_a_lost_approval_gate_is_sent_again_then_fails_after_three_tries():
    wf = workflow({"gate": {"type": "approval"}})
    run = new_run({})
    first = engine.start(run, wf, NOW)
    assert [j.job_id for j in first.jobs] == [f"{RUN}:gate@1"]
    # Not stored yet, but not 30 s late either: left alone
    quiet = engine.reconcile(run, wf, {f"{RUN}:gate@1": ""}, at(10))
    assert not quiet.jobs and run.steps["gate"].status == "waiting"
    # Missing past 30 s: sent again as a new attempt
    again = engine.reconcile(run, wf, {f"{RUN}:gate@1": ""}, at(31))
    assert [j.job_id for j in again.jobs] == [f"{RUN}:gate@2"]
    assert "step_gate_reset" in kinds(again) and run.steps["gate"].status == "waiting"
    # A gate that is stored (waiting for a human) is never reset, however long it waits
    stored = engine.reconcile(run, wf, {f"{RUN}:gate@2": "APPROVAL_REQUIRED"}, at(3600))
    assert not stored.jobs and run.steps["gate"].job_id == f"{RUN}:gate@2"
    third = engine.reconcile(run, wf, {f"{RUN}:gate@2": ""}, at(61))
    assert [j.job_id for j in third.jobs] == [f"{RUN}:gate@3"]
    lost = engine.reconcile(run, wf, {f"{RUN}:gate@3": ""}, at(91))
    assert not lost.jobs
    assert run.steps["gate"].status == "failed" and error_code(run, "gate") == "approval_gate_lost"
    assert run.status == "failed"


def test_storage_steps_write_read_and_delete_the_run_context():
    wf = workflow({
        "put": {"type": "storage",
                "input": {"operation": "write", "key": "order.total", "value": "${input.n}"}},
        "get": {"type": "storage", "depends_on": ["put"],
                "input": {"operation": "read", "key": "order.total"}},
        "use": {"type": "transform", "depends_on": ["get"],
                "input": {"twice": "${ctx.order.total * 2}"}},
        "drop": {"type": "storage", "depends_on": ["use"],
                 "input": {"operation": "delete", "key": "order.total"}},
        "gone": {"type": "storage", "depends_on": ["drop"],
                 "input": {"operation": "read", "key": "order.total"}},
    })
    run = new_run({"n": 21})
    engine.start(run, wf, NOW)
    assert run.status == "succeeded"
    assert run.steps["put"].output == 21 and run.steps["get"].output == 21
    assert run.steps["use"].output == {"twice": 42}
    assert run.steps["drop"].output == 21 and run.steps["gone"].output is None
    assert run.context["order"] == {}


@pytest.mark.parametrize("spec", [
    {"operation": "rename", "key": "a"},
    {"operation": "write", "key": ""},
    {"operation": "write", "key": "steps.put.output", "value": 1},
])
def test_a_bad_storage_step_fails_and_leaves_the_context_alone(spec):
    wf = workflow({"bad": {"type": "storage", "input": spec}})
    run = new_run({})
    engine.start(run, wf, NOW)
    assert run.steps["bad"].status == "failed" and error_code(run, "bad") == "storage_invalid"
    assert set(run.context) <= {"steps"}


SWITCH = {
    "route": {"type": "switch", "condition": "input.tier",
              "input": {"cases": [{"when": "gold", "next": "vip"},
                                  {"match": "silver", "step": "plus"}],
                        "default": "basic"}},
    "vip": {"type": "transform", "depends_on": ["route"], "input": {"lane": "vip"}},
    "plus": {"type": "transform", "depends_on": ["route"], "input": {"lane": "plus"}},
    "basic": {"type": "transform", "depends_on": ["route"], "input": {"lane": "basic"}},
    "after_plus": {"type": "transform", "depends_on": ["plus"], "input": {"x": 1}},
}


@pytest.mark.parametrize(("tier", "taken", "case"), [
    ("gold", "vip", 0), ("silver", "plus", 1), ("bronze", "basic", None)])
def test_a_switch_runs_one_branch_and_cancels_the_others_as_not_taken(tier, taken, case):
    wf = workflow(SWITCH)
    run = new_run({"tier": tier})
    effects = engine.start(run, wf, NOW)
    assert run.steps["route"].output == {"matched_case": case, "matched_value": tier,
                                         "target_step": taken}
    assert run.steps[taken].status == "succeeded"
    for other in {"vip", "plus", "basic"} - {taken}:
        assert run.steps[other].status == "cancelled"
        assert run.steps[other].error["reason"] == "switch_branch_not_taken"
    # A branch not taken counts as complete: the run succeeds; what follows it is skipped.
    assert run.status == "succeeded"
    if taken != "plus":
        assert run.steps["after_plus"].status == "skipped"
    assert "step_switch_evaluated" in kinds(effects)


def test_a_switch_with_map_cases_and_an_unknown_target_fails():
    wf = workflow({"route": {"type": "switch", "condition": "input.n",
                             "input": {"cases": {"1": "one"}}},
                   "one": {"type": "transform", "depends_on": ["route"], "input": {"x": 1}}})
    run = new_run({"n": 1})
    engine.start(run, wf, NOW)
    assert run.steps["route"].output["target_step"] == "one"
    assert run.steps["one"].status == "succeeded" and run.status == "succeeded"
    bad = workflow({"route": {"type": "switch", "condition": "input.n",
                              "input": {"cases": {"1": "nowhere"}}}})
    run = new_run({"n": 1})
    engine.start(run, bad, NOW)
    assert error_code(run, "route") == "switch_invalid" and run.status == "failed"
