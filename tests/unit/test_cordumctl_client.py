"""cordumctl's connection settings, HTTP client and error lines, against a stub API."""

from __future__ import annotations

from pathlib import Path

import pytest

from cordumctl.client import RetryPolicy, retry_after_s
from cordumctl.connection import resolve
from cordumctl.errors import ConfigError, ExitCode
from tests.cordumctl_stub import API_KEY, API_URL, ENV, StubApi, error, reply, run_cli

JOB = {"id": "j1", "state": "SUCCEEDED", "topic": "job.echo", "labels": {}}


def write_local_env(folder: Path, **values: str) -> None:
    (folder / ".cordum").mkdir(parents=True)
    lines = ["# Written by `make up`"] + [f"{k}={v}" for k, v in values.items()]
    (folder / ".cordum" / "local.env").write_text("\n".join(lines) + "\n")


# --- connection ------------------------------------------------------------------------

def test_settings_come_from_the_nearest_local_env_in_a_parent(tmp_path: Path) -> None:
    # Given a local.env at the root and a command run two folders below it
    write_local_env(tmp_path, CORDUM_API_URL="http://x/prod/", CORDUM_API_KEY="k1",
                    CORDUM_TENANT_ID="t1")
    below = tmp_path / "a" / "b"
    below.mkdir(parents=True)
    # When the connection is resolved with nothing in the environment
    conn = resolve(environ={}, cwd=below)
    # Then the file's values are used (the URL without its trailing slash)
    assert (conn.url, conn.key, conn.tenant) == ("http://x/prod", "k1", "t1")


def test_environment_beats_the_file_and_flags_beat_both(tmp_path: Path) -> None:
    write_local_env(tmp_path, CORDUM_API_URL="http://file", CORDUM_API_KEY="kf")
    env = {"CORDUM_API_URL": "http://env", "CORDUM_API_KEY": "ke"}
    assert resolve(environ=env, cwd=tmp_path).url == "http://env"
    conn = resolve(url="http://flag", key="kk", tenant="tt", environ=env, cwd=tmp_path)
    assert (conn.url, conn.key, conn.tenant) == ("http://flag", "kk", "tt")
    # the tenant falls back to default
    assert resolve(environ=env, cwd=tmp_path).tenant == "default"


def test_a_missing_url_or_key_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="CORDUM_API_URL"):
        resolve(environ={}, cwd=tmp_path)
    with pytest.raises(ConfigError, match="CORDUM_API_KEY"):
        resolve(environ={"CORDUM_API_URL": "http://x"}, cwd=tmp_path)
    out = run_cli(StubApi(), "jobs", "get", "j1", env={}, cwd=tmp_path)
    assert out.code == ExitCode.USAGE and "CORDUM_API_URL is not set" in out.err


def test_every_call_carries_the_key_and_tenant_headers_and_the_flags_win() -> None:
    api = StubApi().on("GET", "/api/v1/jobs/j1", reply(200, JOB))
    run_cli(api, "jobs", "get", "j1")
    sent = api.requests[-1]
    assert str(sent.url) == f"{API_URL}/api/v1/jobs/j1"
    assert sent.headers["X-API-Key"] == API_KEY and sent.headers["X-Tenant-ID"] == "default"
    run_cli(api, "--url", "http://other/stage", "--key", "k2", "--tenant", "t2",
            "jobs", "get", "j1")
    sent = api.requests[-1]
    assert str(sent.url).startswith("http://other/stage/api/v1/jobs/j1")
    assert (sent.headers["X-API-Key"], sent.headers["X-Tenant-ID"]) == ("k2", "t2")


# --- retries ---------------------------------------------------------------------------

