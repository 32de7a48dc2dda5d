"""cordumctl's event stream client: the SSE parser, and reading, resuming and giving up
against a real local HTTP server (tests/unit/test_cordumctl_stream_server.py)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from cordumctl.connection import Connection
from cordumctl.errors import ApiError, ExitCode
from cordumctl.stream import (
    Event,
    EventStream,
    Feed,
    ReconnectPolicy,
    SseParser,
    StreamLost,
    StreamTimeouts,
    StreamUnavailable,
)
from tests.unit.test_cordumctl_stream_server import (
    KEY,
    TENANT,
    SseServer,
    frame,
    free_port,
    reply,
    server,
    sse,
)

__all__ = ["server"]  # the fixture


def parse(*chunks: bytes) -> tuple[list[Event], SseParser]:
    parser = SseParser()
    events = [event for chunk in chunks for event in parser.feed(chunk)]
    return events, parser


# --- the parser ------------------------------------------------------------------------

def test_an_event_has_its_type_id_and_data_lines_joined_with_newlines() -> None:
    events, parser = parse(b"id: 7-0\nevent: job.result\ndata: {\"a\":\ndata: 1}\n\n")
    assert events == [Event(type="job.result", data='{"a":\n1}', id="7-0")]
    assert events[0].json() == {"a": 1} and parser.last_event_id == "7-0"


def test_comments_unknown_fields_and_a_block_without_data_dispatch_nothing() -> None:
    events, parser = parse(b": ping\n\n", b"foo: bar\n\n", b"event: x\n\n", b"id: 9\n\n",
                           b"data: after\n\n")
    # the id-only block still moved the last event id, and the type did not carry over
    assert events == [Event(type="message", data="after", id="9")]
    assert parser.last_event_id == "9" and parser.lines == 10


def test_field_values_lose_one_leading_space_and_a_bare_field_is_empty() -> None:
    events, _ = parse(b"data:no space\ndata:  two spaces\ndata\ndata: \n\n")
    assert events[0].data == "no space\n two spaces\n\n"


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
def test_each_line_ending_of_the_spec(ending: bytes) -> None:
    text = b"event: e" + ending + b"data: d1" + ending + b"data: d2" + ending + ending
    events, _ = parse(text)
    assert events == [Event(type="e", data="d1\nd2")]


def test_any_split_into_chunks_gives_the_same_events() -> None:
    # CRLFs, a CR alone, a BOM and a multi-byte character: cut between every two bytes
    text = ("\ufeffid: 1\r\nevent: job.state\r\ndata: {\"s\": \"é€\"}\r\n\r\n"
            ": ping\rid: 2\rdata: two\r\rdata: three\n\n").encode()
    whole, _ = parse(text)
    assert [e.id for e in whole] == ["1", "2", "2"]
    assert whole[0].type == "job.state" and whole[0].json() == {"s": "é€"}
    for cut in range(1, len(text)):
        assert parse(text[:cut], text[cut:])[0] == whole, cut
    assert parse(*(text[i:i + 1] for i in range(len(text))))[0] == whole


def test_a_cr_ending_one_chunk_and_an_lf_starting_the_next_are_one_line_end() -> None:
    events, parser = parse(b"data: a\r", b"\ndata: b\r\n\r", b"\n")
    assert events == [Event(type="message", data="a\nb")] and parser.lines == 3


def test_retry_takes_digits_only_and_an_id_with_nul_is_ignored() -> None:
    _, parser = parse(b"retry: 2500\n\n")
    assert parser.retry_ms == 2500
    _, parser = parse(b"retry: 1s\nretry: \xc2\xb2\nid: a\x00b\n\n")
    assert parser.retry_ms is None and parser.last_event_id == ""


def test_an_event_the_body_ends_in_the_middle_of_is_never_dispatched() -> None:
    events, parser = parse(b"id: 1\ndata: whole\n\nid: 2\ndata: half")
    assert [e.data for e in events] == ["whole"] and parser.last_event_id == "1"


def test_bad_utf8_becomes_the_replacement_character() -> None:
    events, _ = parse(b"data: \xff\xfe ok\n\n")
    assert events[0].data == "\ufffd\ufffd ok"


# --- reading over HTTP -----------------------------------------------------------------

def connection(target: SseServer | str) -> Connection:
    url = target if isinstance(target, str) else target.url
    return Connection(url=url, key=KEY, tenant=TENANT)


def open_stream(target: SseServer | str, path: str = "/api/v1/stream", **kw: Any
                ) -> tuple[EventStream, list[float], list[tuple[str, float]]]:
    sleeps: list[float] = []
    notes: list[tuple[str, float]] = []
    kw.setdefault("timeouts", StreamTimeouts(connect_s=2.0, read_s=10.0))
    stream = EventStream(connection(target), path, kw.pop("params", None), sleep=sleeps.append,
                         on_reconnect=lambda reason, delay: notes.append((reason, delay)), **kw)
    return stream, sleeps, notes


def take(stream: EventStream, n: int | None = None) -> list[Event]:
    out: list[Event] = []
    for event in stream.events():
        out.append(event)
        if n is not None and len(out) >= n:
            break
    return out


def test_events_arrive_in_any_chunking_with_the_key_tenant_accept_and_filters(
        server: SseServer) -> None:
    # Given a stream written in chunks that cut lines, a CRLF and a character in two
    data = json.dumps({"jobResult": {"jobId": "j1", "status": "JOB_STATUS_SUCCEEDED"},
                       "note": "é"}, ensure_ascii=False)
    body = frame("job.result", data, "5-0").replace("\n", "\r\n").encode()
    cuts = [3, body.index(b"\r\n") + 1, body.index("é".encode()) + 1]
    parts = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    server.on("GET", "/api/v1/stream", sse(": ping\n\n", *parts, end="close"))
    stream, sleeps, _ = open_stream(server, params={"types": "job.result", "topic": "job.*",
                                                    "job_id": None})
    # When it is read
    with stream:
        (event,) = take(stream, 1)
    # Then the event is whole, and the request carried the principal and the filters
    assert event.type == "job.result" and event.id == "5-0" and event.doc()["note"] == "é"
    (seen,) = server.sent("/api/v1/stream")
    assert seen.headers["x-api-key"] == KEY and seen.headers["x-tenant-id"] == TENANT
    assert seen.headers["accept"] == "text/event-stream" and "last-event-id" not in seen.headers
    assert seen.query == {"types": "job.result", "topic": "job.*"} and sleeps == []


def test_a_dropped_connection_resumes_from_the_last_event_id(server: SseServer) -> None:
    # Given a stream that breaks after two events, then goes on from where it was
    server.on("GET", "/api/v1/stream",
              sse(frame("job.submit", {"n": 1}, "1-0"), frame("job.result", {"n": 2}, "2-0"),
                  "id: 3-0\ndata: {\"n\": 3", end="drop"),
              sse(frame("job.result", {"n": 3}, "3-0"), end="hold"))
    stream, sleeps, notes = open_stream(server)
    # When three events are read
    with stream:
        events = take(stream, 3)
    # Then the third came on a second connection that asked for what followed 2-0 (the
    # half-sent event's id is not taken), after the first backoff
    assert [e.doc()["n"] for e in events] == [1, 2, 3]
    first, second = server.sent("/api/v1/stream")
    assert "last-event-id" not in first.headers and second.headers["last-event-id"] == "2-0"
    assert sleeps == [0.5] and stream.connections == 2
    assert "RemoteProtocolError" in notes[0][0]


def test_the_servers_retry_sets_the_backoff(server: SseServer) -> None:
    server.on("GET", "/api/v1/stream", sse("retry: 2000\n", frame("a", {}, "1"), end="drop"),
              sse(frame("b", {}, "2"), end="hold"))
    stream, sleeps, _ = open_stream(server)
    with stream:
        assert [e.type for e in take(stream, 2)] == ["a", "b"]
    assert sleeps == [2.0]


def test_a_clean_end_is_the_end_of_a_job_stream_and_a_break_of_the_tenants(
        server: SseServer) -> None:
    server.on("GET", "/api/v1/jobs/j1/stream",
              sse(frame("job.state", {"id": "j1"}, "1"), end="close"))
    server.on("GET", "/api/v1/stream", sse(frame("a", {}, "1"), end="close"),
              sse(frame("b", {}, "2"), end="hold"))
    job, sleeps, _ = open_stream(server, "/api/v1/jobs/j1/stream", end_is_final=True)
    with job:
        assert [e.type for e in take(job)] == ["job.state"]  # ends by itself
    assert job.connections == 1 and sleeps == []
    tenant, sleeps, notes = open_stream(server)
    with tenant:
        assert [e.type for e in take(tenant, 2)] == ["a", "b"]
    # (a busy machine may drop the second connection too: then a third, after 1 s)
    assert sleeps[0] == 0.5 and notes[0][0] == "the server ended the stream"
    assert server.sent("/api/v1/stream")[-1].headers["last-event-id"] == "1"


def test_reconnections_are_bounded_with_a_doubling_backoff(server: SseServer) -> None:
    # Given a server that drops every connection before any event
    server.on("GET", "/api/v1/stream", sse(": hello\n", end="drop"))
    stream, sleeps, _ = open_stream(server, reconnect=ReconnectPolicy(
        max_attempts=4, initial_delay_s=0.5, max_delay_s=3.0))
    # When the stream is read, Then it is lost after four reconnections in a row
    with stream, pytest.raises(StreamLost) as lost:
        take(stream)
    assert sleeps == [0.5, 1.0, 2.0, 3.0] and stream.connections == 5
    assert lost.value.exit_code == ExitCode.UNAVAILABLE
    assert f"event stream at {server.url}/api/v1/stream lost" in str(lost.value)
    assert "4 reconnections failed" in str(lost.value)


def test_an_event_between_breaks_resets_the_count(server: SseServer) -> None:
    server.on("GET", "/api/v1/stream",
              *[sse(frame("e", {"n": n}, str(n)), end="drop") for n in range(5)],
              sse(frame("e", {"n": 5}, "5"), end="hold"))
    stream, sleeps, _ = open_stream(server, reconnect=ReconnectPolicy(max_attempts=2))
    with stream:
        assert [e.doc()["n"] for e in take(stream, 6)] == [0, 1, 2, 3, 4, 5]
    assert sleeps == [0.5] * 5


def test_a_refused_reconnection_counts_and_the_stream_is_lost(server: SseServer) -> None:
    # Given a stream whose server goes away after one event
    gone = threading.Event()
    server.on("GET", "/api/v1/stream", sse(frame("a", {}, "1"), lambda _: gone.is_set(),
                                           end="drop"))
    stream, sleeps, notes = open_stream(server, reconnect=ReconnectPolicy(max_attempts=2))
    events = stream.events()
    assert next(events).type == "a"
    server.httpd.shutdown()  # nothing listens any more: reconnections are refused
    server.httpd.server_close()
    gone.set()
    with stream, pytest.raises(StreamLost, match="cannot reach the event stream"):
        next(events)
    assert sleeps == [0.5, 1.0] and "ConnectError" in notes[-1][0]


def test_a_silent_connection_times_out_and_is_opened_again(server: SseServer) -> None:
    server.on("GET", "/api/v1/stream", sse(frame("a", {}, "1"), end="hold"),
              sse(frame("b", {}, "2"), end="hold"))
    stream, sleeps, notes = open_stream(server, timeouts=StreamTimeouts(read_s=0.3))
    with stream:
        assert [e.type for e in take(stream, 2)] == ["a", "b"]
    assert "ReadTimeout" in notes[0][0] and sleeps == [0.5]
    assert server.sent("/api/v1/stream")[1].headers["last-event-id"] == "1"


@pytest.mark.parametrize("since", ["8-0", "é-1"])
def test_since_is_sent_as_the_first_last_event_id(server: SseServer, since: str) -> None:
    server.on("GET", "/api/v1/stream", sse(frame("a", {}, "8-1"), end="hold"))
    stream, _, _ = open_stream(server, last_event_id=since)
    with stream:
        take(stream, 1)
    sent = server.sent("/api/v1/stream")[0].headers["last-event-id"]
    assert sent.encode("latin-1").decode() == since  # any id, as UTF-8


# --- a stream that is not there --------------------------------------------------------

@pytest.mark.parametrize("script,says", [
    (None, "404 no route /api/v1/stream (not_found)"),
    (reply(405, {"error": "method not allowed"}), "405 method not allowed"),
    (reply(200, {"items": []}), "answered application/json, not an event stream"),
    (reply(403, {"message": "Missing Authentication Token"}), "403 Forbidden"),
])
def test_nothing_serving_the_stream_is_unavailable_at_once(
        server: SseServer, script: Any, says: str) -> None:
    if script is not None:
        server.on("GET", "/api/v1/stream", script)
    stream, sleeps, _ = open_stream(server)
    with stream, pytest.raises(StreamUnavailable) as raised:
        stream.open()
    assert says in str(raised.value) and sleeps == [] and len(server.seen) == 1
    assert raised.value.exit_code == ExitCode.UNAVAILABLE


def test_a_refused_connection_is_unavailable_and_names_the_url_not_the_key() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    stream, _, _ = open_stream(url)
    with stream, pytest.raises(StreamUnavailable) as raised:
        stream.open()
    assert str(raised.value).startswith(f"cannot reach the event stream at {url}/api/v1/stream")
    assert KEY not in str(raised.value)


def test_a_refused_key_is_the_apis_error(server: SseServer) -> None:
    server.on("GET", "/api/v1/stream", reply(401, {"error": "unauthorized",
                                                   "code": "unauthorized", "status": 401}))
    stream, _, _ = open_stream(server)
    with stream, pytest.raises(ApiError) as raised:
        stream.open()
    assert raised.value.exit_code == ExitCode.AUTH and raised.value.line() == \
        "401 unauthorized (unauthorized)"


def test_a_503_is_tried_again_after_its_retry_after(server: SseServer) -> None:
    busy = reply(503, {"error": "stream unavailable", "code": "unavailable"}, {"Retry-After": "2"})
    server.on("GET", "/api/v1/stream", busy, sse(frame("a", {}, "1"), end="hold"))
    stream, sleeps, notes = open_stream(server)
    with stream:
        assert [e.type for e in take(stream, 1)] == ["a"]
    assert sleeps == [2.0] and notes == [("503 stream unavailable (unavailable)", 2.0)]
    server.on("GET", "/api/v1/stream", busy)
    stream, sleeps, _ = open_stream(server, reconnect=ReconnectPolicy(max_attempts=3))
    with stream, pytest.raises(ApiError) as raised:
        stream.open()
    assert raised.value.status == 503 and sleeps == [2.0, 2.0]


# --- the background reader -------------------------------------------------------------

def test_a_feed_takes_what_came_in_batches_and_says_when_the_stream_ended(
        server: SseServer) -> None:
    server.on("GET", "/api/v1/jobs/j1/stream",
              sse(frame("a", {}, "1") + frame("b", {}, "2"), 0.3, frame("c", {}, "3"),
                  end="close"))
    stream, _, _ = open_stream(server, "/api/v1/jobs/j1/stream", end_is_final=True)
    stream.open()
    feed = Feed(stream)
    got: list[str] = []
    while not feed.finished:
        got += [e.type for e in feed.take(5.0)]
    assert got == ["a", "b", "c"] and feed.error is None and feed.take(0) == []


def test_a_feed_waits_no_longer_than_asked_and_keeps_the_error_it_ended_with(
        server: SseServer) -> None:
    server.on("GET", "/api/v1/stream", sse(0.5, end="drop"))
    stream, _, _ = open_stream(server, reconnect=ReconnectPolicy(max_attempts=1))
    stream.open()
    feed = Feed(stream)
    assert feed.take(0.05) == [] and not feed.finished
    while not feed.finished:
        feed.take(5.0)
    assert isinstance(feed.error, StreamLost)


def test_a_stopped_feed_opens_no_more_connections(server: SseServer) -> None:
    server.on("GET", "/api/v1/stream", sse(frame("a", {}, "1"), 0.2, end="drop"))
    stream, sleeps, _ = open_stream(server)
    stream.open()
    feed = Feed(stream)
    assert [e.type for e in feed.take(5.0)] == ["a"]
    feed.stop()
    feed._thread.join(5.0)
    assert not feed._thread.is_alive() and stream.connections == 1 and sleeps == []
