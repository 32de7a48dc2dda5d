"""The job states and run statuses of the HTTP API, and how each ending maps to an exit code.

These are the API's strings (Cordum's), spelled here because the CLI speaks only HTTP.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cordumctl.errors import ExitCode
from cordumctl.output import shown

if TYPE_CHECKING:
    from rich.text import Text

JOB_ENDINGS: dict[str, ExitCode] = {
    "SUCCEEDED": ExitCode.OK,
    "FAILED": ExitCode.FAILED,
    "CANCELLED": ExitCode.CANCELLED,
    "TIMEOUT": ExitCode.TIMED_OUT,
    "DENIED": ExitCode.DENIED,
    "OUTPUT_QUARANTINED": ExitCode.QUARANTINED,
}
"""A job in one of these states is terminal."""

APPROVAL_REQUIRED = "APPROVAL_REQUIRED"

RUN_ENDINGS: dict[str, ExitCode] = {
    "succeeded": ExitCode.OK,
    "failed": ExitCode.FAILED,
    "cancelled": ExitCode.CANCELLED,
    "timed_out": ExitCode.TIMED_OUT,
    "denied": ExitCode.DENIED,
}
"""A workflow run with one of these statuses is terminal."""

STATE_STYLES = {
    "SUCCEEDED": "green", "succeeded": "green",
    "FAILED": "red", "failed": "red", "TIMEOUT": "red", "timed_out": "red",
    "DENIED": "red", "denied": "red", "OUTPUT_QUARANTINED": "red",
    "CANCELLED": "yellow", "cancelled": "yellow", "skipped": "dim",
    "APPROVAL_REQUIRED": "magenta", "waiting": "magenta",
    "RUNNING": "cyan", "running": "cyan", "DISPATCHED": "cyan", "RETRYING": "yellow",
}


def styled(state: str) -> Text:
    """``state`` as printable text (it comes from the API), coloured by what it means."""
    return shown(state, STATE_STYLES.get(state, ""))
