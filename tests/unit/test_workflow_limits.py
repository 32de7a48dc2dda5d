"""timeouts.yaml's per-workflow limits: read, checked, and filled into what a definition
leaves unset."""

from __future__ import annotations

from pathlib import Path

import pytest

from cordum.config import ConfigError
from cordum.workflow import engine, limits
from cordum.workflow.limits import LimitedDefinitions, WorkflowLimits
from tests.unit.test_workflow_engine import NOW, new_run, workflow

WF = workflow({"work": {"topic": "job.a"},
               "own": {"topic": "job.b", "timeout_sec": 5, "retry": {"max_retries": 0}},
               "wait": {"type": "delay", "depends_on": ["work"]},
               "ok": {"type": "approval", "depends_on": ["work"]}})


def test_limits_fill_in_only_what_the_definition_leaves_unset():
    applied = WorkflowLimits(child_timeout_s=30, total_timeout_s=600, max_retries=2).apply(WF)
    assert applied.timeout_sec == 600
    assert applied.steps["work"].timeout_sec == 30
    assert applied.steps["work"].retry is not None
    assert applied.steps["work"].retry.max_retries == 2
    assert applied.steps["own"].timeout_sec == 5 and applied.steps["own"].retry.max_retries == 0
    assert applied.steps["wait"].timeout_sec == 0  # a delay's timeout_sec is its wait
    assert applied.steps["ok"].timeout_sec == 0 and applied.steps["ok"].retry is None
    assert WF.timeout_sec == 0 and WF.steps["work"].retry is None  # the original is kept
    jobs = {job.step_id: job for job in engine.start(new_run(), applied, NOW).jobs}
    assert jobs["work"].deadline_ms == 30_000 and jobs["own"].deadline_ms == 5_000
    assert engine.timer_at(new_run(), applied) == NOW.timestamp() + 600


def test_a_definition_with_its_own_timeout_keeps_it():
    own = workflow({"a": {}}, timeout_sec=60)
    assert WorkflowLimits(total_timeout_s=600).apply(own).timeout_sec == 60


def test_the_workflows_section_is_read_and_checked(tmp_path: Path):
    (tmp_path / "timeouts.yaml").write_text(
        "workflows:\n  orders:\n    child_timeout_seconds: 30\n    max_retries: 2\n"
        "reconciler: {}\n")
    assert limits.load(tmp_path) == {"orders": WorkflowLimits(30, 0, 2)}
    assert limits.load(tmp_path / "missing") == {}
    for bad in ({"workflows": []}, {"workflows": {"w": {"max_retries": -1}}},
                {"workflows": {"w": {"child_timeout_seconds": "30"}}},
                {"workflows": {"w": {"total_timeout_seconds": 604801}}},
                {"workflows": {"w": {"timeout": 3}}}, {"workflows": {"w": 3}}):
        with pytest.raises(ConfigError, match="timeouts.yaml: workflows"):
            limits.from_mapping(bad)


def test_the_shipped_file_parses():
    assert limits.load(Path("config")) == {}


def test_limits_apply_once_per_definition_and_only_to_their_workflow():
    limited = LimitedDefinitions({"wf1": WorkflowLimits(total_timeout_s=9)})
    first = limited(WF)
    assert first.timeout_sec == 9 and limited(WF) is first
    other = workflow({"a": {}}, id="other")
    assert limited(other) is other
