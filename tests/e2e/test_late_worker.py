"""A job with no live worker stays PENDING, then runs when a worker of its pool appears."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def test_pending_job_runs_when_a_worker_of_its_pool_comes_online(stack):
    status, body = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo.late",
                                                       "prompt": "waiting for a worker"})
    assert status == 200, body
    # Given no worker serves pool "late": the job is acknowledged and stays PENDING.
    deadline = time.monotonic() + 20
    state = ""
    while time.monotonic() < deadline:
        _, job = stack.http("GET", f"/api/v1/jobs/{body['job_id']}")
        state = job.get("state", "")
        if job.get("attempts", 0) >= 1:  # the submit function has seen it
            break
        time.sleep(0.5)
    assert state == "PENDING"
    time.sleep(3)
    assert stack.http("GET", f"/api/v1/jobs/{body['job_id']}")[1]["state"] == "PENDING"

    # When a worker of that pool starts heartbeating
    env = {**os.environ, "PYTHONPATH": str(ROOT / "shared"), "REDIS_URL": stack.redis_url,
           "NATS_URL": stack.nats_url, "WORKER_POOL": "late", "WORKER_TOPICS": "job.echo.late",
           "WORKER_ID": f"late-{uuid.uuid4().hex[:6]}"}
    worker = subprocess.Popen([sys.executable, "-m", "cordum.worker.echo"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Then the bridge sees the pool come online, replays the job, and it runs.
        job = stack.wait_terminal(body["job_id"], timeout=60)
        assert job["state"] == "SUCCEEDED", job
        assert job["worker_id"] == env["WORKER_ID"]
    finally:
        worker.terminate()
        worker.wait(15)
