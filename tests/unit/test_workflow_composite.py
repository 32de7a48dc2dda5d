"""for_each, loop, parallel, subworkflow, policy gates, data paths and dry runs in the
engine, with no I/O."""

from __future__ import annotations

from typing import Any

import pytest

from cordum.workflow import engine, subworkflow
from cordum.workflow.gates import GateRecord
from cordum.workflow.model import RunStatus, StepStatus, WorkflowRun
from tests.unit.test_workflow_engine import (
    NOW,
    RUN,
    at,
    error_code,
    finish,
    kinds,
    new_run,
    workflow,
)

APPROVED_GATE = GateRecord("job.cordum.approval-gate", "APPROVED", "approver", "h", "h")
"""A gate job's approval as the approve endpoint records it (not the starter's)."""


def end_child(run: WorkflowRun, wf: Any, path: str, state: str = "SUCCEEDED", *,
              output: Any = None, when: Any = NOW) -> engine.Effects:
    parent, _, _ = path.partition("[")
    child = (run.steps[parent].children or {})[path]
    return engine.on_job(run, wf, path, child.job_id, state, output=output,
                         result_ptr="", error=None, now=when, gate=APPROVED_GATE)


# ---------------------------------------------------------------- for_each

def test_for_each_holds_max_parallel_and_collects_outputs_in_order():
    wf = workflow({"fan": {"topic": "job.echo", "for_each": "input.items", "max_parallel": 2,
                           "input": {"n": "${item}"}},
                   "after": {"type": "transform", "depends_on": ["fan"],
                             "input": {"all": "${steps.fan.output}"}}})
    run = new_run({"items": [10, 20, 30]})
    effects = engine.start(run, wf, NOW)
    assert [j.job_id for j in effects.jobs] == [f"{RUN}:fan[0]@1", f"{RUN}:fan[1]@1"]
    first = effects.jobs[0]
    assert first.env["foreach_index"] == "0" and first.env["foreach_item"] == "10"
    assert first.env["step_id"] == "fan[0]" and first.input == {"item": 10, "n": 10}
    assert first.idempotency_key == f"wf:{RUN}:fan[0]:1"
    assert run.steps["fan"].status == StepStatus.RUNNING
    assert run.steps["fan"].resolved_items == [10, 20, 30]

    effects = end_child(run, wf, "fan[1]", output={"v": 2})
    assert [j.job_id for j in effects.jobs] == [f"{RUN}:fan[2]@1"]  # a slot came free
    end_child(run, wf, "fan[2]", output={"v": 3})
    assert run.steps["fan"].status == StepStatus.RUNNING
    end_child(run, wf, "fan[0]", output={"v": 1})
    assert run.steps["fan"].output == [{"v": 1}, {"v": 2}, {"v": 3}]
    assert run.steps["after"].output == {"all": [{"v": 1}, {"v": 2}, {"v": 3}]}
    assert run.status == RunStatus.SUCCEEDED
    assert "fan[0]" not in run.context["steps"]  # items stay under their parent


def test_a_failed_item_cancels_its_siblings_and_fails_the_step():
    wf = workflow({"fan": {"for_each": "input.items", "max_parallel": 2}})
    run = new_run({"items": ["a", "b", "c"]})
    engine.start(run, wf, NOW)
    effects = end_child(run, wf, "fan[0]", "FAILED")
    children = run.steps["fan"].children or {}
    assert children["fan[1]"].status == StepStatus.CANCELLED
    assert children["fan[2]"].status == StepStatus.CANCELLED  # never started
    assert effects.cancels == [f"{RUN}:fan[1]@1"]
    assert effects.jobs == []
    assert error_code(run, "fan") == "foreach_child_failed"
    assert run.status == RunStatus.FAILED
    assert "step_foreach_orphan_cancelled" in kinds(effects)


def test_more_than_a_thousand_items_fail_the_step():
    wf = workflow({"fan": {"for_each": "input.items"}})
    run = new_run({"items": list(range(1001))})
    effects = engine.start(run, wf, NOW)
    assert effects.jobs == []
    assert error_code(run, "fan") == "for_each_too_many"
    assert "1001 > 1000" in str((run.steps["fan"].error or {})["message"])
    assert run.status == RunStatus.FAILED


