"""The writer's reads of a job's meta (``job:meta:<id>``): whose job it is, and what
the platform decided about its result.

Every read is bounded (TENANT_LOOKUP_TIMEOUT_S): the writer must not hang on a slow
Redis, and an event whose job cannot be read goes out to admin keys only, never to a
tenant it might not belong to.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from cordum.store.jobs import meta_key
from cordum.store.results import output_pending
from cordum.stream.frames import is_terminal
from cordum.text import as_text

log = logging.getLogger(__name__)

TENANT_LOOKUP_TIMEOUT_S = 1.0
"""One read of a job's meta: Cordum's bound on the stream's tenant lookup."""
SETTLE_POLL_S = 0.25
"""How often a result waiting for the platform's decision reads the meta again."""
JOB_FIELDS = ("tenant", "topic", "state")


class JobMeta:
    def __init__(self, redis: Any, *, output_policy: bool) -> None:
        self._redis = redis
        self.output_policy = output_policy
        """OUTPUT_POLICY_ENABLED, as the functions read it: whether a SUCCEEDED job
        with no recorded output decision may be shown."""

    async def fields(self, job_id: str) -> dict[str, str]:
        """tenant, topic and state of the job ({} when unknown or unreadable)."""
        try:
            values = await asyncio.wait_for(
                self._redis.hmget(meta_key(job_id), list(JOB_FIELDS)), TENANT_LOOKUP_TIMEOUT_S)
        except Exception as exc:
            log.warning("job %s: meta not read: %s", job_id, type(exc).__name__)
            return {}
        return {name: as_text(v) for name, v in zip(JOB_FIELDS, values, strict=True)
                if v is not None}

    async def read(self, job_id: str) -> dict[str, str]:
        """The whole meta ({} when unknown or unreadable)."""
        try:
            raw = await asyncio.wait_for(self._redis.hgetall(meta_key(job_id)),
                                         TENANT_LOOKUP_TIMEOUT_S)
        except Exception as exc:
            log.warning("job %s: meta not read: %s", job_id, type(exc).__name__)
            return {}
        return {as_text(k): as_text(v) for k, v in raw.items()}

    def decided(self, meta: dict[str, str]) -> bool:
        """The platform is done with the job's result: a terminal state, and for a
        SUCCEEDED job with an output to check, the output decision recorded."""
        return is_terminal(meta) and not output_pending(meta, output_policy=self.output_policy)

    async def settled(self, job_id: str, within_s: float) -> tuple[dict[str, str], bool]:
        """The meta once the platform decided (True), or as last read when it has not
        within ``within_s`` (False). A worker's result reaches the bus before the
        platform applies it, so the first reads usually find the job still running."""
        deadline = time.monotonic() + within_s
        while True:
            meta = await self.read(job_id)
            if self.decided(meta):
                return meta, True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return meta, False
            await asyncio.sleep(min(SETTLE_POLL_S, remaining))
