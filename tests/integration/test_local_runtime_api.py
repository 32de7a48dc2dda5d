"""The local Lambda Runtime API server on a loopback port, driven over HTTP as awslambdaric
drives it from another thread."""

from __future__ import annotations

import http.client
import json
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from cordum_local_executor.invocation import (
    Invocation,
    InvocationOutcome,
    RuntimeExited,
    RuntimeInitError,
)
from cordum_local_executor.runtime_api import RuntimeApiServer

NEXT = "/2018-06-01/runtime/invocation/next"
ARN = "arn:aws:lambda:us-east-1:000000000000:function:f"


@pytest.fixture
def server() -> Iterator[RuntimeApiServer]:
    srv = RuntimeApiServer()
    srv.start()
    yield srv
    srv.stop()


@dataclass
class Polled:
    """What the runtime's long poll got back."""

    status: int
    body: bytes
    response: http.client.HTTPResponse

    def header(self, name: str) -> str | None:
        return self.response.getheader(name)


class FakeRuntime:
    """The runtime's side: one keep-alive connection, like the C runtime client, to the
    AWS_LAMBDA_RUNTIME_API the executor gives it (``host:port/<token>``)."""

    def __init__(self, server: RuntimeApiServer, api: str | None = None) -> None:
        hostport, _, token = (api or server.runtime_api).partition("/")
        self.prefix = f"/{token}" if token else ""
        self.conn = http.client.HTTPConnection(hostport, timeout=10)

    def next(self) -> Polled:
        self.conn.request("GET", self.prefix + NEXT)
        response = self.conn.getresponse()
        return Polled(response.status, response.read(), response)

    def post(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> int:
        self.conn.request("POST", self.prefix + path, body=body, headers=headers or {})
        response = self.conn.getresponse()
        response.read()
        return response.status

    def respond(self, request_id: str, body: bytes) -> int:
        return self.post(f"/2018-06-01/runtime/invocation/{request_id}/response", body)


def invocation(request_id: str = "req-1", payload: bytes = b'{"n": 1}', **kw: object) -> Invocation:
    fields: dict[str, object] = {
        "function_arn": ARN,
        "deadline_ms": int(time.time() * 1000) + 30_000,
        "trace_id": "Root=1-abc;Parent=def;Sampled=0",
    }
    fields.update(kw)
    return Invocation(request_id=request_id, payload=payload, **fields)  # type: ignore[arg-type]


def dispatch(
    server: RuntimeApiServer, inv: Invocation, timeout_s: float = 30
) -> queue.Queue[InvocationOutcome]:
    outcomes: queue.Queue[InvocationOutcome] = queue.Queue()
    server.dispatch(inv, timeout_s, outcomes.put)
    return outcomes


def test_next_carries_the_event_and_the_lambda_headers(server: RuntimeApiServer) -> None:
    # Given an invocation with every optional header set
    inv = invocation(
        payload=b'{"hello": "world"}',
        client_context='{"custom": {"k": "v"}}',
        cognito_identity='{"cognitoIdentityId": "id-1"}',
    )
    outcomes = dispatch(server, inv)

    # When the runtime polls
    response = FakeRuntime(server).next()

    # Then it gets the event with Lambda's headers
    assert response.status == 200
    assert response.body == b'{"hello": "world"}'
    assert response.header("Lambda-Runtime-Aws-Request-Id") == "req-1"
    assert response.header("Lambda-Runtime-Deadline-Ms") == str(inv.deadline_ms)
    assert response.header("Lambda-Runtime-Invoked-Function-Arn") == ARN
    assert response.header("Lambda-Runtime-Trace-Id") == "Root=1-abc;Parent=def;Sampled=0"
    assert response.header("Lambda-Runtime-Client-Context") == '{"custom": {"k": "v"}}'
    assert response.header("Lambda-Runtime-Cognito-Identity") == '{"cognitoIdentityId": "id-1"}'
    assert outcomes.empty()


def test_optional_headers_are_left_out_when_absent(server: RuntimeApiServer) -> None:
    dispatch(server, invocation())

    response = FakeRuntime(server).next()

    assert response.header("Lambda-Runtime-Client-Context") is None
    assert response.header("Lambda-Runtime-Cognito-Identity") is None


def test_response_round_trip(server: RuntimeApiServer) -> None:
    # Given a runtime that took the invocation
    outcomes = dispatch(server, invocation("req-7"))
    runtime = FakeRuntime(server)
    runtime.next()

    # When it posts its result
    status = runtime.respond("req-7", b'{"result": 42}')

    # Then Lambda's 202 goes back and the executor gets the result
    assert status == 202
    outcome = outcomes.get(timeout=5)
    assert outcome == InvocationOutcome("req-7", b'{"result": 42}', is_error=False)


def test_submit_blocks_until_the_runtime_answers(server: RuntimeApiServer) -> None:
    def run_runtime() -> None:
        runtime = FakeRuntime(server)
        request_id = runtime.next().header("Lambda-Runtime-Aws-Request-Id") or ""
        runtime.respond(request_id, b'"done"')

    thread = threading.Thread(target=run_runtime)
    thread.start()

    outcome = server.submit(invocation("req-s"), timeout_s=10)

    thread.join(5)
    assert outcome.payload == b'"done"'
    assert not outcome.is_error


def test_function_error_keeps_type_and_message(server: RuntimeApiServer) -> None:
    outcomes = dispatch(server, invocation("req-e"))
    runtime = FakeRuntime(server)
    runtime.next()
    error = {"errorMessage": "boom", "errorType": "ValueError", "stackTrace": []}

    status = runtime.post(
        "/2018-06-01/runtime/invocation/req-e/error",
        json.dumps(error).encode(),
        {"Lambda-Runtime-Function-Error-Type": "ValueError"},
    )

    assert status == 202
    outcome = outcomes.get(timeout=5)
    assert outcome.is_error
    assert outcome.error_type == "ValueError"
    assert json.loads(outcome.payload) == error
    assert not outcome.timed_out


def test_two_invocations_in_sequence_on_one_connection(server: RuntimeApiServer) -> None:
    runtime = FakeRuntime(server)
    results = []
    for n in (1, 2):
        outcomes = dispatch(server, invocation(f"req-{n}", f'{{"n": {n}}}'.encode()))
        response = runtime.next()
        assert response.header("Lambda-Runtime-Aws-Request-Id") == f"req-{n}"
        event = json.loads(response.body)
        runtime.respond(f"req-{n}", json.dumps({"double": event["n"] * 2}).encode())
        results.append(json.loads(outcomes.get(timeout=5).payload))

    assert results == [{"double": 2}, {"double": 4}]


def test_a_second_dispatch_while_one_runs_is_refused(server: RuntimeApiServer) -> None:
    dispatch(server, invocation("req-1"))

    with pytest.raises(RuntimeError, match="req-1"):
        dispatch(server, invocation("req-2"))


def test_unknown_request_id_is_rejected_and_the_invocation_stays_open(
    server: RuntimeApiServer,
) -> None:
    outcomes = dispatch(server, invocation("req-1"))
    runtime = FakeRuntime(server)
    runtime.next()

    status = runtime.respond("not-a-request", b"{}")

    assert status == 400
    assert outcomes.empty()
    assert runtime.respond("req-1", b"{}") == 202
    assert outcomes.get(timeout=5).request_id == "req-1"


def test_a_request_id_not_yet_handed_out_is_rejected(server: RuntimeApiServer) -> None:
    outcomes = dispatch(server, invocation("req-1"))

    status = FakeRuntime(server).respond("req-1", b"{}")

    assert status == 400
    assert outcomes.empty()


def test_answering_twice_is_rejected(server: RuntimeApiServer) -> None:
    outcomes = dispatch(server, invocation("req-1"))
    runtime = FakeRuntime(server)
    runtime.next()
    runtime.respond("req-1", b"1")

    assert runtime.respond("req-1", b"2") == 400
    assert outcomes.get(timeout=5).payload == b"1"
    assert outcomes.empty()


def test_unknown_path_is_404(server: RuntimeApiServer) -> None:
    runtime = FakeRuntime(server)
    runtime.conn.request("GET", runtime.prefix + "/2018-06-01/runtime/invocation/whatever")
    response = runtime.conn.getresponse()
    response.read()

    assert response.status == 404
    assert runtime.post("/2018-06-01/runtime/invocation/req/unknown", b"{}") == 404


def test_deadline_ends_the_invocation_as_sandbox_timeout(server: RuntimeApiServer) -> None:
    # Given a runtime that took the event and never answers in time
    outcomes = dispatch(server, invocation("req-slow"), timeout_s=0.2)
    runtime = FakeRuntime(server)
    runtime.next()

    # When the deadline passes
    outcome = outcomes.get(timeout=5)

    # Then the executor gets Lambda's timeout error, and a late answer is refused
    assert outcome.timed_out
    assert outcome.is_error
    assert outcome.error_type == "Sandbox.Timedout"
    body = json.loads(outcome.payload)
    assert body["errorType"] == "Sandbox.Timedout"
    assert "Task timed out after 0.20 seconds" in body["errorMessage"]
    assert runtime.respond("req-slow", b"{}") == 400
    assert outcomes.empty()


def test_deadline_also_covers_an_event_never_polled(server: RuntimeApiServer) -> None:
    outcomes = dispatch(server, invocation("req-1"), timeout_s=0.1)

    assert outcomes.get(timeout=5).timed_out
    # The slot is free again for the next invocation
    dispatch(server, invocation("req-2"))
    response = FakeRuntime(server).next()
    assert response.header("Lambda-Runtime-Aws-Request-Id") == "req-2"


def test_answer_before_the_deadline_cancels_the_timeout(server: RuntimeApiServer) -> None:
    outcomes = dispatch(server, invocation("req-1"), timeout_s=0.3)
    runtime = FakeRuntime(server)
    runtime.next()
    runtime.respond("req-1", b"{}")

    assert not outcomes.get(timeout=5).timed_out
    # Past the 0.3 s deadline: a timeout left armed would have fired by now.
    time.sleep(0.5)
    assert outcomes.empty()


def test_ready_once_the_runtime_polls(server: RuntimeApiServer) -> None:
    with pytest.raises(TimeoutError):
        server.wait_until_ready(timeout=0.1)

    poller = threading.Thread(target=FakeRuntime(server).next, daemon=True)
    poller.start()

    server.wait_until_ready(timeout=5)


def test_init_error_is_raised_with_its_document(server: RuntimeApiServer) -> None:
    error = {
        "errorMessage": "Unable to import module 'app'",
        "errorType": "Runtime.ImportModuleError",
    }

    status = FakeRuntime(server).post(
        "/2018-06-01/runtime/init/error",
        json.dumps(error).encode(),
        {"Lambda-Runtime-Function-Error-Type": "Runtime.ImportModuleError"},
    )

    assert status == 202
    with pytest.raises(RuntimeInitError) as raised:
        server.wait_until_ready(timeout=5)
    assert raised.value.error_type == "Runtime.ImportModuleError"
    assert json.loads(raised.value.payload) == error


def test_runtime_death_fails_the_running_invocation(server: RuntimeApiServer) -> None:
    outcomes = dispatch(server, invocation("req-1"))
    FakeRuntime(server).next()

    server.runtime_exited("Runtime exited with error: exit status 1")

    outcome = outcomes.get(timeout=5)
    assert outcome.is_error
    assert outcome.error_type == "Runtime.ExitError"
    assert "exit status 1" in json.loads(outcome.payload)["errorMessage"]


def test_after_death_dispatch_fails_at_once_and_ready_wait_raises(
    server: RuntimeApiServer,
) -> None:
    server.runtime_exited("Runtime exited with error: signal: killed")

    outcome = dispatch(server, invocation("req-1")).get(timeout=1)

    assert outcome.error_type == "Runtime.ExitError"
    with pytest.raises(RuntimeExited, match="killed"):
        server.wait_until_ready(timeout=1)


def test_reset_keeps_a_dead_runtimes_poll_from_taking_the_next_event(
    server: RuntimeApiServer,
) -> None:
    # Given a long poll left behind by a runtime that has since died
    stale: queue.Queue[Polled] = queue.Queue()
    threading.Thread(target=lambda: stale.put(FakeRuntime(server).next()), daemon=True).start()
    server.wait_until_ready(timeout=5)
    server.runtime_exited("killed")

    # When a new runtime starts and an invocation comes
    server.reset()
    outcomes = dispatch(server, invocation("req-new"))
    fresh = FakeRuntime(server).next()

    # Then the new runtime gets it, and the stale poll is sent away
    assert fresh.header("Lambda-Runtime-Aws-Request-Id") == "req-new"
    assert stale.get(timeout=5).status == 410
    assert outcomes.empty()


def executor(server: RuntimeApiServer) -> FakeRuntime:
    """The executor's side: posts to the server's invoke URL."""
    return FakeRuntime(server, server.invoke_url.removeprefix("http://").removesuffix("/invoke"))


def test_invoke_hook_receives_the_posted_invocation() -> None:
    received: list[bytes] = []
    srv = RuntimeApiServer(invoke_handler=received.append)
    srv.start()
    try:
        status = executor(srv).post("/invoke", b'{"invoke-id": "r1"}')
    finally:
        srv.stop()

    assert status == 200
    assert received == [b'{"invoke-id": "r1"}']


def test_invoke_hook_failure_is_reported_as_500() -> None:
    def refuse(body: bytes) -> None:
        raise RuntimeError("busy")

    srv = RuntimeApiServer(invoke_handler=refuse)
    srv.start()
    try:
        status = executor(srv).post("/invoke", b"{}")
    finally:
        srv.stop()

    assert status == 500


def test_chunked_request_body_is_read(server: RuntimeApiServer) -> None:
    outcomes = dispatch(server, invocation("req-c"))
    runtime = FakeRuntime(server)
    runtime.next()

    runtime.conn.putrequest(
        "POST", runtime.prefix + "/2018-06-01/runtime/invocation/req-c/response"
    )
    runtime.conn.putheader("Transfer-Encoding", "chunked")
    runtime.conn.endheaders()
    runtime.conn.send(b'5\r\n{"a":\r\n3\r\n 1}\r\n0\r\n\r\n')
    response = runtime.conn.getresponse()
    response.read()

    assert response.status == 202
    assert outcomes.get(timeout=5).payload == b'{"a": 1}'


def test_server_listens_on_loopback_with_an_ephemeral_port(server: RuntimeApiServer) -> None:
    host, port = server.address.rsplit(":", 1)

    assert host == "127.0.0.1"
    assert int(port) == server.port > 0


# --- the token -------------------------------------------------------------------------


def test_runtime_api_is_the_address_with_a_token_path(server: RuntimeApiServer) -> None:
    hostport, _, token = server.runtime_api.partition("/")

    assert hostport == server.address
    assert len(token) >= 43 and "/" not in token


def test_next_without_or_with_a_wrong_token_is_403(server: RuntimeApiServer) -> None:
    dispatch(server, invocation("req-1"))
    token = server.runtime_api.partition("/")[2]

    for api in (server.address, f"{server.address}/{token[:-1]}x", f"{server.address}/x{token}"):
        assert FakeRuntime(server, api).next().status == 403, api
    # The event is still there for the runtime
    assert FakeRuntime(server).next().header("Lambda-Runtime-Aws-Request-Id") == "req-1"


def test_every_runtime_call_needs_the_token(server: RuntimeApiServer) -> None:
    outcomes = dispatch(server, invocation("req-1"))
    runtime = FakeRuntime(server)
    runtime.next()
    stranger = FakeRuntime(server, server.address)

    assert stranger.post("/2018-06-01/runtime/invocation/req-1/response", b"{}") == 403
    stranger = FakeRuntime(server, server.address)
    assert stranger.post("/2018-06-01/runtime/invocation/req-1/error", b"{}") == 403
    stranger = FakeRuntime(server, server.address)
    assert stranger.post("/2018-06-01/runtime/init/error", b"{}") == 403
    assert outcomes.empty()
    assert runtime.respond("req-1", b"1") == 202
    assert outcomes.get(timeout=5).payload == b"1"


def test_reset_gives_the_next_runtime_a_new_token(server: RuntimeApiServer) -> None:
    before = server.runtime_api

    server.reset()

    assert server.runtime_api != before
    assert FakeRuntime(server, before).post("/2018-06-01/runtime/init/error", b"{}") == 403
    with pytest.raises(TimeoutError):
        server.wait_until_ready(timeout=0.1)


def test_the_runtime_token_does_not_open_invoke() -> None:
    received: list[bytes] = []
    srv = RuntimeApiServer(invoke_handler=received.append)
    srv.start()
    try:
        assert FakeRuntime(srv).post("/invoke", b"{}") == 404
        assert FakeRuntime(srv, srv.address).post("/invoke", b"{}") == 403
    finally:
        srv.stop()

    assert received == []


def test_without_an_invoke_handler_the_invoke_token_opens_nothing(
    server: RuntimeApiServer,
) -> None:
    assert executor(server).post("/invoke", b"{}") == 403
