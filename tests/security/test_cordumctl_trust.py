"""cordumctl's trust boundaries: where its key is sent, and what server data may do to a
terminal.

No gateway here: cordumctl runs in-process against the stub API of
``tests.cordumctl_stub``, which records every request (the URL and the headers).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cordumctl import connection
from cordumctl.connection import resolve
from cordumctl.errors import ConfigError, ExitCode
from tests.cordumctl_stub import StubApi, error, reply, run_cli

PROD_KEY = "sk-prod-0123456789abcdef"
PROD_URL = "http://prod.test/prod"
FILE_URL = "http://evil.test/prod"
FILE_KEY = "sk-file-fedcba9876543210"

LINK = "[link=http://evil.test]click here[/link]"
BOLD = "[bold red]ALL JOBS SUCCEEDED[/]"
CLOSE = "[/]"
OSC8 = "\x1b]8;;http://evil.test\x1b\\click\x1b]8;;\x1b\\"
CLEAR = "\x1b[2J"
CSI8 = "\x9b2J"  # the 8-bit CSI: a clear screen on terminals that take C1 controls
BIDI = "\u202e"  # right-to-left override: text that reads backwards
BEL = "\x07"
HOSTILE = f"{OSC8} {CLEAR} {CSI8} {BIDI}{BEL}"


def write_local_env(folder: Path, **values: str) -> Path:
    (folder / ".cordum").mkdir(parents=True)
    path = folder / ".cordum" / "local.env"
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A ``.cordum/local.env`` two folders above the working folder, naming another API."""
    write_local_env(tmp_path, CORDUM_API_URL=FILE_URL, CORDUM_API_KEY=FILE_KEY,
                    CORDUM_TENANT_ID="file-tenant")
    below = tmp_path / "checkout" / "src"
    below.mkdir(parents=True)
    return below


def keys_sent(api: StubApi) -> list[tuple[str, str]]:
    return [(f"{r.url.scheme}://{r.url.host}", r.headers.get("X-API-Key", ""))
            for r in api.requests]


def job_api(**fields: Any) -> StubApi:
    doc = {"id": "j1", "state": "FAILED", "topic": "job.echo", "labels": {}, **fields}
    return StubApi().on("GET", "/api/v1/jobs/j1", reply(200, doc))


def assert_inert(output: str) -> None:
    for payload in ("\x1b]8", CLEAR, "\x9b", BIDI, BEL):
        assert payload not in output, f"{payload!r} reached the terminal"


# --- where the key goes ----------------------------------------------------------------

@pytest.mark.parametrize("environ", [
    {"CORDUM_API_KEY": PROD_KEY},
    {"CORDUM_API_KEY": PROD_KEY, "CORDUM_TENANT_ID": "default"},
    {"CORDUM_API_URL": PROD_URL},
    {"CORDUM_TENANT_ID": "default"},
], ids=["key", "key+tenant", "url", "tenant"])
def test_an_environment_key_never_goes_to_a_url_from_a_parent_local_env(
        planted: Path, environ: dict[str, str]) -> None:
    """Exploit: a production key in the environment and a ``.cordum/local.env`` in a parent
    folder (a cloned repository, a shared /tmp) naming another URL; cordumctl took the URL
    from the file and the key from the environment, and sent the key to the file's URL."""
    api = StubApi().on("GET", "/api/v1/jobs/j1", reply(200, {"id": "j1"}))
    out = run_cli(api, "jobs", "get", "j1", env=environ, cwd=planted)
    assert api.requests == [], f"sent {keys_sent(api)}"
    assert out.code == ExitCode.USAGE
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and "environment" in lines[0]
    missing = "CORDUM_API_KEY" if "CORDUM_API_URL" in environ else "CORDUM_API_URL"
    assert f"{missing} is not set" in lines[0]
    with pytest.raises(ConfigError, match=missing):
        resolve(environ=environ, cwd=planted)


def test_a_flag_key_never_goes_to_a_url_from_the_environment_or_a_file(planted: Path) -> None:
    """Exploit: ``--key <prod key>`` typed for one API, sent to the URL a stale environment
    or a planted local.env named."""
    for environ in ({}, {"CORDUM_API_URL": FILE_URL}):
        api = StubApi()
        out = run_cli(api, "--key", PROD_KEY, "jobs", "get", "j1", env=environ, cwd=planted)
        assert api.requests == [] and out.code == ExitCode.USAGE
        assert "--url" in out.err and PROD_KEY not in out.err


def test_a_flag_url_never_receives_the_environments_key(planted: Path) -> None:
    """Exploit: ``--url http://somewhere`` with a production key exported: the exported key
    went to the typed URL."""
    api = StubApi()
    env = {"CORDUM_API_URL": PROD_URL, "CORDUM_API_KEY": PROD_KEY}
    out = run_cli(api, "--url", FILE_URL, "jobs", "get", "j1", env=env, cwd=planted)
    assert api.requests == [] and out.code == ExitCode.USAGE
    assert "--key" in out.err and PROD_KEY not in out.err