def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after_s("3") == 3.0
    assert retry_after_s("0.5") == 0.5
    assert retry_after_s(None) is None and retry_after_s("soon") is None
    assert retry_after_s("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0


@pytest.mark.parametrize("status,code", [(429, "rate_limited"), (503, "store_unavailable")])
def test_429_and_503_are_sent_again_after_the_servers_retry_after(status: int, code: str) -> None:
    # Given an API that answers twice with Retry-After, then the job
    api = StubApi().on("GET", "/api/v1/jobs/j1",
                       error(status, "try later", code, retry_after=2, unavailable="redis"),
                       error(status, "try later", code, retry_after=3, unavailable="redis"),
                       reply(200, JOB))
    # When the job is read
    out = run_cli(api, "jobs", "get", "j1")
    # Then the command waited what the server asked and succeeded on the third call
    assert out.code == 0 and out.sleeps == [2.0, 3.0]
    assert len(api.requests) == 3 and out.json()["id"] == "j1"
    assert f"{status} try later ({code})" in out.err and "retrying in 2s" in out.err


def test_a_post_is_retried_on_503_too_since_nothing_was_done() -> None:
    api = StubApi().on("POST", "/api/v1/jobs",
                       error(503, "policy check unavailable: down", "policy_unavailable",
                             retry_after=1, unavailable="safety-kernel"),
                       reply(200, {"job_id": "j9", "trace_id": "t"}))
    out = run_cli(api, "jobs", "submit", "job.echo", "hi")
    assert out.code == 0 and out.json()["job_id"] == "j9" and out.sleeps == [1.0]
    assert len(api.sent("POST", "/api/v1/jobs")) == 2


def test_retries_stop_after_max_attempts_with_the_kinds_exit_code() -> None:
    api = StubApi().on("GET", "/api/v1/jobs/j1",
                       error(503, "store unavailable", "store_unavailable", retry_after=1,
                             unavailable="redis"))
    out = run_cli(api, "jobs", "get", "j1", retry=RetryPolicy(max_attempts=3))
    assert out.code == ExitCode.UNAVAILABLE and len(api.requests) == 3
    assert out.err.strip().splitlines()[-1] == (
        "cordumctl: 503 store unavailable (store_unavailable); unavailable: redis")


def test_a_long_retry_after_is_capped_and_the_budget_bounds_the_waits() -> None:
    api = StubApi().on("GET", "/api/v1/jobs/j1", error(429, "rate limited", "rate_limited",
                                                       retry_after=500))
    out = run_cli(api, "jobs", "get", "j1",
                  retry=RetryPolicy(max_attempts=10, max_delay_s=30, budget_s=70))
    assert out.code == ExitCode.RATE_LIMITED and out.sleeps == [30.0, 30.0]


def test_other_errors_are_not_retried() -> None:
    api = StubApi().on("GET", "/api/v1/jobs/j1", error(500, "boom", "internal"))
    out = run_cli(api, "jobs", "get", "j1")
    assert out.code == ExitCode.ERROR and len(api.requests) == 1 and out.sleeps == []


# --- errors ----------------------------------------------------------------------------

@pytest.mark.parametrize("status,message,code,exit_code", [
    (400, "prompt: field required", "invalid_request", ExitCode.INVALID),
    (401, "unauthorized", "unauthorized", ExitCode.AUTH),
    (403, "tenant access denied", "forbidden", ExitCode.AUTH),
    (404, "job not found", "not_found", ExitCode.NOT_FOUND),
    (409, "approval already resolved", "approval_already_resolved", ExitCode.CONFLICT),
    (413, "body too large", "payload_too_large", ExitCode.INVALID),
])
def test_an_error_is_one_line_with_the_apis_error_and_code(
        status: int, message: str, code: str, exit_code: ExitCode) -> None:
    api = StubApi().on("GET", "/api/v1/jobs/j1", error(status, message, code))
    out = run_cli(api, "jobs", "get", "j1")
    assert out.code == exit_code
    assert out.err == f"cordumctl: {status} {message} ({code})\n" and out.out == ""


def test_an_unreachable_api_is_unavailable_in_one_line() -> None:
    import httpx

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    api = StubApi().on("GET", "/api/v1/jobs/j1", refuse)
    out = run_cli(api, "jobs", "get", "j1")
    assert out.code == ExitCode.UNAVAILABLE
    assert out.err.startswith(f"cordumctl: cannot reach {API_URL}: ConnectError")
    assert len(out.err.strip().splitlines()) == 1


# --- the key is never printed ----------------------------------------------------------

def test_the_key_is_never_printed(tmp_path: Path) -> None:
    # Given answers that fail in every way the CLI reports, and ones that succeed
    import httpx

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"refused {request.url}", request=request)

    api = (StubApi()
           .on("GET", "/api/v1/jobs/j1", reply(200, JOB))
           .on("GET", "/api/v1/jobs/j2", error(401, "unauthorized", "unauthorized"))
           .on("GET", "/api/v1/jobs/j3", refuse)
           .on("GET", "/api/v1/jobs/j4", error(503, "down", "store_unavailable", retry_after=0)))
    outputs = []
    for fmt in ("json", "yaml", "table"):
        for job in ("j1", "j2", "j3", "j4"):
            outputs.append(run_cli(api, "-o", fmt, "jobs", "get", job))
            outputs.append(run_cli(api, "--key", "flag-key-123456", "-o", fmt, "jobs", "get", job))
    outputs.append(run_cli(api, "--help"))
    # Then neither the environment's key nor a flag's key appears on stdout or stderr
    for out in outputs:
        assert API_KEY not in out.out + out.err
        assert "flag-key-123456" not in out.out + out.err
    # and a connection's repr masks it
    assert API_KEY not in repr(resolve(environ=ENV, cwd=tmp_path))
