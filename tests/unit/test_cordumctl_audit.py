"""cordumctl's audit commands against a stub API: the tail's polls, the search's
filters and pages, and verify's findings and exit code."""

from __future__ import annotations

import httpx

from cordumctl.errors import ExitCode
from tests.cordumctl_stub import StubApi, error, reply, run_cli

EVENTS = "/api/v1/audit/events"
VERIFY = "/api/v1/audit/verify"


def ev(seq: int, type_: str = "approval.approve", **over: object) -> dict[str, object]:
    base: dict[str, object] = {
        "seq": seq, "hash": f"{seq:064x}", "type": type_, "severity": "HIGH",
        "tenant": "default", "actor": "alice", "actor_key": "k1",
        "at": 1_767_225_600_000_000 + seq, "occurred_at": "2026-01-01T00:00:00Z",
        "job_id": f"job-{seq}", "reason": f"act {seq}"}
    base.update(over)
    return base


def page(*items: dict[str, object], cursor: str | None = None) -> httpx.Response:
    return reply(200, {"items": list(items), "next_cursor": cursor, "returned": len(items)})


# --- search ------------------------------------------------------------------------------

def test_search_sends_the_filters_and_prints_a_table() -> None:
    api = StubApi().on("GET", EVENTS, page(ev(2), ev(1, "job.submit", job_id="", run_id="r-1")))
    out = run_cli(api, "-o", "table", "audit", "search", "--type", "job.*", "--severity",
                  "high", "--actor", "alice", "--job", "j", "--run", "r", "--from",
                  "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z", "-s", "deploy",
                  "--limit", "5").out
    [sent] = api.sent("GET", EVENTS)
    assert dict(sent.url.params) == {
        "type": "job.*", "severity": "high", "actor": "alice", "job_id": "j", "run_id": "r",
        "from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z", "search": "deploy",
        "limit": "5"}
    header, first, second = out.splitlines()[:3]
    assert header.split() == ["SEQ", "TIME", "SEVERITY", "TYPE", "ACTOR", "JOB/RUN", "REASON"]
    assert first.split()[:6] == ["2", "2026-01-01T00:00:00Z", "HIGH", "approval.approve",
                                 "alice", "job-2"]
    assert second.split()[5] == "r-1"


def test_search_follows_next_cursor_with_all_and_stops_at_the_first_page_without() -> None:
    api = StubApi().on("GET", EVENTS, page(ev(3), cursor="3"), page(ev(2), cursor="2"),
                       page(ev(1)))
    assert [e["seq"] for e in run_cli(api, "audit", "search", "--all").json()] == [3, 2, 1]
    assert [r.url.params.get("cursor") for r in api.sent("GET", EVENTS)] == [None, "3", "2"]
    api = StubApi().on("GET", EVENTS, page(ev(3), cursor="3"))
    assert [e["seq"] for e in run_cli(api, "audit", "search").json()] == [3]
    assert len(api.sent("GET", EVENTS)) == 1


def test_search_refused_by_the_api_exits_with_its_code() -> None:
    api = StubApi().on("GET", EVENTS, error(400, "from is after to", "INVALID_RANGE"))
    result = run_cli(api, "audit", "search", "--from", "2026-02-01T00:00:00Z",
                     "--to", "2026-01-01T00:00:00Z")
    assert result.code == ExitCode.INVALID
    assert "from is after to" in result.err
    denied = StubApi().on("GET", EVENTS, error(403, "forbidden", "forbidden"))
    assert run_cli(denied, "audit", "search").code == ExitCode.AUTH


def test_search_with_nothing_found_says_so() -> None:
    api = StubApi().on("GET", EVENTS, page())
    assert "no audit events" in run_cli(api, "-o", "table", "audit", "search").out


# --- tail --------------------------------------------------------------------------------

