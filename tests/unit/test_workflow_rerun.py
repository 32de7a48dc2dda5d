"""Building a rerun from an old run (cordum.workflow.rerun), with no I/O: what is kept,
what runs again, and what refuses a rerun. Old runs are built by hand, or by the engine
itself where its own records matter (an approval, a switch)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cordum.workflow import engine
from cordum.workflow.definition import Workflow
from cordum.workflow.errors import RerunNotRunnable, RerunStepUnknown
from cordum.workflow.gates import GateRecord
from cordum.workflow.model import RunStatus, StepRun, StepStatus, WorkflowRun, format_time
from cordum.workflow.rerun import build_rerun, upstream

NOW = datetime(2026, 11, 26, 8, 0, tzinfo=UTC)
LATER = format_time(NOW + timedelta(hours=1))

DIAMOND = {
    "a": {"type": "worker", "topic": "job.default"},
    "b": {"type": "transform", "depends_on": ["a"], "output_path": "shaped.b",
          "input": {"n": "${steps.a.output.n}"}},
    "c": {"type": "worker", "topic": "job.default", "depends_on": ["a"]},
    "d": {"type": "worker", "topic": "job.default", "depends_on": ["b", "c"]},
    "e": {"type": "notify", "depends_on": ["d"]},
    "lone": {"type": "worker", "topic": "job.default", "output_path": "lone"},
}


def workflow(steps: dict[str, dict[str, Any]]) -> Workflow:
    return Workflow.model_validate({"id": "wf1", "org_id": "acme", "name": "demo",
                                    "steps": steps})


def at(minute: int) -> str:
    return format_time(NOW + timedelta(minutes=minute))


def done(step_id: str, minute: int, output: Any = None, *,
         status: StepStatus = StepStatus.SUCCEEDED, **fields: Any) -> StepRun:
    return StepRun(step_id, status, started_at=at(minute), completed_at=at(minute),
                   attempts=1, output=output, job_id=f"old:{step_id}@1", **fields)


def old_run(steps: dict[str, StepRun], context: dict[str, Any], **fields: Any) -> WorkflowRun:
    return WorkflowRun(id="old", workflow_id="wf1", org_id="acme", team_id="blue",
                       input={"n": 1, "nested": {"k": [1, 2]}}, context=context,
                       status=RunStatus.FAILED, started_at=at(0), created_at=at(0),
                       updated_at=at(9), completed_at=at(9), steps=steps,
                       triggered_by="alice", **fields)


def diamond_run() -> WorkflowRun:
    steps = {"a": done("a", 1, {"n": 2}), "b": done("b", 2, {"n": 2}),
             "c": done("c", 3, {"rows": [1]}), "lone": done("lone", 1, "solo"),
             "d": done("d", 4, status=StepStatus.FAILED, error={"code": "FAILED"}),
             "e": StepRun("e", StepStatus.SKIPPED, skip_reason="dependency d failed")}
    context = {"steps": {s: {"output": steps[s].output, "result_ptr": f"redis://res:{s}"}
                         for s in ("a", "b", "c", "d", "lone")},
               "shaped": {"b": {"n": 2}}, "lone": "solo", "stray": True}
    return old_run(steps, context, labels={"team": "blue", "dry_run": "true"},
                   metadata={"call_stack": ["parent"], "parent_run_id": "p1"})


def rerun(old: WorkflowRun, wf: Workflow, from_step: str, *, dry_run: bool = False
          ) -> WorkflowRun:
    return build_rerun(old, wf, from_step, run_id="new", triggered_by="bob", now=LATER,
                       dry_run=dry_run)


def test_the_upstream_closure_is_transitive_and_in_definition_order():
    wf = workflow(DIAMOND)
    assert upstream(wf, "e") == ["a", "b", "c", "d"]
    assert upstream(wf, "d") == ["a", "b", "c"]
    assert upstream(wf, "b") == ["a"]
    assert upstream(wf, "a") == upstream(wf, "lone") == []


def test_a_rerun_keeps_the_steps_upstream_and_runs_the_rest_again():
    wf, old = workflow(DIAMOND), diamond_run()
    new = rerun(old, wf, "d")
    assert sorted(new.steps) == ["a", "b", "c"]
    for step_id in ("a", "b", "c"):
        assert new.steps[step_id].to_json() == old.steps[step_id].to_json()
    # Only what the kept steps wrote: their step entries and b's output_path.
    assert new.context == {"steps": {s: old.context["steps"][s] for s in ("a", "b", "c")},
                           "shaped": {"b": {"n": 2}}}
    assert (new.id, new.workflow_id, new.org_id, new.team_id) == ("new", "wf1", "acme", "blue")
    assert new.input == old.input and new.input is not old.input
    assert (new.status, new.started_at, new.created_at, new.updated_at) == \
        (RunStatus.PENDING, LATER, LATER, LATER)
    assert new.completed_at is None and new.output is None and new.error is None
    assert (new.triggered_by, new.rerun_of, new.rerun_step, new.dry_run) == \
        ("bob", "old", "d", False)
    assert new.idempotency_key == "" and new.total_cost == 0
    # The old run's labels, but not its dry-run mark; none of its bookkeeping.
    assert new.labels == {"team": "blue"}
    assert new.metadata == {"rerun_of": "old", "rerun_step": "d", "rerun_by": "bob"}


def test_the_new_run_shares_nothing_with_the_old_one():
    wf, old = workflow(DIAMOND), diamond_run()
    before = old.to_json()
    new = rerun(old, wf, "d")
    new.input["nested"]["k"].append(3)
    new.steps["a"].output["n"] = 99
    new.context["steps"]["a"]["output"]["n"] = 99
    new.context["shaped"]["b"]["n"] = 99
    assert old.to_json() == before


def test_a_rerun_from_a_step_with_no_dependencies_keeps_nothing():
    wf, old = workflow(DIAMOND), diamond_run()
    new = rerun(old, wf, "a")
    assert new.steps == {} and new.context == {"steps": {}}
    assert new.rerun_step == "a"


def test_without_a_step_the_whole_workflow_runs_again():
    wf, old = workflow(DIAMOND), diamond_run()
    for from_step in ("", "  "):
        new = rerun(old, wf, from_step)
        assert new.steps == {} and new.context == {"steps": {}}
        assert (new.rerun_of, new.rerun_step) == ("old", "")
        assert new.metadata == {"rerun_of": "old", "rerun_by": "bob"}
        assert new.input == old.input


def test_a_dry_rerun_is_marked_as_cordum_marks_it():
    wf, old = workflow(DIAMOND), diamond_run()
    new = rerun(old, wf, "d", dry_run=True)
    assert new.dry_run is True
    assert new.labels == {"team": "blue", "dry_run": "true"}
    assert new.metadata == {"rerun_of": "old", "rerun_step": "d", "rerun_by": "bob",
                            "dry_run": "true"}


@pytest.mark.parametrize(("from_step", "blocker", "status"), [
    ("e", "d", "failed"),
    ("d", "c", "pending"),
])
def test_a_dependency_that_did_not_succeed_refuses_the_rerun(from_step, blocker, status):
    wf, old = workflow(DIAMOND), diamond_run()
    if blocker == "c":
        del old.steps["c"]  # never started
    with pytest.raises(RerunNotRunnable) as refused:
        rerun(old, wf, from_step)
    err = refused.value
    assert (err.status, err.code, err.retryable) == (400, "RUN_NOT_RUNNABLE", False)
    assert err.message == (f"cannot rerun from step {from_step!r}: its dependency "
                           f"{blocker!r} is {status} in run old, not succeeded")


def test_a_step_the_definition_does_not_have_is_refused():
    with pytest.raises(RerunStepUnknown) as refused:
        rerun(diamond_run(), workflow(DIAMOND), "nope")
    assert (refused.value.status, refused.value.code) == (400, "invalid_request")
    assert refused.value.message == "from_step 'nope' is not a step of workflow 'wf1'"


def test_context_writes_of_the_kept_steps_are_replayed_in_completion_order():
    wf = workflow({
        "put": {"type": "storage", "input": {"operation": "write", "key": "order.total",
                                             "value": 10}},
        "drop": {"type": "storage", "depends_on": ["put"],
                 "input": {"operation": "delete", "key": "order.total"}},
        "again": {"type": "storage", "depends_on": ["drop"],
                  "input": {"operation": "write", "key": "order.note", "value": "hi"}},
        "peek": {"type": "storage", "depends_on": ["again"],
                 "input": {"operation": "read", "key": "order.note"}},
        "both": {"type": "transform", "depends_on": ["peek"], "output_path": "order.total"},
        "last": {"type": "worker", "topic": "job.default", "depends_on": ["both"]},
    })
    ran = {s: wf.steps[s].input for s in ("put", "drop", "again", "peek")}
    steps = {"put": done("put", 1, 10, input=ran["put"]),
             "drop": done("drop", 2, 10, input=ran["drop"]),
             "again": done("again", 3, "hi", input=ran["again"]),
             "peek": done("peek", 4, "hi", input=ran["peek"]),
             "both": done("both", 5, 42),
             "last": done("last", 6, status=StepStatus.FAILED)}
    old = old_run(steps, {"steps": {}, "order": {"total": 42, "note": "hi", "other": 1}})
    new = rerun(old, wf, "last")
    assert new.context == {"steps": {}, "order": {"total": 42, "note": "hi"}}
    # Cut before the transform: the delete leaves no total.
    assert rerun(old, wf, "both").context == {"steps": {}, "order": {"note": "hi"}}


def test_an_approved_gate_upstream_is_kept_and_not_asked_again():
    wf = workflow({
        "gate": {"type": "approval"},
        "work": {"type": "worker", "topic": "job.default", "depends_on": ["gate"]},
        "tell": {"type": "notify", "depends_on": ["work"]},
    })
    old = WorkflowRun(id="old", workflow_id="wf1", org_id="acme", input={"n": 1},
                      started_at=at(0), triggered_by="alice")
    started = engine.start(old, wf, NOW)
    assert [j.job_id for j in started.jobs] == ["old:gate@1"]
    engine.on_job(old, wf, "gate", "old:gate@1", "SUCCEEDED", output=None,
                  result_ptr="", error=None, now=NOW, gate=GateRecord(
                      "job.cordum.approval-gate", "APPROVED", "bob", "h", "h"))
    engine.on_job(old, wf, "work", "old:work@1", "FAILED_FATAL", output=None,
                  result_ptr="", error={"message": "boom"}, now=NOW)
    assert old.status == RunStatus.FAILED
    new = rerun(old, wf, "work")
    assert new.steps["gate"].status == StepStatus.SUCCEEDED
    assert new.steps["gate"].job_id == "old:gate@1"
    effects = engine.start(new, wf, NOW + timedelta(hours=1))
    assert [j.job_id for j in effects.jobs] == ["new:work@1"]


def test_a_kept_switch_keeps_the_branches_it_did_not_take():
    wf = workflow({
        "pick": {"type": "switch", "condition": "input.kind",
                 "input": {"cases": [{"when": "a", "next": "left"},
                                     {"when": "b", "next": "right"}], "default": "other"}},
        "left": {"type": "worker", "topic": "job.default", "depends_on": ["pick"]},
        "right": {"type": "worker", "topic": "job.default", "depends_on": ["pick"]},
        "other": {"type": "worker", "topic": "job.default", "depends_on": ["pick"]},
        "after": {"type": "worker", "topic": "job.default", "depends_on": ["left"]},
    })
    old = WorkflowRun(id="old", workflow_id="wf1", org_id="acme", input={"kind": "a"},
                      started_at=at(0), triggered_by="alice")
    engine.start(old, wf, NOW)
    engine.on_job(old, wf, "left", "old:left@1", "SUCCEEDED", output={"ok": 1},
                  result_ptr="", error=None, now=NOW)
    engine.on_job(old, wf, "after", "old:after@1", "FAILED_FATAL", output=None,
                  result_ptr="", error=None, now=NOW)
    assert old.steps["right"].status == StepStatus.CANCELLED
    new = rerun(old, wf, "after")
    assert sorted(new.steps) == ["left", "other", "pick", "right"]
    assert new.steps["right"].to_json() == old.steps["right"].to_json()
    effects = engine.start(new, wf, NOW + timedelta(hours=1))
    assert [j.job_id for j in effects.jobs] == ["new:after@1"]
    # Asked to run from a branch not taken, that branch runs (its switch is kept).
    from_branch = rerun(old, wf, "right")
    assert sorted(from_branch.steps) == ["other", "pick"]
