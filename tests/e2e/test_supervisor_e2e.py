"""The local stack heals itself: the safety kernel killed outright is restarted by its
supervisor, and submits over the REST API succeed again without any command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.e2e.conftest import ROOT

sys.path.insert(0, str(ROOT / "localstack"))

from processes import alive  # noqa: E402  (localstack/processes.py)
from supervisor import read_state  # noqa: E402  (localstack/supervisor.py)

pytestmark = pytest.mark.e2e

RECOVERY_S = 15.0
"""Issue 14: a submit succeeds again within this long after the kernel is killed."""


def _status_json() -> dict:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "localstack" / "stack.py"), "status", "--json"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "shared"), str(ROOT)])},
    )
    return json.loads(proc.stdout)


def test_a_killed_safety_kernel_is_back_within_15_s_without_any_command(stack) -> None:
    # Given the stack up, its kernel running under its supervisor
    before = read_state("safety-kernel")
    assert before is not None and before.child_pid and alive(before.child_pid), before
    killed = before.child_pid

    # When the kernel's process is killed outright
    os.kill(killed, signal.SIGKILL)
    t0 = time.monotonic()

    # Then a submit is accepted again within 15 s (503 policy_unavailable meanwhile)
    seen: list[int] = []
    body: object = None
    while time.monotonic() - t0 < RECOVERY_S:
        status, body = stack.http("POST", "/api/v1/jobs",
                                  {"topic": "job.echo", "prompt": "after the kernel died"})
        seen.append(status)
        if status in (200, 202):
            break
        time.sleep(0.5)
    recovered_s = time.monotonic() - t0
    assert seen[-1] in (200, 202), f"statuses within {RECOVERY_S:g} s: {seen}; last {body}"
    assert isinstance(body, dict)
    print(f"submit accepted {recovered_s:.1f} s after SIGKILL (statuses {seen})")

    # and the job runs to the end on the echo worker
    job = stack.wait_terminal(body["job_id"], 60)
    assert job["state"] == "SUCCEEDED", job

    # and the supervisor says what happened, as does `make status`
    after = read_state("safety-kernel")
    assert after is not None and after.restarts >= before.restarts + 1
    assert after.child_pid not in (None, killed) and alive(after.child_pid)
    assert after.last_exit is not None and after.last_exit.signal == "SIGKILL"
    row = next(p for p in _status_json()["processes"] if p["name"] == "safety-kernel")
    assert row["state"] == "running" and row["pid"] == after.child_pid
    assert row["restarts"] >= 1
