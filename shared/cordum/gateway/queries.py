"""The read side of the HTTP API: job lists, job detail extras, workers, status, health.

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

Cursor: ``"<score>:<job id>"`` of the last job returned; the next page starts
strictly after it, so jobs sharing one microsecond are neither lost nor repeated.
A bare number (Cordum's ``updated_at - 1`` cursor) means "score at or below it".

One job, workers, status
------------------------
``detail_extras`` reads a job's event log (started_at, completed_at), DLQ entry,
output decision, prompt and adapter in one round trip. ``worker_snapshot`` reads the
bridge's ``sys:workers:snapshot``; ``status`` adds Redis and NATS reachability, the
shared breakers (read-only "peek" of ``cordum.safety.breaker``) and Cordum's
fail-open counter, and never fails: what cannot be read reads as down, empty or
UNKNOWN.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from cordum import protocol, runtime
from cordum.config import Settings
from cordum.gateway.views import DetailExtras, is_online, job_summary, json_object, rfc3339_s
from cordum.safety.breaker import (
    INPUT_BREAKER_KEY,
    OUTPUT_BREAKER_KEY,
    BreakerPolicy,
    BreakerState,
    CircuitBreaker,
)
from cordum.scheduler.registry import SNAPSHOT_KEY, WorkerInfo, parse_snapshot
from cordum.store.errors import StoreError
from cordum.store.indexes import normalize_cutoff_us
from cordum.store.jobs import (
    JobState,
    dlq_entry_key,
    events_key,
    meta_key,
    request_key,
    tenant_index_key,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

STARTED_AT = time.monotonic()
"""When this container loaded the gateway: ``uptime_seconds`` counts from here."""

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
INPUT_FAIL_OPEN_KEY = "cordum:scheduler:input_fail_open_total"
"""Cordum's counter of jobs dispatched while the input policy failed open."""
PROJECT = "cordum-serverless"


@dataclass(frozen=True, slots=True)
class ReadKeys:
    """The shared keys the status and worker views read (tests point them elsewhere)."""

    snapshot: str = SNAPSHOT_KEY
    breaker_prefix: str = ""
    input_fail_open: str = INPUT_FAIL_OPEN_KEY


KEYS = ReadKeys()


class RedisReadProtocol(Protocol):
    """The part of ``redis.asyncio.Redis`` the queries use: every read goes in a pipeline."""

    def pipeline(self, transaction: bool = ...) -> Any: ...
    def register_script(self, script: str) -> Any: ...


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)


async def _execute(pipe: Any) -> list[Any]:
    try:
        return list(await pipe.execute())
    except Exception as exc:  # connection, timeout, READONLY alike: the caller answers 503
        raise StoreError(f"redis: {exc}") from exc


# --------------------------------------------------------------------------- job lists


@dataclass(frozen=True, slots=True)
class Position:
    """A place in the newest-first order; the next page starts strictly after it."""

    score: int
    job_id: str | None = None
    """None: every job at ``score`` is still ahead (a bare-number cursor)."""

    def ahead(self, score: int, job_id: str) -> bool:
        """Whether (``score``, ``job_id``) comes after this position."""
        if score != self.score:
            return score < self.score
        return self.job_id is None or job_id < self.job_id

    def encode(self) -> str:
        return f"{self.score}:{self.job_id or ''}"

    @classmethod
    def decode(cls, raw: str) -> Position:
        """Raises ValueError when ``raw`` is not a cursor."""
        score, sep, job_id = raw.strip().partition(":")
        if not sep:
            return cls(int(score))
        if not job_id:
            raise ValueError("cursor has no job id")
        return cls(int(score), job_id)


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


Entry = tuple[int, str]
"""(score, job id); sorted descending this is the list order."""


class _Candidates:
    """Job ids in list order, in batches; metas read in one round trip per batch."""

    def __init__(self, redis: RedisReadProtocol) -> None:
        self._redis = redis

    async def batch(self, after: Position | None, count: int) -> tuple[list[Entry], bool]:
        """At least one entry after ``after`` unless exhausted; True when none remain."""
        raise NotImplementedError

    async def metas(self, ids: Sequence[str]) -> list[dict[str, str] | None]:
        if not ids:
            return []
        pipe = self._redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(meta_key(job_id), *SUMMARY_FIELDS)
        rows = await _execute(pipe)
        return [_row(row) for row in rows]


def _row(values: Sequence[Any]) -> dict[str, str] | None:
    if values[0] is None:  # no tenant: the meta expired (or never had one)
        return None
    return {name: _text(v) for name, v in zip(SUMMARY_FIELDS, values, strict=True)
            if v is not None}


