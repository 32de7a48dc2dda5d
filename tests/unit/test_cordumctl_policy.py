"""cordumctl's policy commands against a stub API: what each sends, what it prints, and
how a refused change reads."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from cordumctl.errors import ExitCode
from tests.cordumctl_stub import StubApi, error, reply, run_cli

BUNDLES = "/api/v1/policy/bundles"
DENY_YAML = """\
rules:
  - id: deny-prod-deploys
    match: {topics: [job.deploy.prod]}
    decision: deny
    reason: "no deploys to prod on Fridays"
"""
ITEM = {"id": "secops/deny-prod", "enabled": False, "source": "secops", "author": "root-ops",
        "message": "first cut", "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z", "sha256": "ab" * 32, "rule_count": 1}
DECISION = {"decision": "DECISION_TYPE_DENY", "reason": "no deploys to prod on Fridays",
            "ruleId": "deny-prod-deploys", "policySnapshot": "sha256:1|cfg:2",
            "approvalRequired": False, "approvalRef": "", "constraints": None,
            "remediations": [], "rule_id": "deny-prod-deploys",
            "policy_snapshot": "sha256:1|cfg:2"}


def bundle_file(tmp_path: Path, name: str = "deny-prod.yaml", content: str = DENY_YAML) -> str:
    path = tmp_path / name
    path.write_text(content)
    return str(path)


class Terminal(io.StringIO):
    """A stdin that is a terminal and answers ``answer``."""

    def isatty(self) -> bool:
        return True


# --- bundles ------------------------------------------------------------------------------

def test_bundles_list_is_a_table_for_people_and_the_items_for_programs() -> None:
    api = StubApi().on("GET", BUNDLES, reply(200, {
        "bundles": {"secops/deny-prod": {"content": DENY_YAML}}, "items": [ITEM],
        "updated_at": "2026-01-01T00:00:00Z"}))
    table = run_cli(api, "-o", "table", "policy", "bundles", "list").out
    header, row = table.splitlines()[:2]
    assert header.split() == ["ID", "ENABLED", "RULES", "AUTHOR", "UPDATED", "MESSAGE"]
    assert row.split()[:4] == ["secops/deny-prod", "no", "1", "root-ops"]
    assert run_cli(api, "policy", "bundles", "list").json() == [ITEM]
    empty = StubApi().on("GET", BUNDLES, reply(200, {"bundles": {}, "items": [],
                                                     "updated_at": None}))
    assert "no policy bundles" in run_cli(empty, "-o", "table", "policy", "bundles", "list").out


def test_bundles_get_sends_the_slash_as_a_tilde_and_shows_the_yaml() -> None:
    api = StubApi().on("GET", f"{BUNDLES}/secops~deny-prod",
                       reply(200, {**ITEM, "content": DENY_YAML}))
    out = run_cli(api, "-o", "table", "policy", "bundles", "get", "secops/deny-prod")
    assert out.code == 0, out.err
    assert api.requests[-1].url.raw_path == b"/prod/api/v1/policy/bundles/secops~deny-prod"
    assert "root-ops" in out.out and "deny-prod-deploys" in out.out
    assert out.out.rstrip().endswith('reason: "no deploys to prod on Fridays"')
    assert run_cli(api, "policy", "bundles", "get", "secops/deny-prod").json()["content"] \
        == DENY_YAML
    missing = StubApi().on("GET", f"{BUNDLES}/nope", error(404, "bundle not found"))
    assert run_cli(missing, "policy", "bundles", "get", "nope").code == ExitCode.NOT_FOUND


def test_apply_puts_the_file_as_written_under_secops_and_its_name(tmp_path: Path) -> None:
    api = StubApi().on("PUT", f"{BUNDLES}/secops~deny-prod", reply(200, {
        "id": "secops/deny-prod", "updated_at": "2026-01-01T00:00:00Z", "enabled": False}))
    out = run_cli(api, "-o", "table", "policy", "bundles", "apply", "-f",
                  bundle_file(tmp_path), "-m", "first cut")
    assert out.code == 0, out.err
    assert api.body("PUT", f"{BUNDLES}/secops~deny-prod") == {"content": DENY_YAML,
                                                              "message": "first cut"}
    assert out.out.strip() == ("applied secops/deny-prod (a draft: `cordumctl policy publish "
                               "secops/deny-prod` puts it in force)")
    run_cli(api, "policy", "bundles", "apply", "-f", bundle_file(tmp_path), "--enable")
    assert api.body("PUT", f"{BUNDLES}/secops~deny-prod")["enabled"] is True
    run_cli(api, "policy", "bundles", "apply", "-f", bundle_file(tmp_path), "--disable")
    assert api.body("PUT", f"{BUNDLES}/secops~deny-prod")["enabled"] is False


def test_apply_with_an_id_and_the_json_answer(tmp_path: Path) -> None:
    written = {"id": "team/ops", "updated_at": "2026-01-01T00:00:00Z", "enabled": True}
    api = StubApi().on("PUT", f"{BUNDLES}/team~ops", reply(200, written))
    out = run_cli(api, "policy", "bundles", "apply", "-f", bundle_file(tmp_path), "--id",
                  "team/ops", "--enable")
    assert out.json() == written
    assert "in force" in run_cli(api, "-o", "table", "policy", "bundles", "apply", "-f",
                                 bundle_file(tmp_path), "--id", "team/ops").out


@pytest.mark.parametrize("args", [["-f", "-"], ["-f", "/nonexistent/deny.yaml"], []])
def test_apply_needs_a_file_and_from_stdin_an_id(args: list[str]) -> None:
    api = StubApi()
    assert run_cli(api, "policy", "bundles", "apply", *args).code == ExitCode.USAGE
    assert api.requests == []


def test_a_bundle_that_does_not_validate_names_the_files_line_and_rule(tmp_path: Path) -> None:
    bad = DENY_YAML.replace("topics: [job.deploy.prod]", "topics: 7")
    api = StubApi().on("PUT", f"{BUNDLES}/secops~deny-prod", error(
        400, "invalid policy bundle: line 3, rule 'deny-prod-deploys': rules[0].match.topics: "
             "Input should be a valid list", "POLICY_VALIDATION_FAILED"))
    path = bundle_file(tmp_path, content=bad)
    out = run_cli(api, "policy", "bundles", "apply", "-f", path)
    assert out.code == ExitCode.INVALID
    first, at, line = out.err.splitlines()
    assert first.startswith("cordumctl: 400 invalid policy bundle: line 3")
    assert first.endswith("(POLICY_VALIDATION_FAILED)")
    assert at == f"  at {path}:3, rule deny-prod-deploys"
    assert line == "      3 |     match: {topics: 7}"


def test_a_key_of_one_tenant_is_told_a_change_takes_a_key_of_every_tenant(
        tmp_path: Path) -> None:
    refused = error(403, "the policy governs every tenant: changing it takes a key whose "
                         "tenant is *", "policy_write_requires_any_tenant_key")
    api = (StubApi().on("PUT", f"{BUNDLES}/secops~deny-prod", refused)
           .on("POST", "/api/v1/policy/publish", refused)
           .on("GET", BUNDLES, error(403, "forbidden", "forbidden")))
    out = run_cli(api, "policy", "bundles", "apply", "-f", bundle_file(tmp_path))
    assert out.code == ExitCode.AUTH
    assert "(policy_write_requires_any_tenant_key)" in out.err
    assert "this key may not change the policy" in out.err
    assert "a change takes an admin or policy.write key whose tenant is *" in out.err
    assert "docs/policy.md" in out.err
    assert run_cli(api, "policy", "publish").code == ExitCode.AUTH
    read = run_cli(api, "policy", "bundles", "list")
    assert read.code == ExitCode.AUTH and "may not read the policy" in read.err


def test_delete_asks_first_and_off_a_terminal_wants_yes(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    path = f"{BUNDLES}/secops~deny-prod"
    api = StubApi().on("DELETE", path, reply(204))
    out = run_cli(api, "policy", "bundles", "delete", "secops/deny-prod")
    assert out.code == ExitCode.USAGE and "give --yes" in out.err and api.requests == []

    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    out = run_cli(api, "policy", "bundles", "delete", "secops/deny-prod")
    assert out.code == ExitCode.ERROR and "aborted" in out.err and api.requests == []

    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    out = run_cli(api, "-o", "table", "policy", "bundles", "delete", "secops/deny-prod")
    assert (out.code, out.out.strip()) == (0, "deleted secops/deny-prod")
    assert len(api.sent("DELETE", path)) == 1

    assert run_cli(api, "policy", "bundles", "delete", "secops/deny-prod", "--yes").json() \
        == {"id": "secops/deny-prod", "deleted": True}


# --- questions ----------------------------------------------------------------------------

def test_simulate_asks_the_policy_in_force_about_the_job() -> None:
    api = StubApi().on("POST", "/api/v1/policy/simulate", reply(200, DECISION))
    out = run_cli(api, "-o", "table", "policy", "simulate", "--topic", "job.deploy.prod",
                  "-l", "env=prod", "-l", "team=ops", "--capability", "deploy",
                  "--risk-tag", "prod", "--job-id", "j-1")
    assert out.code == 0, out.err
    assert api.body("POST", "/api/v1/policy/simulate") == {
        "topic": "job.deploy.prod", "labels": {"env": "prod", "team": "ops"}, "job_id": "j-1",
        "meta": {"capability": "deploy", "risk_tags": ["prod"]}}
    fields = dict(line.strip().split(None, 1) for line in out.out.strip().splitlines())
    assert fields["decision"] == "DENY" and fields["rule"] == "deny-prod-deploys"
    assert fields["snapshot"] == "sha256:1|cfg:2"
    assert run_cli(api, "policy", "simulate", "--topic", "job.x").json() == DECISION


def test_a_denied_job_is_shown_what_to_do_instead() -> None:
    api = StubApi().on("POST", "/api/v1/policy/simulate", reply(200, {
        **DECISION, "remediations": [{"id": "r1", "title": "Use the echo worker",
                                      "replacementTopic": "job.echo"},
                                     {"id": "r2", "replacementTopic": "job.echo.safe"}]}))
    out = run_cli(api, "-o", "table", "policy", "simulate", "--topic", "job.echo.denied")
    assert "remediations  Use the echo worker; use job.echo.safe" in out.out


def test_simulate_with_a_bundle_or_a_candidate_file(tmp_path: Path) -> None:
    api = (StubApi().on("POST", f"{BUNDLES}/secops~deny-prod/simulate", reply(200, DECISION))
           .on("POST", f"{BUNDLES}/team~ops/simulate", reply(200, DECISION)))
    run_cli(api, "policy", "simulate", "--topic", "job.deploy.prod", "--bundle", "team/ops")
    assert api.body("POST", f"{BUNDLES}/team~ops/simulate") == {
        "request": {"topic": "job.deploy.prod"}}
    out = run_cli(api, "policy", "simulate", "--topic", "job.deploy.prod", "-f",
                  bundle_file(tmp_path))
    assert out.code == 0, out.err
    assert api.body("POST", f"{BUNDLES}/secops~deny-prod/simulate") == {
        "request": {"topic": "job.deploy.prod"}, "content": DENY_YAML}
    run_cli(api, "policy", "simulate", "--topic", "job.deploy.prod", "-f",
            bundle_file(tmp_path), "-b", "team/ops")
    assert api.body("POST", f"{BUNDLES}/team~ops/simulate")["content"] == DENY_YAML


def test_simulate_of_a_candidate_that_does_not_validate_points_into_the_file(
        tmp_path: Path) -> None:
    api = StubApi().on("POST", f"{BUNDLES}/secops~deny-prod/simulate", error(
        400, "invalid policy bundle: line 2, rule 'x': rules[0].id: bad",
        "POLICY_VALIDATION_FAILED"))
    out = run_cli(api, "policy", "simulate", "--topic", "job.x", "-f", bundle_file(tmp_path))
    assert out.code == ExitCode.INVALID
    assert "deny-prod.yaml:2, rule x" in out.err and "  - id: deny-prod-deploys" in out.err


def test_explain_prints_each_part_of_the_reason_on_its_own_line() -> None:
    reason = ("decided by deny-prod-deploys: deny (no deploys). also matched: allow-all. "
              "not matched: r1: topic job.a only; r2: label env=dev")
    api = StubApi().on("POST", "/api/v1/policy/explain", reply(200, {**DECISION,
                                                                     "reason": reason}))
    out = run_cli(api, "-o", "table", "policy", "explain", "--topic", "job.deploy.prod")
    assert api.body("POST", "/api/v1/policy/explain") == {"topic": "job.deploy.prod"}
    tail = out.out.strip().splitlines()[-5:]
    assert tail == ["decided by deny-prod-deploys: deny (no deploys)", "also matched: allow-all",
                    "not matched:", "  r1: topic job.a only", "  r2: label env=dev"]


def test_a_key_that_may_not_ask_is_told_which_roles_may() -> None:
    api = StubApi().on("POST", "/api/v1/policy/explain", error(403, "forbidden", "forbidden"))
    out = run_cli(api, "policy", "explain", "--topic", "job.x")
    assert out.code == ExitCode.AUTH
    assert "this key may not ask the policy: simulate, explain and replay take role admin " \
        "or policy.write" in out.err


# --- publish, rollback, snapshots, audit ----------------------------------------------------

def test_publish_names_the_bundles_and_says_how_to_undo_it() -> None:
    api = StubApi().on("POST", "/api/v1/policy/publish", reply(200, {
        "snapshot_before": "s-1", "snapshot_after": "s-2", "published": ["secops/deny-prod"]}))
    out = run_cli(api, "-o", "table", "policy", "publish", "secops/deny-prod", "-m", "go",
                  "--note", "friday")
    assert api.body("POST", "/api/v1/policy/publish") == {
        "bundle_ids": ["secops/deny-prod"], "message": "go", "note": "friday"}
    assert out.out.strip().splitlines() == [
        "published secops/deny-prod",
        "snapshot before: s-1  (undo: cordumctl policy rollback s-1)",
        "snapshot after:  s-2"]
    run_cli(api, "policy", "publish")
    assert api.body("POST", "/api/v1/policy/publish") == {}


def test_rollback_sends_the_snapshot_and_a_missing_one_is_not_found() -> None:
    answer = {"snapshot_before": "s-2", "snapshot_after": "s-1", "rollback_to": "s-1"}
    api = StubApi().on("POST", "/api/v1/policy/rollback", reply(200, answer))
    assert run_cli(api, "policy", "rollback", "s-1", "-m", "undo").json() == answer
    assert api.body("POST", "/api/v1/policy/rollback") == {"snapshot_id": "s-1",
                                                           "message": "undo"}
    table = run_cli(api, "-o", "table", "policy", "rollback", "s-1").out
    assert table.splitlines()[0] == "rolled back to s-1"
    missing = StubApi().on("POST", "/api/v1/policy/rollback", error(404, "snapshot not found"))
    assert run_cli(missing, "policy", "rollback", "s-9").code == ExitCode.NOT_FOUND


def test_snapshots_of_the_bundles_and_of_the_kernel() -> None:
    snap = {"id": "2026-01-01T00:00:00Z-abcdef0123", "created_at": "2026-01-01T00:00:00Z",
            "note": "friday", "author": "root-ops", "bundle_ids": ["secops/a", "secops/b"]}
    api = (StubApi().on("GET", f"{BUNDLES}/snapshots", reply(200, {"items": [snap]}))
           .on("GET", "/api/v1/policy/snapshots", reply(200, [
               {"id": "k-2", "in_force": True}, {"id": "k-1", "in_force": False}])))
    table = run_cli(api, "-o", "table", "policy", "snapshots").out
    assert snap["id"] in table and "secops/a, secops/b" in table and "friday" in table
    assert run_cli(api, "policy", "snapshots").json() == [snap]
    kernel = run_cli(api, "-o", "table", "policy", "snapshots", "--kernel").out.splitlines()
    assert [line.split() for line in kernel[1:]] == [["k-2", "yes"], ["k-1", "no"]]
    assert [s["id"] for s in run_cli(api, "policy", "snapshots", "--kernel").json()] == \
        ["k-2", "k-1"]


def test_audit_sends_its_filters_and_says_when_there_is_more() -> None:
    entry = {"id": "e1", "action": "publish", "actor_id": "root-ops", "message": "go",
             "bundle_ids": ["secops/deny-prod"], "snapshot_after": "s-2",
             "created_at": "2026-01-01T00:00:00Z"}
    api = StubApi().on("GET", "/api/v1/policy/audit", reply(200, [entry], headers={
        "X-Total-Count": "7", "X-Has-More": "true", "X-Offset": "0"}))
    out = run_cli(api, "-o", "table", "policy", "audit", "--limit", "1", "--action", "publish",
                  "--bundle", "secops/deny-prod")
    assert dict(api.requests[-1].url.params) == {"limit": "1", "action": "publish",
                                                 "rule_id": "secops/deny-prod"}
    assert "root-ops" in out.out and out.out.strip().endswith("(1 of 7; --limit shows more)")
    assert run_cli(api, "policy", "audit").json() == [entry]
    assert run_cli(api, "policy", "audit", "--limit", "501").code == ExitCode.USAGE


# --- replay -------------------------------------------------------------------------------

CHANGE = {"job_id": "j-1", "topic": "job.deploy.prod", "tenant": "acme",
          "original_decision": "ALLOW", "new_decision": "DENY", "direction": "escalated",
          "new_rule_id": "deny-prod-deploys", "at": "2026-01-01T00:00:00Z"}


def test_replay_follows_every_page_and_adds_up_the_summaries(tmp_path: Path) -> None:
    cont = "stopped at the max_jobs bound after 3 jobs: continue with next_cursor"
    pages = [
        reply(200, {"replay_id": "r-1", "summary": {"total_jobs": 3, "escalated": 1,
                                                    "unchanged": 2},
                    "rule_hits": [{"rule_id": "deny-prod-deploys", "decision": "DENY",
                                   "count": 1},
                                  {"rule_id": "allow", "decision": "ALLOW", "count": 2}],
                    "changes": [CHANGE], "warnings": ["velocity", cont],
                    "errors": [{"job_id": "j-2", "error": "x"}], "truncated": True,
                    "next_cursor": "c1"}),
        reply(200, {"replay_id": "r-2", "summary": {"total_jobs": 2, "escalated": 1,
                                                    "unchanged": 1},
                    "rule_hits": [{"rule_id": "deny-prod-deploys", "decision": "DENY",
                                   "count": 1}],
                    "changes": [{**CHANGE, "job_id": "j-9"}], "warnings": ["velocity"],
                    "truncated": False, "next_cursor": None}),
    ]
    api = StubApi().on("POST", "/api/v1/policy/replay", *pages)
    out = run_cli(api, "policy", "replay", "--from", "2026-01-01T00:00:00Z", "--to",
                  "2026-01-02T00:00:00+01:00", "-f", bundle_file(tmp_path), "--max-jobs", "3")
    assert out.code == 0, out.err
    first, second = (api.body("POST", "/api/v1/policy/replay", i) for i in (0, 1))
    assert first == {"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T23:00:00Z",
                     "candidate_bundle_id": "secops/deny-prod", "candidate_content": DENY_YAML,
                     "max_jobs": 3}
    assert second == {**first, "cursor": "c1"}
    doc = out.json()
    assert doc["summary"] == {"total_jobs": 5, "escalated": 2, "unchanged": 3}
    assert [c["job_id"] for c in doc["changes"]] == ["j-1", "j-9"]
    assert doc["rule_hits"] == [  # most hits first, as the API orders them
        {"rule_id": "allow", "decision": "ALLOW", "count": 2},
        {"rule_id": "deny-prod-deploys", "decision": "DENY", "count": 2}]
    assert doc["warnings"] == ["velocity"] and doc["errors"] == [{"job_id": "j-2", "error": "x"}]
    assert (doc["replay_id"], doc["truncated"], doc["next_cursor"]) == ("r-2", False, None)


def test_replay_table_and_the_policy_it_replays() -> None:
    api = StubApi().on("POST", "/api/v1/policy/replay", reply(200, {
        "summary": {"total_jobs": 1, "escalated": 1}, "changes": [CHANGE],
        "warnings": ["velocity rules are not replayed"], "next_cursor": ""}))
    out = run_cli(api, "-o", "table", "policy", "replay", "--from", "24h", "--current")
    assert out.code == 0, out.err
    body = api.body("POST", "/api/v1/policy/replay")
    assert body["use_current_policy"] is True and "candidate_bundle_id" not in body
    assert body["from"] < body["to"] and body["to"].endswith("Z")
    lines = out.out.strip().splitlines()
    assert lines[0] == "replayed: total jobs 1, escalated 1"
    assert lines[1] == "warning: velocity rules are not replayed"
    assert lines[3].split() == ["j-1", "2026-01-01T00:00:00Z", "job.deploy.prod", "ALLOW",
                                "DENY", "escalated", "deny-prod-deploys"]
    run_cli(api, "policy", "replay", "--from", "1h", "--bundle", "secops/x")
    assert api.body("POST", "/api/v1/policy/replay")["candidate_bundle_id"] == "secops/x"


def test_replay_stops_on_a_cursor_it_already_followed() -> None:
    api = StubApi().on("POST", "/api/v1/policy/replay", reply(200, {
        "summary": {"total_jobs": 1}, "changes": [], "next_cursor": "same"}))
    out = run_cli(api, "policy", "replay", "--from", "1h", "--current")
    assert out.code == 0 and len(api.requests) == 2
    assert out.json()["summary"] == {"total_jobs": 2}


@pytest.mark.parametrize("args", [
    ["--from", "1h"], ["--from", "1h", "--current", "--bundle", "secops/x"],
    ["--from", "yesterday", "--current"], ["--current"]])
def test_replay_refuses_a_request_it_cannot_make(args: list[str]) -> None:
    api = StubApi()
    out = run_cli(api, "policy", "replay", *args)
    assert out.code == ExitCode.USAGE and api.requests == []


def test_every_answer_in_json_is_the_apis_as_it_came() -> None:
    api = StubApi().on("POST", "/api/v1/policy/explain", reply(200, DECISION))
    assert json.loads(run_cli(api, "policy", "explain", "--topic", "job.x").out) == DECISION


# --- two people for a change ----------------------------------------------------------------

PROPOSAL = {"id": "prop-1", "action": "publish", "bundle_ids": ["secops/deny-prod"],
            "proposed_by": "root-ops", "proposed_at": "2026-01-01T00:00:00Z",
            "expires_at": "2026-01-02T00:00:00Z", "message": "go"}


@pytest.mark.parametrize(("method", "path", "argv"), [
    ("POST", "/api/v1/policy/publish", ["policy", "publish"]),
    ("POST", "/api/v1/policy/rollback", ["policy", "rollback", "s-1"]),
    ("DELETE", "/api/v1/policy/bundles/secops~deny-prod",
     ["policy", "bundles", "delete", "secops/deny-prod", "--yes"]),
])
def test_a_change_kept_as_a_proposal_says_who_must_confirm_it(method, path, argv) -> None:
    api = StubApi().on(method, path, reply(202, {"proposal": PROPOSAL,
                                                 "status": "pending_confirmation"}))
    out = run_cli(api, "-o", "table", *argv)
    assert out.code == 0
    assert out.out.strip().splitlines() == [
        "proposed prop-1: not in force until another identity confirms it",
        "  confirm: cordumctl policy proposals confirm prop-1  (by someone else)",
        "  expires: 2026-01-02T00:00:00Z"]


def test_proposals_are_listed_confirmed_and_rejected() -> None:
    api = (StubApi()
           .on("GET", "/api/v1/policy/proposals", reply(200, {"items": [PROPOSAL]}))
           .on("POST", "/api/v1/policy/proposals/prop-1/confirm", reply(200, {
               "proposal_id": "prop-1", "proposed_by": "root-ops", "confirmed_by": "gov",
               "snapshot_before": "s-1", "snapshot_after": "s-2"}))
           .on("POST", "/api/v1/policy/proposals/prop-1/reject", reply(200, {
               "id": "prop-1", "state": "rejected", "rejected_by": "gov"})))
    table = run_cli(api, "-o", "table", "policy", "proposals", "list").out
    assert "prop-1" in table and "root-ops" in table and "secops/deny-prod" in table
    out = run_cli(api, "-o", "table", "policy", "proposals", "confirm", "prop-1").out
    assert out.splitlines()[0] == ("confirmed prop-1: proposed by root-ops, confirmed by gov, "
                                   "now in force")
    run_cli(api, "policy", "proposals", "reject", "prop-1", "-r", "not now")
    assert api.body("POST", "/api/v1/policy/proposals/prop-1/reject") == {"reason": "not now"}


def test_confirming_ones_own_change_is_refused_with_the_reason() -> None:
    api = StubApi().on("POST", "/api/v1/policy/proposals/prop-1/confirm", error(
        403, "the author of a policy change cannot confirm it; another identity must",
        "self_confirmation_denied"))
    out = run_cli(api, "policy", "proposals", "confirm", "prop-1")
    assert out.code != 0 and "another identity must" in out.err