def test_a_thousand_items_are_allowed_and_no_items_succeed_at_once():
    wf = workflow({"fan": {"for_each": "input.items", "max_parallel": 5}})
    run = new_run({"items": list(range(1000))})
    assert len(engine.start(run, wf, NOW).jobs) == 5
    empty = new_run({"items": []})
    engine.start(empty, wf, NOW)
    assert empty.steps["fan"].output == [] and empty.status == RunStatus.SUCCEEDED


def test_an_item_is_retried_by_the_steps_policy():
    wf = workflow({"fan": {"for_each": "input.items",
                           "retry": {"max_retries": 1, "initial_backoff_sec": 2}}})
    run = new_run({"items": [1]})
    engine.start(run, wf, NOW)
    effects = end_child(run, wf, "fan[0]", "FAILED")
    child = (run.steps["fan"].children or {})["fan[0]"]
    assert child.status == StepStatus.PENDING and effects.timer_at == at(2).timestamp()
    effects = engine.on_timer(run, wf, at(2))
    assert [j.job_id for j in effects.jobs] == [f"{RUN}:fan[0]@2"]


# ---------------------------------------------------------------- loop

def loop_wf(**loop_input: Any) -> Any:
    return workflow({
        "loop": {"type": "loop", "input": {"body_step": "body", **loop_input}},
        "body": {"topic": "job.count", "input": {"i": "${loop.index}"}},
        "done": {"type": "transform", "depends_on": ["loop"],
                 "input": {"n": "${steps.loop.output.iterations}"}}})


def test_a_loop_runs_its_body_until_the_condition_stops_it():
    wf = loop_wf(until="loop.previous_output.total >= 3", max_iterations=10)
    run = new_run()
    effects = engine.start(run, wf, NOW)
    [job] = effects.jobs
    assert job.job_id == f"{RUN}:loop[0]@1" and job.topic == "job.count"
    assert job.input["i"] == 0 and job.input["loop"]["iteration"] == 1
    assert job.env["loop_index"] == "0"
    for i in range(3):
        effects = end_child(run, wf, f"loop[{i}]", output={"total": i + 1})
        if i < 2:
            assert [j.job_id for j in effects.jobs] == [f"{RUN}:loop[{i + 1}]@1"]
            assert effects.jobs[0].env["loop_previous_output"] == f'{{"total":{i + 1}}}'
    assert run.steps["loop"].output == {"iterations": 3, "last_output": {"total": 3}}
    assert run.steps["done"].output == {"n": 3}
    assert run.steps["body"].status == StepStatus.SKIPPED  # run by the loop, never alone
    assert run.status == RunStatus.SUCCEEDED


def test_a_loop_with_a_condition_fails_past_max_iterations_and_without_one_stops():
    wf = loop_wf(condition="true", max_iterations=2)
    run = new_run()
    engine.start(run, wf, NOW)
    end_child(run, wf, "loop[0]")
    end_child(run, wf, "loop[1]")
    assert run.steps["loop"].status == StepStatus.FAILED
    assert "max_iterations exceeded (2)" in str((run.steps["loop"].error or {})["message"])
    wf = loop_wf(max_iterations=1)
    run = new_run()
    engine.start(run, wf, NOW)
    end_child(run, wf, "loop[0]", output=7)
    assert run.steps["loop"].output == {"iterations": 1, "last_output": 7}


@pytest.mark.parametrize("bad", [0, -1, 1001, "many", True])
def test_a_loop_refuses_a_bad_or_too_large_max_iterations(bad: Any):
    wf = loop_wf(max_iterations=bad)
    run = new_run()
    assert engine.start(run, wf, NOW).jobs == []
    assert error_code(run, "loop") == "loop_failed"


def test_a_failed_iteration_fails_the_loop():
    wf = loop_wf(max_iterations=3)
    run = new_run()
    engine.start(run, wf, NOW)
    end_child(run, wf, "loop[0]", "FAILED")
    assert run.steps["loop"].status == StepStatus.FAILED
    assert run.status == RunStatus.FAILED


