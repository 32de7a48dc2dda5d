"""Read-side queries over the job indexes, for the reconciler and the replayer.

Every query reads a bounded slice of a sorted set (``ZRANGEBYSCORE ... LIMIT``),
so a scan costs O(log N + batch) whatever the number of jobs stored.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from cordum.store.errors import StoreError
from cordum.store.jobs import DEADLINE_KEY, index_key, meta_key, request_key
from cordum.text import as_text

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from cordum.protocol import JobRequest

log = logging.getLogger(__name__)

DEFAULT_BATCH = 200


class RedisIndexClientProtocol(Protocol):
    """The part of ``redis.asyncio.Redis`` the index queries use."""

    def zrangebyscore(self, name: str, min: Any, max: Any, start: int | None = ...,
                      num: int | None = ..., withscores: bool = ...) -> Awaitable[Any]: ...
    def get(self, name: str) -> Awaitable[Any]: ...
    def hget(self, name: str, key: str) -> Awaitable[Any]: ...


def normalize_cutoff_us(cutoff: int | float) -> int:
    """A cutoff in µs, whatever unit it was given in (Cordum's rule).

    Below 1e12 it is read as seconds, below 1e15 as milliseconds, below 1e18
    as microseconds, and from there as nanoseconds.
    """
    if cutoff < 1e12:
        return int(cutoff * 1_000_000)
    if cutoff < 1e15:
        return int(cutoff * 1_000)
    if cutoff < 1e18:
        return int(cutoff)
    return int(cutoff // 1_000)


class JobIndexes:
    """Queries over ``job:index:<state>``, ``job:deadline``, ``job:req:<id>``, ``job:meta:<id>``."""

    def __init__(self, redis: RedisIndexClientProtocol) -> None:
        self._redis = redis

    async def list_jobs_by_state(self, state: str, cutoff_us: int | float,
                                 limit: int = DEFAULT_BATCH, *, offset: int = 0) -> list[str]:
        """Ids of jobs that entered ``state`` at or before ``cutoff_us``, oldest first."""
        return await self._range(index_key(state), normalize_cutoff_us(cutoff_us), limit, offset)

    async def expired_deadlines(self, now_us: int | float, limit: int = DEFAULT_BATCH, *,
                                offset: int = 0) -> list[str]:
        """Ids of jobs whose deadline is at or before ``now_us``, earliest first."""
        return await self._range(DEADLINE_KEY, normalize_cutoff_us(now_us), limit, offset)

    async def list_jobs_after(self, state: str, after_us: int | None,
                              limit: int = DEFAULT_BATCH) -> list[tuple[str, int]]:
        """Ids of jobs in ``state`` with the time (µs) they entered it, oldest first,
        from just after ``after_us`` (None: from the oldest)."""
        low = "-inf" if after_us is None else f"({after_us}"
        try:
            rows = await self._redis.zrangebyscore(index_key(state), low, "+inf", start=0,
                                                   num=limit, withscores=True)
        except Exception as exc:
            raise StoreError(f"read {index_key(state)}: {exc}") from exc
        return [(as_text(i), int(score)) for i, score in rows]

    async def get_meta_fields(self, job_ids: list[str],
                              names: tuple[str, ...]) -> list[dict[str, str]]:
        """``names`` of each job's meta ('' when unset), in one round trip."""
        if not job_ids:
            return []
        try:
            pipe = self._redis.pipeline(transaction=False)  # type: ignore[attr-defined]
            for job_id in job_ids:
                pipe.hmget(meta_key(job_id), list(names))
            rows = await pipe.execute()
        except Exception as exc:
            raise StoreError(f"read meta of {len(job_ids)} jobs: {exc}") from exc
        return [dict(zip(names, map(as_text, row), strict=True)) for row in rows]

    async def existing(self, keys: list[str]) -> list[bool]:
        """Whether each key exists, in one round trip."""
        if not keys:
            return []
        try:
            pipe = self._redis.pipeline(transaction=False)  # type: ignore[attr-defined]
            for key in keys:
                pipe.exists(key)
            return [bool(n) for n in await pipe.execute()]
        except Exception as exc:
            raise StoreError(f"read {len(keys)} keys: {exc}") from exc

    async def get_request(self, job_id: str) -> JobRequest | None:
        """The stored JobRequest; None when there is none or it cannot be parsed."""
        try:
            raw = await self._redis.get(request_key(job_id))
        except Exception as exc:
            raise StoreError(f"read request of {job_id}: {exc}") from exc
        if raw is None:
            return None
        from google.protobuf import json_format

        from cordum import protocol

        try:
            return json_format.Parse(as_text(raw), protocol.JobRequest(),
                                     ignore_unknown_fields=True)
        except json_format.ParseError as exc:
            log.warning("stored request of %s is not a JobRequest: %s", job_id, exc)
            return None

    async def get_trace_id(self, job_id: str) -> str:
        """The job's trace id ('' when unknown)."""
        try:
            return as_text(await self._redis.hget(meta_key(job_id), "trace_id"))
        except Exception as exc:
            raise StoreError(f"read trace of {job_id}: {exc}") from exc

    async def get_meta_field(self, job_id: str, name: str) -> str:
        """One field of the job's meta ('' when unset)."""
        try:
            return as_text(await self._redis.hget(meta_key(job_id), name))
        except Exception as exc:
            raise StoreError(f"read {name} of {job_id}: {exc}") from exc

    async def _range(self, key: str, max_score: int, limit: int, offset: int) -> list[str]:
        try:
            ids = await self._redis.zrangebyscore(key, "-inf", max_score, start=offset,
                                                  num=limit)
        except Exception as exc:
            raise StoreError(f"read {key}: {exc}") from exc
        return [as_text(i) for i in ids]