def test_tail_starts_at_the_newest_polls_every_2_s_and_prints_new_events_oldest_first() -> None:
    api = StubApi().on(
        "GET", EVENTS,
        page(ev(10)),                                       # the newest when it starts
        page(ev(10)),                                       # poll 1: nothing new
        page(ev(12), ev(11, reason="second"), ev(10)),      # poll 2: two new
        page(ev(14, "audit.read"), ev(13, severity="LOW"), ev(12)))  # poll 3
    result = run_cli(api, "-o", "table", "audit", "tail", "--count", "3")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert [line.split()[4] for line in lines] == ["job-11", "job-12", "job-13"]
    assert lines[0].split()[:4] == ["2026-01-01T00:00:00Z", "HIGH", "approval.approve", "alice"]
    assert lines[0].endswith("second")
    assert result.sleeps == [2.0, 2.0, 2.0]
    # The first read asks for the newest event only; the polls for a small page.
    assert [r.url.params.get("limit") for r in api.sent("GET", EVENTS)] == ["1", "20", "20",
                                                                           "20"]


def test_tail_follows_the_cursor_while_every_event_of_a_page_is_new() -> None:
    api = StubApi().on("GET", EVENTS, page(ev(5)), page(ev(8), ev(7), cursor="7"),
                       page(ev(6), ev(5), cursor="5"))
    result = run_cli(api, "audit", "tail", "--count", "3")
    assert [line for line in result.out.splitlines() if line.startswith('  "seq"')] == [
        '  "seq": 6,', '  "seq": 7,', '  "seq": 8,']
    assert [r.url.params.get("cursor") for r in api.sent("GET", EVENTS)] == [None, None, "7"]


def test_tail_filters_and_hides_its_own_reads_unless_asked() -> None:
    def answers() -> StubApi:
        return StubApi().on("GET", EVENTS, page(ev(1)), page(
            ev(5, "job.fail", severity="CRITICAL"), ev(4, "audit.read", severity="INFO"),
            ev(3, "job.submit", actor="bob"), ev(2, "job.submit"), ev(1)))

    shown = run_cli(answers(), "-o", "table", "audit", "tail", "--type", "job.*",
                    "--actor", "alice", "--count", "2").out.splitlines()
    assert [line.split()[2] for line in shown] == ["job.submit", "job.fail"]
    reads = run_cli(answers(), "-o", "table", "audit", "tail", "--show-reads",
                    "--severity", "info", "--count", "1").out.splitlines()
    assert [line.split()[2] for line in reads] == ["audit.read"]


def test_ctrl_c_ends_a_tail_cleanly() -> None:
    calls = []

    def newest(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) > 2:
            raise KeyboardInterrupt
        return page(ev(1))

    api = StubApi().on("GET", EVENTS, newest)
    result = run_cli(api, "audit", "tail")
    assert (result.code, result.out) == (0, "")


# --- verify ------------------------------------------------------------------------------

def verified(status: str, gaps: list[dict[str, object]] | None = None) -> httpx.Response:
    return reply(200, {"status": status, "tenant": "default", "total_events": 5,
                       "verified_events": 5 - len(gaps or []), "first_seq": 1, "last_seq": 5,
                       "gaps": gaps or [], "hmac_verified": True, "gaps_truncated": False,
                       "exported_through_seq": None, "exported": None,
                       "checked_at": "2026-01-01T00:00:00Z"})


def test_verify_ok_prints_the_status_and_exits_0() -> None:
    result = run_cli(StubApi().on("GET", VERIFY, verified("ok")), "-o", "table", "audit",
                     "verify")
    assert result.code == 0
    assert result.out.splitlines()[0].split() == ["STATUS", "ok"]
    partial = run_cli(StubApi().on("GET", VERIFY, verified("partial")), "audit", "verify")
    assert (partial.code, partial.json()["status"]) == (0, "partial")


def test_verify_compromised_prints_each_gap_and_exits_non_zero() -> None:
    gaps = [{"at_seq": 2, "type": "hash_mismatch"}, {"at_seq": 4, "type": "missing",
                                                       "count": 2}]
    result = run_cli(StubApi().on("GET", VERIFY, verified("compromised", gaps)), "-o", "table",
                     "audit", "verify")
    assert result.code == ExitCode.FAILED != 0
    assert "seq 2: hash_mismatch" in result.out
    assert "seq 4: missing (x2)" in result.out
    as_json = run_cli(StubApi().on("GET", VERIFY, verified("compromised", gaps)), "audit",
                      "verify")
    assert as_json.code == ExitCode.FAILED and as_json.json()["gaps"] == gaps
