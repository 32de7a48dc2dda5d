"""Idempotency keys of submitted jobs: ``job:idempotency:<tenant>:<sha256 of the key>``.

The value names the job a key created: ``{job_id, trace_id, request_hash}``. One
key's timeline::

    claim    SET NX GET, TTL CLAIM_TTL_S
    stored   the job exists -> keep(): the TTL becomes the job meta's (7 days)
    refused  nothing was stored (throttle, 503) -> release(): the key is free again
    crashed  the claim runs out after CLAIM_TTL_S by itself

A submit that finds a claim answers its ids. Between claim and creation those
name a job about to exist; if the first submit then fails, its own caller got
the error and the key is free for the retry.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any, Protocol

from cordum.store.errors import StoreError
from cordum.store.jobs import META_TTL_S

if TYPE_CHECKING:
    from collections.abc import Awaitable

log = logging.getLogger(__name__)

CLAIM_TTL_S = 60
"""A claim whose job was never stored lives this long. It must outlast everything
between claim and creation (the policy check, the store call): API Gateway ends a
request after 29 s."""
FIELDS = ("job_id", "trace_id", "request_hash")


class RedisIdempotencyProtocol(Protocol):
    """The part of ``redis.asyncio.Redis`` the keys use."""

    def set(self, name: str, value: str, *, nx: bool = ..., get: bool = ...,
            ex: int | None = ...) -> Awaitable[Any]: ...
    def expire(self, name: str, time: int) -> Awaitable[Any]: ...
    def delete(self, *names: str) -> Awaitable[Any]: ...


class IdempotencyKeys:
    def __init__(self, redis: RedisIdempotencyProtocol) -> None:
        self._redis = redis

    @staticmethod
    def key(tenant: str, idempotency_key: str) -> str:
        """The Redis key of a tenant's idempotency key (a digest: keys may be long)."""
        digest = hashlib.sha256(idempotency_key.encode()).hexdigest()
        return f"job:idempotency:{tenant}:{digest}"

    async def claim(self, key: str, job_id: str, trace_id: str,
                    request_hash: str) -> dict[str, str] | None:
        """Claim ``key`` for a new job; the earlier claim when there is one (None: ours).
        StoreError when Redis does not answer."""
        value = json.dumps({"job_id": job_id, "trace_id": trace_id,
                            "request_hash": request_hash}, separators=(",", ":"))
        try:
            earlier = await self._redis.set(key, value, nx=True, get=True, ex=CLAIM_TTL_S)
        except Exception as exc:
            log.error("submit %s: idempotency claim failed: %s", job_id, exc)
            raise StoreError(f"idempotency claim: {exc}") from exc
        if earlier is None:
            return None
        text = earlier.decode() if isinstance(earlier, bytes) else str(earlier)
        try:
            found = json.loads(text)
        except ValueError:
            found = None
        if not isinstance(found, dict):
            return {"job_id": text, "trace_id": "", "request_hash": ""}
        return {k: str(found.get(k) or "") for k in FIELDS}

    async def keep(self, key: str) -> None:
        """The job is stored: the key lives as long as the job's meta."""
        try:
            await self._redis.expire(key, META_TTL_S)
        except Exception as exc:
            # The key lapses with its claim; a later repeat would make a second job.
            log.warning("idempotency key kept only %ss: %s", CLAIM_TTL_S, exc)

    async def release(self, key: str) -> None:
        """Nothing was stored under the claim: free the key for a retry."""
        try:
            await self._redis.delete(key)
        except Exception as exc:
            log.warning("idempotency claim not released (it runs out in %ss): %s",
                        CLAIM_TTL_S, exc)
