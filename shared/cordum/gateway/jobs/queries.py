"""The read side of jobs in the HTTP API: job lists and one job's details.

Job lists (``list_jobs``)
-------------------------
Every job of a tenant sits in exactly one of the tenant's per-state indexes
``job:tenant:index:<tenant>:<state>`` (``store.jobs.tenant_index_key``; the store's
scripts move it atomically, together with Cordum's global ``job:index:<state>``),
scored by the µs of its last state change. Pages are newest first by that score,
then by job id (descending, as Redis orders ties). Only the caller's tenant's
indexes are read, so what a page costs does not depend on what other tenants store.

Where the candidates come from:

* ``trace_id``: ``ZINTER`` of the set ``trace:<id>`` with each of the tenant's
  indexes (the one of ``state`` when given). Redis walks the smaller set of each
  pair, and only the tenant's jobs of the trace come back. Exact.
* ``state``: the tenant's index of that state, walked downwards. Exact.
* no filter: the tenant's twelve per-state indexes walked together and merged by
  score. Exact. ``job:recent``, which Cordum filters, is not used: it keeps only the
  last 1000 state changes of all tenants, so older jobs would vanish from the list.

Each batch of candidates costs one pipelined round trip for the index ranges and
one for the metas (``HMGET`` of :data:`SUMMARY_FIELDS`, never the whole meta);
without a topic or team filter a batch is the page plus one. Tenant, state, topic,
team and trace are checked on the meta, so a job that moved on is not shown.

Best-effort, by design:

* A request examines at most :data:`SCAN_BUDGET` candidates. A topic or team that
  is rare among the tenant's jobs gives a short page (possibly empty) with a
  ``next_cursor`` to continue from; only ``next_cursor: null`` means the end.
* A job that changes state while a client pages gets a newer score: if it was not
  listed yet, this traversal skips it. No job is ever listed twice.
* Index entries outlive an expired meta (7 days); such entries are skipped. A
  terminal index drops them whenever a job lands in it.
* A job stored before the tenant indexes existed is listed from its next state
  change on (until then it is in the global index only).

The cursor is a ``cordum.gateway.core.paging.Position``: ``"<score>:<job id>"`` of the
last job returned; a bare number (Cordum's ``updated_at - 1`` cursor) means
"score at or below it".

One job
-------
``detail_extras`` reads a job's event log (started_at, completed_at), DLQ entry,
output decision, prompt and adapter in one round trip; ``decision_meta`` the
fields its decisions are built from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cordum import protocol
from cordum.gateway.core.paging import Position
from cordum.gateway.jobs.views import (
    MAX_INLINE_RESULT_BYTES,
    DetailExtras,
    job_detail,
    job_summary,
    json_or_text,
)
from cordum.safety.client import EFFECTIVE_CONFIG_ENV
from cordum.store.errors import StoreError
from cordum.store.jobs import JobState, tenant_index_key
from cordum.store.json_docs import json_object
from cordum.store.reads import Entry, JobReads, text
from cordum.store.results import decision_key, served_result_ptr

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from cordum.store.reads import RedisReadProtocol

SUMMARY_FIELDS = ("tenant", "state", "topic", "updated_at", "team", "trace_id")
DECISION_FIELDS = ("tenant", "safety_decision", "safety_reason", "safety_rule_id",
                   "safety_constraints", "safety_checked_at")
SCAN_BUDGET = 5000
"""Candidates one list request examines at most (see the module docstring)."""
MIN_BATCH = 64
"""Candidates read per round trip at least (twice the page size when that is more)
when a topic or team filter may leave most of them out."""
EVENTS_READ = 512
"""Events of a job read for started_at/completed_at (a job has a few dozen)."""


# --------------------------------------------------------------------------- job lists


@dataclass(frozen=True, slots=True)
class JobFilter:
    tenant: str
    state: str = ""
    topic: str = ""
    team: str = ""
    trace_id: str = ""
    after_us: int | None = None
    """Only jobs whose score is greater."""
    before_us: int | None = None
    """Only jobs whose score is smaller."""

    def matches(self, meta: Mapping[str, str]) -> bool:
        return (
            meta.get("tenant") == self.tenant
            and (not self.state or meta.get("state") == self.state)
            and (not self.topic or meta.get("topic") == self.topic)
            and (not self.team or meta.get("team") == self.team)
            and (not self.trace_id or meta.get("trace_id") == self.trace_id)
        )

    def in_window(self, score: int) -> bool:
        return ((self.after_us is None or score > self.after_us)
                and (self.before_us is None or score < self.before_us))


@dataclass(frozen=True, slots=True)
class JobPage:
    items: list[dict[str, Any]]
    next_cursor: str | None


class _Candidates:
    """Job ids in list order, in batches; metas read in one round trip per batch."""

    def __init__(self, reads: JobReads) -> None:
        self._reads = reads

    async def batch(self, after: Position | None, count: int) -> tuple[list[Entry], bool]:
        """At least one entry after ``after`` unless exhausted; True when none remain."""
        raise NotImplementedError

    async def metas(self, ids: Sequence[str]) -> list[dict[str, str] | None]:
        """The summary fields of each job; None when its meta expired (or never had a
        tenant)."""
        metas = await self._reads.metas(ids, SUMMARY_FIELDS)
        return [meta if "tenant" in meta else None for meta in metas]


class _IndexWalk(_Candidates):
    """One or more sorted sets walked downwards together, merged by (score, id)."""

    def __init__(self, reads: JobReads, keys: Sequence[str], flt: JobFilter) -> None:
        super().__init__(reads)
        self._keys = list(keys)
        self._min = "-inf" if flt.after_us is None else f"({flt.after_us}"
        self._max_score = None if flt.before_us is None else flt.before_us - 1

    async def batch(self, after: Position | None, count: int) -> tuple[list[Entry], bool]:
        top = after.score if after is not None else self._max_score
        if top is not None and self._max_score is not None:
            top = min(top, self._max_score)
        upper = "+inf" if top is None else str(top)
        while True:
            merged: list[Entry] = []
            frontier: Entry | None = None
            for entries in await self._reads.ranges(self._keys, upper, self._min, count):
                if len(entries) == count:
                    # This set has more below its last entry: the merge is only
                    # complete down to the highest such last entry.
                    frontier = max(frontier or entries[-1], entries[-1])
                merged += [e for e in entries if after is None or after.ahead(*e)]
            merged.sort(reverse=True)
            exhausted = frontier is None
            if frontier is not None:
                merged = [e for e in merged if e >= frontier]
            if len(merged) > count:
                return merged[:count], False
            if merged or exhausted:
                return merged, exhausted
            # Only jobs tied at the cursor's score came back: read further.
            count *= 2


class _Listed(_Candidates):
    """Candidates known in full up front (the tenant's jobs of a trace)."""

    def __init__(self, reads: JobReads, entries: list[Entry]) -> None:
        super().__init__(reads)
        self._entries = sorted(entries, reverse=True)

    async def batch(self, after: Position | None, count: int) -> tuple[list[Entry], bool]:
        rest = [e for e in self._entries if after is None or after.ahead(*e)]
        return rest[:count], len(rest) <= count


async def _candidates(reads: JobReads, flt: JobFilter) -> _Candidates:
    states = [flt.state] if flt.state else list(JobState)
    keys = [tenant_index_key(flt.tenant, s) for s in states]
    if flt.trace_id:
        entries = await reads.in_trace(keys, flt.trace_id)
        return _Listed(reads, [e for e in entries if flt.in_window(e[0])])
    return _IndexWalk(reads, keys, flt)


async def list_jobs(redis: RedisReadProtocol, flt: JobFilter, limit: int,
                    cursor: Position | None = None) -> JobPage:
    """One page of the tenant's jobs, newest first (see the module docstring)."""
    source = await _candidates(JobReads(redis), flt)
    found: list[tuple[Position, dict[str, Any]]] = []
    position = cursor
    examined = 0
    # The tenant's index holds that tenant's jobs in that state: unless a topic or
    # team leaves some out, every candidate read is shown.
    wanted = max(2 * (limit + 1), MIN_BATCH) if flt.topic or flt.team else limit + 1
    while True:
        count = min(wanted, SCAN_BUDGET - examined)
        entries, exhausted = await source.batch(position, count)
        metas = await source.metas([job_id for _, job_id in entries])
        for (score, job_id), meta in zip(entries, metas, strict=True):
            position = Position(score, job_id)
            examined += 1
            if meta is None or not flt.matches(meta):
                continue
            found.append((position, job_summary(job_id, meta)))
            if len(found) > limit:
                # One more than asked for: there is a next page, after the last shown.
                return JobPage([s for _, s in found[:limit]], found[limit - 1][0].encode())
        if exhausted:
            return JobPage([s for _, s in found], None)
        if examined >= SCAN_BUDGET and position is not None:
            return JobPage([s for _, s in found], position.encode())


# --------------------------------------------------------------------------- one job


async def decision_meta(redis: RedisReadProtocol, job_id: str) -> dict[str, str]:
    """The meta fields a job's decisions are built from ({} when the job is unknown)."""
    (meta,) = await JobReads(redis).metas([job_id], DECISION_FIELDS)
    return meta if "tenant" in meta else {}


async def detail_extras(redis: RedisReadProtocol, job_id: str) -> DetailExtras:
    """A job's event log, DLQ entry, output decision, prompt and adapter: one round trip."""
    stored = await JobReads(redis).extras(job_id, events=EVENTS_READ,
                                          output_decision_key=decision_key(job_id))
    context = json_object(stored.context)
    prompt = context.get("prompt") if context is not None else None
    req = json_object(stored.request) or {}
    return DetailExtras(
        events=[e for raw in stored.events if (e := state_event(text(raw))) is not None],
        dlq=json_object(stored.dlq),
        output_decision=json_object(stored.output_decision),
        prompt=prompt if isinstance(prompt, str) else None,
        adapter_id=str(req.get("adapterId") or req.get("adapter_id") or ""),
        effective_config=json_object((req.get("env") or {}).get(EFFECTIVE_CONFIG_ENV)),
    )


def state_event(raw: str) -> tuple[int, str] | None:
    """``{"ts": µs, "state": ...}``, or Cordum's older ``"<ts>|<STATE>"``."""
    ts: Any
    state: Any
    if raw.startswith("{"):
        doc = json_object(raw)
        if doc is None:
            return None
        ts, state = doc.get("ts"), doc.get("state")
    else:
        ts, _, state = raw.partition("|")
    try:
        return int(ts), str(state)
    except (TypeError, ValueError):
        return None


async def job_view(redis: Any, job_id: str, meta: dict[str, str], *,
                   output_policy: bool) -> dict[str, Any]:
    """The job as ``GET /api/v1/jobs/{id}`` serves it, from its stored meta: the one
    builder of the API's answer and the live stream's ``job.state``.

    The result is read only when it may be served (SUCCEEDED, its own pointer, the
    output decision final), and its size first (STRLEN reads nothing): one larger than
    MAX_INLINE_RESULT_BYTES is never read, only pointed at.
    """
    result_ptr = served_result_ptr(job_id, meta, output_policy=output_policy)
    result: Any = None
    size: int | None = None
    if result_ptr:
        key = protocol.key_from_pointer(result_ptr)
        try:
            size = int(await redis.strlen(key))
            raw = await redis.get(key) if size <= MAX_INLINE_RESULT_BYTES else None
        except Exception as exc:
            raise StoreError(f"read {key}: {exc}") from exc
        if size <= MAX_INLINE_RESULT_BYTES:
            result = json_or_text(None if raw is None else text(raw))
    extras = await detail_extras(redis, job_id)
    return job_detail(job_id, meta, result_ptr, result, extras, result_size=size)
