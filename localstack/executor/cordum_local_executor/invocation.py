"""One invocation as the Lambda service sees it: the event handed out and how it ended.

Shared by the Runtime API server (runtime_api) and the executor; error documents
are what Lambda returns for errors raised outside the function's own code.
Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Invocation:
    """One event for the runtime, with what the Runtime API sends as headers."""

    request_id: str
    payload: bytes
    function_arn: str
    deadline_ms: int
    """Epoch milliseconds; ``context.get_remaining_time_in_millis()`` counts down to it."""
    trace_id: str = ""
    client_context: str | None = None
    """JSON text, passed through as the Client-Context header."""
    cognito_identity: str | None = None
    """JSON text, passed through as the Cognito-Identity header."""


@dataclass(frozen=True)
class InvocationOutcome:
    """How an invocation ended, as the Lambda service would report it."""

    request_id: str
    payload: bytes
    """The function's result, or an error document ``{"errorType", "errorMessage", ...}``."""
    is_error: bool
    error_type: str | None = None
    """The runtime's Lambda-Runtime-Function-Error-Type header, or ours (Sandbox.Timedout...)."""
    timed_out: bool = False
    """The function ran past its deadline; its runtime is stuck and must be replaced."""


class RuntimeInitError(Exception):
    """The runtime reported an init error (e.g. the handler module failed to import)."""

    def __init__(self, payload: bytes, error_type: str | None) -> None:
        super().__init__(f"runtime init failed: {error_type or 'unknown error'}")
        self.payload = payload
        self.error_type = error_type


class RuntimeExited(Exception):
    """The runtime process ended before it was ready."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def error_document(error_type: str, message: str) -> bytes:
    """The JSON body Lambda returns for errors raised outside the function's own code."""
    return json.dumps({"errorType": error_type, "errorMessage": message}).encode()


def _error_outcome(
    request_id: str, error_type: str, detail: str, *, timed_out: bool = False
) -> InvocationOutcome:
    return InvocationOutcome(
        request_id,
        error_document(error_type, f"RequestId: {request_id} Error: {detail}"),
        is_error=True,
        error_type=error_type,
        timed_out=timed_out,
    )


def exit_outcome(request_id: str, reason: str) -> InvocationOutcome:
    """The outcome of an invocation whose runtime process died (``Runtime.ExitError``)."""
    return _error_outcome(request_id, "Runtime.ExitError", reason)


def timeout_outcome(request_id: str, timeout_s: float) -> InvocationOutcome:
    """The outcome of an invocation that ran past its deadline (``Sandbox.Timedout``)."""
    detail = f"Task timed out after {timeout_s:.2f} seconds"
    return _error_outcome(request_id, "Sandbox.Timedout", detail, timed_out=True)
