"""``jobs watch``, ``jobs submit --wait`` and ``runs watch`` on the live event stream, and
their fall back to polling, against a real local HTTP server
(tests/unit/test_cordumctl_stream_server.py) that serves the API and the stream.

A watch on the stream reads the job or run when an event says it moved, and ends with
the event that ends it: no poll (no sleep between reads). Without the stream it polls as
before; the output and exit codes are the same either way.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from cordumctl.errors import ExitCode
from tests.unit.test_cordumctl_stream_server import (
    KEY,
    SseServer,
    frame,
    free_port,
    reads,
    reply,
    run_real,
    server,
    sse,
)

__all__ = ["server"]  # the fixture

JOB_PATH = "/api/v1/jobs/j1"
JOB_STREAM = "/api/v1/jobs/j1/stream"
RUN_PATH = "/api/v1/workflow-runs/r1"


def job(state: str, **extra: Any) -> dict[str, Any]:
    return {"id": "j1", "state": state, "topic": "job.echo", "labels": {}, **extra}


def packet(payload: str, **body: Any) -> dict[str, Any]:
    return {"traceId": "t1", "senderId": "worker-1", "createdAt": "2026-11-26T10:00:00.123Z",
            "protocolVersion": 1, payload: {"jobId": "j1", **body}}


def result(status: str) -> dict[str, Any]:
    return packet("jobResult", status=f"JOB_STATUS_{status}", resultPtr="redis://res:j1",
                  workerId="worker-1", executionMs="12")


def states(text: str) -> list[str]:
    return [line.split()[2] for line in text.strip().splitlines()]


def job_api(server: SseServer, *answers: dict[str, Any]) -> None:
    server.on("GET", JOB_PATH, *(reply(200, a) for a in answers))


def job_stream(server: SseServer, final: str, *, end: str = "hold") -> None:
    """job.state PENDING; progress (read: RUNNING); once read, the result (read: final)."""
    server.on("GET", JOB_STREAM, sse(
        frame("job.state", job("PENDING"), "1-0"),
        frame("job.progress", packet("jobProgress", percent=50, message="half"), "2-0"),
        reads(JOB_PATH, 1),
        frame("job.result", result(final), "3-0"), end=end))


# --- jobs ------------------------------------------------------------------------------

@pytest.mark.parametrize("final,code", [("SUCCEEDED", 0), ("FAILED", 10), ("CANCELLED", 11),
                                        ("TIMEOUT", 12), ("DENIED", 13)])
def test_jobs_watch_follows_the_jobs_stream_and_ends_with_its_end_without_polling(
        server: SseServer, final: str, code: int) -> None:
    # Given a job's stream: its state, progress, then (once the CLI has read it) its result
    job_stream(server, final)
    job_api(server, job("RUNNING"), job(final, error="boom" if code else None))
    # When it is watched
    out = run_real(server, "-o", "table", "jobs", "watch", "j1")
    # Then it printed a line per state, as polling does, and ended by how the job did
    assert out.code == code
    assert states(out.out) == ["PENDING", "RUNNING", final]
    assert out.out.splitlines()[0].split()[1:] == ["j1", "PENDING", "+0.0s"]
    # without a poll: one stream, a read per event that moved the job, no sleep
    assert out.sleeps == [] and len(server.sent(JOB_STREAM)) == 1
    assert len(server.sent(JOB_PATH)) == 2
    (subscribed,) = server.sent(JOB_STREAM)
    assert subscribed.headers["accept"] == "text/event-stream"
    assert subscribed.headers["x-api-key"] == KEY


def test_jobs_watch_in_json_is_one_object_per_change_on_the_stream_too(
        server: SseServer) -> None:
    job_stream(server, "SUCCEEDED")
    job_api(server, job("RUNNING"), job("SUCCEEDED"))
    out = run_real(server, "jobs", "watch", "j1")
    docs = [json.loads(line) for line in out.out.splitlines()]
    assert [d["state"] for d in docs] == ["PENDING", "RUNNING", "SUCCEEDED"]
    assert set(docs[0]) == {"job_id", "state", "elapsed", "at"} and out.code == 0


def test_jobs_watch_falls_back_to_polling_against_a_404(server: SseServer) -> None:
    # Given an API without the stream (its route answers 404)
    job_api(server, job("PENDING"), job("RUNNING"), job("SUCCEEDED"))
    # When a job is watched, Then it is polled, a second apart, as before
    out = run_real(server, "-o", "table", "jobs", "watch", "j1")
    assert out.code == 0 and states(out.out) == ["PENDING", "RUNNING", "SUCCEEDED"]
    assert out.sleeps == [1.0, 1.0] and len(server.sent(JOB_STREAM)) == 1
    assert len(server.sent(JOB_PATH)) == 3


@pytest.mark.parametrize("stream", ["refused", "json", "gateway"])
def test_jobs_watch_polls_when_the_stream_url_refuses_or_is_no_stream(
        server: SseServer, stream: str) -> None:
    job_api(server, job("RUNNING"), job("SUCCEEDED"))
    env = None
    if stream == "refused":
        env = {"CORDUM_API_URL": server.url, "CORDUM_API_KEY": KEY,
               "CORDUM_STREAM_URL": f"http://127.0.0.1:{free_port()}"}
    elif stream == "json":
        server.on("GET", JOB_STREAM, reply(200, job("RUNNING")))
    else:  # API Gateway, which routes no stream
        server.on("GET", JOB_STREAM, reply(403, {"message": "Missing Authentication Token"}))
    out = run_real(server, "-o", "table", "jobs", "watch", "j1", env=env)
    assert out.code == 0 and states(out.out) == ["RUNNING", "SUCCEEDED"]
    assert out.sleeps == [1.0] and out.err == ""


def test_a_job_stream_that_ends_before_the_job_did_turns_to_polling(server: SseServer) -> None:
    # Given a stream that closes after the state, the job not ended yet
    server.on("GET", JOB_STREAM, sse(frame("job.state", job("RUNNING"), "1"), end="close"))
    job_api(server, job("RUNNING"), job("RUNNING"), job("SUCCEEDED"))
    out = run_real(server, "-o", "table", "jobs", "watch", "j1")
    # Then it read the job at once, then polled until it ended
    assert out.code == 0 and states(out.out) == ["RUNNING", "SUCCEEDED"]
    assert out.sleeps == [1.0, 1.0] and len(server.sent(JOB_STREAM)) == 1


def test_a_job_stream_that_breaks_is_resumed_from_its_last_event(server: SseServer) -> None:
    server.on("GET", JOB_STREAM,
              sse(frame("job.state", job("PENDING"), "1-0"), end="drop"),
              sse(frame("job.state", job("RUNNING"), "2-0"),
                  frame("job.result", result("SUCCEEDED"), "3-0"), end="close"))
    job_api(server, job("SUCCEEDED"))
    out = run_real(server, "-o", "table", "jobs", "watch", "j1")
    assert out.code == 0 and states(out.out) == ["PENDING", "RUNNING", "SUCCEEDED"]
    assert server.sent(JOB_STREAM)[1].headers["last-event-id"] == "1-0"
    assert out.sleeps == [0.5]  # the reconnection's backoff, no poll


def test_jobs_watch_on_the_stream_times_out_like_polling(server: SseServer) -> None:
    server.on("GET", JOB_STREAM, sse(frame("job.state", job("APPROVAL_REQUIRED"), "1")))
    out = run_real(server, "-o", "table", "jobs", "watch", "j1", "--timeout", "300ms")
    assert out.code == ExitCode.WATCH_TIMEOUT
    lines = out.out.strip().splitlines()
    assert "waiting for approval: cordumctl approvals approve j1" in lines[0]
    assert lines[-1] == "still APPROVAL_REQUIRED after 0.3s" and out.sleeps == []


def test_a_quiet_stream_still_reads_the_job_now_and_then(server: SseServer) -> None:
    # Given a stream that says nothing after the state (an event it lost, say)
    server.on("GET", JOB_STREAM, sse(frame("job.state", job("RUNNING"), "1")))
    job_api(server, job("SUCCEEDED"))
    # When the watch has heard nothing for the idle time, Then it reads the job
    out = run_real(server, "-o", "table", "jobs", "watch", "j1", idle_reread_s=0.2)
    assert out.code == 0 and states(out.out) == ["RUNNING", "SUCCEEDED"]
    assert out.sleeps == [] and len(server.sent(JOB_PATH)) == 1


def test_heartbeats_and_alerts_do_not_read_the_job(server: SseServer) -> None:
    server.on("GET", JOB_STREAM, sse(
        frame("job.state", job("RUNNING"), "1"),
        frame("worker.heartbeat", {"heartbeat": {"workerId": "w1"}}, "2"),
        frame("system.alert", {"alert": {"message": "x"}}, "3"),
        frame("job.progress", packet("jobProgress", percent=10), "4"),
        frame("job.result", result("SUCCEEDED"), "5"), end="close"))
    job_api(server, job("SUCCEEDED"))
    out = run_real(server, "-o", "table", "jobs", "watch", "j1")
    assert out.code == 0 and len(server.sent(JOB_PATH)) == 1  # the result's read only


def test_submit_wait_follows_the_new_job_on_its_stream(server: SseServer) -> None:
    server.on("POST", "/api/v1/jobs", reply(200, {"job_id": "j1", "trace_id": "t1"}))
    job_stream(server, "SUCCEEDED")
    job_api(server, job("RUNNING"), job("SUCCEEDED", result={"echo": "hi"}))
    out = run_real(server, "jobs", "submit", "job.echo", "hi", "--wait")
    assert out.code == 0 and out.json()["result"] == {"echo": "hi"}  # the ended job
    assert out.err.splitlines()[0] == "submitted j1"
    assert states("\n".join(out.err.splitlines()[1:])) == ["PENDING", "RUNNING", "SUCCEEDED"]
    assert out.sleeps == []


def test_the_stream_may_have_a_url_of_its_own(server: SseServer) -> None:
    # Given the API on one server and the stream on another, whose steps wait for reads
    # of the API
    stream = SseServer()
    try:
        job_api(server, job("RUNNING"), job("SUCCEEDED"))
        stream.on("GET", JOB_STREAM, sse(
            frame("job.state", job("PENDING"), "1"),
            frame("job.progress", packet("jobProgress"), "2"),
            lambda _: len(server.sent(JOB_PATH)) >= 1,
            frame("job.result", result("SUCCEEDED"), "3")))
        env = {"CORDUM_API_URL": server.url, "CORDUM_API_KEY": KEY,
               "CORDUM_STREAM_URL": stream.url + "/"}
        out = run_real(server, "-o", "table", "jobs", "watch", "j1", env=env)
        assert out.code == 0 and states(out.out) == ["PENDING", "RUNNING", "SUCCEEDED"]
        assert len(stream.sent(JOB_STREAM)) == 1 and server.sent(JOB_STREAM) == []
        assert stream.sent(JOB_STREAM)[0].headers["x-api-key"] == KEY
    finally:
        stream.close()


# --- runs ------------------------------------------------------------------------------

WF = {"id": "wf", "steps": {"approve": {"type": "approval"}, "echo": {"type": "worker"}}}


def run(status: str, **steps: dict[str, Any]) -> dict[str, Any]:
    return {"id": "r1", "workflow_id": "wf", "status": status,
            "started_at": "2026-01-01T00:00:00Z", "steps": steps, "timers": []}


def run_event(status: str, step: str = "", step_status: str = "") -> dict[str, Any]:
    doc = {"type": "workflow.run", "runId": "r1", "workflowId": "wf", "tenantId": "t1",
           "status": status, "createdAt": "2026-11-26T10:00:00Z"}
    return {**doc, "stepId": step, "stepStatus": step_status} if step else doc


OK = {"status": "succeeded", "attempts": 1}
RUN_READS = [run("waiting", approve={"status": "waiting", "attempts": 1}),
             run("running", approve=OK, echo={"status": "running", "attempts": 1}),
             run("succeeded", approve=OK, echo=OK)]


def test_runs_watch_reads_the_run_on_each_workflow_run_event_and_ends_with_it(
        server: SseServer) -> None:
    # Given the tenant's stream, which sends the run's events once the CLI has read it
    server.on("GET", "/api/v1/workflows/wf", reply(200, WF))
    server.on("GET", RUN_PATH, *(reply(200, r) for r in RUN_READS))
    server.on("GET", "/api/v1/stream", sse(
        reads(RUN_PATH, 1),
        frame("workflow.run", run_event("running", "approve", "succeeded"), "1-0"),
        reads(RUN_PATH, 2),
        frame("workflow.run", run_event("succeeded"), "2-0")))
    # When the run is watched off a terminal
    out = run_real(server, "-o", "table", "runs", "watch", "r1")
    # Then the lines are polling's, and it ended with the run, without polling
    assert out.code == 0
    changes = [" ".join(line.split()[1:]) for line in out.out.strip().splitlines()]
    assert changes == ["run r1 waiting", "step approve waiting", "run r1 running",
                       "step approve succeeded", "step echo running", "run r1 succeeded",
                       "step echo succeeded"]
    assert out.sleeps == [] and len(server.sent(RUN_PATH)) == 3
    (subscribed,) = server.sent("/api/v1/stream")
    assert subscribed.query == {"types": "workflow.run", "run_id": "r1"}


def test_runs_watch_draws_the_live_tree_from_the_stream(server: SseServer) -> None:
    server.on("GET", "/api/v1/workflows/wf", reply(200, WF))
    server.on("GET", RUN_PATH, *(reply(200, r) for r in RUN_READS))
    server.on("GET", "/api/v1/stream", sse(
        reads(RUN_PATH, 1), frame("workflow.run", run_event("running"), "1"),
        reads(RUN_PATH, 2), frame("workflow.run", run_event("succeeded"), "2")))
    out = run_real(server, "runs", "watch", "r1", terminal=True, poll_interval_s=0.1)
    assert out.code == 0 and out.sleeps == []
    last_frame = out.out.rsplit("run r1", 1)[1]
    assert "succeeded" in last_frame and "running" not in last_frame
    assert "approval" in out.out and "worker" in out.out


def test_runs_watch_polls_against_a_404(server: SseServer) -> None:
    server.on("GET", "/api/v1/workflows/wf", reply(200, WF))
    server.on("GET", RUN_PATH, *(reply(200, r) for r in RUN_READS))
    out = run_real(server, "runs", "watch", "r1")
    docs = [json.loads(line) for line in out.out.splitlines()]
    assert docs[-1]["status"] == "succeeded" and out.code == 0
    assert out.sleeps == [1.0, 1.0] and len(server.sent("/api/v1/stream")) == 1


def test_an_end_the_run_does_not_show_yet_turns_the_watch_to_polling(
        server: SseServer) -> None:
    # Given an event that says the run failed while a read still says it runs
    server.on("GET", "/api/v1/workflows/wf", reply(200, WF))
    server.on("GET", RUN_PATH, reply(200, run("running")), reply(200, run("running")),
              reply(200, run("failed")))
    server.on("GET", "/api/v1/stream", sse(
        reads(RUN_PATH, 1), frame("workflow.run", run_event("failed"), "1")))
    out = run_real(server, "-o", "table", "runs", "watch", "r1")
    # Then it polls until the read agrees
    assert out.code == ExitCode.FAILED and out.sleeps == [1.0]


def test_runs_watch_on_the_stream_times_out(server: SseServer) -> None:
    server.on("GET", "/api/v1/workflows/wf", reply(200, WF))
    server.on("GET", RUN_PATH, reply(200, run("waiting")))
    server.on("GET", "/api/v1/stream", sse())
    out = run_real(server, "-o", "table", "runs", "watch", "r1", "--timeout", "200ms")
    assert out.code == ExitCode.WATCH_TIMEOUT and out.sleeps == []