def test_the_local_env_alone_still_works(planted: Path) -> None:
    """Keeps the fix from costing ``make up``'s no-setup use: an empty environment takes the
    URL, key and tenant together from the nearest local.env."""
    api = StubApi().on("GET", "/api/v1/jobs/j1", reply(200, {"id": "j1"}))
    out = run_cli(api, "jobs", "get", "j1", env={}, cwd=planted)
    assert out.code == 0, out.err
    sent = api.requests[-1]
    assert str(sent.url).startswith(FILE_URL)
    assert (sent.headers["X-API-Key"], sent.headers["X-Tenant-ID"]) == (FILE_KEY, "file-tenant")


def test_an_incomplete_local_env_is_refused_naming_what_is_missing(tmp_path: Path) -> None:
    """Exploit: a local.env naming only a URL, completed by a key from elsewhere."""
    path = write_local_env(tmp_path, CORDUM_API_URL=FILE_URL)
    api = StubApi()
    out = run_cli(api, "jobs", "get", "j1", env={}, cwd=tmp_path)
    assert api.requests == [] and out.code == ExitCode.USAGE
    assert "CORDUM_API_KEY" in out.err and str(path) in out.err


def test_a_complete_environment_never_reads_the_file(
        planted: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exploit: a planted local.env read (and so able to weigh in) although the environment
    names the URL, the key and the tenant."""
    def refuse(path: Path) -> dict[str, str]:
        raise AssertionError(f"{path} was read")

    monkeypatch.setattr(connection, "read_env_file", refuse)
    api = StubApi().on("GET", "/api/v1/jobs/j1", reply(200, {"id": "j1"}))
    env = {"CORDUM_API_URL": PROD_URL, "CORDUM_API_KEY": PROD_KEY, "CORDUM_TENANT_ID": "t1"}
    out = run_cli(api, "jobs", "get", "j1", env=env, cwd=planted)
    assert out.code == 0, out.err
    assert keys_sent(api) == [("http://prod.test", PROD_KEY)]


def test_all_three_flags_use_only_the_flags(planted: Path) -> None:
    """Exploit: a flag set completed from the environment or the file."""
    api = StubApi().on("GET", "/api/v1/jobs/j1", reply(200, {"id": "j1"}))
    env = {"CORDUM_API_URL": PROD_URL, "CORDUM_API_KEY": PROD_KEY, "CORDUM_TENANT_ID": "t1"}
    out = run_cli(api, "--url", "http://flag.test/prod", "--key", "k-flag", "--tenant", "t-flag",
                  "jobs", "get", "j1", env=env, cwd=planted)
    assert out.code == 0, out.err
    sent = api.requests[-1]
    assert str(sent.url).startswith("http://flag.test/prod/")
    assert (sent.headers["X-API-Key"], sent.headers["X-Tenant-ID"]) == ("k-flag", "t-flag")
    conn = resolve(url="http://flag.test/prod", key="k-flag", environ=env, cwd=planted)
    assert (conn.tenant, conn.source) == ("default", "flags")


# --- what server data may print ---------------------------------------------------------

def test_markup_in_a_jobs_fields_prints_literally() -> None:
    """Exploit: a worker's result, a policy reason or a label written as rich markup: a
    hidden hyperlink, a fake red banner, or a ``[/]`` that crashed the table."""
    api = job_api(result={"text": LINK}, safety_reason=BOLD, labels={"team": CLOSE},
                  error=CLOSE)
    out = run_cli(api, "jobs", "get", "j1", terminal=True)
    assert out.code == 0, out.err
    for literal in (LINK, BOLD, CLOSE):
        assert literal in out.out


def test_markup_in_lists_and_messages_prints_literally() -> None:
    """Exploit: markup in a topic, an approval's reason, a DLQ error, a cancel's reason or a
    submit's approval reason, shown in a table or a one-line message."""
    api = (StubApi()
           .on("GET", "/api/v1/jobs", reply(200, {"items": [
               {"id": "j1", "state": BOLD, "topic": LINK}]}))
           .on("GET", "/api/v1/approvals", reply(200, {"items": [
               {"job": {"id": "j1", "topic": "t"}, "policy_reason": LINK}]}))
           .on("GET", "/api/v1/dlq/page", reply(200, {"items": [
               {"job_id": "j1", "error": CLOSE, "reason_code": BOLD}]}))
           .on("POST", "/api/v1/jobs/j1/cancel", reply(200, {
               "id": "j1", "state": CLOSE, "reason": LINK}))
           .on("POST", "/api/v1/jobs", reply(200, {
               "job_id": BOLD, "status": "approval_required", "reason": LINK}))
           .on("POST", "/api/v1/dlq/j1/retry", reply(200, {"job_id": LINK})))
    for args, literals in [(["jobs", "list"], [BOLD, LINK]),
                           (["approvals", "list"], [LINK]),
                           (["dlq", "list"], [CLOSE, BOLD]),
                           (["jobs", "cancel", "j1"], [CLOSE, LINK]),
                           (["jobs", "submit", "job.echo", "hi"], [BOLD, LINK]),
                           (["dlq", "retry", "j1"], [LINK])]:
        out = run_cli(api, *args, terminal=True)
        assert out.code == 0, (args, out.err)
        for literal in literals:
            assert literal in out.out, (args, out.out)


def test_markup_in_watch_lines_prints_literally() -> None:
    """Exploit: a job's state or error, a run's step ids and step errors written as markup,
    shown by ``jobs watch``, ``jobs submit --wait``, ``runs watch`` and ``runs tree``."""
    jobs = (StubApi().on("POST", "/api/v1/jobs", reply(200, {"job_id": "j1"}))
            .on("GET", "/api/v1/jobs/j1", reply(200, {"id": "j1", "state": BOLD}),
                reply(200, {"id": "j1", "state": "FAILED", "error": LINK})))
    out = run_cli(jobs, "-o", "table", "jobs", "watch", "j1")
    assert out.code == ExitCode.FAILED and BOLD in out.out and LINK in out.out
    waited = run_cli(jobs, "jobs", "submit", "job.echo", "hi", "--wait")
    assert LINK in waited.err
    run = {"id": "r1", "workflow_id": LINK, "status": "failed", "error": BOLD,
           "steps": {CLOSE: {"status": "failed", "attempts": 1, "error": {"message": LINK}},
                     BOLD: {"status": BOLD}}}
    runs = StubApi().on("GET", "/api/v1/workflow-runs/r1", reply(200, run))
    for args, terminal in ((["runs", "tree", "r1"], True), (["runs", "watch", "r1"], True),
                           (["-o", "table", "runs", "watch", "r1"], False)):
        out = run_cli(runs, *args, terminal=terminal)
        assert CLOSE in out.out and BOLD in out.out, (args, out.out)
        if terminal:  # the tree's head names the workflow, and a step its error
            assert LINK in out.out, (args, out.out)


def test_markup_in_an_api_error_or_a_retry_line_prints_literally() -> None:
    """Exploit: an error message from the API written as markup, shown on stderr by the
    retry notice and the final error line."""
    api = (StubApi()
           .on("GET", "/api/v1/jobs/j1", error(503, BOLD, "down", retry_after=0),
               reply(200, {"id": "j1"}))
           .on("GET", "/api/v1/jobs/j2", error(404, LINK, "not_found")))
    out = run_cli(api, "jobs", "get", "j1")
    assert out.code == 0 and BOLD in out.err
    out = run_cli(api, "jobs", "get", "j2")
    assert out.code == ExitCode.NOT_FOUND and LINK in out.err


def test_markup_in_status_parts_prints_literally() -> None:
    """Exploit: a breaker's name or state, or the build version, written as markup."""
    body = {"redis": {"connected": True, "url": LINK}, "nats": {"connected": True},
            "workers": 1, "build": {"version": BOLD}, "uptime_seconds": 1.0,
            "circuit_breakers": {CLOSE: {"state": LINK}}}
    api = (StubApi().on("GET", "/api/v1/health", reply(200, {"status": "healthy"}))
           .on("GET", "/api/v1/status", reply(200, body)))
    out = run_cli(api, "status", terminal=True)
    assert out.code == 0, out.err
    assert LINK in out.out and BOLD in out.out and f"breaker {CLOSE}" in out.out


def test_control_characters_from_the_server_never_reach_the_terminal() -> None:
    """Exploit: escape sequences in a job's result, error or labels (an OSC 8 hyperlink, a
    clear screen, an 8-bit CSI, a bell, a right-to-left override) written to the terminal
    as they came, in a table, a watch line, an error line, or JSON on a terminal."""
    api = job_api(result=HOSTILE, error=HOSTILE, labels={"x": HOSTILE}, topic=HOSTILE)
    table = run_cli(api, "jobs", "get", "j1", terminal=True)
    assert table.code == 0
    assert_inert(table.out)
    assert "click" in table.out and "\\x1b" in table.out  # shown, not obeyed
    watched = run_cli(api, "-o", "table", "jobs", "watch", "j1")
    assert_inert(watched.out)
    failing = StubApi().on("GET", "/api/v1/jobs/j1", error(500, HOSTILE, "boom"))
    assert_inert(run_cli(failing, "jobs", "get", "j1").err)
    # JSON stays the same data, with the controls escaped
    as_json = run_cli(api, "-o", "json", "jobs", "get", "j1", terminal=True)
    assert_inert(as_json.out)
    assert json.loads(as_json.out)["result"] == HOSTILE
    as_yaml = run_cli(api, "-o", "yaml", "jobs", "get", "j1", terminal=True)
    assert_inert(as_yaml.out)
    assert yaml.safe_load(as_yaml.out)["result"] == HOSTILE
