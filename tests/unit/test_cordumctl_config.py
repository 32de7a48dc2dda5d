"""cordumctl's config commands against a stub API: get's scope and envelope, set's
pairs, file, dotted keys and revision, effective's ids, and the exit codes of refusals."""

from __future__ import annotations

import json

import pytest
import typer

from cordumctl.commands.config import parse_pairs, parse_value
from cordumctl.errors import ExitCode
from tests.cordumctl_stub import StubApi, error, reply, run_cli

CONFIG = "/api/v1/config"
EFFECTIVE = "/api/v1/config/effective"
DOC = {"scope": "team", "scope_id": "blue", "revision": 4, "updated_at": "2026-01-01T00:00:00Z",
       "data": {"safety": {"denied_topics": ["job.a"], "mode": "enforce"}, "n": 1}}


def test_get_asks_for_the_envelope_of_the_scope_and_id() -> None:
    api = StubApi().on("GET", CONFIG, reply(200, DOC))
    assert run_cli(api, "config", "get", "--scope", "team", "--id", "blue").json() == DOC
    [sent] = api.sent("GET", CONFIG)
    assert dict(sent.url.params) == {"scope": "team", "scope_id": "blue", "envelope": "true"}
    out = run_cli(api, "-o", "table", "config", "get", "--scope", "team", "--id", "blue").out
    lines = out.splitlines()
    assert lines[0].split() == ["SCOPE", "team"] and lines[2].split() == ["REVISION", "4"]
    assert json.loads(out[out.index("{"):]) == DOC["data"]


def test_get_defaults_to_system_default() -> None:
    api = StubApi().on("GET", CONFIG, reply(200, {}))
    assert run_cli(api, "config", "get").json() == {}
    assert dict(api.sent("GET", CONFIG)[0].url.params) == {"scope": "system",
                                                           "envelope": "true"}


def test_set_sends_pairs_as_json_values_with_the_revision() -> None:
    api = StubApi().on("PUT", CONFIG, reply(204))
    result = run_cli(api, "config", "set", "--scope", "team", "--id", "blue", "--revision", "4",
                     "n=5", "mode=enforce", "on=true", 'topics=["job.x"]')
    assert result.code == 0
    assert api.body("PUT", CONFIG) == {
        "scope": "team", "scope_id": "blue", "revision": 4,
        "data": {"n": 5, "mode": "enforce", "on": True, "topics": ["job.x"]}}
    assert result.json() == {"scope": "team", "scope_id": "blue",
                             "set": ["mode", "n", "on", "topics"]}
    assert not api.sent("GET", CONFIG)  # no dotted key: nothing to read first


def test_a_dotted_key_reads_the_member_and_sends_it_whole_with_the_revision_read() -> None:
    api = StubApi().on("GET", CONFIG, reply(200, DOC)).on("PUT", CONFIG, reply(204))
    run_cli(api, "config", "set", "--scope", "team", "--id", "blue",
            'safety.denied_topics=["job.x.*"]', "safety.limits.max=3")
    assert api.body("PUT", CONFIG) == {
        "scope": "team", "scope_id": "blue", "revision": 4,
        "data": {"safety": {"denied_topics": ["job.x.*"], "mode": "enforce",
                            "limits": {"max": 3}}}}


def test_set_takes_a_file_and_the_pairs_win(tmp_path) -> None:
    file = tmp_path / "cfg.yaml"
    file.write_text("safety:\n  allowed_topics: [job.a]\nn: 1\n")
    api = StubApi().on("PUT", CONFIG, reply(204))
    out = run_cli(api, "-o", "table", "config", "set", "-f", str(file), "n=2").out
    assert api.body("PUT", CONFIG) == {
        "scope": "system", "scope_id": "",
        "data": {"safety": {"allowed_topics": ["job.a"]}, "n": 2}}
    assert "set n, safety in config system/default" in out


def test_set_refusals_exit_with_their_codes() -> None:
    stale = StubApi().on("PUT", CONFIG, error(409, "config is at revision 5, not 4",
                                               "config_version_conflict"))
    result = run_cli(stale, "config", "set", "--scope", "team", "--id", "b", "--revision", "4",
                     "n=1")
    assert result.code == ExitCode.CONFLICT and "revision 5" in result.err
    denied = StubApi().on("PUT", CONFIG, error(403, "forbidden", "forbidden"))
    assert run_cli(denied, "config", "set", "n=1").code == ExitCode.AUTH
    big = StubApi().on("PUT", CONFIG, error(400, "too large", "config_too_large"))
    assert run_cli(big, "config", "set", "n=1").code == ExitCode.INVALID
    assert run_cli(StubApi(), "config", "set").code == ExitCode.USAGE
    assert run_cli(StubApi(), "config", "set", "--scope", "galaxy", "n=1").code == \
        ExitCode.USAGE
    assert run_cli(StubApi(), "config", "set", "novalue").code == ExitCode.USAGE


def test_effective_sends_the_ids_and_prints_the_snapshot() -> None:
    snap = {"version": "system:1|org:0|team:2|workflow:0|step:0", "hash": "ab" * 32,
            "data": {"n": 1}}
    api = StubApi().on("GET", EFFECTIVE, reply(200, snap))
    assert run_cli(api, "config", "effective", "--team", "blue", "--workflow", "wf",
                   "--step", "s1").json() == snap
    assert dict(api.sent("GET", EFFECTIVE)[0].url.params) == {
        "team_id": "blue", "workflow_id": "wf", "step_id": "s1"}
    out = run_cli(api, "-o", "table", "config", "effective").out
    assert out.splitlines()[0].split() == ["VERSION", snap["version"]]
    assert "team_id" not in api.sent("GET", EFFECTIVE)[-1].url.params


def test_values_and_pairs_parse() -> None:
    assert parse_value("5") == 5 and parse_value("x y") == "x y" and parse_value("null") is None
    assert parse_pairs(["a.b=1", "c= text"]) == {"a.b": 1, "c": " text"}
    for bad in ("a", "=1", "a..b=1", ".a=1"):
        with pytest.raises(typer.BadParameter):
            parse_pairs([bad])
