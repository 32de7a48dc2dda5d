"""Dead-letter entries as the HTTP API reads and removes them.

The job store writes them with a terminal transition (``lua/transition.lua``):
``dlq:entry:<job_id>`` holds the JSON ``{job_id, topic?, status, reason,
reason_code, last_state, attempts, created_at}`` and ``dlq:index`` orders the ids
by ``created_at`` (µs); both keys are named in ``cordum.store.jobs``. Any Redis
failure is raised as ``StoreError``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Protocol

from cordum.store.audit_trail import AuditTrail
from cordum.store.errors import StoreError
from cordum.store.jobs import DLQ_INDEX_KEY, dlq_entry_key, meta_key
from cordum.store.reads import execute, text

if TYPE_CHECKING:
    from collections.abc import Awaitable, Sequence

    from cordum.store.audit import AuditEvent


class RedisDlqProtocol(Protocol):
    """The part of ``redis.asyncio.Redis`` the entries use."""

    def get(self, name: str) -> Awaitable[Any]: ...
    def pipeline(self, transaction: bool = ...) -> Any: ...


def parse_entry(raw: Any) -> dict[str, Any] | None:
    """A stored entry; None when missing or not a JSON object."""
    if raw is None:
        return None
    try:
        entry = json.loads(text(raw))
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


class DlqEntries:
    def __init__(self, redis: RedisDlqProtocol) -> None:
        self._redis = redis

    async def with_meta(self, ids: Sequence[str], names: Sequence[str]
                        ) -> list[tuple[dict[str, Any] | None, dict[str, str]]]:
        """Each job's entry (None when gone) and the fields ``names`` of its meta that are
        set: one round trip."""
        pipe = self._redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.get(dlq_entry_key(job_id))
            pipe.hmget(meta_key(job_id), *names)
        replies = await execute(pipe)
        return [(parse_entry(replies[2 * i]),
                 {k: text(v) for k, v in zip(names, replies[2 * i + 1], strict=True)
                  if v is not None})
                for i in range(len(ids))]

    async def entry(self, job_id: str) -> dict[str, Any] | None:
        try:
            raw = await self._redis.get(dlq_entry_key(job_id))
        except Exception as exc:
            raise StoreError(f"read dlq entry of {job_id}: {exc}") from exc
        return parse_entry(raw)

    async def remove(self, job_id: str, *, audit: AuditEvent | None = None) -> None:
        """The entry and its index member, together; with ``audit``, the act's event
        staged in its tenant's outbox in the same transaction (``AuditTrail.drain``
        moves it into the chain)."""
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(dlq_entry_key(job_id))
        pipe.zrem(DLQ_INDEX_KEY, job_id)
        if audit is not None:
            AuditTrail.stage(pipe, audit)
        await execute(pipe)
