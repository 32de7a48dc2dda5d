"""What the routes share, built once per container: keys, Redis, the publisher.

A feature that keeps a client or service of its own for the container builds it
with :func:`cached`, so :func:`reset` forgets it too: the core cannot name what the
features build (they sit above it), and a test that changes the environment must
not meet a service built from the one before.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Protocol, TypeVar

from cordum import runtime
from cordum.bus.publisher import NatsPublisher
from cordum.config import settings
from cordum.gateway.core.auth import Authenticator
from cordum.store.audit_trail import AuditTrail, process_hmac_key

if TYPE_CHECKING:
    from collections.abc import Callable

    import redis.asyncio as aioredis

T = TypeVar("T")


class _Cached(Protocol):
    def cache_clear(self) -> None: ...


_BUILT: list[_Cached] = []
"""Everything :func:`cached` made, in the order it was declared."""


def cached(build: Callable[[], T]) -> Callable[[], T]:
    """``build`` run once per container (until :func:`reset`)."""
    once = lru_cache(maxsize=1)(build)
    _BUILT.append(once)
    return once


@cached
def authenticator() -> Authenticator:
    return Authenticator.from_env()


def redis() -> aioredis.Redis:
    return runtime.redis_client(settings())


@cached
def publisher() -> NatsPublisher:
    return NatsPublisher(settings())


def audit_trail() -> AuditTrail:
    """Where the features record governance acts (built per request around the cached
    Redis client; the HMAC key is read once per container)."""
    return AuditTrail(redis(), process_hmac_key())


def reset() -> None:
    """Forget what was built (tests change the environment between cases)."""
    for built in _BUILT:
        built.cache_clear()
    process_hmac_key.cache_clear()