class _IndexWalk(_Candidates):
    """One or more sorted sets walked downwards together, merged by (score, id)."""

    def __init__(self, redis: RedisReadProtocol, keys: Sequence[str], flt: JobFilter) -> None:
        super().__init__(redis)
        self._keys = list(keys)
        self._min = "-inf" if flt.after_us is None else f"({flt.after_us}"
        self._max_score = None if flt.before_us is None else flt.before_us - 1

    async def batch(self, after: Position | None, count: int) -> tuple[list[Entry], bool]:
        top = after.score if after is not None else self._max_score
        if top is not None and self._max_score is not None:
            top = min(top, self._max_score)
        upper = "+inf" if top is None else str(top)
        while True:
            pipe = self._redis.pipeline(transaction=False)
            for key in self._keys:
                pipe.zrevrangebyscore(key, upper, self._min, start=0, num=count,
                                      withscores=True)
            merged: list[Entry] = []
            frontier: Entry | None = None
            for rows in await _execute(pipe):
                entries = [(int(score), _text(member)) for member, score in rows]
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

    def __init__(self, redis: RedisReadProtocol, entries: list[Entry]) -> None:
        super().__init__(redis)
        self._entries = sorted(entries, reverse=True)

    async def batch(self, after: Position | None, count: int) -> tuple[list[Entry], bool]:
        rest = [e for e in self._entries if after is None or after.ahead(*e)]
        return rest[:count], len(rest) <= count


async def _candidates(redis: RedisReadProtocol, flt: JobFilter) -> _Candidates:
    states = [flt.state] if flt.state else list(JobState)
    keys = [tenant_index_key(flt.tenant, s) for s in states]
    if flt.trace_id:
        return await _trace(redis, keys, flt)
    return _IndexWalk(redis, keys, flt)


async def _trace(redis: RedisReadProtocol, keys: Sequence[str],
                 flt: JobFilter) -> _Candidates:
    trace = f"trace:{flt.trace_id}"
    pipe = redis.pipeline(transaction=False)
    for key in keys:
        # A plain set scores 1 in ZINTER: weight 0 keeps the index score alone.
        pipe.zinter({key: 1, trace: 0}, withscores=True)
    entries = [(int(score), _text(member))
               for rows in await _execute(pipe) for member, score in rows]
    return _Listed(redis, [e for e in entries if flt.in_window(e[0])])


async def list_jobs(redis: RedisReadProtocol, flt: JobFilter, limit: int,
                    cursor: Position | None = None) -> JobPage:
    """One page of the tenant's jobs, newest first (see the module docstring)."""
    source = await _candidates(redis, flt)
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


def parse_time_us(raw: str) -> int:
    """``updated_after``/``updated_before``: RFC 3339, or an epoch number in s, ms or µs.

    Raises ValueError when it is neither.
    """
    raw = raw.strip()
    if raw.lstrip("-").isdigit():
        return normalize_cutoff_us(int(raw))
    instant = datetime.fromisoformat(raw.replace("z", "Z"))
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return int(instant.timestamp() * 1_000_000)


# --------------------------------------------------------------------------- one job


async def decision_meta(redis: RedisReadProtocol, job_id: str) -> dict[str, str]:
    """The meta fields a job's decisions are built from ({} when the job is unknown)."""
    pipe = redis.pipeline(transaction=False)
    pipe.hmget(meta_key(job_id), *DECISION_FIELDS)
    (values,) = await _execute(pipe)
    if values[0] is None:
        return {}
    return {name: _text(v) for name, v in zip(DECISION_FIELDS, values, strict=True)
            if v is not None}


async def detail_extras(redis: RedisReadProtocol, job_id: str) -> DetailExtras:
    """A job's event log, DLQ entry, output decision, prompt and adapter: one round trip."""
    pipe = redis.pipeline(transaction=False)
    pipe.lrange(events_key(job_id), 0, EVENTS_READ - 1)
    pipe.get(dlq_entry_key(job_id))
    pipe.get(f"job:{job_id}:output_decision")
    pipe.get(protocol.context_key(job_id))
    pipe.get(request_key(job_id))
    events, dlq, output, ctx, request = await _execute(pipe)
    context = json_object(ctx)
    prompt = context.get("prompt") if context is not None else None
    req = json_object(request) or {}
    return DetailExtras(
        events=[e for raw in events if (e := _event(_text(raw))) is not None],
        dlq=json_object(dlq),
        output_decision=json_object(output),
        prompt=prompt if isinstance(prompt, str) else None,
        adapter_id=str(req.get("adapterId") or req.get("adapter_id") or ""),
    )


def _event(raw: str) -> tuple[int, str] | None:
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


# --------------------------------------------------------------------------- workers


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The worker snapshot as the bridge last wrote it."""

    workers: list[WorkerInfo] = field(default_factory=list)
    writer_id: str = ""
    captured_at: str = ""


async def worker_snapshot(redis: RedisReadProtocol, keys: ReadKeys | None = None) -> Snapshot:
    """The snapshot's workers, fresh or not (an empty one when missing or corrupt)."""
    pipe = redis.pipeline(transaction=False)
    pipe.get((keys or KEYS).snapshot)
    (raw,) = await _execute(pipe)
    return _snapshot(raw)


