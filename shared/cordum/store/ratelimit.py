"""Request counters of the API's rate limiter: ``cordum:ratelimit:<key id>:<window index>``.

One counter per credential and fixed window; a counter is read as the
"previous" one during the next window, then dropped (its TTL is two windows).
Counting one request and reading the previous window's count is one pipeline.
A request that needs other keys read anyway (a submit reads its tenant's config
documents and its topic's registration) has them read in the same pipeline, so the
limiter's round trip carries them at no cost of their own.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

from cordum.store.reads import execute

if TYPE_CHECKING:
    from collections.abc import Sequence

KEY_PREFIX = "cordum:ratelimit:"


class RedisPipelineProtocol(Protocol):
    """The part of ``redis.asyncio.Redis`` the counters use."""

    def pipeline(self, transaction: bool = ...) -> Any: ...


def counter_key(key_id: str, window: int) -> str:
    return f"{KEY_PREFIX}{key_id}:{window}"


class RateCounters:
    def __init__(self, redis: RedisPipelineProtocol) -> None:
        self._redis = redis

    async def count(self, key_id: str, window: int, window_s: float,
                    reads: Sequence[str] = ()) -> tuple[int, int, list[Any]]:
        """Count one request of ``key_id`` in window number ``window`` (``window_s`` long);
        this window's count so far, the previous window's, and the values of ``reads``
        (one MGET in the same pipeline; [] when none are asked). StoreError when Redis
        does not answer."""
        current_key = counter_key(key_id, window)
        pipe = self._redis.pipeline(transaction=False)
        pipe.incr(current_key)
        pipe.pexpire(current_key, math.ceil(2 * window_s * 1000))
        pipe.get(counter_key(key_id, window - 1))
        if reads:
            pipe.mget(list(reads))
        answers = await execute(pipe)
        current, previous = answers[0], answers[2]
        return int(current), int(previous or 0), list(answers[3]) if reads else []
