"""The supervisor's restart policy and state file, and the ``make status`` rows read from
them (localstack/supervisor.py, localstack/process_status.py). The supervisor on real
processes is tests/infra/test_supervisor.py."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "localstack"))

from process_status import (  # noqa: E402  (localstack/process_status.py)
    RESTARTING,
    RUNNING,
    STOPPED,
    ProcessRow,
    as_json,
    last_exit_text,
    table,
)
from supervisor import (  # noqa: E402  (localstack/supervisor.py)
    Exit,
    RestartPolicy,
    State,
    epoch,
    read_state,
    state_path,
    write_state,
)

from cordumctl.output import duration  # noqa: E402  (the one duration format)

NOW = epoch("2026-11-26T12:00:00.000+00:00")


def test_the_wait_doubles_from_half_a_second_up_to_ten() -> None:
    policy = RestartPolicy()
    delays: list[float] = []
    delay = None
    for _ in range(8):
        delay = policy.next_delay(delay, ran_s=0.2)
        delays.append(delay)
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]


def test_a_child_that_ran_thirty_seconds_resets_the_wait() -> None:
    policy = RestartPolicy()
    assert policy.next_delay(8.0, ran_s=29.9) == 10.0
    assert policy.next_delay(8.0, ran_s=30.0) == 0.5
    assert policy.next_delay(None, ran_s=0.0) == 0.5


def test_an_exit_says_its_signal_or_its_code() -> None:
    killed = Exit.of(-9, ran_s=12.3456)
    assert (killed.signal, killed.code, killed.ran_s, killed.cause) == (
        "SIGKILL", None, 12.346, "SIGKILL")
    failed = Exit.of(3, ran_s=0.1)
    assert (failed.signal, failed.code, failed.cause) == (None, 3, "exit 3")


def test_the_state_file_is_replaced_whole_and_reads_back(tmp_path: Path) -> None:
    state = State(
        name="bridge", supervisor_pid=10, child_pid=11, restarts=2,
        started_at="2026-11-26T11:59:00.000+00:00",
        last_exit=Exit(code=None, signal="SIGKILL", at="2026-11-26T11:58:59.000+00:00",
                       ran_s=41.0),
    )
    write_state(state, tmp_path)
    assert read_state("bridge", tmp_path) == state
    # and no temporary file is left beside it
    assert [p.name for p in tmp_path.iterdir()] == ["bridge.json"]


def test_a_missing_or_broken_state_file_reads_as_none(tmp_path: Path) -> None:
    assert read_state("bridge", tmp_path) is None
    state_path("bridge", tmp_path).write_text("{not json")
    assert read_state("bridge", tmp_path) is None


def test_durations_read_at_a_glance() -> None:
    seconds = (None, -1, 0.04, 9.94, 41, 125, 3 * 3600 + 12 * 60, 2 * 86400 + 4 * 3600)
    assert [duration(s) for s in seconds] == [
        "-", "0.0s", "0.0s", "9.9s", "41.0s", "2m05s", "3h12m", "2d04h"]


def test_the_last_exit_says_what_when_and_after_how_long() -> None:
    last = Exit(code=None, signal="SIGKILL", at="2026-11-26T11:58:00.000+00:00", ran_s=41.2)
    assert last_exit_text(last, NOW) == "SIGKILL 2m00s ago after 41.2s"
    assert last_exit_text(None, NOW) == "-"


def _rows() -> list[ProcessRow]:
    killed = Exit(code=None, signal="SIGKILL", at="2026-11-26T11:58:00.000+00:00", ran_s=41.0)
    return [
        ProcessRow("safety-kernel", RUNNING, pid=101, started_at=NOW - 119.5, supervisor_pid=100,
                   restarts=1, last_exit=killed),
        ProcessRow("bridge", RESTARTING, supervisor_pid=200, restarts=7,
                   last_exit=Exit(code=1, signal=None, at="2026-11-26T11:59:59.000+00:00",
                                  ran_s=0.3)),
        ProcessRow("localstack", RUNNING, pid=300, started_at=NOW - 3700),
        ProcessRow("redis", STOPPED),
    ]


def test_the_status_table_has_one_aligned_row_per_process() -> None:
    assert table(_rows(), NOW).splitlines() == [
        "NAME           STATE       PID  UPTIME  RESTARTS  LAST EXIT",
        "safety-kernel  running     101  1m59s   1         SIGKILL 2m00s ago after 41.0s",
        "bridge         restarting  -    -       7         exit 1 1.0s ago after 0.3s",
        "localstack     running     300  1h01m   -         -",
        "redis          stopped     -    -       -         -",
    ]


def test_the_status_json_keeps_every_field_and_says_whether_all_run() -> None:
    doc = as_json(_rows(), NOW)
    assert doc["running"] is False
    kernel = doc["processes"][0]  # type: ignore[index]
    assert kernel == {
        "name": "safety-kernel", "state": "running", "pid": 101, "supervisor_pid": 100,
        "uptime_s": 119.5, "restarts": 1,
        "last_exit": {"code": None, "signal": "SIGKILL", "at": "2026-11-26T11:58:00.000+00:00",
                      "ran_s": 41.0},
    }
    assert as_json(_rows()[:1] + _rows()[2:3], NOW)["running"] is True
