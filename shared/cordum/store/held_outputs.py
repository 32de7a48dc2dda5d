"""The held outputs: SUCCEEDED jobs whose output content check could not reach the kernel.

One sorted set, ``cordum:output:held``: member the job id, score when its output was
first held (µs). A held job has no final output decision, so its result is not served
(:func:`cordum.store.results.served_result_ptr`); everything a re-check needs is read
again from the job (its meta, its stored request, its result). The set holds no TTL:
an entry leaves when a re-check decides, or when the job it names is gone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from cordum.store.errors import StoreError
from cordum.store.reads import text

if TYPE_CHECKING:
    from collections.abc import Awaitable

HELD_KEY = "cordum:output:held"


class RedisHeldProtocol(Protocol):
    """The Redis commands used here (``redis.asyncio.Redis`` has them)."""

    def zadd(self, name: str, mapping: Any, nx: bool = ...) -> Awaitable[Any]: ...
    def zrange(self, name: str, start: int, end: int,
               withscores: bool = ...) -> Awaitable[Any]: ...
    def zrem(self, name: str, *values: Any) -> Awaitable[Any]: ...


class HeldOutputs:
    """The held set; every Redis failure is a :class:`StoreError`."""

    def __init__(self, redis: RedisHeldProtocol, key: str = HELD_KEY) -> None:
        self._redis = redis
        self.key = key

    async def hold(self, job_id: str, at_us: int) -> None:
        """Hold ``job_id`` since ``at_us``; a job held already keeps its first time."""
        try:
            await self._redis.zadd(self.key, {job_id: at_us}, nx=True)
        except Exception as exc:
            raise StoreError(f"hold output of {job_id}: {exc}") from exc

    async def oldest(self, limit: int) -> list[tuple[str, int]]:
        """The ``limit`` longest-held jobs, oldest first, with when each was held (µs)."""
        try:
            raw = await self._redis.zrange(self.key, 0, limit - 1, withscores=True)
        except Exception as exc:
            raise StoreError(f"list held outputs: {exc}") from exc
        return [(text(job_id), int(score)) for job_id, score in raw]

    async def release(self, job_id: str) -> None:
        try:
            await self._redis.zrem(self.key, job_id)
        except Exception as exc:
            raise StoreError(f"release held output of {job_id}: {exc}") from exc
