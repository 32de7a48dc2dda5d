"""Reads of jobs: index pages, meta fields, one job's other keys (for the HTTP API),
and the ends of workflow step jobs (for the workflow reconciler).

Each call is one round trip (a single command or one pipeline), however many
jobs it reads, so a list page costs a fixed number of round trips. Any Redis
failure (connection, timeout, READONLY) is raised as ``StoreError``. Values are
handed back as Redis returned them unless a method says it decodes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from cordum import protocol
from cordum.store.errors import StoreError
from cordum.store.jobs import dlq_entry_key, events_key, meta_key, request_key
from cordum.store.results import served_result_ptr
from cordum.store.step_jobs import StepJobRecord, StoredJobEnd, step_job_key

if TYPE_CHECKING:
    from collections.abc import Awaitable, Sequence

Row = tuple[str, int]
"""A sorted-set member and its score."""
Entry = tuple[int, str]
"""A score and its member: sorted descending, newest first."""


class RedisReadProtocol(Protocol):
    """The part of ``redis.asyncio.Redis`` the reads use."""

    def zrevrangebyscore(self, name: str, max: Any, min: Any, start: int | None = ...,
                         num: int | None = ..., withscores: bool = ...) -> Awaitable[Any]: ...
    def pipeline(self, transaction: bool = ...) -> Any: ...
    def ping(self) -> Awaitable[Any]: ...


def trace_key(trace_id: str) -> str:
    """The set of a trace's job ids (written by ``create_job.lua``)."""
    return f"trace:{trace_id}"


def text(value: Any) -> str:
    """A Redis reply as text ("" for none)."""
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)


async def execute(pipe: Any) -> list[Any]:
    """Send what ``pipe`` queued; StoreError when Redis does not answer."""
    try:
        return list(await pipe.execute())
    except Exception as exc:  # connection, timeout, READONLY alike
        raise StoreError(f"redis: {exc}") from exc


@dataclass(frozen=True, slots=True)
class StoredExtras:
    """A job's keys beyond its meta, as stored (None where a key is missing)."""

    events: list[Any] = field(default_factory=list)
    """``job:events:<id>``, oldest first, at most the count asked for."""
    dlq: Any = None
    output_decision: Any = None
    context: Any = None
    request: Any = None


class JobReads:
    """Reads of the job keys of ``cordum.store.jobs`` for API answers."""

    def __init__(self, redis: RedisReadProtocol) -> None:
        self._redis = redis

    async def newest_first(self, key: str, top: int | str, offset: int,
                           count: int) -> list[Row]:
        """Up to ``count`` members of ``key`` scored ``top`` or lower, from ``offset``."""
        try:
            raw = await self._redis.zrevrangebyscore(key, top, "-inf", start=offset, num=count,
                                                     withscores=True)
        except Exception as exc:
            raise StoreError(f"read {key}: {exc}") from exc
        return [(text(member), int(score)) for member, score in raw]

    async def ranges(self, keys: Sequence[str], upper: str, lower: str,
                     count: int) -> list[list[Entry]]:
        """The first ``count`` entries of each of ``keys`` from ``upper`` down to ``lower``."""
        pipe = self._redis.pipeline(transaction=False)
        for key in keys:
            pipe.zrevrangebyscore(key, upper, lower, start=0, num=count, withscores=True)
        return [[(int(score), text(member)) for member, score in rows]
                for rows in await execute(pipe)]

    async def in_trace(self, keys: Sequence[str], trace_id: str) -> list[Entry]:
        """The entries of ``keys`` whose job belongs to the trace, with their index scores."""
        trace = trace_key(trace_id)
        pipe = self._redis.pipeline(transaction=False)
        for key in keys:
            # A plain set scores 1 in ZINTER: weight 0 keeps the index score alone.
            pipe.zinter({key: 1, trace: 0}, withscores=True)
        return [(int(score), text(member))
                for rows in await execute(pipe) for member, score in rows]

    async def metas(self, ids: Sequence[str], names: Sequence[str]) -> list[dict[str, str]]:
        """The fields ``names`` of each job's meta, decoded; a field that is not set is left
        out (an expired meta reads as {})."""
        if not ids:
            return []
        pipe = self._redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(meta_key(job_id), *names)
        return [{name: text(v) for name, v in zip(names, values, strict=True) if v is not None}
                for values in await execute(pipe)]

    async def extras(self, job_id: str, *, events: int, output_decision_key: str
                     ) -> StoredExtras:
        """The job's first ``events`` events, DLQ entry, output decision, context payload
        and request."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.lrange(events_key(job_id), 0, events - 1)
        pipe.get(dlq_entry_key(job_id))
        pipe.get(output_decision_key)
        pipe.get(protocol.context_key(job_id))
        pipe.get(request_key(job_id))
        log, dlq, output, context, request = await execute(pipe)
        return StoredExtras(list(log), dlq, output, context, request)

    async def step_job_ends(self, job_ids: Sequence[str], names: Sequence[str], *,
                            output_policy: bool, max_result_bytes: int
                            ) -> dict[str, StoredJobEnd]:
        """Each step job's meta fields ``names`` (decoded, as :meth:`metas`), the engine's
        record of it and its result, by job id in the order given. A result is read only
        when the API would serve it (:func:`~cordum.store.results.served_result_ptr`:
        ``names`` must hold ``state``, ``result_ptr`` and ``output_safety``) and when
        it is not longer than ``max_result_bytes``. One round trip for the metas and
        records, a second only when some result may be shown."""
        if not job_ids:
            return {}
        pipe = self._redis.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hmget(meta_key(job_id), *names)
            pipe.get(step_job_key(job_id))
        replies = await execute(pipe)
        metas = {job_id: {name: text(v) for name, v in zip(names, replies[2 * i] or [],
                                                            strict=False) if v is not None}
                 for i, job_id in enumerate(job_ids)}
        shown = {job_id: ptr for job_id, meta in metas.items()
                 if (ptr := served_result_ptr(job_id, meta, output_policy=output_policy))}
        results: dict[str, bytes | None] = {}
        if shown:
            pipe = self._redis.pipeline(transaction=False)
            for ptr in shown.values():
                key = protocol.key_from_pointer(ptr)
                pipe.strlen(key)
                pipe.get(key)
            raw = await execute(pipe)
            for job_id, size, value in zip(shown, raw[::2], raw[1::2], strict=True):
                results[job_id] = value if int(size or 0) <= max_result_bytes else None
        return {job_id: StoredJobEnd(metas[job_id], results.get(job_id),
                                     StepJobRecord.from_json(replies[2 * i + 1]))
                for i, job_id in enumerate(job_ids)}

    async def values(self, *keys: str) -> list[Any]:
        """GET of each of ``keys``."""
        pipe = self._redis.pipeline(transaction=False)
        for key in keys:
            pipe.get(key)
        return await execute(pipe)

    async def ping(self) -> None:
        """Raises whatever the client raises when Redis does not answer."""
        await self._redis.ping()
