"""The job lock as the API holds it while it changes a job (approve, reject, DLQ retry).

It is the lock the scheduler takes (``cordum.store.locks``), so a decision never
crosses a scheduling pass of the same job::

    t=0     API: SET NX cordum:scheduler:job:<id> (TTL 10 s) + read job:meta
    t=0.1   engine: the re-published request arrives, waits for the lock
    t=0.2   API: the change written, published, released
    t=0.2   engine: gets the lock, sees the change

A gateway that dies while holding the lock blocks the job for at most the TTL
(10 s); the renewal keeps it while a slow call is still running. The work under
the lock ends :data:`DEADLINE_MARGIN_S` before the invocation does, so there is
time left to answer.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from cordum import runtime
from cordum.gateway.core.errors import RetryableConflict
from cordum.store.errors import LockBusy
from cordum.store.jobs import meta_key
from cordum.store.locks import LockPolicy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from cordum.store.locks import JobLocks, Lease

API_LOCK = LockPolicy(ttl_s=10.0, renew_every_s=3.0, acquire_timeout_s=2.0)
"""The job lock as the API holds it: 10 s TTL (Cordum's approval lock), a 2 s wait
when busy. The work under it is a few bounded Redis / NATS / kernel calls."""

DEADLINE_MARGIN_S = 1.0
"""Time kept back from the invocation's end to answer after the locked work."""

BUSY_MESSAGE = "job is being changed; retry"


def locked_work_deadline(context: Any) -> float | None:
    """The ``time.monotonic()`` instant by which locked work must be over, from the
    Lambda context (None outside Lambda)."""
    end = runtime.lambda_deadline(context)
    if end is None:
        return None
    return max(time.monotonic(), end - DEADLINE_MARGIN_S)


@contextlib.asynccontextmanager
async def api_job_lock(locks: JobLocks, job_id: str, deadline: float | None,
                       busy_code: str) -> AsyncIterator[Lease]:
    """The job's lock with its meta read in the same round trip (``lease.data``).

    Busy past the wait: :class:`RetryableConflict` ``busy_code``. Redis failing
    raises the store's ``LockUnavailable``.
    """
    try:
        lease = await locks.acquire(job_id, deadline=deadline, read=meta_key(job_id))
    except LockBusy as exc:
        raise RetryableConflict(BUSY_MESSAGE, busy_code, exc.delay_s) from exc
    try:
        yield lease
    finally:
        await lease.release()


def lock_lost(code: str) -> RetryableConflict:
    """Another holder may own the job now: nothing may be written."""
    return RetryableConflict("job lock lost; retry", code, 1.0)
