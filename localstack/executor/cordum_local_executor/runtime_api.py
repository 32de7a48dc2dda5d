"""A minimal AWS Lambda Runtime API, served to one runtime process.

The server's state and the route handler driving it stay together (the handler
calls the server's private methods); the HTTP/1.1 plumbing is ``http_handler``'s.

On AWS the Lambda service answers the runtime's long poll on
``/2018-06-01/runtime/invocation/next`` and collects its ``/response`` or
``/error``. This module plays that part on 127.0.0.1 for a runtime started by
the executor (``awslambdaric`` under the function's interpreter), and gives the
executor a small API on the other side:

* :meth:`RuntimeApiServer.wait_until_ready` returns once the runtime has
  finished its init (its first ``next`` poll) or raises what went wrong;
* :meth:`RuntimeApiServer.dispatch` queues one invocation and calls back with
  its :class:`InvocationOutcome` (response, function error, timeout, or the
  runtime's death); :meth:`RuntimeApiServer.submit` is the blocking form.

A Lambda environment runs one invocation at a time, and so does this server.

Only the runtime process the executor started may use the Runtime API: the port is
open to every process on the machine, and the events carry what callers sent (API
keys in API Gateway headers). Each runtime process gets a random token of its own
as the first path segment of its AWS_LAMBDA_RUNTIME_API (``127.0.0.1:<port>/<token>``,
see :attr:`RuntimeApiServer.runtime_api`); awslambdaric puts that address before
every Runtime API path, so every request carries the token. The token changes with
each new runtime process (:meth:`RuntimeApiServer.reset`), so a replaced one is shut
out too. The executor's ``POST /invoke`` has a token of its own
(:attr:`RuntimeApiServer.invoke_url`). Any other request is answered 403 before its
path is looked at.

Standard library only: LocalStack's interpreter imports it in the executor,
and the unit tests import it without LocalStack.
"""

from __future__ import annotations

import hmac
import queue
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cordum_local_executor.http_handler import JsonHandler, message
from cordum_local_executor.invocation import (
    Invocation,
    InvocationOutcome,
    RuntimeExited,
    RuntimeInitError,
    exit_outcome,
    timeout_outcome,
)

RUNTIME_PREFIX = "/2018-06-01/runtime"
INVOKE_PATH = "/invoke"

TOKEN_BYTES = 32
"""Entropy of a token (256 bits), URL-safe base64 in the path."""

HEADER_REQUEST_ID = "Lambda-Runtime-Aws-Request-Id"
HEADER_DEADLINE_MS = "Lambda-Runtime-Deadline-Ms"
HEADER_FUNCTION_ARN = "Lambda-Runtime-Invoked-Function-Arn"
HEADER_TRACE_ID = "Lambda-Runtime-Trace-Id"
HEADER_CLIENT_CONTEXT = "Lambda-Runtime-Client-Context"
HEADER_COGNITO_IDENTITY = "Lambda-Runtime-Cognito-Identity"
HEADER_ERROR_TYPE = "Lambda-Runtime-Function-Error-Type"

_INVOCATION_PATH = re.compile(
    re.escape(RUNTIME_PREFIX) + r"/invocation/(?P<request_id>[^/]+)/(?P<kind>response|error)$"
)


@dataclass
class _Pending:
    invocation: Invocation
    on_done: Callable[[InvocationOutcome], None]
    timer: threading.Timer | None = None
    handed_out: bool = False