# ---------------------------------------------------------------- parallel

def parallel_wf(strategy: str, **extra: Any) -> Any:
    return workflow({
        "par": {"type": "parallel", "input": {"steps": ["a", "b", "c"], "strategy": strategy,
                                              **extra}},
        "a": {"topic": "job.a"}, "b": {"topic": "job.b"}, "c": {"topic": "job.c"},
        "after": {"type": "transform", "depends_on": ["par"],
                  "input": {"got": "${steps.par.output}"}}})


def test_parallel_all_waits_for_every_child():
    wf = parallel_wf("all")
    run = new_run()
    effects = engine.start(run, wf, NOW)
    assert sorted(j.step_id for j in effects.jobs) == ["a", "b", "c"]
    assert "step_parallel_started" in kinds(effects)
    finish(run, wf, "a", output=1)
    finish(run, wf, "b", output=2)
    assert run.steps["par"].status == StepStatus.RUNNING
    finish(run, wf, "c", output=3)
    assert run.steps["par"].output == {"a": 1, "b": 2, "c": 3}
    assert run.status == RunStatus.SUCCEEDED


def test_parallel_any_cancels_the_losers_and_the_run_succeeds():
    wf = parallel_wf("any")
    run = new_run()
    engine.start(run, wf, NOW)
    finish(run, wf, "b", "FAILED")
    assert run.steps["par"].status == StepStatus.RUNNING
    effects = finish(run, wf, "c", output="won")
    assert sorted(effects.cancels) == [f"{RUN}:a@1"]
    assert run.steps["a"].status == StepStatus.CANCELLED
    assert run.steps["par"].output == {"c": "won"}
    assert run.status == RunStatus.SUCCEEDED


def test_parallel_n_of_m_fails_once_it_cannot_reach_required_and_holds_max_parallel():
    wf = parallel_wf("n_of_m", required=2, max_parallel=2)
    run = new_run()
    effects = engine.start(run, wf, NOW)
    assert sorted(j.step_id for j in effects.jobs) == ["a", "b"]
    effects = finish(run, wf, "a", "FAILED")
    assert [j.step_id for j in effects.jobs] == ["c"]
    finish(run, wf, "b", "FAILED")
    assert run.steps["par"].status == StepStatus.FAILED
    assert error_code(run, "par") == "parallel_failed"
    assert run.status == RunStatus.FAILED


def test_parallel_with_a_bad_config_fails():
    wf = parallel_wf("some")
    run = new_run()
    engine.start(run, wf, NOW)
    assert error_code(run, "par") == "parallel_invalid"


# ---------------------------------------------------------------- subworkflow

def sub_wf(target: str = "child-wf") -> Any:
    return workflow({"sub": {"type": "subworkflow",
                             "input": {"workflow_id": target,
                                       "input_mapping": {"n": "${input.n}"},
                                       "output_mapping": {"doubled": "${child.output.d}"}}}})


def child_run(status: RunStatus, output: Any = None) -> WorkflowRun:
    child = new_run()
    child.id, child.status, child.output = "child-1", status, output
    return child


def test_a_subworkflow_asks_for_a_child_run_and_maps_its_output():
    wf = sub_wf()
    run = new_run({"n": 4})
    effects = engine.start(run, wf, NOW)
    [spec] = effects.runs
    assert spec["workflow_id"] == "child-wf" and spec["input"] == {"n": 4}
    assert spec["metadata"][subworkflow.CALL_STACK] == "wf1"
    assert spec["metadata"][subworkflow.PARENT_RUN] == RUN
    sr = run.steps["sub"]
    assert sr.status == StepStatus.RUNNING and sr.job_id == spec["run_id"]
    assert spec["run_id"] == subworkflow.child_run_id(RUN, "sub", 1)
    engine.on_child(run, wf, "someone-else", child_run(RunStatus.SUCCEEDED), NOW)
    assert sr.status == StepStatus.RUNNING  # not its child
    done = child_run(RunStatus.SUCCEEDED, {"d": 8})
    done.id = sr.job_id
    engine.on_child(run, wf, sr.job_id, done, NOW)
    assert sr.output == {"doubled": 8} and run.status == RunStatus.SUCCEEDED


