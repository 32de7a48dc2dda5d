"""A real local HTTP server for cordumctl's event stream tests, and cordumctl run against it.

``SseServer`` listens on 127.0.0.1 (an ephemeral port), one thread per connection, and
answers each route from a script, like ``tests/cordumctl_stub.StubApi`` (a route given a
list answers its items in turn, the last one again once they run out). A stream script
writes Server-Sent Events in HTTP/1.1 chunks, as given (so a test picks where chunks
split), and ends by closing the stream properly (``end="close"``), by dropping the
connection mid-body (``end="drop"``), or by holding it open until the test ends
(``end="hold"``). Every request is recorded with its query and headers.

The tests at the bottom check the server itself.
"""

from __future__ import annotations

import io
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from rich.console import Console

from cordumctl.app import main
from cordumctl.client import RetryPolicy
from cordumctl.session import Runtime
from cordumctl.stream import ReconnectPolicy, StreamTimeouts
from tests.cordumctl_stub import Outcome

KEY = "sk-stream-test-5a4b3c2d1e"
TENANT = "t1"

Script = Callable[["Handler"], None]
"""How the server answers one request."""
Step = str | bytes | float | Callable[["SseServer"], object]
"""Part of a stream: text to write as one chunk, seconds to pause, or a condition on the
server to wait for (a callable that answers true when the stream may go on)."""


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    """Lower-cased names."""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Httpd

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self.server.owner.dispatch(self)

    do_POST = do_GET

    # -- what a script writes ------------------------------------------------------------

    def json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(raw)

    def start_stream(self, content_type: str = "text/event-stream") -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        self.close_connection = True

    def drop(self) -> None:
        """Cut the connection mid-body (no last chunk): the client sees it break."""
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True


class _Httpd(ThreadingHTTPServer):
    daemon_threads = True
    owner: SseServer


@dataclass
class SseServer:
    routes: dict[tuple[str, str], list[Script]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self.httpd = _Httpd(("127.0.0.1", 0), Handler)
        self.httpd.owner = self
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def on(self, method: str, path: str, *scripts: Script) -> SseServer:
        self.routes[(method, path)] = list(scripts)
        return self

    def sent(self, path: str, method: str = "GET") -> list[Seen]:
        with self._lock:
            return [r for r in self.seen if r.path == path and r.method == method]

    def dispatch(self, handler: Handler) -> None:
        split = urlsplit(handler.path)
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        headers = {k.lower(): v for k, v in handler.headers.items()}
        if handler.command == "POST":
            handler.rfile.read(int(headers.get("content-length") or 0))
        with self._lock:
            self.seen.append(Seen(handler.command, split.path, query, headers))
            scripts = self.routes.get((handler.command, split.path))
            script = (scripts.pop(0) if len(scripts) > 1 else scripts[0]) if scripts else None
        if script is None:
            handler.json(404, {"error": f"no route {split.path}", "code": "not_found",
                               "status": 404})
            return
        try:
            script(handler)
        except (BrokenPipeError, ConnectionResetError):  # the client went away
            handler.close_connection = True

    def close(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[SseServer]:
    found = SseServer()
    try:
        yield found
    finally:
        found.close()


def free_port() -> int:
    """A port nothing listens on (bound, then let go): connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --- scripts ---------------------------------------------------------------------------

def frame(kind: str, data: Any, event_id: str | None = None) -> str:
    """One event as the stream writes it."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    text = data if isinstance(data, str) else json.dumps(data)
    return f"{head}event: {kind}\ndata: {text}\n\n"


def reply(status: int, body: Any = None, headers: dict[str, str] | None = None) -> Script:
    return lambda h: h.json(status, body, headers)


def sse(*steps: Step, end: str = "hold", content_type: str = "text/event-stream") -> Script:
    """A stream of ``steps``, ended as ``end`` says: close, drop or hold."""
    def script(h: Handler) -> None:
        h.start_stream(content_type)
        owner = h.server.owner
        for step in steps:
            if isinstance(step, int | float):
                time.sleep(step)
            elif callable(step):
                wait_until(_either(step, owner))
            else:
                h.chunk(step.encode() if isinstance(step, str) else step)
        if end == "close":
            h.end_stream()
        elif end == "drop":
            h.drop()
        else:
            owner.stopping.wait(30)
            h.end_stream()
    return script


def _either(step: Callable[[SseServer], object], owner: SseServer) -> Callable[[], bool]:
    """The step's condition, or the server stopping."""
    return lambda: bool(step(owner)) or owner.stopping.is_set()


def reads(path: str, count: int) -> Callable[[SseServer], bool]:
    """A stream step: wait until ``path`` was read ``count`` times."""
    return lambda server: len(server.sent(path)) >= count


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the server waited in vain")
        time.sleep(0.01)


# --- cordumctl against it --------------------------------------------------------------

def env_for(server: SseServer, stream: SseServer | str | None = None) -> dict[str, str]:
    env = {"CORDUM_API_URL": server.url, "CORDUM_API_KEY": KEY, "CORDUM_TENANT_ID": TENANT}
    if stream is not None:
        env["CORDUM_STREAM_URL"] = stream if isinstance(stream, str) else stream.url
    return env


def run_real(server: SseServer, *args: str, env: dict[str, str] | None = None,
             terminal: bool = False, poll_interval_s: float = 1.0,
             idle_reread_s: float = 30.0, reconnect: ReconnectPolicy | None = None,
             timeouts: StreamTimeouts | None = None) -> Outcome:
    """cordumctl in-process over the network to ``server``; sleeps are recorded, not slept,
    and the clock moves only with them (as in ``tests/cordumctl_stub.run_cli``)."""
    out, err = io.StringIO(), io.StringIO()
    sleeps: list[float] = []
    clock = [0.0]

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock[0] += seconds

    runtime = Runtime(
        environ=env_for(server) if env is None else env,
        cwd=Path("/nonexistent-cordumctl-test"), sleep=sleep, clock=lambda: clock[0],
        retry=RetryPolicy(), poll_interval_s=poll_interval_s,
        stream_reconnect=reconnect or ReconnectPolicy(),
        stream_timeouts=timeouts or StreamTimeouts(connect_s=2.0, read_s=10.0),
        stream_idle_reread_s=idle_reread_s,
        console=Console(file=out, width=200, force_terminal=terminal, color_system=None),
        err_console=Console(file=err, width=200, color_system=None))
    code = main(list(args), runtime)
    return Outcome(code, out.getvalue(), err.getvalue(), sleeps)


# --- the server itself -----------------------------------------------------------------

def test_the_server_writes_chunks_as_given_and_records_each_request(server: SseServer) -> None:
    server.on("GET", "/s", sse("id: 1\n", "data: a\n\n", end="close"))
    request = urllib.request.Request(server.url + "/s?types=x", headers={"X-Test": "1"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert answer.headers["Content-Type"] == "text/event-stream"
        assert answer.read() == b"id: 1\ndata: a\n\n"
    (seen,) = server.sent("/s")
    assert seen.query == {"types": "x"} and seen.headers["x-test"] == "1"


def test_an_unknown_route_is_a_json_404(server: SseServer) -> None:
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(server.url + "/nothing", timeout=5)
    assert raised.value.code == 404
    assert json.loads(raised.value.read())["code"] == "not_found"
