"""``cordumctl events``: tailing the live event stream, against a real local HTTP server
(tests/unit/test_cordumctl_stream_server.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cordumctl.errors import ExitCode
from tests.unit.test_cordumctl_stream_server import (
    KEY,
    SseServer,
    env_for,
    frame,
    free_port,
    reply,
    run_real,
    server,
    sse,
)

__all__ = ["server"]  # the fixture

REPO = Path(__file__).resolve().parents[2]
STREAM = "/api/v1/stream"
AT = "2026-11-26T10:00:00.123Z"


def packet(payload: str, **body: Any) -> dict[str, Any]:
    return {"traceId": "t1", "senderId": "s1", "createdAt": AT, "protocolVersion": 1,
            payload: body}


EVENTS = [
    ("job.submit", packet("jobRequest", jobId="j1", topic="job.echo", tenantId="t1")),
    ("job.progress", packet("jobProgress", jobId="j1", percent=50, message="half way")),
    ("job.result", packet("jobResult", jobId="j1", status="JOB_STATUS_SUCCEEDED",
                          resultPtr="redis://res:j1", workerId="w1", executionMs="12")),
    ("job.dlq", packet("jobResult", jobId="j2", status="JOB_STATUS_FAILED",
                       errorMessage="boom")),
    ("job.cancel", packet("jobCancel", jobId="j3", reason="operator")),
    ("worker.heartbeat", packet("heartbeat", workerId="w1", pool="echo", activeJobs=1,
                                maxParallelJobs=4)),
    ("system.alert", packet("alert", level="WARN", message="disk")),
    ("workflow.run", {"type": "workflow.run", "runId": "r1", "workflowId": "wf",
                      "tenantId": "t1", "status": "running", "stepId": "echo",
                      "stepStatus": "succeeded", "createdAt": "2026-11-26T10:00:01Z"}),
    ("audit.output_policy", {"createdAt": AT, "jobId": "j4"}),
]


def all_events() -> list[str]:
    return [frame(kind, data, f"{n}-0") for n, (kind, data) in enumerate(EVENTS, 1)]


def test_a_table_line_per_event_time_type_subject_and_status(server: SseServer) -> None:
    server.on("GET", STREAM, sse(": ping\n\n", *all_events()))
    out = run_real(server, "-o", "table", "events", "--count", str(len(EVENTS)))
    assert out.code == 0 and out.err == ""
    rows = [line.split(None, 3) for line in out.out.splitlines()]
    assert [r[:3] for r in rows] == [
        ["10:00:00", "job.submit", "j1"], ["10:00:00", "job.progress", "j1"],
        ["10:00:00", "job.result", "j1"], ["10:00:00", "job.dlq", "j2"],
        ["10:00:00", "job.cancel", "j3"], ["10:00:00", "worker.heartbeat", "w1"],
        ["10:00:00", "system.alert", "-"], ["10:00:01", "workflow.run", "r1"],
        ["10:00:00", "audit.output_policy", "j4"]]
    assert [r[3].split() for r in rows] == [
        ["job.echo"], ["50%", "half", "way"], ["SUCCEEDED"], ["FAILED", "boom"],
        ["operator"], ["echo", "1/4"], ["WARN", "disk"],
        ["running", "wf", "step", "echo", "succeeded"], ["-"]]
    # the columns line up: the subject starts at the same place on every line
    assert len({line.index(row[2], 10) for line, row in zip(out.out.splitlines(), rows,
                                                           strict=True)
                if row[1] != "audit.output_policy"}) == 1


def test_json_is_one_object_per_line_with_id_type_and_data(server: SseServer) -> None:
    server.on("GET", STREAM, sse(*all_events()[:3], frame("x", "not json", "9-0")))
    # the output flag after the command's name, as before it
    out = run_real(server, "events", "--count", "4", "--output", "json")
    docs = [json.loads(line) for line in out.out.splitlines()]
    assert docs[0] == {"id": "1-0", "type": "job.submit", "data": EVENTS[0][1]}
    assert docs[2]["data"]["jobResult"]["status"] == "JOB_STATUS_SUCCEEDED"
    assert docs[3] == {"id": "9-0", "type": "x", "data": "not json"}
    # and a pipe gets JSON without asking
    assert json.loads(run_real(server, "events", "--count", "1").out)["id"] == "1-0"


def test_yaml_is_a_document_per_event(server: SseServer) -> None:
    server.on("GET", STREAM, sse(*all_events()[:2]))
    out = run_real(server, "-o", "yaml", "events", "--count", "2")
    docs = list(yaml.safe_load_all(out.out))
    assert [d["type"] for d in docs] == ["job.submit", "job.progress"]


def test_filters_and_since_go_to_the_stream(server: SseServer) -> None:
    server.on("GET", STREAM, sse(*all_events()[:1]))
    run_real(server, "events", "--type", "job.result", "-t", "workflow.run, job.dlq",
             "--topic", "job.*", "--job", "j1", "--run", "r1", "--since", "5-0", "--count", "1")
    (seen,) = server.sent(STREAM)
    assert seen.query == {"types": "job.result,workflow.run,job.dlq", "topic": "job.*",
                          "job_id": "j1", "run_id": "r1"}
    assert seen.headers["last-event-id"] == "5-0" and seen.headers["x-api-key"] == KEY


def test_text_from_the_stream_is_printed_with_its_controls_escaped(server: SseServer) -> None:
    evil = packet("jobRequest", jobId="j1", topic="job.\x1b[31mred\u202e")
    server.on("GET", STREAM, sse(frame("job.submit", evil, "1")))
    table = run_real(server, "-o", "table", "events", "--count", "1").out
    assert "\x1b" not in table and "\\x1b[31mred\\u202e" in table
    raw = run_real(server, "-o", "json", "events", "--count", "1").out
    assert "\x1b" not in raw and "\u202e" not in raw
    assert json.loads(raw)["data"]["jobRequest"]["topic"] == "job.\x1b[31mred\u202e"


def test_a_dropped_connection_is_resumed_and_said_on_stderr(server: SseServer) -> None:
    events = all_events()
    server.on("GET", STREAM, sse(events[0], end="drop"), sse(events[1]))
    out = run_real(server, "-o", "json", "events", "--count", "2")
    assert out.code == 0 and [json.loads(x)["id"] for x in out.out.splitlines()] == \
        ["1-0", "2-0"]
    assert server.sent(STREAM)[1].headers["last-event-id"] == "1-0"
    assert "event stream: RemoteProtocolError" in out.err
    assert "reconnecting in 0.5s" in out.err and out.sleeps == [0.5]


def test_a_stream_lost_for_good_is_one_line_and_exit_6(server: SseServer) -> None:
    server.on("GET", STREAM, sse(all_events()[0], end="drop"), sse(end="drop"))
    out = run_real(server, "-o", "json", "events")
    assert out.code == ExitCode.UNAVAILABLE and len(out.out.splitlines()) == 1
    last = out.err.strip().splitlines()[-1]
    assert last.startswith(f"cordumctl: event stream at {server.url}{STREAM} lost: ")
    assert last.endswith("(5 reconnections failed)") and out.sleeps == [0.5, 1, 2, 4, 8]


@pytest.mark.parametrize("where", ["404", "refused"])
def test_no_stream_is_a_clear_one_line_error_and_exit_6(server: SseServer, where: str) -> None:
    env = env_for(server, f"http://127.0.0.1:{free_port()}") if where == "refused" else None
    out = run_real(server, "events", env=env)
    assert out.code == ExitCode.UNAVAILABLE and out.out == ""
    assert len(out.err.strip().splitlines()) == 1
    if where == "404":
        assert out.err.startswith(f"cordumctl: no event stream at {server.url}{STREAM}: 404 ")
    else:
        assert out.err.startswith("cordumctl: cannot reach the event stream at http://127.0.0.1:")
    assert out.err.rstrip().endswith(
        "; if the stream has a URL of its own, give --stream-url or set CORDUM_STREAM_URL")
    assert KEY not in out.err


def test_a_refused_key_is_exit_3(server: SseServer) -> None:
    server.on("GET", STREAM, reply(401, {"error": "unauthorized", "code": "unauthorized",
                                         "status": 401}))
    out = run_real(server, "events")
    assert out.code == ExitCode.AUTH
    assert out.err == "cordumctl: 401 unauthorized (unauthorized)\n"


def test_lines_come_as_events_do_and_ctrl_c_ends_the_tail_with_exit_0(
        server: SseServer) -> None:
    # Given cordumctl as its own process, its stdout a pipe, on a stream that stays open
    server.on("GET", STREAM, sse(*all_events()[:2]))
    env = {**os.environ, **env_for(server), "PYTHONPATH": f"{REPO / 'shared'}:{REPO}"}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from cordumctl.app import main; sys.exit(main())",
         "-o", "json", "events"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        cwd=REPO,
        # As from a terminal: a suite started as a background job of a script inherits
        # SIGINT ignored, its children too, and Python then never raises KeyboardInterrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # When two events have come, Then both lines are out while it still runs
        assert proc.stdout is not None
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        assert [json.loads(line)["id"] for line in lines] == ["1-0", "2-0"]
        assert proc.poll() is None
        # and Ctrl-C ends it quietly
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0 and err == b""
    finally:
        if proc.poll() is None:
            proc.kill()