def test_a_failed_or_missing_child_fails_the_step_and_a_cancel_cancels_the_child():
    wf = sub_wf()
    run = new_run({"n": 1})
    engine.start(run, wf, NOW)
    failed = child_run(RunStatus.DENIED)
    failed.id = run.steps["sub"].job_id
    engine.on_child(run, wf, failed.id, failed, NOW)
    assert run.steps["sub"].status == StepStatus.DENIED and run.status == RunStatus.DENIED
    run = new_run({"n": 1})
    engine.start(run, wf, NOW)
    engine.on_child(run, wf, run.steps["sub"].job_id, None, NOW)
    assert error_code(run, "sub") == "subworkflow_not_started"
    run = new_run({"n": 1})
    engine.start(run, wf, NOW)
    effects = engine.cancel(run, wf, NOW)
    assert effects.cancel_runs == [run.steps["sub"].job_id] and effects.cancels == []


def test_a_subworkflow_that_calls_a_workflow_above_it_is_refused():
    wf = sub_wf("top")
    run = new_run({"n": 1}, metadata={subworkflow.CALL_STACK: "top,middle"})
    effects = engine.start(run, wf, NOW)
    assert effects.runs == []
    assert error_code(run, "sub") == "subworkflow_cycle"
    assert "top -> middle -> wf1 -> top" in str((run.steps["sub"].error or {})["message"])
    itself = sub_wf("wf1")
    run = new_run({"n": 1})
    engine.start(run, itself, NOW)
    assert error_code(run, "sub") == "subworkflow_cycle"


# ---------------------------------------------------------------- gates, paths, dry runs

def test_policy_gate_deny_refuses_the_step_and_require_approval_gates_it_once():
    wf = workflow({"a": {"topic": "job.a", "policy_gate": "deny"}})
    run = new_run()
    assert engine.start(run, wf, NOW).jobs == []
    assert error_code(run, "a") == "policy_gate_denied" and run.status == RunStatus.DENIED
    wf = workflow({"a": {"topic": "job.a", "policy_gate": "require_approval",
                         "retry": {"max_retries": 1}}})
    run = new_run()
    [gate] = engine.start(run, wf, NOW).jobs
    assert gate.kind == "approval" and gate.job_id == f"{RUN}:a@1"
    assert run.status == RunStatus.WAITING
    [job] = finish(run, wf, "a").jobs
    assert job.kind == "job" and job.job_id == f"{RUN}:a@2" and job.topic == "job.a"
    effects = finish(run, wf, "a", "FAILED")
    assert effects.jobs == [] and run.steps["a"].status == StepStatus.PENDING  # one retry
    [again] = engine.on_timer(run, wf, at(1)).jobs
    assert again.kind == "job" and again.job_id == f"{RUN}:a@3"  # not asked again


def test_a_rejected_policy_gate_denies_the_step():
    wf = workflow({"a": {"policy_gate": "require_approval"}})
    run = new_run()
    engine.start(run, wf, NOW)
    finish(run, wf, "a", "DENIED")
    assert error_code(run, "a") == "policy_gate_rejected"
    assert run.status == RunStatus.DENIED


def test_result_data_path_picks_the_output_and_the_schema_checks_it():
    wf = workflow({"a": {"result_data_path": "data.items", "output_path": "found",
                         "output_schema": {"type": "array"}}})
    run = new_run()
    engine.start(run, wf, NOW)
    finish(run, wf, "a", output={"data": {"items": [1, 2]}, "meta": "x"})
    assert run.steps["a"].output == [1, 2] and run.context["found"] == [1, 2]
    run = new_run()
    engine.start(run, wf, NOW)
    finish(run, wf, "a", output={"data": {"items": "not a list"}})
    assert error_code(run, "a") == "step_output_invalid"