class RuntimeApiServer:
    """The Runtime API for one runtime process, on a loopback ephemeral port.

    The runtime process may be replaced (after a timeout or a crash): the
    executor calls :meth:`runtime_exited` when one dies and :meth:`reset`
    before starting the next. Each reset starts a new generation with a new
    token, so neither a long poll left over from the dead process nor a new
    request of it can take the next invocation.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        invoke_handler: Callable[[bytes], None] | None = None,
    ) -> None:
        """``invoke_handler``, if given, serves ``POST`` on :attr:`invoke_url` on the same
        port: LocalStack's ExecutorEndpoint posts each invocation there, as it would
        to its init inside a container; the handler is expected to :meth:`dispatch` it.
        """
        self._invoke_handler = invoke_handler
        self._cond = threading.Condition()
        self._generation = 0
        self._closed = False
        self._ready = False
        self._init_error: RuntimeInitError | None = None
        self._exited: RuntimeExited | None = None
        self._pending: _Pending | None = None
        self._runtime_token = secrets.token_urlsafe(TOKEN_BYTES)
        self._invoke_token = secrets.token_urlsafe(TOKEN_BYTES)
        self._httpd = ThreadingHTTPServer((host, port), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        """``host:port`` the server listens on."""
        host = self._httpd.server_address[0]
        return f"{host!s}:{self.port}"

    @property
    def runtime_api(self) -> str:
        """``host:port/<token>``: the AWS_LAMBDA_RUNTIME_API of the runtime process
        started after the last :meth:`reset`, and of no other."""
        with self._cond:
            return f"{self.address}/{self._runtime_token}"

    @property
    def invoke_url(self) -> str:
        """Where the executor posts invocations for ``invoke_handler``."""
        return f"http://{self.address}/{self._invoke_token}{INVOKE_PATH}"

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> None:
        # The poll interval bounds how long stop() waits for the serving loop.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            args=(0.05,),
            name=f"runtime-api-{self.port}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self.runtime_exited("Runtime API server stopped")
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- executor side -------------------------------------------------------

    def reset(self) -> None:
        """Forget the previous runtime process before a new one is started."""
        with self._cond:
            self._generation += 1
            self._runtime_token = secrets.token_urlsafe(TOKEN_BYTES)
            self._ready = False
            self._init_error = None
            self._exited = None
            self._cond.notify_all()

    def wait_until_ready(self, timeout: float) -> None:
        """Block until the runtime polls for its first invocation.

        Raises RuntimeInitError if the runtime posted an init error, RuntimeExited
        if it died first, TimeoutError if neither happened within ``timeout``.
        """
        with self._cond:
            self._cond.wait_for(lambda: self._ready or self._init_error or self._exited, timeout)
            if self._init_error:
                raise self._init_error
            if self._ready:
                return
            if self._exited:
                raise self._exited
        raise TimeoutError(f"runtime not ready after {timeout:.1f} s")

    def dispatch(
        self, invocation: Invocation, timeout_s: float, on_done: Callable[[InvocationOutcome], None]
    ) -> None:
        """Queue an invocation; ``on_done`` is called once with its outcome.

        ``on_done`` runs on a server thread (after the runtime got its HTTP
        answer) or on the deadline timer's thread.
        """
        with self._cond:
            if self._pending is not None:
                raise RuntimeError(
                    f"invocation {self._pending.invocation.request_id} is still running"
                )
            exited = self._exited
            if exited is None:
                pending = _Pending(invocation, on_done)
                pending.timer = threading.Timer(
                    timeout_s, self._time_out, args=(invocation.request_id, timeout_s)
                )
                pending.timer.daemon = True
                self._pending = pending
                pending.timer.start()
                self._cond.notify_all()
        if exited is not None:
            on_done(exit_outcome(invocation.request_id, exited.reason))

    def submit(self, invocation: Invocation, timeout_s: float) -> InvocationOutcome:
        """Run one invocation and wait for its outcome."""
        done: queue.Queue[InvocationOutcome] = queue.Queue(maxsize=1)
        self.dispatch(invocation, timeout_s, done.put)
        return done.get()

    def runtime_exited(self, reason: str) -> None:
        """Tell the server its runtime process is gone: fail whatever waits on it."""
        with self._cond:
            if self._exited is None:
                self._exited = RuntimeExited(reason)
            self._cond.notify_all()
        self._finish(None, lambda p: exit_outcome(p.invocation.request_id, reason))

    # -- runtime side (called by the HTTP handler) ---------------------------

    def _authorize(self, path: str) -> tuple[str, int, str] | None:
        """``(caller, generation, path)`` for a request under a token, None otherwise.

        ``caller`` is ``"runtime"`` or ``"executor"``; ``path`` is what follows the
        token; ``generation`` is the runtime generation the token belongs to.
        """
        _, _, rest = path.partition("/")
        token, slash, tail = rest.partition("/")
        if not slash:
            return None
        with self._cond:
            # Both compared, in constant time: how long a refusal takes says nothing.
            runtime = hmac.compare_digest(token, self._runtime_token)
            executor = hmac.compare_digest(token, self._invoke_token)
            generation = self._generation
        if runtime:
            return "runtime", generation, f"/{tail}"
        if executor and self._invoke_handler is not None:
            return "executor", generation, f"/{tail}"
        return None

    def _next_invocation(self, generation: int) -> _Pending | None:
        """The long poll: wait for an invocation not yet handed to the runtime."""
        with self._cond:
            if generation == self._generation:
                self._ready = True
                self._cond.notify_all()
            self._cond.wait_for(
                lambda: (
                    self._closed
                    or generation != self._generation
                    or (self._pending is not None and not self._pending.handed_out)
                )
            )
            if self._closed or generation != self._generation:
                return None
            assert self._pending is not None
            self._pending.handed_out = True
            return self._pending

    def _is_current(self, request_id: str) -> bool:
        with self._cond:
            return (
                self._pending is not None
                and self._pending.handed_out
                and self._pending.invocation.request_id == request_id
            )

    def _record_init_error(
        self, generation: int, payload: bytes, error_type: str | None
    ) -> None:
        with self._cond:
            if generation != self._generation:
                return
            self._init_error = RuntimeInitError(payload, error_type)
            self._cond.notify_all()

    def _time_out(self, request_id: str, timeout_s: float) -> None:
        outcome = timeout_outcome(request_id, timeout_s)
        self._finish(request_id, lambda _: outcome)

    def _finish(
        self, request_id: str | None, make: Callable[[_Pending], InvocationOutcome]
    ) -> bool:
        """End the pending invocation (if it is ``request_id``) exactly once."""
        with self._cond:
            pending = self._pending
            if pending is None or (
                request_id is not None and pending.invocation.request_id != request_id
            ):
                return False
            self._pending = None
        if pending.timer:
            pending.timer.cancel()
        pending.on_done(make(pending))
        return True


def _make_handler(server: RuntimeApiServer) -> type[BaseHTTPRequestHandler]:
    class RuntimeApiHandler(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            request = server._authorize(self.path)
            if request is None or request[0] != "runtime":
                self._refuse()
                return
            _, generation, path = request
            if path != f"{RUNTIME_PREFIX}/invocation/next":
                self._reply(HTTPStatus.NOT_FOUND, message("unknown path"))
                return
            pending = server._next_invocation(generation)
            if pending is None:
                self._reply(HTTPStatus.GONE, message("runtime API shutting down"))
                return
            inv = pending.invocation
            headers = {
                HEADER_REQUEST_ID: inv.request_id,
                HEADER_DEADLINE_MS: str(inv.deadline_ms),
                HEADER_FUNCTION_ARN: inv.function_arn,
                HEADER_TRACE_ID: inv.trace_id,
                "Content-Type": "application/json",
            }
            if inv.client_context:
                headers[HEADER_CLIENT_CONTEXT] = inv.client_context
            if inv.cognito_identity:
                headers[HEADER_COGNITO_IDENTITY] = inv.cognito_identity
            self._reply(HTTPStatus.OK, inv.payload, headers)

        def do_POST(self) -> None:  # noqa: N802
            request = server._authorize(self.path)
            if request is None:
                self._refuse()
                return
            body = self._read_body()
            caller, generation, path = request
            if caller == "executor":
                if path != INVOKE_PATH or server._invoke_handler is None:
                    self._reply(HTTPStatus.NOT_FOUND, message("unknown path"))
                    return
                try:
                    server._invoke_handler(body)
                except Exception as exc:  # the caller gets the reason, not a dropped connection
                    self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, message(repr(exc)))
                else:
                    self._reply(HTTPStatus.OK, message("queued"))
                return
            if path == f"{RUNTIME_PREFIX}/init/error":
                server._record_init_error(generation, body, self.headers.get(HEADER_ERROR_TYPE))
                self._reply(HTTPStatus.ACCEPTED, message("accepted"))
                return
            match = _INVOCATION_PATH.match(path)
            if match is None:
                self._reply(HTTPStatus.NOT_FOUND, message("unknown path"))
                return
            request_id = match["request_id"]
            if not server._is_current(request_id):
                # Unknown, already answered, or timed out: Lambda answers 400 here too.
                self._reply(HTTPStatus.BAD_REQUEST, message(f"invalid request id {request_id}"))
                return
            is_error = match["kind"] == "error"
            outcome = InvocationOutcome(
                request_id,
                body,
                is_error=is_error,
                error_type=self.headers.get(HEADER_ERROR_TYPE) if is_error else None,
            )
            # Answer the runtime first: the outcome callback may take a moment
            # (it reports to LocalStack), and the runtime should not wait on it.
            # Should the deadline fire in between, the timeout stands and this
            # outcome is dropped.
            self._reply(HTTPStatus.ACCEPTED, message("accepted"))
            server._finish(request_id, lambda _: outcome)

    return RuntimeApiHandler
