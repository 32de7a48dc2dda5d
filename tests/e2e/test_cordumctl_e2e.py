"""The installed ``cordumctl`` against the local stack, as an operator runs it.

Each command is a subprocess of the venv's ``cordumctl`` (the one `make setup` puts on
its PATH), with the stack's URL, key and tenant in the environment; its stdout is a
pipe, so it answers JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CORDUMCTL = Path(sys.executable).parent / "cordumctl"
EXAMPLE = ROOT / "config" / "workflows" / "example.json"


class Ctl:
    def __init__(self, stack: Any) -> None:
        self.env = {**os.environ, "CORDUM_API_URL": stack.api, "CORDUM_API_KEY": stack.key,
                    "CORDUM_TENANT_ID": stack.tenant}
        self.approver_key = stack.approver_key

    def __call__(self, *args: str, approver: bool = False, timeout: float = 180
                 ) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        if approver:
            env["CORDUM_API_KEY"] = self.approver_key
        return subprocess.run([str(CORDUMCTL), *args], env=env, cwd=ROOT, text=True,
                              capture_output=True, timeout=timeout)

    def json(self, *args: str, approver: bool = False) -> Any:
        proc = self(*args, approver=approver)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def ctl(stack: Any) -> Ctl:
    assert CORDUMCTL.is_file(), f"{CORDUMCTL} missing: run `make setup`"
    return Ctl(stack)


def test_submit_wait_ends_with_the_succeeded_job(ctl: Ctl) -> None:
    proc = ctl("jobs", "submit", "job.echo", "hello from cordumctl", "-l", "via=cordumctl",
               "--wait", "--timeout", "90s")
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)
    assert job["state"] == "SUCCEEDED" and job["labels"]["via"] == "cordumctl"
    assert "SUCCEEDED" in proc.stderr.splitlines()[-1]
    assert ctl.env["CORDUM_API_KEY"] not in proc.stdout + proc.stderr


def test_an_approval_is_listed_refused_to_the_submitter_and_approved_by_the_approver(
        ctl: Ctl) -> None:
    answer = ctl.json("jobs", "submit", "job.echo.approval", "needs a human")
    assert answer["status"] == "approval_required"
    job_id = answer["job_id"]
    listed = ctl.json("approvals", "list", "--all")
    assert job_id in {item["job"]["id"] for item in listed}
    shown = ctl.json("approvals", "show", job_id)
    assert shown["job"]["state"] == "APPROVAL_REQUIRED" and shown["job"]["safety_reason"]
    own = ctl("approvals", "approve", job_id, "--reason", "mine")
    assert own.returncode == 3 and "self_approval_denied" in own.stderr
    assert ctl("approvals", "approve", job_id, "--reason", "reviewed",
               approver=True).returncode == 0
    watched = ctl("jobs", "watch", job_id, "--timeout", "90s")
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert json.loads(watched.stdout.splitlines()[-1])["state"] == "SUCCEEDED"


def test_a_failed_job_is_in_the_dlq_and_retried_from_it(ctl: Ctl) -> None:
    failed = ctl("jobs", "submit", "job.echo", "fail once", "-l", "echo.fail=true", "--wait",
                 "--timeout", "90s")
    assert failed.returncode == 10, failed.stderr  # FAILED
    job_id = json.loads(failed.stdout)["id"]
    assert job_id in {e["job_id"] for e in ctl.json("dlq", "list", "--all", "--limit", "200")}
    new_id = ctl.json("dlq", "retry", job_id)["job_id"]
    assert new_id.startswith(f"{job_id}-retry-")
    retried = ctl("jobs", "watch", new_id, "--timeout", "90s")
    assert retried.returncode in (0, 10), retried.stderr  # the worker is told to fail again
    again = ctl("dlq", "retry", job_id)
    assert again.returncode == 4, again.stderr


def test_a_workflow_is_applied_run_approved_and_watched_to_the_end(ctl: Ctl) -> None:
    assert ctl.json("workflows", "apply", "-f", str(EXAMPLE))["id"] == "example-approval"
    assert "example-approval" in {w["id"] for w in ctl.json("workflows", "list")}
    run_id = ctl.json("workflows", "run", "example-approval", "--input",
                      '{"amount": 250, "message": "hello"}',
                      "--idempotency-key", f"cordumctl-e2e-{uuid.uuid4()}")["run_id"]
    gate = f"{run_id}:approve@1"
    deadline = time.monotonic() + 60
    while ctl.json("runs", "get", run_id)["status"] != "waiting":
        assert time.monotonic() < deadline, "the run never reached its approval gate"
        time.sleep(1)
    # The run waits from the moment it sends its approval step's job; the approval is
    # there once the submit function has gated that job, a hop later.
    while (found := ctl("approvals", "show", gate)).returncode != 0:
        assert "job_not_found" in found.stderr, found.stderr
        assert time.monotonic() < deadline, "the gate's job never reached its approval"
        time.sleep(1)
    shown = json.loads(found.stdout)
    assert shown["gate"]["workflow"]["run_id"] == run_id
    assert ctl("approvals", "approve", gate, "--reason", "ok", approver=True).returncode == 0
    watched = ctl("runs", "watch", run_id, "--timeout", "120s")
    assert watched.returncode == 0, watched.stdout + watched.stderr
    changes = [json.loads(line) for line in watched.stdout.splitlines()]
    assert {"run_id": run_id, "status": "succeeded"} in changes
    assert ctl.json("runs", "get", run_id)["steps"]["echo"]["status"] == "succeeded"
    events = [e["type"] for e in ctl.json("runs", "timeline", run_id)]
    assert events[-1] == "run_status" and "step_approved" in events
