"""What the gateway's services refuse a request with, by kind.

Services raise these (and the store's own ``StoreError``, ``LockUnavailable``) and
never build an HTTP answer; ``cordum.gateway.app`` turns each kind into one, in
one place. A kind names its status, so a caller of a service (or a test) reads
the same status the API would answer. Every error body is ``{"error", "code",
"status"}``; ``code`` defaults to the message in snake case.
"""

from __future__ import annotations

import re
from typing import ClassVar


def snake_case(message: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", message.lower()).strip("_") or "error"


class GatewayError(Exception):
    """A request the gateway refuses."""

    status: ClassVar[int] = 500
    """The HTTP status the API answers this kind with."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or snake_case(message)

    def body(self) -> dict[str, object]:
        return {"error": self.message, "code": self.code, "status": self.status}


class InvalidRequest(GatewayError):
    """The path, query or body is malformed."""

    status = 400

    def __init__(self, message: str, code: str = "invalid_request") -> None:
        super().__init__(message, code)


class Unauthorized(GatewayError):
    """No credential, or one no key matches."""

    status = 401

    def __init__(self) -> None:
        super().__init__("unauthorized", "unauthorized")


class Forbidden(GatewayError):
    """The caller may not do this: another tenant's job, a role, its own approval."""

    status = 403


class NotFound(GatewayError):
    status = 404


class Conflict(GatewayError):
    """The resource's current state does not allow the change."""

    status = 409


class RetryableConflict(Conflict):
    """A conflict that may pass when sent again (the job's lock was busy or lost)."""

    def __init__(self, message: str, code: str, retry_after_s: float) -> None:
        super().__init__(message, code)
        self.retry_after_s = retry_after_s


class PayloadTooLarge(GatewayError):
    status = 413

    def __init__(self, message: str) -> None:
        super().__init__(message, "payload_too_large")


class Throttled(GatewayError):
    """Not now: the rate limit or the policy holds the request back."""

    status = 429

    def __init__(self, message: str, code: str, retry_after_s: int) -> None:
        super().__init__(message, code)
        self.retry_after_s = retry_after_s


class Unavailable(GatewayError):
    """Something the request needs cannot be reached; safe to send again. The answer
    names the part (``unavailable``) and carries Retry-After."""

    status = 503
    part = ""
    """What is down, for the client and the operator: redis, nats, safety-kernel, ..."""
    retry_after_s: float = 2.0
    """A Redis failover or a NATS reconnect takes a few seconds."""


class StoreUnavailable(Unavailable):
    part = "redis"

    def __init__(self) -> None:
        super().__init__("store unavailable", "store_unavailable")


class BusUnavailable(Unavailable):
    part = "nats"

    def __init__(self) -> None:
        super().__init__("bus unavailable", "bus_unavailable")


class KeysUnavailable(Unavailable):
    """No API key source has been read yet."""

    part = "api-keys"
    retry_after_s = 5.0

    def __init__(self) -> None:
        super().__init__("api keys unavailable", "keys_unavailable")


class PolicyUnavailable(Unavailable):
    """The safety kernel cannot be asked and the input fail mode is closed."""

    part = "safety-kernel"

    def __init__(self, reason: str, retry_after_s: int) -> None:
        super().__init__(f"policy check unavailable: {reason}", "policy_unavailable")
        self.retry_after_s = retry_after_s


class PolicyDenied(Forbidden):
    """The policy denied a submitted job; the job exists (DENIED) under these ids."""

    def __init__(self, reason: str, code: str, job_id: str, trace_id: str) -> None:
        super().__init__(reason, code)
        self.job_id = job_id
        self.trace_id = trace_id
