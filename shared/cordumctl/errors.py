"""What can go wrong in a command, and the exit code each kind of failure ends with."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The process's exit code. Scripts branch on these, so they never change meaning."""

    OK = 0
    ERROR = 1
    """Anything not named below (a 5xx other than 503, an answer that is not JSON)."""
    USAGE = 2
    """Bad arguments or options (the CLI framework's own code)."""
    AUTH = 3
    """401 or 403: no key, a wrong key, another tenant, a role that may not."""
    NOT_FOUND = 4
    CONFLICT = 5
    """409: already resolved, idempotency conflict, a job that cannot be cancelled now."""
    UNAVAILABLE = 6
    """503 after its retries, or the API could not be reached."""
    RATE_LIMITED = 7
    """429 after its retries."""
    INVALID = 8
    """400, 413, 422: the API refused the request as written."""
    # How a watched job or run ended, when it did not succeed.
    FAILED = 10
    CANCELLED = 11
    TIMED_OUT = 12
    DENIED = 13
    QUARANTINED = 14
    WATCH_TIMEOUT = 15
    """``--timeout`` passed before the job or run ended."""


_BY_STATUS = {
    400: ExitCode.INVALID, 413: ExitCode.INVALID, 422: ExitCode.INVALID,
    401: ExitCode.AUTH, 403: ExitCode.AUTH,
    404: ExitCode.NOT_FOUND,
    409: ExitCode.CONFLICT,
    429: ExitCode.RATE_LIMITED,
    503: ExitCode.UNAVAILABLE,
}


class CliError(Exception):
    """A failure shown as one line on stderr, ending the process with ``exit_code``."""

    exit_code: ExitCode = ExitCode.ERROR

    def __init__(self, message: str, exit_code: ExitCode | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class ConfigError(CliError):
    """The connection settings are missing or unusable."""

    exit_code = ExitCode.USAGE


class ApiError(CliError):
    """An answer of 4xx or 5xx, from the API's ``{"error", "code", "status"}`` body."""

    def __init__(self, status: int, error: str, code: str = "", *, request_id: str = "",
                 unavailable: str = "") -> None:
        self.status = status
        self.error = error
        self.code = code
        self.request_id = request_id
        self.unavailable = unavailable
        """For a 503: the part that is down (``redis``, ``nats``, ``safety-kernel``, ...)."""
        if status in _BY_STATUS:
            exit_code = _BY_STATUS[status]
        else:
            exit_code = ExitCode.UNAVAILABLE if unavailable else ExitCode.ERROR
        super().__init__(self.line(), exit_code)

    def line(self) -> str:
        text = f"{self.status} {self.error or 'error'}"
        if self.code:
            text += f" ({self.code})"
        if self.unavailable:
            text += f"; unavailable: {self.unavailable}"
        return text


class UnreachableError(CliError):
    """The API did not answer at all (connection refused, DNS, timeout)."""

    exit_code = ExitCode.UNAVAILABLE
