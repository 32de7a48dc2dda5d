"""Workflow definitions and runs on Redis (keys in :mod:`cordum.workflow.keys`).

A run is written whole, together with everything that must change with it, in one
MULTI: its indexes, the open/active sets, new timeline events, the effects still to
carry out (the outbox), its step jobs' mappings and contexts, and its timer. A
reader therefore never sees a run whose jobs cannot be traced back to it, nor a
dispatched step whose context is missing.

Tenancy: a definition's key names its tenant; a run's key does not (run ids are
server-made uuids), so every read by tenant checks the run's ``org_id`` and answers
"not found" for another tenant's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from types import EllipsisType
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from cordum import protocol
from cordum.store.errors import LockBusy, LockUnavailable, StoreError
from cordum.store.indexes import normalize_cutoff_us
from cordum.store.jobs import DATA_TTL_S, meta_key
from cordum.store.locks import Lease, LockPolicy, LockScripts, TtlHoldLock
from cordum.workflow import keys
from cordum.workflow.errors import (
    IdempotencyConflict,
    InvalidInput,
    RunNotRunnable,
    WorkflowError,
)
from cordum.workflow.model import RunStatus, StepRun, Workflow, WorkflowRun, parse_time

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping

    from cordum.workflow.model import TimelineEvent

log = logging.getLogger(__name__)

_LUA = Path(__file__).parent / "lua"

RUN_LOCK_POLICY = LockPolicy(ttl_s=keys.RUN_LOCK_TTL_S, renew_every_s=keys.RUN_LOCK_RENEW_S)
LOCK_POLL_S = 0.025
"""Pause between two attempts on a busy run lock."""
LOCK_BUSY_RETRY_S = 0.5
"""``LockBusy`` delay when the run lock stayed busy."""
LIST_SCAN_BUDGET = 2000
"""Index entries one ``list_runs`` call looks at, at most; past that the page ends
early with a cursor, so a rare status filter cannot make a request unbounded."""
_RUN_STATUSES = frozenset(s.value for s in RunStatus)
REMEMBERED_TIMERS = 4096
"""Runs whose timer score a store remembers from its last read or write."""


class RedisWorkflowProtocol(Protocol):
    """The part of ``redis.asyncio.Redis`` the store uses."""

    def register_script(self, script: str) -> Any: ...
    def pipeline(self, transaction: bool = ...) -> Any: ...
    def set(self, name: str, value: str, *, nx: bool = ..., px: int | None = ...
            ) -> Awaitable[Any]: ...


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def time_us(text: str) -> int:
    """µs since the epoch of an RFC 3339 time; now when it is empty or no time."""
    try:
        instant = parse_time(text)
    except (ValueError, TypeError):
        return time.time_ns() // 1000
    return (instant - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


@contextlib.contextmanager
def _redis_errors(what: str) -> Iterator[None]:
    try:
        yield
    except Exception as exc:  # connection, timeout, script error: the caller may retry
        raise StoreError(f"{what}: {exc}") from exc


async def _execute(what: str, pipe: Any) -> list[Any]:
    with _redis_errors(what):
        return list(await pipe.execute())


def _job_ids(steps: Mapping[str, StepRun]) -> list[str]:
    out: list[str] = []
    for step in steps.values():
        if step.job_id:
            out.append(step.job_id)
        if step.children:
            out += _job_ids(step.children)
    return out


class WorkflowStore:
    def __init__(self, redis: RedisWorkflowProtocol) -> None:
        self._redis = redis
        self._create = redis.register_script((_LUA / "create_run.lua").read_text())
        self._read = redis.register_script((_LUA / "read_run.lua").read_text())
        self._save = redis.register_script((_LUA / "save_run.lua").read_text())
        self._locks = LockScripts(redis)
        self._timers: OrderedDict[str, float | None] = OrderedDict()

    # ------------------------------------------------------------------ definitions

    async def put_definition(self, wf: Workflow) -> None:
        pipe = self._redis.pipeline(transaction=True)
        pipe.set(keys.definition_key(wf.org_id, wf.id), _dumps(wf.to_json()))
        pipe.zadd(keys.definition_index_key(wf.org_id), {wf.id: time_us(wf.updated_at)})
        await _execute(f"put workflow {wf.id}", pipe)

    async def get_definition(self, tenant: str, workflow_id: str) -> Workflow | None:
        (raw,) = await _execute(f"get workflow {workflow_id}",
                                self._pipe().get(keys.definition_key(tenant, workflow_id)))
        return _definition(raw, workflow_id)

    async def list_definitions(self, tenant: str, limit: int = 100) -> list[Workflow]:
        """The tenant's definitions, last updated first."""
        what = f"list workflows of {tenant}"
        (ids,) = await _execute(what, self._pipe().zrevrange(
            keys.definition_index_key(tenant), 0, max(limit, 1) - 1))
        ids = [_text(i) for i in ids]
        if not ids:
            return []
        (raws,) = await _execute(what, self._pipe().mget(
            [keys.definition_key(tenant, i) for i in ids]))
        found = [_definition(raw, i) for i, raw in zip(ids, raws, strict=True)]
        return [wf for wf in found if wf is not None]

    async def delete_definition(self, tenant: str, workflow_id: str) -> bool:
        """Runs of the definition stay: each keeps the definition it started with."""
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(keys.definition_key(tenant, workflow_id))
        pipe.zrem(keys.definition_index_key(tenant), workflow_id)
        deleted, _ = await _execute(f"delete workflow {workflow_id}", pipe)
        return bool(deleted)

    # ------------------------------------------------------------------ runs: writes

    async def create_run(self, run: WorkflowRun, definition: Workflow, *,
                         idempotency_key: str, body_hash: str,
                         max_active: int) -> tuple[str, bool]:
        """Store a new run; ``(run id, True)``, or ``(earlier run id, False)`` when
        ``idempotency_key`` already started one with the same body.

        Raises :class:`IdempotencyConflict` (the key started a run with another body)
        and :class:`RunNotRunnable` (the tenant has ``max_active`` open runs; 0 = no
        limit).
        """
        tenant = run.org_id
        keys_ = [keys.idempotency_key(tenant, idempotency_key), keys.active_runs_key(tenant),
                 keys.run_key(run.id), keys.run_definition_key(run.id),
                 keys.workflow_runs_key(tenant, run.workflow_id), keys.tenant_runs_key(tenant),
                 keys.OPEN_RUNS_KEY]
        args = [run.id, body_hash, max(max_active, 0), _dumps(run.to_json()),
                _dumps(definition.to_json()), time_us(run.updated_at), keys.IDEMPOTENCY_TTL_S,
                "1" if idempotency_key else "0"]
        with _redis_errors(f"create run {run.id}"):
            outcome, value = await self._create(keys=keys_, args=args)
        outcome, value = _text(outcome), _text(value)
        if outcome == "conflict":
            raise IdempotencyConflict(
                "idempotency key already used with a different request body", value)
        if outcome == "limit":
            raise RunNotRunnable(f"tenant has {value} open workflow runs (limit {max_active})")
        return value, outcome == "created"

    async def save(self, run: WorkflowRun, *, timeline: list[TimelineEvent],
                   outbox: list[dict[str, Any]] | None,
                   jobs: Mapping[str, str | tuple[str, str]] | None = None,
                   contexts: Mapping[str, str] | None = None,
                   timer_at: float | None | EllipsisType = ...) -> None:
        """Write the run and what changes with it in one script (``lua/save_run.lua``).

        ``outbox``: the effects still to carry out (None or empty: none). ``jobs``:
        job id -> its step path (or a pair whose second item is the step path; the
        tenant and run are the run's). ``contexts``: job id -> the JSON input stored
        at ``ctx:<job_id>``. ``timer_at``: the run's earliest fire time (unix s),
        None to drop its timer, ``...`` to leave it as it is.
        """
        terminal = run.terminal
        job_docs = [_dumps({"tenant": run.org_id, "run_id": run.id,
                            "step_path": step if isinstance(step, str) else step[1]})
                    for step in (jobs or {}).values()]
        if timer_at is None:
            timer = "drop"
        elif isinstance(timer_at, float | int):
            timer = repr(float(timer_at))
        else:
            timer = "keep"
        save_keys = [keys.run_key(run.id), keys.outbox_key(run.id), keys.timeline_key(run.id),
                     keys.run_definition_key(run.id),
                     keys.workflow_runs_key(run.org_id, run.workflow_id),
                     keys.tenant_runs_key(run.org_id), keys.OPEN_RUNS_KEY,
                     keys.active_runs_key(run.org_id), keys.TIMERS_KEY,
                     *[keys.job_run_key(job_id) for job_id in (jobs or {})],
                     *[protocol.context_key(job_id) for job_id in (contexts or {})]]
        args: list[Any] = [
            run.id, _dumps(run.to_json()), _dumps(outbox) if outbox else "",
            "1" if terminal else "0", keys.RUN_TTL_S, time_us(run.updated_at),
            keys.TIMELINE_MAX, timer, keys.timer_member(run.workflow_id, run.id),
            keys.JOB_MAP_TTL_S, DATA_TTL_S, len(job_docs), len(contexts or {}), len(timeline),
            *job_docs, *(contexts or {}).values(), *[_dumps(e.to_json()) for e in timeline]]
        with _redis_errors(f"save run {run.id}"):
            await self._save(keys=save_keys, args=args)
        if not isinstance(timer_at, EllipsisType):
            self._remember_timer(run.id, None if timer_at is None else float(timer_at))

    async def clear_outbox(self, run_id: str) -> None:
        await _execute(f"clear outbox of run {run_id}",
                       self._pipe().delete(keys.outbox_key(run_id)))

    async def delete_run(self, tenant: str, run_id: str) -> bool:
        """Remove the run and everything kept for it; False when the tenant has no such
        run. An open run should be cancelled first: its jobs are not."""
        run = await self.get_run(tenant, run_id)
        if run is None:
            return False
        idem = keys.idempotency_key(tenant, run.idempotency_key) if run.idempotency_key else ""
        held = ""
        if idem:
            (raw,) = await _execute(f"delete run {run_id}", self._pipe().get(idem))
            held = _text(raw) if raw is not None else ""
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(keys.run_key(run_id), keys.run_definition_key(run_id),
                    keys.outbox_key(run_id), keys.timeline_key(run_id),
                    *[keys.job_run_key(j) for j in _job_ids(run.steps)])
        pipe.zrem(keys.workflow_runs_key(tenant, run.workflow_id), run_id)
        pipe.zrem(keys.tenant_runs_key(tenant), run_id)
        pipe.zrem(keys.OPEN_RUNS_KEY, run_id)
        pipe.srem(keys.active_runs_key(tenant), run_id)
        pipe.zrem(keys.TIMERS_KEY, keys.timer_member(run.workflow_id, run_id))
        if held.split(" ", 1)[0] == run_id:
            # A repeat of the request that started it must not answer a deleted run.
            pipe.delete(idem)
        await _execute(f"delete run {run_id}", pipe)
        self._timers.pop(run_id, None)
        return True

    # ------------------------------------------------------------------ runs: reads

    async def load(self, run_id: str
                   ) -> tuple[WorkflowRun, Workflow, list[dict[str, Any]] | None] | None:
        """The run, the definition it started with and its outbox left to carry out (None:
        nothing), in one round trip; None when the run does not exist."""
        reply = await self._read_run(run_id, full=True)
        if reply is None:
            return None
        return self._loaded(run_id, reply)

    def _loaded(self, run_id: str, reply: list[Any]
                ) -> tuple[WorkflowRun, Workflow, list[dict[str, Any]] | None] | None:
        run_raw, def_raw, outbox_raw = reply[0], reply[2], reply[3]
        run = WorkflowRun.from_json(json.loads(run_raw))
        wf = _definition(def_raw, run.workflow_id)
        if wf is None:
            log.error("run %s has no definition snapshot; it cannot advance", run_id)
            return None
        outbox = json.loads(outbox_raw) if outbox_raw is not None else None
        return run, wf, outbox or None

    async def get_run(self, tenant: str, run_id: str) -> WorkflowRun | None:
        reply = await self._read_run(run_id, full=False)
        if reply is None:
            return None
        run = WorkflowRun.from_json(json.loads(reply[0]))
        return run if run.org_id == tenant else None

    def timer_of(self, run: WorkflowRun) -> float | None:
        """The run's timer (unix s) as this store last read (``load``, ``get_run``) or
        wrote it (``save``); None when it has none or was not read here."""
        return self._timers.get(run.id)

    async def job_run(self, job_id: str) -> tuple[str, str, str] | None:
        """(tenant, run id, step path) of a step's job; None for any other job."""
        (raw,) = await _execute(f"job {job_id}", self._pipe().get(keys.job_run_key(job_id)))
        if raw is None:
            return None
        doc = json.loads(raw)
        return str(doc["tenant"]), str(doc["run_id"]), str(doc["step_path"])

    async def timeline(self, tenant: str, run_id: str) -> list[dict[str, Any]] | None:
        """The run's events, oldest first; None when the tenant has no such run."""
        pipe = self._pipe().get(keys.run_key(run_id)).lrange(keys.timeline_key(run_id), 0, -1)
        run_raw, events = await _execute(f"timeline of run {run_id}", pipe)
        if run_raw is None or json.loads(run_raw).get("org_id") != tenant:
            return None
        return [json.loads(e) for e in events]

    async def list_runs(self, tenant: str, *, workflow_id: str = "", status: str = "",
                        limit: int = 50, cursor: str = "",
                        updated_after: float | None = None,
                        updated_before: float | None = None) -> tuple[list[WorkflowRun], str]:
        """A page of the tenant's runs (of ``workflow_id`` when given), last updated first,
        and the cursor of the next page ("" at the end).

        The cursor is ``"<score>:<run id>"`` of the last run looked at; ``updated_after``
        and ``updated_before`` are exclusive bounds in s, ms or µs since the epoch.
        Raises :class:`InvalidInput` for an unknown status or a malformed cursor.
        """
        if status and status not in _RUN_STATUSES:
            raise InvalidInput(f"unknown run status {status!r}")
        after = _Position.decode(cursor)
        index = (keys.workflow_runs_key(tenant, workflow_id) if workflow_id
                 else keys.tenant_runs_key(tenant))
        top = None if after is None else after.score
        if updated_before is not None:
            before_us = normalize_cutoff_us(updated_before) - 1
            top = before_us if top is None else min(top, before_us)
        upper = "+inf" if top is None else str(top)
        lower = "-inf" if updated_after is None else f"({normalize_cutoff_us(updated_after)}"
        limit = max(limit, 1)
        batch = limit + 1
        found: list[tuple[_Position, WorkflowRun]] = []
        offset = examined = 0
        last: _Position | None = None
        while True:
            what = f"list runs of {tenant}"
            (rows,) = await _execute(what, self._pipe().zrevrangebyscore(
                index, upper, lower, start=offset, num=batch, withscores=True))
            offset += len(rows)
            entries = [_Position(int(score), _text(member)) for member, score in rows]
            entries = [e for e in entries if after is None or after.before(e)]
            raws: list[Any] = []
            if entries:
                (raws,) = await _execute(what, self._pipe().mget(
                    [keys.run_key(e.member) for e in entries]))
            for entry, raw in zip(entries, raws, strict=True):
                last = entry
                examined += 1
                run = WorkflowRun.from_json(json.loads(raw)) if raw is not None else None
                if (run is None or run.org_id != tenant or (status and run.status != status)
                        or (workflow_id and run.workflow_id != workflow_id)):
                    continue
                found.append((entry, run))
                if len(found) > limit:
                    return [r for _, r in found[:limit]], found[limit - 1][0].encode()
            if len(rows) < batch:
                return [r for _, r in found], ""
            if examined >= LIST_SCAN_BUDGET and last is not None:
                return [r for _, r in found], last.encode()

    async def due_timers(self, now: float, limit: int) -> list[tuple[str, str, float]]:
        """(workflow id, run id, fire time) of the timers due at ``now`` (unix s), earliest
        first."""
        (rows,) = await _execute("due timers", self._pipe().zrangebyscore(
            keys.TIMERS_KEY, "-inf", now, start=0, num=max(limit, 1), withscores=True))
        return [(*keys.parse_timer_member(_text(m)), float(s)) for m, s in rows]

    async def open_runs(self, limit: int) -> list[str]:
        """Ids of pending, running and waiting runs, least recently updated first."""
        (ids,) = await _execute("open runs",
                                self._pipe().zrange(keys.OPEN_RUNS_KEY, 0, max(limit, 1) - 1))
        return [_text(i) for i in ids]

    # ------------------------------------------------------------------ locks

    @contextlib.asynccontextmanager
    async def run_lock(self, run_id: str, *, wait_s: float = 0) -> AsyncIterator[Lease]:
        """Hold the run's lock for the block (renewed every 10 s, released on exit).

        Raises :class:`LockBusy` when another holder keeps it past ``wait_s`` (one
        attempt at 0) and :class:`LockUnavailable` when Redis fails.
        """
        key = keys.run_lock_key(run_id)
        token = str(uuid.uuid4())
        give_up = time.monotonic() + wait_s
        while True:
            try:
                got = await asyncio.wait_for(
                    self._locks.try_acquire(key, token, RUN_LOCK_POLICY.ttl_s),
                    RUN_LOCK_POLICY.op_timeout_s)
            except Exception as exc:
                raise LockUnavailable(f"run lock {run_id}: {exc}",
                                      RUN_LOCK_POLICY.error_retry_s) from exc
            if got:
                break
            if time.monotonic() + LOCK_POLL_S > give_up:
                raise LockBusy(run_id, LOCK_BUSY_RETRY_S)
            await asyncio.sleep(LOCK_POLL_S)
        lease = Lease(self._locks, key, token, RUN_LOCK_POLICY)
        lease._start_renewing()
        try:
            yield lease
        finally:
            await lease.release()

    @contextlib.asynccontextmanager
    async def locked_run(self, run_id: str, *, wait_s: float = 0, job_id: str = "",
                         max_result_bytes: int = 0) -> AsyncIterator[LockedRun]:
        """``run_lock`` and ``load`` in one round trip, with a job id also that step job's
        stored end: the lock is taken by the script that reads the run. ``LockedRun.loaded`` is None
        when the run does not exist (and then no lock is held)."""
        token = str(uuid.uuid4())
        give_up = time.monotonic() + wait_s
        while True:
            try:
                reply = await self._read_run(run_id, full=True, job_id=job_id,
                                             max_result_bytes=max_result_bytes, token=token)
                break
            except LockBusy:
                if time.monotonic() + LOCK_POLL_S > give_up:
                    raise
            except StoreError as exc:
                raise LockUnavailable(f"run lock {run_id}: {exc}",
                                      RUN_LOCK_POLICY.error_retry_s) from exc
            await asyncio.sleep(LOCK_POLL_S)
        if reply is None:
            yield LockedRun(None, None, None)
            return
        lease = Lease(self._locks, keys.run_lock_key(run_id), token, RUN_LOCK_POLICY)
        lease._start_renewing()
        try:
            loaded = self._loaded(run_id, reply)
            job = _job_end(reply) if job_id and loaded is not None else None
            yield LockedRun(lease, loaded, job)
        finally:
            await lease.release()

    def reconciler_lock(self, interval_s: float = 10.0) -> TtlHoldLock:
        """The reconciler's lock-hold: one replica ticks per two intervals."""
        return TtlHoldLock(self._redis, keys.RECONCILER_LOCK_KEY, ttl_s=2 * interval_s)

    # ------------------------------------------------------------------ internals

    def _pipe(self) -> Any:
        """A pipeline without MULTI, for reads (its commands chain)."""
        return self._redis.pipeline(transaction=False)

    async def _read_run(self, run_id: str, *, full: bool, job_id: str = "",
                        max_result_bytes: int = 0, token: str = "") -> list[Any] | None:
        """The script's reply without its status; None when the run does not exist.
        With ``token`` the run's lock is taken first: LockBusy when another holds it."""
        run_keys = [keys.run_key(run_id), keys.TIMERS_KEY, keys.run_definition_key(run_id),
                    keys.outbox_key(run_id), keys.run_lock_key(run_id)]
        if job_id:
            run_keys += [meta_key(job_id), protocol.result_key(job_id)]
        args: list[Any] = [run_id, "1" if full else "0", token,
                           int(RUN_LOCK_POLICY.ttl_s * 1000), max_result_bytes]
        with _redis_errors(f"read run {run_id}"):
            reply = await self._read(keys=run_keys, args=args)
        status = _text(reply[0])
        if status == "busy":
            raise LockBusy(run_id, LOCK_BUSY_RETRY_S)
        if status != "ok":
            return None
        reply = list(reply[1:])
        score = reply[1]
        self._remember_timer(run_id, float(score) if score is not None else None)
        return reply

    def _remember_timer(self, run_id: str, score: float | None) -> None:
        self._timers[run_id] = score
        self._timers.move_to_end(run_id)
        while len(self._timers) > REMEMBERED_TIMERS:
            self._timers.popitem(last=False)