def _snapshot(raw: Any) -> Snapshot:
    doc = json_object(raw) or {}
    return Snapshot(parse_snapshot(raw), str(doc.get("writer_id") or ""),
                    str(doc.get("captured_at") or ""))


# --------------------------------------------------------------------------- health and status


@dataclass(frozen=True, slots=True)
class Connectivity:
    redis_error: str | None
    nats_error: str | None

    @property
    def healthy(self) -> bool:
        return self.redis_error is None and self.nats_error is None


async def _redis_problem(cfg: Settings) -> str | None:
    try:
        await asyncio.wait_for(runtime.redis_client(cfg).ping(), cfg.store_timeout_s)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


async def _nats_problem(cfg: Settings) -> str | None:
    try:
        nc = await asyncio.wait_for(runtime.nats_client(cfg), cfg.publish_timeout_s)
        await asyncio.wait_for(nc.flush(), cfg.publish_timeout_s)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


async def connectivity(cfg: Settings) -> Connectivity:
    """Whether Redis answers a PING and NATS a flush, both at once, each bounded by its
    configured timeout."""
    redis_error, nats_error = await asyncio.gather(_redis_problem(cfg), _nats_problem(cfg))
    return Connectivity(redis_error, nats_error)


def redact_url(url: str) -> str:
    """``url`` without password or token (every URL of a comma-separated list)."""
    out = []
    for part in url.split(","):
        parts = urlsplit(part.strip())
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        try:
            port = parts.port
        except ValueError:
            port = None
        netloc = host + (f":{port}" if port else "")
        if parts.username and parts.password is not None and parts.scheme.startswith("redis"):
            netloc = f"{parts.username}@{netloc}"  # a Redis ACL user name is no secret
        out.append(urlunsplit((parts.scheme, netloc, parts.path, "", "")))
    return ",".join(out)


def build_info() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version(PROJECT)
    except PackageNotFoundError:
        ver = "dev"  # Lambda bundles the sources, not the installed distribution
    return {"version": ver, "commit": os.environ.get("CORDUM_BUILD_COMMIT", ""),
            "date": os.environ.get("CORDUM_BUILD_DATE", "")}


async def _redis_reads(redis: RedisReadProtocol, keys: ReadKeys,
                       timeout_s: float) -> tuple[Snapshot, int]:
    pipe = redis.pipeline(transaction=False)
    pipe.get(keys.snapshot)
    pipe.get(keys.input_fail_open)
    try:
        raw, fail_open = await asyncio.wait_for(_execute(pipe), timeout_s)
    except (StoreError, TimeoutError):
        return Snapshot(), 0
    try:
        return _snapshot(raw), int(fail_open or 0)
    except ValueError:
        return _snapshot(raw), 0


async def _breaker(redis: RedisReadProtocol, key: str, keys: ReadKeys,
                   timeout_s: float) -> BreakerState:
    breaker = CircuitBreaker(redis, key=key, key_prefix=keys.breaker_prefix,
                             policy=BreakerPolicy(op_timeout_s=timeout_s))
    return await breaker.state()


def _breaker_view(state: BreakerState) -> dict[str, Any]:
    return {"state": state.state.value, "failures": state.failures,
            "fail_threshold": state.fail_threshold,
            "cooldown_remaining_ms": state.cooldown_remaining_ms}


async def status(redis: RedisReadProtocol, cfg: Settings, *, admin: bool,
                 keys: ReadKeys | None = None, now: float | None = None) -> dict[str, Any]:
    """StatusResponse, plus Cordum's admin extras when ``admin``.

    Where the gateway connects (URLs, hosts) is shown to admins only: to anyone else
    it maps the network. Never fails for Redis or NATS trouble: what cannot be read
    reads as disconnected, no workers, UNKNOWN breakers.
    """
    keys = keys or KEYS
    timeout = cfg.store_timeout_s
    reach, (snapshot, fail_open), input_state, output_state = await asyncio.gather(
        connectivity(cfg),
        _redis_reads(redis, keys, timeout),
        _breaker(redis, INPUT_BREAKER_KEY, keys, timeout),
        _breaker(redis, OUTPUT_BREAKER_KEY, keys, timeout),
    )
    now = time.time() if now is None else now
    body: dict[str, Any] = {
        "time": rfc3339_s(now),
        "uptime_seconds": round(time.monotonic() - STARTED_AT, 3),
        "build": build_info(),
        "nats": {"connected": reach.nats_error is None},
        "redis": {"connected": reach.redis_error is None},
        "workers": sum(1 for w in snapshot.workers if is_online(w, now)),
    }
    if admin:
        body["nats"]["url"] = redact_url(cfg.nats_url)
        body["redis"]["url"] = redact_url(cfg.redis_url)
        body["circuit_breakers"] = {"input": _breaker_view(input_state),
                                    "output": _breaker_view(output_state)}
        body["input_fail_open_total"] = fail_open
        body["snapshot_meta"] = {"writer_id": snapshot.writer_id,
                                 "captured_at": snapshot.captured_at}
    return body
