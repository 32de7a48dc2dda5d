"""The chaos suite's accounting: how a fault's jobs, receipts and answers become a row of
RELIABILITY.md (the suite itself runs with `make chaos`, not in `make test`)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "localstack"))

import chaos_load  # noqa: E402
import chaos_report  # noqa: E402
from chaos_load import End, Load, Sent  # noqa: E402


def load_with(sent: list[Sent]) -> Load:
    load = Load("http://x", "k", "default", 1.0, "t")
    load.sent = sent
    return load


def test_a_row_counts_ends_duplicates_losses_recovery_and_answers():
    load = load_with([
        Sent(at=10.0, status="200", job_id="a"),
        Sent(at=11.0, status="503", retry_after="2"),
        Sent(at=12.0, status="200", job_id="b"),
        Sent(at=13.0, status="200", job_id="c"),
        Sent(at=14.0, status="200", job_id="d"),
        Sent(at=15.0, status="timeout"),
    ])
    ends = {"a": End("SUCCEEDED", "", 10.5), "b": End("TIMEOUT", "running timeout", 40.0),
            "c": End("RUNNING", "", 13.1), "x": End("SUCCEEDED", "", 12.0)}
    row = chaos_load.account("f", load, ["x"], ends, Counter({"a": 2, "d": 1}), fault_at=11.5)
    assert (row.accepted, row.succeeded) == (5, 2)  # a, b, c, d and the fault's own x
    assert row.other == {"TIMEOUT: running timeout": 1}
    assert row.still_open == {"RUNNING": 1}
    assert (row.twice, row.lost) == (1, 1)  # a reached the worker twice; d is unknown
    assert row.recovery_s is None  # nothing sent after the fault succeeded
    assert row.client_saw == {"200": 4, "503": 1, "timeout": 1}
    assert row.retry_after and not row.clean


def test_recovery_ends_with_the_first_job_sent_after_the_fault_that_succeeded():
    load = load_with([Sent(at=5.0, status="200", job_id="a"), Sent(at=7.0, status="429"),
                      Sent(at=6.5, status="200", job_id="b"), Sent(at=9.5, status="200",
                                                                   job_id="c")])
    # b was sent during the fault and ended at 70 s; c, sent later, ended first.
    ends = {"a": End("SUCCEEDED", "", 6.2), "b": End("SUCCEEDED", "", 70.0),
            "c": End("SUCCEEDED", "", 21.0)}
    row = chaos_load.account("f", load, [], ends, Counter({"a": 1, "b": 1, "c": 1}),
                             fault_at=6.0)
    assert row.recovery_s == 15.0 and row.clean
    assert not row.retry_after


def test_a_job_the_platform_sent_again_is_not_twice_unless_it_arrived_more_often():
    load = load_with([Sent(at=10.0, status="200", job_id="a"),
                      Sent(at=10.5, status="200", job_id="b"),
                      Sent(at=30.0, status="200", job_id="c")])
    # a: its worker was lost, dispatched again, arrived twice; b: dispatched twice but
    # arrived three times; c: sent long after the fault, ended 3 s later
    ends = {"a": End("SUCCEEDED", "", 52.0, dispatches=2),
            "b": End("SUCCEEDED", "", 40.0, dispatches=2),
            "c": End("SUCCEEDED", "", 33.0, dispatches=1)}
    row = chaos_load.account("f", load, [], ends, Counter({"a": 2, "b": 3, "c": 1}),
                             fault_at=11.0)
    assert (row.sent_again, row.twice) == (2, 1)
    assert row.slowest_s == 41.0  # a: from the fault (after its submission) to its end


def test_receipts_count_lines_after_a_mark(tmp_path: Path):
    path = tmp_path / "r.txt"
    path.write_text("a\nb\na\n")
    assert chaos_load.line_count(path) == 3
    path.write_text("a\nb\na\nc\nc\nd\nd retry\nd\n")
    # A retry line is the worker's answer, not a delivery
    assert chaos_load.receipts(path, since_line=3) == Counter({"c": 2, "d": 2})
    assert chaos_load.receipts(tmp_path / "missing.txt") == Counter()


def test_the_report_lists_rows_known_limits_and_exceptions(tmp_path: Path):
    clean = chaos_load.Row("redis-pause", 10, 10, {}, {}, 0, 0, 4.2, {"200": 10}, True,
                           slowest_s=3.5)
    limit = chaos_load.Row("worker-kill", 8, 6, {"TIMEOUT: x": 2}, {}, 0, 0, 1.0,
                           {"200": 8}, True)
    broken = chaos_load.Row("bridge-kill", 9, 7, {}, {"PENDING": 2}, 0, 0, None,
                            {"200": 9, "503": 1}, False, notes=["bridge pid 7 killed"])
    out = tmp_path / "RELIABILITY.md"
    chaos_report.write(out, [clean, limit, broken], rate=4, minutes=12.5)
    text = out.read_text()
    assert "| **redis-pause**: Redis paused 6 s (SIGSTOP, SIGCONT) | 10 | 10 | - | - | 0 | 0 " \
           "| 0 | 4.2 s | 3.5 s | 200 x10 |" in text
    assert "(a refusal without Retry-After)" in text
    assert "- bridge-kill: bridge pid 7 killed" in text
    assert "**worker-kill**: A worker killed mid-job" in text
    assert "- **bridge-kill**: 2 open, 0 twice, 0 lost" in text
    assert "redis-pause**: 0" not in text.split("## Exceptions")[1]


def test_workflow_runs_are_counted_by_how_they_ended():
    load = load_with([])
    load.runs = [Sent(at=1.0, status="200", job_id="r1"), Sent(at=2.0, status="200", job_id="r2"),
                 Sent(at=3.0, status="200", job_id="r3"), Sent(at=4.0, status="503",
                                                              retry_after="1")]
    row = chaos_load.account("f", load, [], {}, Counter(), fault_at=0.0,
                             run_ends={"r1": "succeeded", "r2": "running"})
    assert row.runs == {"accepted": 3, "succeeded": 1, "open": 1, "lost": 1}
    assert not row.clean and row.retry_after
    assert chaos_report._runs(row.runs) == "1/3 (lost x1; open x1)"
