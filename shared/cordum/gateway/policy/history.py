"""One tenant's jobs in a time window, newest first: what replay and analytics read.

Every job of a tenant sits in exactly one of the tenant's per-state indexes
``job:tenant:index:<tenant>:<state>`` (:func:`cordum.store.jobs.tenant_index_key`),
scored by the µs of its last state change. The window is read from those indexes
only, so a tenant's replay never looks at another tenant's jobs (and costs the same
whatever other tenants store); the meta's ``tenant`` is checked again on read.

The walk is newest first by (score, job id), the order of
:class:`~cordum.gateway.core.paging.Position`, whose ``"<score>:<job id>"`` is the
cursor. A job that changes state while a client pages gets a newer score, above the
cursor, so it is never read twice; if it was not read yet it is skipped.

A batch's reads (``HMGET`` of the meta fields asked for, and ``GET job:req:<id>``
when the request is wanted) go in one pipeline with the twelve index ranges of the
next batch, so a scan of N batches costs about N + 1 round trips.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cordum.gateway.core.errors import InvalidRequest
from cordum.gateway.core.times import parse_time_us
from cordum.store.jobs import JobState, meta_key, request_key, tenant_index_key
from cordum.store.reads import Entry, execute, text

if TYPE_CHECKING:
    from collections.abc import Sequence

    from cordum.gateway.core.paging import Position
    from cordum.store.reads import RedisReadProtocol

READ_BATCH = 200
"""Jobs read per pipelined round trip (metas and requests)."""
MAX_WINDOW_S = 7 * 24 * 3600
"""A window spans at most 7 days (Cordum's bound; job metas live 7 days at most)."""


def window_us(raw_from: str, raw_to: str, code: str) -> tuple[int, int]:
    """``from`` and ``to`` (RFC 3339) in µs; 400 ``code`` unless from < to and the span
    is at most :data:`MAX_WINDOW_S`."""
    bounds = []
    for name, raw in (("from", raw_from), ("to", raw_to)):
        try:
            bounds.append(parse_time_us(raw))
        except ValueError:
            raise InvalidRequest(f"{name} must be an RFC 3339 time", code) from None
    low, high = bounds
    if low >= high:
        raise InvalidRequest("from must be before to", code)
    if high - low > MAX_WINDOW_S * 1_000_000:
        raise InvalidRequest("the window spans more than 7 days", code)
    return low, high


@dataclass(frozen=True, slots=True)
class StoredJob:
    """One job of the window: its place, the meta fields asked for ('' when unset) and
    its stored request (None when not asked for or gone)."""

    job_id: str
    score: int
    meta: dict[str, str]
    request: Any = None


Batch = tuple[list[Entry], bool]
"""Entries newest first, and whether nothing further is in the window."""


class TenantWindow:
    """The jobs of ``tenant`` whose last state change is in ``[from_us, to_us]``."""

    def __init__(self, redis: RedisReadProtocol, tenant: str, from_us: int, to_us: int
                 ) -> None:
        self._redis = redis
        self._tenant = tenant
        self._keys = [tenant_index_key(tenant, state) for state in JobState]
        self._low = str(from_us)
        self._high = to_us

    async def entries(self, after: Position | None, count: int) -> Batch:
        """Up to ``count`` (score, job id) strictly after ``after``, newest first."""
        while True:
            pipe = self._redis.pipeline(transaction=False)
            asked = self._queue_ranges(pipe, after, count)
            found = self._merge(await execute(pipe), after, count, asked)
            if found is not None:
                return found
            count *= 2  # only jobs tied at the cursor's score came back: read further

    async def read(self, entries: Sequence[Entry], fields: Sequence[str], *,
                   with_request: bool, then: tuple[Position, int] | None = None
                   ) -> tuple[list[StoredJob], Batch | None]:
        """The jobs of ``entries`` that are still stored and the tenant's (``fields`` must
        include ``tenant``); with ``then`` = (after, count), the next batch's entries too,
        in the same round trip (None when they need another)."""
        pipe = self._redis.pipeline(transaction=False)
        for _, job_id in entries:
            pipe.hmget(meta_key(job_id), *fields)
            if with_request:
                pipe.get(request_key(job_id))
        asked = self._queue_ranges(pipe, *then) if then is not None else 0
        if not len(pipe):
            return [], None
        replies = await execute(pipe)
        step = 2 if with_request else 1
        reads = len(entries) * step
        out: list[StoredJob] = []
        for i, (score, job_id) in enumerate(entries):
            meta = {name: text(v) for name, v in zip(fields, replies[i * step], strict=True)}
            if meta.get("tenant") != self._tenant:
                continue  # expired meta, or an index entry that is not this tenant's
            out.append(StoredJob(job_id, score, meta,
                                 replies[i * step + 1] if with_request else None))
        following = (self._merge(replies[reads:], then[0], then[1], asked)
                     if then is not None else None)
        return out, following

    def _queue_ranges(self, pipe: Any, after: Position | None, count: int) -> int:
        """Queue each index's range below ``after``; the rows asked of each."""
        top = self._high if after is None else min(after.score, self._high)
        # The cursor's own row comes back too (the top is inclusive): one more is asked
        # so that a batch is still ``count`` new rows.
        asked = count + (after is not None)
        for key in self._keys:
            pipe.zrevrangebyscore(key, str(top), self._low, start=0, num=asked,
                                  withscores=True)
        return asked

    @staticmethod
    def _merge(replies: Sequence[Any], after: Position | None, count: int, asked: int
               ) -> Batch | None:
        """The batch the ranges ``replies`` make; None when more rows must be read."""
        merged: list[Entry] = []
        frontier: Entry | None = None
        for raw in replies:
            rows = [(int(score), text(member)) for member, score in raw]
            if len(rows) == asked:
                # This index has more below its last row: the merge is complete only
                # down to the highest such row.
                frontier = max(frontier or rows[-1], rows[-1])
            merged += [r for r in rows if after is None or after.ahead(*r)]
        merged.sort(reverse=True)
        if frontier is None:
            return merged[:count], len(merged) <= count
        merged = [r for r in merged if r >= frontier]
        if len(merged) >= count:
            return merged[:count], False
        return (merged, False) if merged else None
