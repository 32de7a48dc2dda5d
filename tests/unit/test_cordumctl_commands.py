"""Each cordumctl command against a stub API: what it sends, what it prints, its exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cordumctl.errors import ExitCode
from tests.cordumctl_stub import StubApi, error, reply, run_cli


def job(state: str, **extra: object) -> dict[str, object]:
    return {"id": "j1", "state": state, "topic": "job.echo", "labels": {}, **extra}


# --- jobs ------------------------------------------------------------------------------

def test_submit_sends_topic_prompt_labels_priority_deadline_and_idempotency_key() -> None:
    api = StubApi().on("POST", "/api/v1/jobs", reply(200, {"job_id": "j1", "trace_id": "t1"}))
    out = run_cli(api, "jobs", "submit", "job.echo", "hello", "-l", "team=ops", "-l", "env=dev",
                  "--priority", "batch", "--deadline", "1m", "--idempotency-key", "k-1")
    assert out.code == 0 and out.json() == {"job_id": "j1", "trace_id": "t1"}
    assert api.body("POST", "/api/v1/jobs") == {
        "topic": "job.echo", "priority": "batch", "prompt": "hello",
        "labels": {"team": "ops", "env": "dev"}, "deadline_ms": 60000}
    assert api.requests[-1].headers["Idempotency-Key"] == "k-1"


def test_submit_team_names_the_team_whose_config_documents_apply() -> None:
    api = StubApi().on("POST", "/api/v1/jobs", reply(200, {"job_id": "j1"}))
    run_cli(api, "jobs", "submit", "job.echo", "hi", "--team", "blue")
    assert api.body("POST", "/api/v1/jobs")["team_id"] == "blue"


def test_submit_input_file_becomes_the_jobs_context(tmp_path: Path) -> None:
    (tmp_path / "in.json").write_text(json.dumps({"prompt": "from file", "amount": 3}))
    api = StubApi().on("POST", "/api/v1/jobs", reply(200, {"job_id": "j1"}))
    run_cli(api, "jobs", "submit", "job.echo", "--input", str(tmp_path / "in.json"))
    body = api.body("POST", "/api/v1/jobs")
    assert body["context"] == {"prompt": "from file", "amount": 3}
    assert body["prompt"] == "from file"


@pytest.mark.parametrize("args", [["--priority", "urgent"], ["--deadline", "soon"],
                                  ["-l", "novalue"], []])
def test_submit_rejects_bad_arguments_before_calling(args: list[str]) -> None:
    api = StubApi()
    prompt = [] if args == [] else ["hi"]
    out = run_cli(api, "jobs", "submit", "job.echo", *prompt, *args)
    assert out.code == ExitCode.USAGE and api.requests == []


def test_submit_approval_required_in_a_table_says_so() -> None:
    api = StubApi().on("POST", "/api/v1/jobs", reply(200, {
        "job_id": "j1", "status": "approval_required", "reason": "needs a human"}))
    out = run_cli(api, "-o", "table", "jobs", "submit", "job.echo.approval", "hi")
    assert out.out.strip() == "j1  APPROVAL_REQUIRED: needs a human"


@pytest.mark.parametrize("final,code", [("SUCCEEDED", 0), ("FAILED", 10), ("CANCELLED", 11),
                                        ("TIMEOUT", 12), ("DENIED", 13),
                                        ("OUTPUT_QUARANTINED", 14)])
def test_submit_wait_follows_the_job_and_exits_by_how_it_ended(final: str, code: int) -> None:
    api = (StubApi().on("POST", "/api/v1/jobs", reply(200, {"job_id": "j1"}))
           .on("GET", "/api/v1/jobs/j1", reply(200, job("PENDING")), reply(200, job("RUNNING")),
               reply(200, job(final, result={"echo": "hi"}))))
    out = run_cli(api, "jobs", "submit", "job.echo", "hi", "--wait")
    assert out.code == code
    assert out.json()["state"] == final  # the ended job on stdout
    states = [line.split()[2] for line in out.err.splitlines()[1:]]
    assert states == ["PENDING", "RUNNING", final]  # the progress on stderr
    assert out.sleeps == [1.0, 1.0]


def test_watch_prints_a_line_per_change_only_and_stops_on_timeout() -> None:
    api = StubApi().on("GET", "/api/v1/jobs/j1", reply(200, job("PENDING")),
                       reply(200, job("PENDING")), reply(200, job("APPROVAL_REQUIRED")))
    out = run_cli(api, "-o", "table", "jobs", "watch", "j1", "--timeout", "5s")
    assert out.code == ExitCode.WATCH_TIMEOUT
    lines = out.out.strip().splitlines()
    assert [ln.split()[2] for ln in lines[:-1]] == ["PENDING", "APPROVAL_REQUIRED"]
    assert "cordumctl approvals approve j1" in lines[1]
    assert lines[-1] == "still APPROVAL_REQUIRED after 5.0s"


def test_watch_in_json_is_one_object_per_change() -> None:
    api = StubApi().on("GET", "/api/v1/jobs/j1", reply(200, job("RUNNING")),
                       reply(200, job("SUCCEEDED")))
    out = run_cli(api, "jobs", "watch", "j1")
    docs = [json.loads(line) for line in out.out.splitlines()]
    assert [d["state"] for d in docs] == ["RUNNING", "SUCCEEDED"] and out.code == 0


def test_get_in_each_format() -> None:
    api = StubApi().on("GET", "/api/v1/jobs/j1", reply(200, job("SUCCEEDED", result={"a": 1})))
    assert run_cli(api, "jobs", "get", "j1").json()["result"] == {"a": 1}
    assert yaml.safe_load(run_cli(api, "-o", "yaml", "jobs", "get", "j1").out)["state"] == \
        "SUCCEEDED"
    table = run_cli(api, "-o", "table", "jobs", "get", "j1").out
    assert "state" in table and "SUCCEEDED" in table and '{"a":1}' in table
    # a terminal gets a table without asking
    assert "SUCCEEDED" in run_cli(api, "jobs", "get", "j1", terminal=True).out.splitlines()[1]


def test_list_sends_filters_and_all_follows_every_cursor() -> None:
    api = StubApi().on("GET", "/api/v1/jobs",
                       reply(200, {"items": [job("RUNNING")], "next_cursor": "c1"}),
                       reply(200, {"items": [job("FAILED", id="j2")], "next_cursor": None}))
    out = run_cli(api, "jobs", "list", "--state", "RUNNING", "--topic", "job.echo", "--all",
                  "--limit", "1")
    assert [j["id"] for j in out.json()] == ["j1", "j2"]
    first, second = api.sent("GET", "/api/v1/jobs")
    assert dict(first.url.params) == {"state": "RUNNING", "topic": "job.echo", "limit": "1"}
    assert second.url.params["cursor"] == "c1"


def test_list_without_all_reads_one_page_and_a_table_has_columns() -> None:
    api = StubApi().on("GET", "/api/v1/jobs",
                       reply(200, {"items": [job("RUNNING")], "next_cursor": "c1"}))
    out = run_cli(api, "-o", "table", "jobs", "list")
    assert len(api.requests) == 1
    assert out.out.split()[:4] == ["ID", "STATE", "TOPIC", "UPDATED"]


def test_cancel_and_decisions() -> None:
    api = (StubApi()
           .on("POST", "/api/v1/jobs/j1/cancel", reply(200, {"id": "j1", "state": "CANCELLED"}))
           .on("GET", "/api/v1/jobs/j1/decisions", reply(200, [
               {"rule_id": "r1", "action": "ALLOW", "reason": "ok",
                "evaluated_at": "2026-01-01T00:00:00Z"}])))
    assert run_cli(api, "jobs", "cancel", "j1").json()["state"] == "CANCELLED"
    assert run_cli(api, "-o", "table", "jobs", "cancel", "j1").out.split() == ["j1", "CANCELLED"]
    assert run_cli(api, "jobs", "decisions", "j1").json()[0]["action"] == "ALLOW"
    assert "r1" in run_cli(api, "-o", "table", "jobs", "decisions", "j1").out


def test_cancel_conflict_exits_5() -> None:
    api = StubApi().on("POST", "/api/v1/jobs/j1/cancel",
                       error(409, "job cannot be cancelled", "conflict"))
    assert run_cli(api, "jobs", "cancel", "j1").code == ExitCode.CONFLICT


# --- approvals -------------------------------------------------------------------------

APPROVAL = {"job": {"id": "j1", "state": "APPROVAL_REQUIRED", "topic": "job.echo.approval"},
            "decision": "PENDING", "policy_rule_id": "approve-echo",
            "policy_reason": "needs a human", "requested_at": "2026-01-01T00:00:00Z"}


def test_approvals_list_and_approve_reject_bodies() -> None:
    api = (StubApi()
           .on("GET", "/api/v1/approvals", reply(200, {"items": [APPROVAL], "next_cursor": None}))
           .on("POST", "/api/v1/approvals/j1/approve", reply(200, {"job_id": "j1"}))
           .on("POST", "/api/v1/approvals/j1/reject", reply(200, {"job_id": "j1"})))
    table = run_cli(api, "-o", "table", "approvals", "list").out
    assert "approve-echo" in table and "needs a human" in table
    out = run_cli(api, "-o", "table", "approvals", "approve", "j1", "--reason", "reviewed")
    assert out.code == 0 and out.out.split() == ["j1", "APPROVED"]
    assert api.body("POST", "/api/v1/approvals/j1/approve") == {"reason": "reviewed"}
    run_cli(api, "approvals", "reject", "j1", "-r", "no", "--note", "see ticket")
    assert api.body("POST", "/api/v1/approvals/j1/reject") == {"reason": "no",
                                                                 "note": "see ticket"}
    # the reason is required
    assert run_cli(api, "approvals", "approve", "j1").code == ExitCode.USAGE


def test_self_approval_is_an_auth_error() -> None:
    api = StubApi().on("POST", "/api/v1/approvals/j1/approve",
                       error(403, "self approval denied", "self_approval_denied"))
    out = run_cli(api, "approvals", "approve", "j1", "--reason", "x")
    assert out.code == ExitCode.AUTH and "(self_approval_denied)" in out.err


def test_show_has_the_job_the_policy_reason_and_a_gates_workflow_context() -> None:
    gate_job = {"id": "r1:approve@1", "state": "APPROVAL_REQUIRED",
                "topic": "job.cordum.approval-gate", "safety_reason": "gate", "labels": {}}
    context = {"kind": "workflow_approval_context", "version": 1,
               "workflow": {"workflow_id": "wf", "run_id": "r1", "step_id": "approve",
                            "step_name": "Approve", "triggered_by": "local-admin"},
               "decision": {"amount": 250}}
    api = (StubApi().on("GET", "/api/v1/jobs/r1:approve@1", reply(200, gate_job))
           .on("GET", "/api/v1/approvals/r1:approve@1/context", reply(200, context)))
    doc = run_cli(api, "approvals", "show", "r1:approve@1").json()
    assert doc["job"]["safety_reason"] == "gate" and doc["gate"]["workflow"]["run_id"] == "r1"
    table = run_cli(api, "-o", "table", "approvals", "show", "r1:approve@1").out
    assert "workflow gate" in table and '{"amount":250}' in table and "local-admin" in table
    # a plain job has no gate context, and none is asked for
    api.on("GET", "/api/v1/jobs/j1", reply(200, {**gate_job, "id": "j1", "topic": "job.echo"}))
    assert "gate" not in run_cli(api, "approvals", "show", "j1").json()


# --- dlq, workers, status --------------------------------------------------------------

def test_dlq_list_retry_delete() -> None:
    entry = {"job_id": "j1", "topic": "job.echo", "error": "boom", "reason_code": "max_retries",
             "failed_at": "2026-01-01T00:00:00Z", "retry_count": 3, "original_state": "FAILED"}
    api = (StubApi()
           .on("GET", "/api/v1/dlq/page", reply(200, {"items": [entry], "next_cursor": None}))
           .on("POST", "/api/v1/dlq/j1/retry", reply(200, {"job_id": "j1-retry-ab12"}))
           .on("DELETE", "/api/v1/dlq/j1", reply(204)))
    assert run_cli(api, "dlq", "list").json()[0]["reason_code"] == "max_retries"
    assert "max_retries" in run_cli(api, "-o", "table", "dlq", "list").out
    assert run_cli(api, "-o", "table", "dlq", "retry", "j1").out.strip() == "j1-retry-ab12"
    out = run_cli(api, "dlq", "delete", "j1")
    assert out.code == 0 and out.json() == {"job_id": "j1", "deleted": True}


def test_workers_table_has_pool_load_and_heartbeat_age() -> None:
    api = StubApi().on("GET", "/api/v1/workers", reply(200, {"items": [
        {"worker_id": "echo-1", "pool": "echo", "active_jobs": 1, "max_parallel_jobs": 4,
         "cpu_load": 12.0, "heartbeat_age_seconds": 2.5, "online": True},
        {"worker_id": "gpu-1", "pool": "gpu", "active_jobs": 0, "max_parallel_jobs": 1,
         "heartbeat_age_seconds": 400, "online": False}]}))
    table = run_cli(api, "-o", "table", "workers").out
    assert "1/4  cpu 12%" in table and "2.5s ago" in table and "6m40s ago (offline)" in table
    assert [w["worker_id"] for w in run_cli(api, "workers", "--pool", "gpu").json()["items"]] \
        == ["gpu-1"]


STATUS = {"time": "2026-01-01T00:00:00Z", "uptime_seconds": 12.0, "build": {"version": "0.1.0"},
          "redis": {"connected": True}, "nats": {"connected": True}, "workers": 1}


def test_status_shows_each_part_and_breakers_for_admins() -> None:
    admin = {**STATUS, "circuit_breakers": {
        "input": {"state": "CLOSED", "failures": 0, "fail_threshold": 5},
        "output": {"state": "OPEN", "failures": 5, "fail_threshold": 5,
                   "cooldown_remaining_ms": 4000}}, "input_fail_open_total": 0}
    api = (StubApi().on("GET", "/api/v1/health", reply(200, {"status": "healthy"}))
           .on("GET", "/api/v1/status", reply(200, admin)))
    out = run_cli(api, "-o", "table", "status")
    assert out.code == 0
    assert "breaker input   CLOSED" in out.out and "cooldown 4.0s" in out.out
    assert run_cli(api, "status").json()["status"]["workers"] == 1


def test_status_exits_6_when_a_part_is_down() -> None:
    api = (StubApi().on("GET", "/api/v1/health",
                        error(503, "unhealthy", "store_unavailable", retry_after=0,
                              unavailable="redis"))
           .on("GET", "/api/v1/status", reply(200, {**STATUS, "redis": {"connected": False}})))
    out = run_cli(api, "-o", "table", "status")
    assert out.code == ExitCode.UNAVAILABLE and "down" in out.out and "redis" in out.out
