"""Scheduling outcomes that carry their retry meaning."""

from __future__ import annotations


class RetryAfter(Exception):  # noqa: N818 (Cordum's name for it)
    """Not now: deliver this packet again after ``delay_s`` seconds."""

    retryable = True

    def __init__(self, reason: str, delay_s: float) -> None:
        super().__init__(f"{reason} (retry in {delay_s:g}s)")
        self.reason = reason
        self.delay_s = delay_s


class NoWorkers(RetryAfter):
    def __init__(self, topic: str, delay_s: float = 2.0) -> None:
        super().__init__(f"no workers available for topic {topic}", delay_s)
        self.topic = topic


class UnparseableRecord(Exception):  # noqa: N818
    """A queue record that is not a CAP packet: reported failed, so it reaches the DLQ."""

    retryable = False
