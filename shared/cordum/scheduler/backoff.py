"""How long a retryable scheduling outcome waits before the job is tried again."""

from __future__ import annotations

import random
from dataclasses import dataclass

# Jitter only spreads retries apart, but Cordum draws it from crypto/rand; the
# OS source keeps that property and never shares state with the `random` module.
_entropy = random.SystemRandom()


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """Exponential backoff with additive jitter, as Cordum's ``backoffDelay``.

    ``delay(attempt) = min(base_s * 2**min(attempt, max_shift) + U[0, jitter_s), max_s)``
    """

    base_s: float = 1.0
    """Delay before jitter for attempt 0; each further attempt doubles it."""

    max_s: float = 30.0
    """Ceiling of every delay, jitter included."""

    jitter_s: float = 0.5
    """Upper bound (exclusive) of the uniform jitter added to each delay, so jobs
    that failed together do not all come back in the same instant."""

    max_shift: int = 10
    """Largest doubling exponent: later attempts wait as long as this one (which is
    already past ``max_s`` with the defaults), and the power never grows unbounded."""

    def __post_init__(self) -> None:
        if self.base_s <= 0:
            raise ValueError("base_s must be positive")
        if self.max_s < self.base_s:
            raise ValueError("max_s must be at least base_s")
        if self.jitter_s < 0:
            raise ValueError("jitter_s must not be negative")
        if self.max_shift < 0:
            raise ValueError("max_shift must not be negative")

    def delay(self, attempt: int) -> float:
        """Seconds to wait before try number ``attempt`` (0-based; negative counts as 0)."""
        shift = min(max(attempt, 0), self.max_shift)
        jitter = _entropy.random() * self.jitter_s
        return min(self.base_s * (1 << shift) + jitter, self.max_s)


DEFAULT_BACKOFF = BackoffPolicy()
