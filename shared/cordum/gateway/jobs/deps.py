"""The job service, built once per container, beside the clients every feature shares.

The shared clients are ``cordum.gateway.core.deps``'s, passed on here so the job
routes (and a test that swaps the service) read every dependency off one module.
"""

from __future__ import annotations

from cordum.gateway.core.deps import authenticator, cached, publisher, redis, reset
from cordum.gateway.jobs.service import JobService
from cordum.store.jobs import JobStore

__all__ = ["authenticator", "jobs", "publisher", "redis", "reset"]


@cached
def jobs() -> JobService:
    return JobService(JobStore(redis()), publisher())
