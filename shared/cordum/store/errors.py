"""Store errors."""

from __future__ import annotations

from cordum.errors import RetryAfter


class StoreError(RuntimeError):
    """Redis could not be reached or answered with an error; the caller may retry."""

    retryable = True


class InvalidTransition(StoreError):
    """The state machine forbids the move; retrying will not help."""

    retryable = False

    def __init__(self, job_id: str, current: str, target: str) -> None:
        super().__init__(f"invalid transition {current or '<none>'} -> {target} for job {job_id}")
        self.job_id = job_id
        self.current = current
        self.target = target


class LockBusy(RetryAfter):
    """Another holder has the lock (a job's, a run's) and kept it past the wait."""

    def __init__(self, key: str, delay_s: float) -> None:
        super().__init__(f"lock {key} busy", delay_s)
        self.key = key


class LockUnavailable(RetryAfter):
    """Redis failed while the lock (a job's, a run's) was being taken."""

    def __init__(self, key: str, cause: Exception, delay_s: float) -> None:
        super().__init__(f"lock {key}: {cause}", delay_s)
        self.key = key
