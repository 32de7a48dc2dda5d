"""cordumctl's workflow and run commands against a stub API."""

from __future__ import annotations

import json
from pathlib import Path

from cordumctl.errors import ExitCode
from tests.cordumctl_stub import StubApi, error, reply, run_cli

WF = {"id": "wf", "name": "Example", "steps": {
    "approve": {"id": "approve", "type": "approval"},
    "echo": {"id": "echo", "type": "worker", "topic": "job.echo", "depends_on": ["approve"]}}}


def run(status: str, **steps: dict[str, object]) -> dict[str, object]:
    return {"id": "r1", "workflow_id": "wf", "status": status,
            "started_at": "2026-01-01T00:00:00Z", "steps": steps, "timers": []}


def test_apply_reads_yaml_or_json_and_posts_the_definition(tmp_path: Path) -> None:
    (tmp_path / "wf.yaml").write_text("id: wf\nname: Example\nsteps:\n  echo:\n    type: worker\n")
    api = StubApi().on("POST", "/api/v1/workflows", reply(200, {"id": "wf"}))
    out = run_cli(api, "-o", "table", "workflows", "apply", "-f", str(tmp_path / "wf.yaml"))
    assert out.out.strip() == "applied wf"
    assert api.body("POST", "/api/v1/workflows")["steps"] == {"echo": {"type": "worker"}}
    (tmp_path / "wf.json").write_text(json.dumps(WF))
    assert run_cli(api, "workflows", "apply", "-f", str(tmp_path / "wf.json")).json() == \
        {"id": "wf"}
    assert run_cli(api, "workflows", "apply", "-f", str(tmp_path / "none.json")).code == \
        ExitCode.USAGE


def test_list_get_delete() -> None:
    api = (StubApi().on("GET", "/api/v1/workflows", reply(200, [WF]))
           .on("GET", "/api/v1/workflows/wf", reply(200, WF))
           .on("DELETE", "/api/v1/workflows/wf", reply(204)))
    assert "Example" in run_cli(api, "-o", "table", "workflows", "list").out
    table = run_cli(api, "-o", "table", "workflows", "get", "wf").out
    assert "job.echo" in table and "approval" in table
    assert run_cli(api, "-o", "table", "workflows", "delete", "wf").out.strip() == "deleted wf"
    missing = StubApi().on("DELETE", "/api/v1/workflows/wf", error(404, "workflow not found"))
    assert run_cli(missing, "workflows", "delete", "wf").code == ExitCode.NOT_FOUND


def test_run_sends_the_input_idempotency_key_and_dry_run() -> None:
    api = StubApi().on("POST", "/api/v1/workflows/wf/runs", reply(200, {"run_id": "r1"}))
    out = run_cli(api, "-o", "table", "workflows", "run", "wf", "--input", '{"amount": 250}',
                  "--idempotency-key", "demo-1", "--dry-run")
    assert out.out.strip() == "r1"
    sent = api.sent("POST", "/api/v1/workflows/wf/runs")[-1]
    assert json.loads(sent.content) == {"amount": 250}
    assert sent.headers["Idempotency-Key"] == "demo-1" and sent.url.params["dry_run"] == "true"


def test_dry_run_lists_each_steps_decision() -> None:
    api = StubApi().on("POST", "/api/v1/workflows/wf/dry-run", reply(200, {
        "workflow_id": "wf", "steps": [
            {"step_id": "approve", "step_type": "approval", "decision": "REQUIRE_APPROVAL",
             "reason": "gate", "rule_id": "policy_gate"}]}))
    table = run_cli(api, "-o", "table", "workflows", "dry-run", "wf", "-i", '{"a": 1}').out
    assert "REQUIRE_APPROVAL" in table and "policy_gate" in table
    assert api.body("POST", "/api/v1/workflows/wf/dry-run") == {"input": {"a": 1}}


def test_runs_list_get_timeline() -> None:
    api = (StubApi()
           .on("GET", "/api/v1/workflow-runs", reply(200, {"items": [run("running")],
                                                           "next_cursor": None}))
           .on("GET", "/api/v1/workflow-runs/r1", reply(200, run(
               "waiting", approve={"status": "waiting", "attempts": 1, "job_id": "r1:approve@1"})))
           .on("GET", "/api/v1/workflow-runs/r1/timeline", reply(200, [
               {"timestamp": "2026-01-01T00:00:00Z", "type": "step_waiting",
                "step_id": "approve", "status": "waiting"}])))
    run_cli(api, "runs", "list", "--workflow", "wf", "--status", "running")
    assert dict(api.requests[-1].url.params) == {"workflow_id": "wf", "status": "running",
                                                 "limit": "50"}
    table = run_cli(api, "-o", "table", "runs", "get", "r1").out
    assert "r1:approve@1" in table and "waiting" in table
    assert "step_waiting" in run_cli(api, "-o", "table", "runs", "timeline", "r1").out


def test_runs_cancel_finds_the_workflow_and_rerun_sends_from_step() -> None:
    api = (StubApi()
           .on("GET", "/api/v1/workflow-runs/r1", reply(200, run("running")),
               reply(200, run("cancelled")))
           .on("POST", "/api/v1/workflows/wf/runs/r1/cancel", reply(204))
           .on("POST", "/api/v1/workflow-runs/r1/rerun", reply(200, {"run_id": "r2"})))
    assert run_cli(api, "runs", "cancel", "r1").json() == {"run_id": "r1", "status": "cancelled"}
    assert run_cli(api, "-o", "table", "runs", "rerun", "r1", "--from-step", "echo").out.strip() \
        == "r2"
    assert api.body("POST", "/api/v1/workflow-runs/r1/rerun") == {"dry_run": False,
                                                                   "from_step": "echo"}


def test_runs_watch_off_a_terminal_prints_each_change_and_exits_by_the_end() -> None:
    api = (StubApi().on("GET", "/api/v1/workflows/wf", reply(200, WF))
           .on("GET", "/api/v1/workflow-runs/r1",
               reply(200, run("waiting", approve={"status": "waiting", "attempts": 1})),
               reply(200, run("running", approve={"status": "succeeded", "attempts": 1},
                              echo={"status": "running", "attempts": 1})),
               reply(200, run("running", approve={"status": "succeeded", "attempts": 1},
                              echo={"status": "running", "attempts": 2})),
               reply(200, run("failed", approve={"status": "succeeded", "attempts": 1},
                              echo={"status": "failed", "attempts": 2}))))
    out = run_cli(api, "-o", "table", "runs", "watch", "r1")
    assert out.code == ExitCode.FAILED
    changes = [" ".join(line.split()[1:]) for line in out.out.strip().splitlines()]
    assert changes == ["run r1 waiting", "step approve waiting", "run r1 running",
                       "step approve succeeded", "step echo running",
                       "step echo running attempt 2", "run r1 failed", "step echo failed attempt 2"]
    docs = [json.loads(x) for x in run_cli(api, "runs", "watch", "r1").out.splitlines()]
    assert docs[-1]["status"] == "failed"


def test_workflows_run_watch_follows_the_new_run() -> None:
    api = (StubApi().on("POST", "/api/v1/workflows/wf/runs", reply(200, {"run_id": "r1"}))
           .on("GET", "/api/v1/workflows/wf", reply(200, WF))
           .on("GET", "/api/v1/workflow-runs/r1", reply(200, run("running")),
               reply(200, run("succeeded"))))
    out = run_cli(api, "workflows", "run", "wf", "--watch")
    assert out.code == 0 and "started r1" in out.err
