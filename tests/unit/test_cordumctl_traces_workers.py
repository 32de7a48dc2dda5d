"""``cordumctl traces get`` and ``cordumctl workers [get]`` against a stub API: what they
send, what they print, their exit codes; bare ``cordumctl workers`` still lists."""

from __future__ import annotations

from cordumctl.errors import ExitCode
from tests.cordumctl_stub import StubApi, error, reply, run_cli

T0 = "2026-01-01T00:00:00Z"
TRACE = [  # as the API answers: newest first
    {"id": "j3", "state": "RUNNING", "topic": "job.c", "trace_id": "t1", "worker_id": "w-1",
     "created_at": "2026-01-01T00:00:05Z", "started_at": "2026-01-01T00:00:06.500000Z",
     "completed_at": None, "updated_at": "2026-01-01T00:00:06.500000Z"},
    {"id": "j2", "state": "FAILED", "topic": "job.b", "trace_id": "t1", "worker_id": "w-2",
     "created_at": "2026-01-01T00:00:01Z", "started_at": "2026-01-01T00:00:02Z",
     "completed_at": "2026-01-01T00:03:02Z", "updated_at": "2026-01-01T00:03:02Z"},
    {"id": "j1", "state": "SUCCEEDED", "topic": "job.a", "trace_id": "t1", "worker_id": "w-1",
     "created_at": T0, "started_at": "2026-01-01T00:00:00.200000Z",
     "completed_at": "2026-01-01T00:00:00.900000Z", "updated_at": "2026-01-01T00:00:00.9Z"},
]
WORKER = {"worker_id": "w-1", "pool": "echo", "active_jobs": 1, "max_parallel_jobs": 4,
          "cpu_load": 10.0, "heartbeat_age_seconds": 1.5, "online": True,
          "capabilities": ["echo"], "labels": {"zone": "a"}}
RECORDS = {"items": [
    {"id": "j3", "state": "RUNNING", "topic": "job.c", "trace_id": "t1", "worker_id": "w-1",
     "updated_at": 1_767_225_606_500_000},
    {"id": "j1", "state": "SUCCEEDED", "topic": "job.a", "trace_id": "t1", "worker_id": "w-1",
     "updated_at": 1_767_225_600_900_000}]}


def lines(out: str) -> list[str]:
    return [line.rstrip() for line in out.splitlines() if line.strip()]


# --- traces ----------------------------------------------------------------------------

def test_traces_get_prints_a_time_line_oldest_first_relative_to_the_first_job() -> None:
    api = StubApi().on("GET", "/api/v1/traces/t1", reply(200, TRACE, {
        "X-Total-Count": "3", "X-Has-More": "false"}))
    out = run_cli(api, "-o", "table", "traces", "get", "t1")
    assert out.code == 0, out.err
    rows = lines(out.out)
    assert "trace t1, from 2026-01-01T00:00:00+00:00" in rows[0]
    assert rows[1].split() == ["JOB", "STATE", "TOPIC", "CREATED", "STARTED", "COMPLETED",
                               "WORKER"]
    assert rows[2].split() == ["j1", "SUCCEEDED", "job.a", "+0.0s", "+0.2s", "+0.9s", "w-1"]
    assert rows[3].split() == ["j2", "FAILED", "job.b", "+1.0s", "+2.0s", "+3m02s", "w-2"]
    assert rows[4].split() == ["j3", "RUNNING", "job.c", "+5.0s", "+6.5s", "-", "w-1"]
    assert len(rows) == 5  # nothing left out, nothing said


def test_traces_get_as_json_is_the_answer_and_says_when_jobs_were_left_out() -> None:
    api = StubApi().on("GET", "/api/v1/traces/t1", reply(200, TRACE[:1], {
        "X-Total-Count": "250", "X-Has-More": "true"}))
    assert run_cli(api, "traces", "get", "t1").json() == TRACE[:1]
    table = run_cli(api, "-o", "table", "traces", "get", "t1").out
    assert "the newest 1 of 250 jobs" in table


def test_traces_get_of_an_unknown_trace_exits_4_and_ids_stay_one_segment() -> None:
    api = StubApi().on("GET", "/api/v1/traces/nope", error(404, "trace not found",
                                                           "trace_not_found"))
    out = run_cli(api, "traces", "get", "nope")
    assert out.code == ExitCode.NOT_FOUND and "trace not found" in out.err
    run_cli(api, "traces", "get", "a/b")
    assert api.requests[-1].url.raw_path == b"/prod/api/v1/traces/a%2Fb"


# --- workers ---------------------------------------------------------------------------

def test_bare_workers_still_lists_and_filters_by_pool() -> None:
    api = StubApi().on("GET", "/api/v1/workers", reply(200, {"items": [
        WORKER, {**WORKER, "worker_id": "gpu-1", "pool": "gpu"}]}))
    assert [w["worker_id"] for w in run_cli(api, "workers").json()["items"]] == ["w-1", "gpu-1"]
    assert [w["worker_id"] for w in run_cli(api, "workers", "--pool", "gpu").json()["items"]] \
        == ["gpu-1"]
    assert "1/4  cpu 10%" in run_cli(api, "-o", "table", "workers").out
    assert run_cli(api, "workers", "-o", "json").code == 0


def test_workers_get_shows_the_worker_and_its_jobs() -> None:
    api = (StubApi().on("GET", "/api/v1/workers/w-1", reply(200, WORKER))
           .on("GET", "/api/v1/workers/w-1/jobs", reply(200, RECORDS)))
    out = run_cli(api, "workers", "get", "w-1", "--limit", "5")
    assert out.code == 0 and out.json() == {"worker": WORKER, "jobs": RECORDS["items"]}
    assert api.sent("GET", "/api/v1/workers/w-1/jobs")[-1].url.params["limit"] == "5"
    table = run_cli(api, "-o", "table", "workers", "get", "w-1").out
    assert "pool" in table and "echo" in table and '{"zone":"a"}' in table
    assert "j3" in table and "RUNNING" in table and " ago" in table
    assert table.index("j3") < table.index("j1")  # newest first, as the API answers
    assert api.sent("GET", "/api/v1/workers/w-1/jobs")[-1].url.params["limit"] == "20"


def test_workers_get_of_a_gone_worker_shows_its_jobs_and_an_unknown_one_exits_4() -> None:
    api = (StubApi().on("GET", "/api/v1/workers/w-gone", error(404, "worker not found",
                                                               "WORKER_NOT_FOUND"))
           .on("GET", "/api/v1/workers/w-gone/jobs", reply(200, RECORDS)))
    out = run_cli(api, "-o", "table", "workers", "get", "w-gone")
    assert out.code == 0 and "not in the registry" in out.out and "j3" in out.out
    assert run_cli(api, "workers", "get", "w-gone").json()["worker"] is None
    api = (StubApi().on("GET", "/api/v1/workers/w-x", error(404, "worker not found",
                                                            "WORKER_NOT_FOUND"))
           .on("GET", "/api/v1/workers/w-x/jobs", error(404, "worker not found",
                                                        "WORKER_NOT_FOUND")))
    out = run_cli(api, "workers", "get", "w-x")
    assert out.code == ExitCode.NOT_FOUND and "worker not found" in out.err


def test_workers_get_refused_exits_3_and_a_bad_limit_is_usage() -> None:
    api = StubApi().on("GET", "/api/v1/workers/w-1", error(403, "forbidden", "forbidden"))
    assert run_cli(api, "workers", "get", "w-1").code == ExitCode.AUTH
    out = run_cli(StubApi(), "workers", "get", "w-1", "--limit", "0")
    assert out.code == ExitCode.USAGE
