"""What the stream service refuses a request with, by kind.

Each kind names its status and code; ``cordum.stream.app`` turns any of them into the
API's JSON error ``{"error", "code", "status"}`` in one place, before any stream starts.
"""

from __future__ import annotations

from typing import ClassVar


class StreamError(Exception):
    """A request the stream service refuses."""

    status: ClassVar[int] = 500
    retry_after_s: float | None = None
    """Sent as Retry-After: the same request may pass later."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    def body(self) -> dict[str, object]:
        return {"error": self.message, "code": self.code, "status": self.status}


class InvalidRequest(StreamError):
    status = 400

    def __init__(self, message: str, code: str = "invalid_request") -> None:
        super().__init__(message, code)


class Unauthorized(StreamError):
    status = 401

    def __init__(self) -> None:
        super().__init__("unauthorized", "unauthorized")


class Forbidden(StreamError):
    status = 403

    def __init__(self, message: str = "tenant access denied",
                 code: str = "tenant_access_denied") -> None:
        super().__init__(message, code)


class NotFound(StreamError):
    status = 404

    def __init__(self, message: str = "job not found", code: str = "job_not_found") -> None:
        super().__init__(message, code)


class NotAcceptable(StreamError):
    status = 406

    def __init__(self) -> None:
        super().__init__("this endpoint streams over WebSocket (a request with "
                         "'Upgrade: websocket') or Server-Sent Events ('Accept: "
                         "text/event-stream')", "not_acceptable")


class TooManyStreams(StreamError):
    status = 429
    retry_after_s = 5.0

    def __init__(self, limit: int) -> None:
        super().__init__(f"this key has {limit} streams open already", "too_many_streams")


class Unavailable(StreamError):
    """Redis, NATS or the API keys cannot be reached now."""

    status = 503
    retry_after_s = 2.0

    def __init__(self, part: str) -> None:
        super().__init__(f"{part} unavailable", f"{part.replace('-', '_')}_unavailable")
        self.part = part

    def body(self) -> dict[str, object]:
        return {**super().body(), "unavailable": self.part}