class _Position:
    """A place in the newest-first order of a runs index (score, then run id desc)."""

    __slots__ = ("member", "score")

    def __init__(self, score: int, member: str) -> None:
        self.score = score
        self.member = member

    def before(self, other: _Position) -> bool:
        """Whether ``other`` comes after this position in the listing."""
        if other.score != self.score:
            return other.score < self.score
        return other.member < self.member

    def encode(self) -> str:
        return f"{self.score}:{self.member}"

    @classmethod
    def decode(cls, raw: str) -> _Position | None:
        if not raw:
            return None
        score, sep, member = raw.strip().partition(":")
        try:
            return cls(int(score), member if sep else "\U0010ffff")
        except ValueError:
            raise InvalidInput("cursor is invalid") from None


def _definition(raw: Any, workflow_id: str) -> Workflow | None:
    if raw is None:
        return None
    try:
        return _parsed_definition(raw if isinstance(raw, bytes) else str(raw).encode())
    except (ValidationError, ValueError, WorkflowError) as exc:
        log.error("stored workflow %s does not parse: %s", workflow_id, exc)
        return None


@lru_cache(maxsize=64)
def _parsed_definition(raw: bytes) -> Workflow:
    """A run's definition snapshot never changes: each is parsed once per process (the
    engine reads a definition, it never changes one)."""
    return Workflow.model_validate_json(raw)


def _job_end(reply: list[Any]) -> StoredJobEnd:
    fields = [_text(v) if v is not None else "" for v in (reply[4] or [])]
    fields += [""] * (4 - len(fields))
    return StoredJobEnd(state=fields[0], result_status=fields[1], result_ptr=fields[2],
                        failure_reason=fields[3], result=reply[5])


@dataclass(frozen=True, slots=True)
class LockedRun:
    """A run read under its lock, taken in the same round trip."""

    lease: Lease | None
    """None when the run does not exist (no lock is held then)."""
    loaded: tuple[WorkflowRun, Workflow, list[dict[str, Any]] | None] | None
    job: StoredJobEnd | None


@dataclass(frozen=True, slots=True)
class StoredJobEnd:
    """A step job as the job store holds it when its end is applied to its run."""

    state: str
    result_status: str
    result_ptr: str
    failure_reason: str
    result: bytes | None
    """The stored result, when not longer than asked for."""
