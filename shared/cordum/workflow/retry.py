"""When a failed step job is tried again, and after how long (a step's ``retry``, as in
Cordum: docs/workflows.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cordum.store.jobs import JobState
from cordum.workflow.status import RETRYABLE_STATE

if TYPE_CHECKING:
    from cordum.workflow.definition import Step

RETRYABLE_STATES = frozenset({JobState.FAILED, JobState.TIMEOUT, RETRYABLE_STATE})
"""Job outcomes worth another attempt. DENIED (a policy verdict) and FAILED_FATAL (the
worker said so) never are: trying again would only repeat the answer."""

MAX_DELAY_S = 604_800
"""The longest wait ever scheduled: a week, the longest workflow ``timeout_sec``, past
which a run could never see its retry anyway."""


@dataclass(frozen=True, slots=True)
class StepRetryPolicy:
    """A step's retry budget and backoff, as Cordum reads a step's ``retry`` block.

    ``delay_s(attempt) = floor(min(initial_backoff_sec * multiplier ** (attempt - 1),
    max_backoff_sec or inf, MAX_DELAY_S))``
    """

    max_retries: int = 0
    """Attempts allowed after the first; a step runs at most ``max_retries + 1`` times."""

    initial_backoff_sec: float = 1.0
    """Wait after the first failed attempt."""

    max_backoff_sec: float = 0.0
    """Ceiling of every wait; 0 leaves the growth uncapped, as Cordum does."""

    multiplier: float = 2.0
    """Growth of the wait from one failed attempt to the next."""

    @classmethod
    def of(cls, step: Step) -> StepRetryPolicy:
        """The policy of a step; a step without ``retry`` is never retried."""
        retry = step.retry
        if retry is None:
            return NO_RETRY
        return cls(
            max_retries=max(int(retry.max_retries), 0),
            initial_backoff_sec=max(float(retry.initial_backoff_sec), 0.0),
            max_backoff_sec=max(float(retry.max_backoff_sec), 0.0),
            multiplier=float(retry.multiplier),
        )

    def allows(self, attempts: int, state: str) -> bool:
        """Whether a job that ended in ``state`` after ``attempts`` tries gets another.

        The check reads ``attempts <= max_retries``: attempts count from 1, so one retry
        means two attempts in all.
        """
        return state in RETRYABLE_STATES and attempts <= self.max_retries

    def delay_s(self, attempt: int) -> int:
        """Whole seconds to wait after failed attempt number ``attempt`` (1-based).

        Cordum turns the product into a duration of whole seconds, dropping the
        fraction, so a delay below one second retries at once.
        """
        exponent = max(attempt - 1, 0)
        multiplier = self.multiplier if self.multiplier > 0 else 1.0
        try:
            delay = self.initial_backoff_sec * multiplier**exponent
        except OverflowError:
            delay = math.inf
        if self.max_backoff_sec > 0:
            delay = min(delay, self.max_backoff_sec)
        return int(min(delay, MAX_DELAY_S))


NO_RETRY = StepRetryPolicy()
