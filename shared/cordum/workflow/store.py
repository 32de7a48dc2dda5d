"""Workflow runs on Redis (keys in :mod:`cordum.workflow.keys`): writes, reads and locks.

A run is written whole, together with everything that must change with it, in one
MULTI: its indexes, the open/active sets, new timeline events, the effects still to
carry out (the outbox), its step jobs' mappings and contexts, and its timer. A
reader therefore never sees a run whose jobs cannot be traced back to it, nor a
dispatched step whose context is missing. A save made under the run's lock checks the
lock's token in the same script: a holder whose lease ran out writes nothing.

Tenancy: a run's key does not name its tenant (run ids are server-made uuids), so
every read by tenant checks the run's ``org_id`` and answers "not found" for another
tenant's. Definitions are :mod:`cordum.workflow.definition_store`; pages of runs,
:mod:`cordum.workflow.run_listing`.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from types import EllipsisType
from typing import TYPE_CHECKING, Any

from cordum import protocol
from cordum.store.audit import with_audit
from cordum.store.errors import StoreError
from cordum.store.jobs import DATA_TTL_S, AuditParts, meta_key
from cordum.store.locks import Lease, LockPolicy, LockScripts, TtlHoldLock
from cordum.store.results import redacted_key
from cordum.store.step_jobs import StepJobRecord, StoredJobEnd, step_job_key
from cordum.workflow import keys, run_listing
from cordum.workflow.definition_store import stored_definition
from cordum.workflow.errors import IdempotencyConflict, RunLimitExceeded, RunNotRunnable
from cordum.workflow.job_ends import fields_of
from cordum.workflow.model import StepRun, WorkflowRun
from cordum.workflow.redis_io import dumps, execute, read_pipe, redis_errors, text, time_us

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from cordum.workflow.definition import Workflow
    from cordum.workflow.model import TimelineEvent
    from cordum.workflow.redis_io import RedisWorkflowProtocol

log = logging.getLogger(__name__)

_LUA = Path(__file__).parent / "lua"

RUN_LOCK_POLICY = LockPolicy(ttl_s=keys.RUN_LOCK_TTL_S, renew_every_s=keys.RUN_LOCK_RENEW_S)
"""A run's lock: a 30 s TTL renewed every 10 s; polled every 25 ms while busy, then
``LockBusy`` of 0.5 s, ``LockUnavailable`` of 1 s (the job lock's)."""
REMEMBERED_TIMERS = 4096
"""Runs whose timer score a store remembers from its last read or write."""


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
        # The two scripts a governance act may run (a run started or cancelled through
        # the API): they append its audit event themselves.
        self._create = redis.register_script(with_audit((_LUA / "create_run.lua").read_text()))
        self._read = redis.register_script((_LUA / "read_run.lua").read_text())
        self._save = redis.register_script(with_audit((_LUA / "save_run.lua").read_text()))
        self._locks = LockScripts(redis)
        self._timers: OrderedDict[str, float | None] = OrderedDict()

    # ------------------------------------------------------------------ runs: writes

    async def create_run(self, run: WorkflowRun, definition: Workflow, *,
                         idempotency_key: str, body_hash: str, max_active: int,
                         root_run_id: str = "", max_root_runs: int = 0,
                         audit: AuditParts | None = None) -> tuple[str, bool]:
        """Store a new run; ``(run id, True)``, or ``(earlier run id, False)`` when
        ``idempotency_key`` already started one with the same body (or a run of that id
        is stored already).

        Raises :class:`IdempotencyConflict` (the key started a run with another body),
        :class:`RunNotRunnable` (the tenant has ``max_active`` open runs; 0 = no limit)
        and :class:`RunLimitExceeded` (``max_root_runs`` runs were made under
        ``root_run_id`` already; each one made is counted there). ``audit``
        (``AuditTrail.script_parts``): the event of a run started through the API,
        appended by the same script when the run is made, and only then.
        """
        tenant = run.org_id
        keys_ = [keys.idempotency_key(tenant, idempotency_key), keys.active_runs_key(tenant),
                 keys.run_key(run.id), keys.run_definition_key(run.id),
                 keys.workflow_runs_key(tenant, run.workflow_id), keys.tenant_runs_key(tenant),
                 keys.OPEN_RUNS_KEY]
        args = [run.id, body_hash, max(max_active, 0), dumps(run.to_json()),
                dumps(definition.to_json()), time_us(run.updated_at), keys.IDEMPOTENCY_TTL_S,
                "1" if idempotency_key else "0"]
        if root_run_id:
            keys_.append(keys.root_runs_key(root_run_id))
        args += [max(max_root_runs, 0) if root_run_id else 0, keys.RUN_TTL_S]
        audit_keys, audit_args = audit or ([], [])
        keys_ += audit_keys
        args += [len(audit_args), *audit_args]
        with redis_errors(f"create run {run.id}"):
            outcome, value = await self._create(keys=keys_, args=args)
        outcome, value = text(outcome), text(value)
        if outcome == "conflict":
            raise IdempotencyConflict(
                "idempotency key already used with a different request body", value)
        if outcome == "limit":
            raise RunNotRunnable(f"tenant has {value} open workflow runs (limit {max_active})")
        if outcome == "root_limit":
            raise RunLimitExceeded(f"{value} runs were made under run {root_run_id} "
                                   f"(limit {max_root_runs}, max_runs_per_root)")
        return value, outcome == "created"

    async def put_refused_run(self, run: WorkflowRun) -> bool:
        """Store a run that was refused before it was made (terminal, with its reason in
        ``error``) where a reader of its id finds it: in no index, counted nowhere, kept
        ``RUN_TTL_S``; a run of that id already stored is left as it is (False)."""
        with redis_errors(f"store refused run {run.id}"):
            stored = await self._redis.set(keys.run_key(run.id), dumps(run.to_json()),
                                           nx=True, px=keys.RUN_TTL_S * 1000)
        return bool(stored)

    async def save(self, run: WorkflowRun, *, timeline: list[TimelineEvent],
                   outbox: list[dict[str, Any]] | None,
                   jobs: Mapping[str, str | tuple[str, str]] | None = None,
                   contexts: Mapping[str, str] | None = None,
                   timer_at: float | None | EllipsisType = ...,
                   document: str | None = None, audit: AuditParts | None = None,
                   lease: Lease | None = None, release: bool = False) -> None:
        """Write the run and what changes with it in one script (``lua/save_run.lua``).
        ``document``: the run's JSON when the caller has it already (else it is encoded).
        ``lease``: the run lock it is saved under; the script writes nothing, and
        :class:`LockLost` is raised, when the lock no longer holds its token (the lease
        ran out, or another holder took the run meanwhile).

        ``outbox``: the effects still to carry out (None or empty: none). ``jobs``:
        job id -> its step path, or (step path, hash of the request the engine sends:
        the scheduler takes no other under that id; see :mod:`cordum.store.step_jobs`);
        the tenant and run are the run's. ``contexts``: job id -> the JSON input stored
        at ``ctx:<job_id>``. ``timer_at``: the run's earliest fire time (unix s),
        None to drop its timer, ``...`` to leave it as it is. ``audit``: the event of
        the governance act this save is (a run cancelled through the API), appended by
        the same script. ``release``: the same script also releases ``lease`` (the run's
        lock), one round trip for both; the caller then carries the outbox out after
        the release, so it keeps only what is safe to repeat and is told apart from
        a leftover: the publish of one step job, which ``lua/read_run.lua`` drops once
        that job's end is applied (:func:`cordum.workflow.runner.released_outbox`).
        """
        terminal = run.terminal
        job_docs = [StepJobRecord(run.org_id, run.id, *((step, "") if isinstance(step, str)
                                                        else step)).to_json()
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
                     keys.run_lock_key(run.id),
                     *[keys.job_run_key(job_id) for job_id in (jobs or {})],
                     *[protocol.context_key(job_id) for job_id in (contexts or {})]]
        audit_keys, audit_args = audit or ([], [])
        save_keys += audit_keys
        args: list[Any] = [
            run.id, document if document is not None else dumps(run.to_json()),
            dumps(outbox) if outbox else "",
            "1" if terminal else "0", keys.RUN_TTL_S, time_us(run.updated_at),
            keys.TIMELINE_MAX, timer, keys.timer_member(run.workflow_id, run.id),
            keys.JOB_MAP_TTL_S, DATA_TTL_S, len(job_docs), len(contexts or {}), len(timeline),
            lease.token if lease is not None else "",
            "1" if release and lease is not None else "",
            len(audit_args), *audit_args, *job_docs, *(contexts or {}).values(),
            *[dumps(e.to_json()) for e in timeline]]

        async def write(_key: str = "", _token: str = "") -> tuple[Any, bool]:
            with redis_errors(f"save run {run.id}"):
                saved = await self._save(keys=save_keys, args=args)
            return saved, bool(int(saved))

        if release and lease is not None:
            saved = await lease.release_with(write)
        else:
            saved, _ = await write()
        if not int(saved):
            raise LockLost(f"save run {run.id}: its lock is no longer this holder's")
        if not isinstance(timer_at, EllipsisType):
            self._remember_timer(run.id, None if timer_at is None else float(timer_at))

    async def delete_run(self, tenant: str, run_id: str) -> bool:
        """Remove the run and everything kept for it; False when the tenant has no such
        run. An open run should be cancelled first: its jobs are not."""
        run = await self.get_run(tenant, run_id)
        if run is None:
            return False
        idem = keys.idempotency_key(tenant, run.idempotency_key) if run.idempotency_key else ""
        held = ""
        if idem:
            (raw,) = await execute(f"delete run {run_id}", self._pipe().get(idem))
            held = text(raw) if raw is not None else ""
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
        await execute(f"delete run {run_id}", pipe)
        self._timers.pop(run_id, None)
        return True

    # ------------------------------------------------------------------ runs: reads

    async def load(self, run_id: str
                   ) -> tuple[WorkflowRun, Workflow, list[dict[str, Any]] | None] | None:
        """The run, the definition it started with and its outbox left to carry out (None:
        nothing), in one round trip; None when the run does not exist."""
        status, reply = await self._read_run(run_id, full=True)
        return self._loaded(run_id, reply) if status == "ok" else None

    def _loaded(self, run_id: str, reply: list[Any]
                ) -> tuple[WorkflowRun, Workflow, list[dict[str, Any]] | None] | None:
        run_raw, def_raw, outbox_raw = reply[0], reply[2], reply[3]
        run = WorkflowRun.from_json(json.loads(run_raw))
        wf = stored_definition(def_raw, run.workflow_id)
        if wf is None:
            log.error("run %s has no definition snapshot; it cannot advance", run_id)
            return None
        outbox = json.loads(outbox_raw) if outbox_raw is not None else None
        return run, wf, outbox or None

    async def get_run(self, tenant: str, run_id: str) -> WorkflowRun | None:
        status, reply = await self._read_run(run_id, full=False)
        if status != "ok":
            return None
        run = WorkflowRun.from_json(json.loads(reply[0]))
        return run if run.org_id == tenant else None

    def timer_of(self, run: WorkflowRun) -> float | None:
        """The run's timer (unix s) as this store last read (``load``, ``get_run``) or
        wrote it (``save``); None when it has none or was not read here."""
        return self._timers.get(run.id)

    async def timeline(self, tenant: str, run_id: str) -> list[dict[str, Any]] | None:
        """The run's events, oldest first; None when the tenant has no such run."""
        pipe = self._pipe().get(keys.run_key(run_id)).lrange(keys.timeline_key(run_id), 0, -1)
        run_raw, events = await execute(f"timeline of run {run_id}", pipe)
        if run_raw is None or json.loads(run_raw).get("org_id") != tenant:
            return None
        return [json.loads(e) for e in events]

    async def list_runs(self, tenant: str, *, workflow_id: str = "", status: str = "",
                        limit: int = 50, cursor: str = "",
                        updated_after: float | None = None,
                        updated_before: float | None = None) -> tuple[list[WorkflowRun], str]:
        """A page of the tenant's runs and the next page's cursor: see
        :func:`cordum.workflow.run_listing.list_runs`."""
        return await run_listing.list_runs(
            self._redis, tenant, workflow_id=workflow_id, status=status, limit=limit,
            cursor=cursor, updated_after=updated_after, updated_before=updated_before)

    async def due_timers(self, now: float, limit: int) -> list[tuple[str, str, float]]:
        """(workflow id, run id, fire time) of the timers due at ``now`` (unix s), earliest
        first."""
        (rows,) = await execute("due timers", self._pipe().zrangebyscore(
            keys.TIMERS_KEY, "-inf", now, start=0, num=max(limit, 1), withscores=True))
        return [(*keys.parse_timer_member(text(m)), float(s)) for m, s in rows]

    async def open_runs(self, limit: int) -> list[str]:
        """Ids of pending, running and waiting runs, least recently updated first."""
        (ids,) = await execute("open runs",
                                self._pipe().zrange(keys.OPEN_RUNS_KEY, 0, max(limit, 1) - 1))
        return [text(i) for i in ids]

    # ------------------------------------------------------------------ locks

    @contextlib.asynccontextmanager
    async def locked_run(self, run_id: str, *, wait_s: float = 0, job_id: str = "",
                         max_result_bytes: int = 0) -> AsyncIterator[LockedRun]:
        """The run's lock and ``load`` in one round trip, with a job id also that step
        job's stored end: the lock is taken (:meth:`LockScripts.acquire`) by the script
        that reads the run, renewed every 10 s and released on exit.
        ``LockedRun.loaded`` is None when the run does not exist (and then no lock is
        held).

        Raises :class:`LockBusy` when another holder keeps the lock past ``wait_s`` (one
        attempt at 0) and :class:`LockUnavailable` when Redis fails.
        """
        async def read_locked(token: str) -> tuple[bool, Any]:
            status, reply = await self._read_run(run_id, full=True, job_id=job_id,
                                                 max_result_bytes=max_result_bytes,
                                                 token=token)
            if status == "busy":
                return False, None
            if status != "ok":
                raise _NoRun(run_id)  # the script gave the key back
            return True, reply

        try:
            lease: Lease | None = await self._locks.acquire(
                keys.run_lock_key(run_id), RUN_LOCK_POLICY, wait_s=wait_s,
                attempt=read_locked)
        except _NoRun:
            lease = None
        if lease is None:
            yield LockedRun(None, None, None)
            return
        try:
            loaded = self._loaded(run_id, lease.data)
            job = _job_end(lease.data) if job_id and loaded is not None else None
            yield LockedRun(lease, loaded, job)
        finally:
            await lease.release()

    def reconciler_lock(self, interval_s: float = 10.0) -> TtlHoldLock:
        """The reconciler's lock-hold: one replica ticks per two intervals."""
        return TtlHoldLock(self._redis, keys.RECONCILER_LOCK_KEY, ttl_s=2 * interval_s)

    @property
    def redis(self) -> RedisWorkflowProtocol:
        """The client of this store, for the reconciler's helpers on the same keys."""
        return self._redis

    # ------------------------------------------------------------------ internals

    def _pipe(self) -> Any:
        return read_pipe(self._redis)

    async def _read_run(self, run_id: str, *, full: bool, job_id: str = "",
                        max_result_bytes: int = 0, token: str = "") -> tuple[str, list[Any]]:
        """The script's status and the rest of its reply: "ok", or "none" when the run
        does not exist. With ``token`` the run's lock is taken first (and given back
        when there is no run): "busy" when another holds it."""
        run_keys = [keys.run_key(run_id), keys.TIMERS_KEY, keys.run_definition_key(run_id),
                    keys.outbox_key(run_id), keys.run_lock_key(run_id)]
        if job_id:
            run_keys += [meta_key(job_id), protocol.result_key(job_id),
                         redacted_key(job_id), step_job_key(job_id)]
        args: list[Any] = [run_id, "1" if full else "0", token,
                           int(RUN_LOCK_POLICY.ttl_s * 1000), max_result_bytes, job_id]
        with redis_errors(f"read run {run_id}"):
            reply = await self._read(keys=run_keys, args=args)
        status, rest = text(reply[0]), list(reply[1:])
        if status == "ok":
            score = rest[1]
            self._remember_timer(run_id, float(score) if score is not None else None)
        return status, rest

    def _remember_timer(self, run_id: str, score: float | None) -> None:
        self._timers[run_id] = score
        self._timers.move_to_end(run_id)
        while len(self._timers) > REMEMBERED_TIMERS:
            self._timers.popitem(last=False)


def _job_end(reply: list[Any]) -> StoredJobEnd:
    return StoredJobEnd(fields_of(reply[4] or []), reply[5] or None,
                        StepJobRecord.from_json(reply[6] or None))


@dataclass(frozen=True, slots=True)
class LockedRun:
    """A run read under its lock, taken in the same round trip."""

    lease: Lease | None
    """None when the run does not exist (no lock is held then)."""
    loaded: tuple[WorkflowRun, Workflow, list[dict[str, Any]] | None] | None
    job: StoredJobEnd | None


class LockLost(StoreError):
    """A save refused: the run lock it was made under is no longer the saver's."""


class _NoRun(Exception):  # noqa: N818
    """The run a lock was asked for does not exist (its read gave the key back)."""
