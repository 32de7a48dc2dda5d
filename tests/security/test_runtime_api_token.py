"""The local Lambda Runtime API serves only the runtime process the executor started.

Every function's events (API Gateway events carry the caller's X-API-Key) used to be
handed to whoever polled ``/2018-06-01/runtime/invocation/next`` on the loopback
port first; anyone there could also answer for the function, report an init error
or post ``/invoke`` to run the function on an event of their own.
"""

from __future__ import annotations

import http.client
import json
import queue
import threading
import time
from collections.abc import Iterator

import pytest
from cordum_local_executor.runtime_api import Invocation, InvocationOutcome, RuntimeApiServer

NEXT = "/2018-06-01/runtime/invocation/next"
API_KEY = "alice-key-0123456789"
EVENT = json.dumps({"httpMethod": "GET", "path": "/api/v1/jobs",
                    "headers": {"X-API-Key": API_KEY}}).encode()


@pytest.fixture
def server() -> Iterator[RuntimeApiServer]:
    srv = RuntimeApiServer()
    srv.start()
    yield srv
    srv.stop()


def runtime_api(server: RuntimeApiServer) -> str:
    """What the executor puts in the runtime's AWS_LAMBDA_RUNTIME_API."""
    return str(getattr(server, "runtime_api", server.address))


class Client:
    """An HTTP client of the Runtime API at ``host:port[/prefix]``."""

    def __init__(self, api: str, timeout: float = 10) -> None:
        hostport, _, prefix = api.partition("/")
        self.prefix = f"/{prefix}" if prefix else ""
        self.conn = http.client.HTTPConnection(hostport, timeout=timeout)

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
        self.conn.request(method, self.prefix + path, body=body, headers=headers or {})
        response = self.conn.getresponse()
        return response.status, response.read(), dict(response.getheaders())


def stranger(server: RuntimeApiServer) -> Client:
    """A process on the same machine that knows the port (a port scan finds it)."""
    return Client(server.address, timeout=3)


def dispatch(server: RuntimeApiServer, request_id: str) -> queue.Queue[InvocationOutcome]:
    outcomes: queue.Queue[InvocationOutcome] = queue.Queue()
    invocation = Invocation(request_id=request_id, payload=EVENT,
                            function_arn="arn:aws:lambda:us-east-1:000000000000:function:gw",
                            deadline_ms=int(time.time() * 1000) + 30_000)
    server.dispatch(invocation, 30, outcomes.put)
    return outcomes


def test_a_stranger_polling_next_gets_no_event(server: RuntimeApiServer) -> None:
    # Given an invocation waiting for the function's runtime
    dispatch(server, "req-1")
    # When another local process polls the Runtime API
    try:
        status, body, _ = stranger(server).request("GET", NEXT)
    except TimeoutError:
        status, body = 0, b""
    # Then it is refused, and the event (with its API key) is not in the answer
    assert status in (403, 404)
    assert API_KEY.encode() not in body
    # And the function's own runtime still gets the event
    status, body, headers = Client(runtime_api(server)).request("GET", NEXT)
    assert status == 200 and headers["Lambda-Runtime-Aws-Request-Id"] == "req-1"


def test_a_stranger_cannot_answer_for_the_function(server: RuntimeApiServer) -> None:
    # Given the runtime working on an invocation
    outcomes = dispatch(server, "req-2")
    runtime = Client(runtime_api(server))
    assert runtime.request("GET", NEXT)[0] == 200
    # When another process posts a result for it
    status, _, _ = stranger(server).request(
        "POST", "/2018-06-01/runtime/invocation/req-2/response", b'{"forged": true}')
    # Then it is refused and the invocation still waits for the real answer
    assert status in (403, 404)
    assert outcomes.empty()
    assert runtime.request("POST", "/2018-06-01/runtime/invocation/req-2/response",
                           b'{"real": true}')[0] == 202
    assert outcomes.get(timeout=5).payload == b'{"real": true}'


def test_a_stranger_cannot_report_an_init_error(server: RuntimeApiServer) -> None:
    error = {"errorType": "Runtime.ImportModuleError", "errorMessage": "forged"}
    status, _, _ = stranger(server).request(
        "POST", "/2018-06-01/runtime/init/error", json.dumps(error).encode(),
        {"Lambda-Runtime-Function-Error-Type": "Runtime.ImportModuleError"})
    assert status in (403, 404)
    # The executor keeps waiting for its own runtime instead of failing the environment
    with pytest.raises(TimeoutError):
        server.wait_until_ready(timeout=0.2)


def test_a_stranger_cannot_inject_an_invocation() -> None:
    # Given the server as the executor runs it, taking invocations from LocalStack
    received: list[bytes] = []
    srv = RuntimeApiServer(invoke_handler=received.append)
    srv.start()
    try:
        body = json.dumps({"invoke-id": "evil", "payload": "{}",
                           "invoked-function-arn": "arn"}).encode()
        status, _, _ = stranger(srv).request("POST", "/invoke", body)
    finally:
        srv.stop()
    # Then a post from anyone else runs nothing
    assert status in (403, 404)
    assert received == []


def test_a_replaced_runtimes_address_is_refused(server: RuntimeApiServer) -> None:
    # Given a runtime that was replaced (timed out or died): it still knows its address
    old_api = runtime_api(server)
    server.runtime_exited("killed")
    server.reset()
    dispatch(server, "req-3")
    got: queue.Queue[int] = queue.Queue()

    def poll() -> None:
        try:
            got.put(Client(old_api, timeout=3).request("GET", NEXT)[0])
        except TimeoutError:
            got.put(0)

    threading.Thread(target=poll, daemon=True).start()
    # Then it cannot take the next runtime's event
    assert got.get(timeout=10) in (403, 404)
    assert Client(runtime_api(server)).request("GET", NEXT)[0] == 200
