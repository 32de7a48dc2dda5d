"""Scheduling outcomes that carry their retry meaning."""

from __future__ import annotations

from cordum.errors import RetryAfter


class NoWorkers(RetryAfter):
    def __init__(self, topic: str, delay_s: float = 2.0) -> None:
        super().__init__(f"no workers available for topic {topic}", delay_s)
        self.topic = topic


class UnparseableRecord(Exception):  # noqa: N818
    """A queue record that is not a CAP packet: reported failed, so it reaches the DLQ."""

    retryable = False
