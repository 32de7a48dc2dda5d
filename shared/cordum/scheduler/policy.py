"""How the engine retries and where it gives up: Cordum's constants, as defaults."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EnginePolicy:
    """Retry delays and bounds of the request, result and output paths.

    A delay is what a ``RetryAfter`` asks the queue to wait before it delivers
    the record again; the defaults are Cordum's (``engine.go``).
    """

    retry_store_s: float = 1.0
    """Redelivery delay after a Redis error (Cordum's ``retryDelayStore``)."""
    retry_publish_s: float = 2.0
    """Least redelivery delay after a dispatch publish failed (``retryDelayPublish``);
    the backoff of the job's attempts may make it longer."""
    retry_safety_s: float = 5.0
    """Redelivery delay of a throttled job, and of one the kernel could not judge when
    input fails closed (``safetyThrottleDelay``)."""
    max_scheduling_retries: int = 50
    """A job that has entered SCHEDULED this many times fails with DLQ code
    ``max_scheduling_retries`` (``maxSchedulingRetries``)."""
    max_dispatch_picks: int = 3
    """Picks of one dispatch when the chosen worker turns out stale
    (``maxDispatchRetries``)."""
    dlq_publish_retry_s: float = 0.5
    """Pause before the one retry of a ``sys.job.dlq`` publish (``emitDLQWithRetry``)."""
    output_margin_s: float = 2.0
    """Time kept back from the output content check for the writes after it."""
    quarantine_retry_s: tuple[float, ...] = (1.0, 2.0)
    """Pauses between the tries of an async quarantine: one try more than pauses
    (Cordum's 3 tries, 1 s and 2 s apart)."""

    def __post_init__(self) -> None:
        if min(self.retry_store_s, self.retry_publish_s, self.retry_safety_s,
               self.dlq_publish_retry_s, self.output_margin_s, *self.quarantine_retry_s) < 0:
            raise ValueError("delays must not be negative")
        if self.max_scheduling_retries < 1 or self.max_dispatch_picks < 1:
            raise ValueError("max_scheduling_retries and max_dispatch_picks must be >= 1")


DEFAULT_ENGINE_POLICY = EnginePolicy()
