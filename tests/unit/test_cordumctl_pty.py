"""``jobs watch`` and ``runs watch`` on a real terminal (a pty): the display updates while
the job or run moves, and ends with it.

The command runs in a child process whose stdout is the pty's slave, against the stub
API (each poll answers the next state); the test reads the master side as it arrives.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import sys
from rich.console import Console
from cordumctl.app import main
from cordumctl.session import Runtime
from tests.cordumctl_stub import ENV, StubApi, reply

def run(status, **steps):
    return {"id": "r1", "workflow_id": "wf", "status": status,
            "started_at": "2026-01-01T00:00:00Z", "steps": steps, "timers": []}

def job(state):
    return {"id": "j1", "state": state, "topic": "job.echo"}

wf = {"id": "wf", "steps": {"approve": {"type": "approval"}, "wait": {"type": "delay"},
                            "echo": {"type": "worker"}}}
ok = {"status": "succeeded", "attempts": 1}
api = (StubApi()
       .on("GET", "/api/v1/jobs/j1", reply(200, job("PENDING")), reply(200, job("RUNNING")),
           reply(200, job("RUNNING")), reply(200, job("SUCCEEDED")))
       .on("GET", "/api/v1/workflows/wf", reply(200, wf))
       .on("GET", "/api/v1/workflow-runs/r1",
           reply(200, run("waiting", approve={"status": "waiting", "attempts": 1})),
           reply(200, run("running", approve=ok, wait={"status": "running", "attempts": 1})),
           reply(200, run("running", approve=ok, wait=ok,
                          echo={"status": "running", "attempts": 1})),
           reply(200, run("succeeded", approve=ok, wait=ok, echo=ok))))
runtime = Runtime(transport=api.transport(), environ=ENV, poll_interval_s=0.4,
                  console=Console(force_terminal=True, width=100))
sys.exit(main(sys.argv[1:], runtime))
"""


def run_in_pty(*args: str, timeout_s: float = 20.0) -> tuple[int, list[tuple[float, bytes]]]:
    """The child's exit code and its output as (seconds since start, bytes) chunks."""
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'shared'}:{REPO}", "TERM": "xterm-256color",
           "COLUMNS": "100", "LINES": "40"}
    env.pop("NO_COLOR", None)
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, *args], stdin=slave, stdout=slave,
                            stderr=slave, env=env, cwd=REPO, close_fds=True)
    os.close(slave)
    chunks: list[tuple[float, bytes]] = []
    try:
        while time.monotonic() - started < timeout_s:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed the pty
                    break
                if not data:
                    break
                chunks.append((time.monotonic() - started, data))
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return code, chunks


def first_seen(chunks: list[tuple[float, bytes]], needle: bytes) -> float:
    seen = b""
    for at, data in chunks:
        seen += data
        if needle in seen:
            return at
    raise AssertionError(f"{needle!r} never shown in {seen!r}")


def test_jobs_watch_shows_each_state_as_it_comes_and_ends_with_the_job() -> None:
    code, chunks = run_in_pty("jobs", "watch", "j1")
    assert code == 0
    pending, running, done = (first_seen(chunks, s) for s in
                              (b"PENDING", b"RUNNING", b"SUCCEEDED"))
    # each line appeared on its own, a poll apart, not all at the end
    assert pending < running < done and done - pending >= 0.8
    text = b"".join(data for _, data in chunks).decode()
    assert text.count("RUNNING") == 1  # a line per change, not per poll


def test_runs_watch_redraws_the_tree_of_steps_until_the_run_ends() -> None:
    code, chunks = run_in_pty("runs", "watch", "r1")
    assert code == 0
    text = b"".join(data for _, data in chunks).decode()
    # the tree is drawn in place: the cursor goes back up over the previous frame
    assert "\x1b[1A" in text or "\x1b[2K" in text
    assert first_seen(chunks, b"waiting") < first_seen(chunks, b"succeeded")
    # every step is in the tree from the start, pending ones too, with their kinds
    first_frame_end = first_seen(chunks, b"echo")
    assert first_frame_end <= first_seen(chunks, b"running")
    assert "approval" in text and "delay" in text and "attempt 1" in text
    last_frame = text.rsplit("run r1", 1)[1]
    assert "succeeded" in last_frame and "running" not in last_frame
