"""cordumctl's global options (--output, --url, --key, --tenant, --stream-url) before the
command or after it, for every command, and where the stream's URL comes from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.core import TyperGroup

from cordumctl.app import app
from cordumctl.connection import resolve
from cordumctl.errors import ExitCode
from tests.cordumctl_stub import API_KEY, ENV, StubApi, reply, run_cli

JOB = {"id": "j1", "state": "SUCCEEDED", "topic": "job.echo", "labels": {}}
GLOBAL = {"--url", "--key", "--tenant", "--stream-url", "--output", "-o"}


def api() -> StubApi:
    return StubApi().on("GET", "/api/v1/jobs/j1", reply(200, JOB))


def fmt(out: str) -> str:
    """Which format ``jobs get`` printed."""
    try:
        json.loads(out)
        return "json"
    except ValueError:
        pass
    return "table" if out.startswith("id ") else "yaml" if yaml.safe_load(out) else "?"


@pytest.mark.parametrize("args,expected", [
    (["jobs", "get", "j1", "--output", "json"], "json"),
    (["jobs", "get", "j1", "-o", "table"], "table"),
    (["jobs", "get", "--output", "YAML", "j1"], "yaml"),
    (["-o", "table", "jobs", "get", "j1"], "table"),
    (["jobs", "-o", "table", "get", "j1"], "table"),
    (["-o", "yaml", "jobs", "get", "j1", "-o", "table"], "table"),  # the later one wins
    (["-o", "table", "jobs", "-o", "yaml", "get", "j1", "-o", "json"], "json"),
])
def test_output_is_taken_before_the_command_after_it_or_between(
        args: list[str], expected: str) -> None:
    out = run_cli(api(), *args, terminal=expected != "table")
    assert out.code == 0, out.err
    assert fmt(out.out) == expected


def test_connection_flags_after_the_command_are_the_flags() -> None:
    stub = api()
    out = run_cli(stub, "jobs", "get", "j1", "--url", "http://other/prod", "--key", "k2",
                  "--tenant", "t2")
    assert out.code == 0
    sent = stub.requests[-1]
    assert str(sent.url) == "http://other/prod/api/v1/jobs/j1"
    assert (sent.headers["X-API-Key"], sent.headers["X-Tenant-ID"]) == ("k2", "t2")
    # one flag before the command, one after: still flags only, and both count
    assert run_cli(stub, "--url", "http://third/prod", "jobs", "get", "j1", "--key", "k3"
                   ).code == 0
    assert str(stub.requests[-1].url) == "http://third/prod/api/v1/jobs/j1"
    assert stub.requests[-1].headers["X-API-Key"] == "k3"


def test_a_flag_after_the_command_without_its_pair_is_a_usage_error() -> None:
    out = run_cli(api(), "jobs", "get", "j1", "--url", "http://other")
    assert out.code == ExitCode.USAGE
    assert "--key is not given" in out.err and API_KEY not in out.err


@pytest.mark.parametrize("args", [["jobs", "get", "j1", "--output", "xml"],
                                  ["jobs", "get", "j1", "--nope"],
                                  ["jobs", "get", "j1", "--url"]])
def test_bad_global_options_after_the_command_are_usage_errors(args: list[str]) -> None:
    stub = api()
    assert run_cli(stub, *args).code == ExitCode.USAGE and stub.requests == []


def test_watch_takes_its_output_after_the_command_too() -> None:
    stub = StubApi().on("GET", "/api/v1/jobs/j1", reply(200, {**JOB, "state": "RUNNING"}),
                        reply(200, JOB))
    out = run_cli(stub, "jobs", "watch", "j1", "-o", "json", terminal=True)
    assert [json.loads(line)["state"] for line in out.out.splitlines()] == ["RUNNING",
                                                                           "SUCCEEDED"]


def commands(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = []
    for name, command in group.commands.items():
        found.append(((*prefix, name), command))
        if isinstance(command, TyperGroup):
            found += commands(command, (*prefix, name))
    return found


def test_every_command_and_group_takes_the_global_options_once() -> None:
    root = typer.main.get_command(app)
    below = commands(root)
    assert len(below) > 25 and ("events",) in dict(below)
    for path, command in below:
        opts = [o for p in command.params for o in (*p.opts, *p.secondary_opts)]
        assert GLOBAL <= set(opts), path
        assert len(opts) == len(set(opts)), f"{path} declares an option twice"
    root_opts = {o for p in root.params for o in p.opts}
    assert GLOBAL <= root_opts


@pytest.mark.parametrize("path", [["jobs", "get"], ["runs", "watch"], ["events"], ["status"]])
def test_each_commands_help_lists_the_global_options(
        path: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(StubApi(), *path, "--help").code == 0
    shown = capsys.readouterr().out  # help goes to the process's stdout
    assert "Global options" in shown and "--stream-url" in shown and "--output" in shown


# --- the stream's URL ------------------------------------------------------------------

def test_the_stream_url_flag_goes_with_the_other_flags() -> None:
    stub = StubApi()
    out = run_cli(stub, "events", "--url", "http://api.test/prod", "--key", "k9",
                  "--stream-url", "http://stream.test/s/")
    assert out.code == ExitCode.UNAVAILABLE  # the stub serves no stream
    sent = stub.requests[-1]
    assert str(sent.url) == "http://stream.test/s/api/v1/stream"
    assert sent.headers["X-API-Key"] == "k9" and sent.headers["Accept"] == "text/event-stream"
    # without it, the stream is at the API's URL
    run_cli(stub, "events")
    assert str(stub.requests[-1].url) == "http://api.test/prod/api/v1/stream"
    assert stub.requests[-1].headers["X-API-Key"] == API_KEY


def test_a_stream_url_alone_sends_no_key_anywhere(tmp_path: Path) -> None:
    # --stream-url is a flag: the URL and key must be flags too
    stub = StubApi()
    out = run_cli(stub, "events", "--stream-url", "http://elsewhere")
    assert out.code == ExitCode.USAGE and "--url is not given" in out.err
    # CORDUM_STREAM_URL is the environment: the URL and key must be set there too
    out = run_cli(stub, "events", env={"CORDUM_STREAM_URL": "http://elsewhere"}, cwd=tmp_path)
    assert out.code == ExitCode.USAGE and "CORDUM_API_URL is not set in the environment, " \
        "which sets CORDUM_STREAM_URL" in out.err
    assert stub.requests == []


def test_the_stream_url_is_read_from_the_same_place_as_the_rest(tmp_path: Path) -> None:
    (tmp_path / ".cordum").mkdir()
    (tmp_path / ".cordum" / "local.env").write_text(
        "CORDUM_API_URL=http://api\nCORDUM_API_KEY=k\nCORDUM_STREAM_URL=http://stream:9/\n")
    conn = resolve(environ={}, cwd=tmp_path)
    assert conn.stream_url == "http://stream:9" and conn.for_stream().url == "http://stream:9"
    assert conn.for_stream().key == "k"
    env = resolve(environ={**ENV, "CORDUM_STREAM_URL": "http://s2"}, cwd=tmp_path)
    assert env.for_stream().url == "http://s2"
    # the environment decides, so the file's stream URL is not taken
    assert resolve(environ=ENV, cwd=tmp_path).for_stream().url == ENV["CORDUM_API_URL"]
    assert "k'" not in repr(conn) and "key='***'" in repr(conn)
