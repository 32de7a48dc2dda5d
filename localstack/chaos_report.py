"""RELIABILITY.md from the chaos suite's rows (see chaos.py)."""

from __future__ import annotations

import platform
import subprocess
import time
from pathlib import Path

from chaos_faults import FAULTS  # localstack/chaos_faults.py
from chaos_load import Row  # localstack/chaos_load.py

KNOWN_LIMITS: dict[str, str] = {
    "worker-kill": (
        "A worker killed mid-job never answers. The supervisor starts it again under the same "
        "id, and its heartbeats say when it started (`cordum.started_at`): the reconciler's "
        "next tick sends every job dispatched to it before that again, as a new, counted "
        "attempt (`worker_lost`), or ends it FAILED `worker_lost` when no attempt is left. A "
        "worker that stays away is lost once its heartbeats have been missing for the "
        "registry's 30 s TTL, with the same outcome. A late result from the killed worker is "
        "dropped by the worker-of-record fence. Jobs sent again show under **sent again**; "
        "none is run twice unasked."),
    "kernel-kill": (
        "New submits get 503 `policy_unavailable` with Retry-After until the kernel answers "
        "and the circuit breaker's next probe (1 s after it opened, doubling up to 30 s) "
        "succeeds. Outputs checked while the kernel is down are held, unserved, and checked "
        "again by the replayer tick; they are quarantined `output_check_unavailable` only "
        "if the kernel stays away past `CORDUM_OUTPUT_HOLD_MAX_S` (600 s)."),
    "nats-restart": (
        "A job dispatched on its worker's direct subject while NATS restarts (or while the "
        "worker is still reconnecting) never reaches the worker: dispatch is core NATS, as in "
        "Cordum, since CAP workers subscribe on core subjects. The reconciler sends it again "
        "once the worker's heartbeats report fewer active jobs than were dispatched to it "
        "(`dispatch_lost`), or the running timeout ends it. Submits and results travel on "
        "JetStream and survive the restart."),
    "kernel-slow": (
        "As for kernel-kill: checks past their deadline count as failures, so the circuit "
        "breaker opens, and output checks in that window are held until the kernel answers "
        "in time."),
    "all-together": (
        "Everything above at once; its jobs end as the single faults' do."),
}
"""Faults whose rows are expected to show jobs that did not succeed, and why."""


def _cell(counts: dict[str, int]) -> str:
    return "; ".join(f"{k} x{v}" for k, v in sorted(counts.items())) or "-"


def _runs(runs: dict[str, int]) -> str:
    if not runs:
        return "-"
    rest = {k: v for k, v in runs.items() if k not in ("accepted", "succeeded")}
    text = f"{runs.get('succeeded', 0)}/{runs.get('accepted', 0)}"
    return text + (f" ({_cell(rest)})" if rest else "")


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=False).stdout.strip() or "?"
    except OSError:
        return "?"


def write(path: Path, rows: list[Row], *, rate: float, minutes: float) -> None:
    lines = [
        "# Reliability: faults survived, counted",
        "",
        "Written by `make chaos` (`localstack/chaos.py`); do not edit by hand. Each row is one",
        f"fault injected while jobs arrived over the REST API at {rate:g} per second, on the",
        "local stack with a private Redis (AOF, fsync always) and NATS (JetStream on disk).",
        "The kernel, the bridge and the echo worker run under the stack's supervisor, which",
        "restarts them as ECS would. Every accepted job is followed until it ends. The",
        "reconciler runs with a 200 s running timeout and re-drives waiting jobs after 30 s",
        "(the shipped file: 900 s and 300 s), so that a run takes minutes; the echo worker",
        "runs 16 jobs at once (4 as shipped), so that no row's load outgrows it.",
        "",
        f"Commit {_commit()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.node() or 'this machine'}; the run took {minutes:.1f} min.",
        "",
        "- **accepted**: jobs the API answered 200 (plus the jobs a duplicate-delivery fault "
        "sent itself);",
        "- **other terminal**: accepted jobs that ended otherwise, with the stored reason;",
        "- **open**: accepted jobs not terminal when their wait ran out: 150 s after the load "
        "stopped, 300 s after a fault that can lose a Lambda's batch or a job on its way to a "
        "worker (the wait goes on while the next faults run);",
        "- **sent again**: accepted jobs the platform dispatched more than once (their worker "
        "or its dispatch lost, or the worker asked for a retry), each a counted attempt in the "
        "job's events;",
        "- **twice**: accepted jobs that reached the worker more often than they were "
        "dispatched (its receipts file beside the job's events): run twice unasked;",
        "- **lost**: accepted jobs the job store does not know;",
        "- **recovery**: from the fault to the end of the first job sent after it that "
        "succeeded;",
        "- **slowest**: the longest any accepted job took from its submission, or the fault "
        "if later, to its end;",
        "- **client saw**: HTTP answers during the whole row (all 429 and 503 answers carried "
        "Retry-After unless the row says otherwise); a kernel fault's recovery includes the "
        "gateway circuit breaker's wait for its next probe (1 s, doubling up to 30 s);",
        "- **runs**: workflow runs started (one tick in eight), as succeeded/accepted, with any "
        "that ended otherwise or stayed open.",
        "",
        "| fault | accepted | succeeded | other terminal | open | sent again | twice | lost "
        "| recovery | slowest | client saw | runs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        what = FAULTS[r.fault][1] if r.fault in FAULTS else "no fault (baseline)"
        recovery = f"{r.recovery_s:.1f} s" if r.recovery_s is not None else "-"
        slowest = f"{r.slowest_s:.1f} s" if r.slowest_s is not None else "-"
        saw = _cell(r.client_saw) + ("" if r.retry_after else " (a refusal without "
                                                                 "Retry-After)")
        lines.append(f"| **{r.fault}**: {what} | {r.accepted} | {r.succeeded} | "
                     f"{_cell(r.other)} | {_cell(r.still_open)} | {r.sent_again} | {r.twice} | "
                     f"{r.lost} | {recovery} | {slowest} | {saw} | {_runs(r.runs)} |")
    notes = [(r.fault, n) for r in rows for n in r.notes]
    if notes:
        lines += ["", "Notes from the run:", ""]
        lines += [f"- {fault}: {note}" for fault, note in notes]
    lines += ["", "## Known limits", ""]
    lines += [f"- **{name}**: {why}" for name, why in KNOWN_LIMITS.items()]
    exceptions = [r for r in rows if not r.clean and r.fault not in KNOWN_LIMITS]
    lines += ["", "## Exceptions", ""]
    if exceptions:
        lines += [f"- **{r.fault}**: {sum(r.still_open.values())} open, {r.twice} twice, "
                  f"{r.lost} lost, runs {_runs(r.runs)} (see the row)." for r in exceptions]
    else:
        lines.append("None: after every other fault all accepted jobs ended, none reached a "
                     "worker twice and none was lost.")
    path.write_text("\n".join(lines) + "\n")
