"""Errors that carry their retry meaning, for every layer.

Domain code raises them; one place per edge maps them (the queue handlers to an
SQS retry with a visibility delay, the HTTP gateway to a status), so no lower
layer needs to know who called it.
"""

from __future__ import annotations


class RetryAfter(Exception):  # noqa: N818 (Cordum's name for it)
    """Not now: deliver this packet (or send this request) again after ``delay_s`` seconds."""

    retryable = True

    def __init__(self, reason: str, delay_s: float) -> None:
        super().__init__(f"{reason} (retry in {delay_s:g}s)")
        self.reason = reason
        self.delay_s = delay_s
