"""What the routes share, built once per container: keys, Redis, the job service."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from cordum import runtime
from cordum.bus.publisher import NatsPublisher
from cordum.config import settings
from cordum.gateway.auth import Authenticator
from cordum.gateway.jobs import JobService
from cordum.store.jobs import JobStore

if TYPE_CHECKING:
    import redis.asyncio as aioredis


@lru_cache(maxsize=1)
def authenticator() -> Authenticator:
    return Authenticator.from_env()


def redis() -> aioredis.Redis:
    return runtime.redis_client(settings())


@lru_cache(maxsize=1)
def publisher() -> NatsPublisher:
    return NatsPublisher(settings())


@lru_cache(maxsize=1)
def jobs() -> JobService:
    return JobService(JobStore(redis()), publisher())


def reset() -> None:
    """Forget what was built (tests change the environment between cases)."""
    for cached in (authenticator, publisher, jobs):
        cached.cache_clear()