@pytest.mark.parametrize("kind", ["worker", "approval"])
def test_a_dry_run_walks_the_graph_without_dispatching(kind: str):
    wf = workflow({"a": {"type": kind, "topic": "job.a", "input": {"x": "${input.x}"}},
                   "wait": {"type": "delay", "delay_sec": 60, "depends_on": ["a"]},
                   "fan": {"for_each": "input.items", "depends_on": ["wait"]}})
    run = new_run({"x": 1, "items": [1, 2]}, dry_run=True)
    effects = engine.start(run, wf, NOW)
    assert effects.jobs == []
    out = run.steps["a"].output
    assert out["dry_run"] is True and out["job_id"] == f"{RUN}:a@1"
    assert run.steps["fan"].output is not None and len(run.steps["fan"].output) == 2
    assert run.status == RunStatus.SUCCEEDED


def test_a_policy_gate_on_a_step_that_runs_no_job_is_ignored():
    wf = workflow({"t": {"type": "transform", "policy_gate": "deny", "input": {"x": 1}},
                   "n": {"type": "notify", "policy_gate": "require_approval"}})
    run = new_run()
    effects = engine.start(run, wf, NOW)
    assert effects.jobs == [] and len(effects.alerts) == 1
    assert run.steps["t"].output == {"x": 1} and run.status == RunStatus.SUCCEEDED


def test_a_result_data_path_the_answer_lacks_fails_the_step():
    wf = workflow({"a": {"result_data_path": "data.id"}})
    run = new_run()
    engine.start(run, wf, NOW)
    finish(run, wf, "a", output={"data": {"name": "x"}})
    assert error_code(run, "a") == "step_output_invalid"
    assert "data.id" in str((run.steps["a"].error or {})["message"])


def test_a_dry_run_sends_no_alert_and_loop_payloads_do_not_nest():
    wf = workflow({"n": {"type": "notify", "input": {"message": "hi"}}})
    run = new_run(dry_run=True)
    effects = engine.start(run, wf, NOW)
    assert effects.alerts == [] and "step_event_emitted" in kinds(effects)
    wf = loop_wf(max_iterations=3)
    run = new_run()
    engine.start(run, wf, NOW)
    effects = end_child(run, wf, "loop[0]", output={"echo": {"i": 0, "loop": {"index": 0}}})
    [job] = effects.jobs
    assert job.input["loop"] == {"index": 1, "iteration": 2}


def test_a_step_job_the_store_never_saw_is_sent_again_with_its_id_then_fails():
    from cordum.workflow import lost_jobs
    from cordum.workflow.outbox_entries import PublishJob, to_outbox

    wf = workflow({"a": {"topic": "job.a", "input": {"x": 1}},
                   "fan": {"for_each": "input.items"}})
    run = new_run({"items": ["p"]})
    engine.start(run, wf, NOW)
    jid, item = run.steps["a"].job_id, run.steps["fan"].children["fan[0]"].job_id
    assert engine.reconcile(run, wf, {jid: "", item: ""}, at(10)).jobs == []  # not yet
    effects = engine.reconcile(run, wf, {jid: "", item: ""}, at(lost_jobs.LOST_JOB_S + 1))
    assert sorted(j.job_id for j in effects.jobs) == sorted([jid, item])
    resent = {j.job_id: j for j in effects.jobs}
    assert resent[jid].input == {"x": 1} and resent[jid].resend == 1
    assert resent[item].env["foreach_item"] == '"p"'
    assert "step_job_resent" in kinds(effects)
    [entry] = [e for e in to_outbox(effects, timer_at=None)
               if isinstance(e, PublishJob) and e.job_id == jid]
    assert entry.resend == 1
    # a job the store knows is left alone; one never stored fails after its tries
    assert engine.reconcile(run, wf, {jid: "RUNNING", item: "RUNNING"}, at(500)).jobs == []
    for n in range(2, lost_jobs.LOST_JOB_TRIES + 1):
        engine.reconcile(run, wf, {jid: "", item: "SUCCEEDED"},
                         at(lost_jobs.LOST_JOB_S * n + 1))
    engine.reconcile(run, wf, {jid: ""}, at(lost_jobs.LOST_JOB_S * 20))
    assert error_code(run, "a") == "step_job_lost"
