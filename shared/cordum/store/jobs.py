"""The job store: Cordum's job keys on Redis, each write one Lua script (one round trip)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cordum.store.errors import InvalidTransition, StoreError
from cordum.text import as_text

if TYPE_CHECKING:
    from collections.abc import Awaitable, Iterable, Mapping

META_TTL_S = 7 * 24 * 3600
"""An open job's job:meta, job:req and job:events live 7 days from its last write
(a job waiting for approval or a slow worker must not vanish). The transition into a
terminal state sets the job's retention instead (``JobStore.retention_s``, from
CORDUM_JOB_RETENTION_S, default cordum.config.DEFAULT_JOB_RETENTION_S: 3 days)."""
DATA_TTL_S = 24 * 3600
"""ctx:/res: payloads live 24 hours."""
DLQ_TTL_S = 30 * 24 * 3600
"""dlq:entry lives 30 days; dlq:index keeps the newest 10,000 (scores in µs)."""
DLQ_INDEX_KEY = "dlq:index"

_LUA = Path(__file__).parent / "lua"


class JobState(StrEnum):
    PENDING = "PENDING"
    APPROVAL_REQUIRED = "APPROVAL_REQUIRED"
    SCHEDULED = "SCHEDULED"
    DISPATCHED = "DISPATCHED"
    RUNNING = "RUNNING"
    RETRYING = "RETRYING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    DENIED = "DENIED"
    OUTPUT_QUARANTINED = "OUTPUT_QUARANTINED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.TIMEOUT,
        JobState.DENIED,
        JobState.OUTPUT_QUARANTINED,
    }
)

OPEN_STATES = tuple(s for s in JobState if s not in TERMINAL_STATES)
"""Every state a job can still leave (PENDING ... RETRYING)."""

NO_STATE = "-"
"""In ``only_from``: a job that has no state yet."""


class RedisClientProtocol(Protocol):
    """The part of ``redis.asyncio.Redis`` the store uses."""

    def register_script(self, script: str) -> Any: ...
    def hgetall(self, name: str) -> Awaitable[Any]: ...
    def get(self, name: str) -> Awaitable[Any]: ...


def now_us() -> int:
    return time.time_ns() // 1000


def meta_key(job_id: str) -> str:
    return f"job:meta:{job_id}"


def request_key(job_id: str) -> str:
    return f"job:req:{job_id}"


def events_key(job_id: str) -> str:
    return f"job:events:{job_id}"


def index_key(state: str) -> str:
    return f"job:index:{state.lower()}"


def dlq_entry_key(job_id: str) -> str:
    return f"dlq:entry:{job_id}"


def tenant_active_key(tenant: str) -> str:
    return f"job:tenant:active:{tenant}"


TENANT_INDEX_PREFIX = "job:tenant:index:"
"""``job:tenant:index:<tenant>:<state>``: one tenant's share of ``job:index:<state>``,
kept by the same scripts (which spell this prefix) and read by the list endpoints."""


def tenant_index_key(tenant: str, state: str) -> str:
    return f"{TENANT_INDEX_PREFIX}{tenant}:{state.lower()}"


RECENT_KEY = "job:recent"
FAIL_OPEN_COUNTER_KEY = "cordum:scheduler:input_fail_open_total"
"""Jobs dispatched without a safety answer (input fail mode open), Cordum's counter."""
DEADLINE_KEY = "job:deadline"


@dataclass(frozen=True, slots=True)
class NewJob:
    """What the gateway stores for an accepted job."""

    job_id: str
    trace_id: str
    tenant: str
    topic: str
    context: str
    """JSON payload stored at ``ctx:<job_id>``."""
    request: str
    """The JobRequest as protojson, stored at ``job:req:<job_id>``."""
    meta: Mapping[str, str]
    """Extra job:meta fields (labels, principal, ...)."""
    state: JobState = JobState.PENDING


@dataclass(frozen=True, slots=True)
class TransitionResult:
    applied: bool
    previous: str
    """The state before the call ('' when the job had none)."""
    workflow_id: str = ""
    """The job's workflow (saga) id from its meta, '' when it has none."""
    foreign: bool = False
    """Nothing was written: the job's worker of record is not ``worker_of_record``."""


def _flatten(fields: Mapping[str, str] | None) -> list[str]:
    out: list[str] = []
    for k, v in (fields or {}).items():
        out += [k, v]
    return out


AuditParts = tuple[list[str], list[bytes]]
"""A governance act's event as a script passes it on: the chain's keys and the
arguments of ``audit_append`` (``cordum.store.audit_trail.AuditTrail.script_parts``)."""


class JobStore:
    """Reads and writes Cordum's job keys. Every write is one script call."""

    def __init__(self, redis: RedisClientProtocol, *, retention_s: int | None = None) -> None:
        """``retention_s``: how long a terminal job stays; None reads it from the
        process settings (CORDUM_JOB_RETENTION_S or Cordum's JOB_META_TTL*)."""
        if retention_s is None:
            from cordum.config import settings

            retention_s = settings().job_retention_s
        self.retention_s = retention_s
        self._redis = redis
        from cordum.store.audit import with_audit

        # The two scripts a governance act may run: they append its event themselves.
        self._create = redis.register_script(with_audit((_LUA / "create_job.lua").read_text()))
        self._discard = redis.register_script((_LUA / "discard_job.lua").read_text())
        self._transition = redis.register_script(
            with_audit((_LUA / "transition.lua").read_text()))
        self._incr = redis.register_script((_LUA / "incr_attempts.lua").read_text())

    @staticmethod
    def _create_keys(job: NewJob) -> list[str]:
        return [
            meta_key(job.job_id),
            request_key(job.job_id),
            f"ctx:{job.job_id}",
            index_key(job.state),
            RECENT_KEY,
            events_key(job.job_id),
            tenant_active_key(job.tenant),
            f"trace:{job.trace_id}",
            tenant_index_key(job.tenant, job.state),
        ]

    async def create(self, job: NewJob, *, audit: AuditParts | None = None) -> bool:
        """Store payload, request, meta and the first state at once; False if it exists.
        ``audit`` (``AuditTrail.script_parts``): the event of a governance act (a gated
        submit), appended by the same script."""
        meta = {"topic": job.topic, "tenant": job.tenant, "trace_id": job.trace_id, **job.meta}
        audit_keys, audit_args = audit or ([], [])
        args = [job.job_id, now_us(), job.state.value, job.context, job.request, META_TTL_S,
                DATA_TTL_S, len(audit_args), *audit_args, *_flatten(meta)]
        created = await self._call(self._create, [*self._create_keys(job), *audit_keys], args)
        return bool(created)

    async def discard(self, job: NewJob) -> bool:
        """Remove a job created by :meth:`create` that never left its first state."""
        removed = await self._call(self._discard, self._create_keys(job), [job.job_id, job.state])
        return bool(removed)

    async def transition(
        self,
        job_id: str,
        path: Iterable[JobState],
        *,
        only_from: Iterable[str] = (),
        fields: Mapping[str, str] | None = None,
        dlq: Mapping[str, Any] | None = None,
        records: Mapping[str, tuple[str, int]] | None = None,
        unchanged_since: int | None = None,
        worker_of_record: str = "",
        audit: AuditParts | None = None,
    ) -> TransitionResult:
        """Walk ``path`` in one atomic step.

        ``only_from`` names the states the job may be in (``NO_STATE`` for none);
        when it is elsewhere nothing is written and ``applied`` is False. A move
        the state machine forbids raises :class:`InvalidTransition`. ``dlq``, when
        given, is written as the job's DLQ entry by the same script; so are
        ``records`` (key -> (value, TTL s)), only when the move is made.
        ``unchanged_since`` (µs) skips a job whose last transition is later: one that
        left the state a caller scanned and came back to it since.
        ``worker_of_record`` (a result's worker) skips, with ``foreign`` set, a job
        whose meta names another ``worker_id``, or none (a job never dispatched).
        ``audit`` (``AuditTrail.script_parts``): the event of the governance act this
        move is (an approval, a cancel), appended by the same script when the move is
        made, and only then.
        """
        states = [JobState(s).value for s in path]
        # The job ends in the path's last state when the move is made: a terminal one
        # starts its retention, an open one keeps it for META_TTL_S more.
        meta_ttl = self.retention_s if JobState(states[-1]).terminal else META_TTL_S
        audit_keys, audit_args = audit or ([], [])
        keys = [meta_key(job_id), events_key(job_id), RECENT_KEY, DEADLINE_KEY,
                dlq_entry_key(job_id), DLQ_INDEX_KEY, request_key(job_id), *audit_keys,
                *(records or {})]
        entry = json.dumps({"job_id": job_id, **dlq}, separators=(",", ":")) if dlq else ""
        sides: list[Any] = []
        for value, ttl in (records or {}).values():
            sides += [value, ttl]
        args = [job_id, now_us(), meta_ttl, ",".join(states), ",".join(only_from),
                entry, DLQ_TTL_S, "" if unchanged_since is None else unchanged_since,
                len(records or {}), worker_of_record, len(audit_args), *audit_args, *sides,
                *_flatten(fields)]
        status, previous, workflow_id = await self._call(self._transition, keys, args)
        status = as_text(status)
        previous = as_text(previous)
        if status == "invalid":
            raise InvalidTransition(job_id, previous, states[-1])
        return TransitionResult(applied=status == "ok", previous=previous,
                                workflow_id=as_text(workflow_id), foreign=status == "foreign")

    async def put_records(self, job_id: str, fields: Mapping[str, str],
                          records: Mapping[str, tuple[str, int]]) -> None:
        """Meta fields of an existing job and side records (key -> (value, TTL s)),
        in one round trip; the state does not move."""
        try:
            pipe = self._redis.pipeline(transaction=False)  # type: ignore[attr-defined]
            if fields:
                pipe.hset(meta_key(job_id), mapping=dict(fields))
            for key, (value, ttl) in records.items():
                pipe.set(key, value, ex=ttl)
            await pipe.execute()
        except Exception as exc:
            raise StoreError(f"redis: {exc}") from exc

    async def count_fail_open(self) -> None:
        try:
            await self._redis.incr(FAIL_OPEN_COUNTER_KEY)  # type: ignore[attr-defined]
        except Exception as exc:
            raise StoreError(f"redis: {exc}") from exc

    async def incr_attempts(self, job_id: str) -> int:
        """Count one more scheduling attempt of an existing job (0 when unknown)."""
        try:
            return int(await self._incr(keys=[meta_key(job_id)], args=[META_TTL_S]))
        except Exception as exc:
            raise StoreError(f"redis: {exc}") from exc

    async def touch(self, job_id: str, state: str) -> None:
        """Move a job to the young end of its state's index (it was just looked at)."""
        try:
            await self._redis.zadd(index_key(state), {job_id: now_us()},  # type: ignore[attr-defined]
                                   xx=True)
        except Exception as exc:
            raise StoreError(f"redis: {exc}") from exc

    async def put_request(self, job_id: str, request: str) -> None:
        """Store the JobRequest (protojson) the replayer re-drives a job from."""
        try:
            await self._redis.set(request_key(job_id), request,  # type: ignore[attr-defined]
                                  ex=META_TTL_S)
        except Exception as exc:
            raise StoreError(f"redis: {exc}") from exc

    async def count_active(self, tenant: str, *, exclude: str = "") -> int:
        """Non-terminal jobs of ``tenant`` (the first PENDING included), less ``exclude``."""
        try:
            pipe = self._redis.pipeline(transaction=False)  # type: ignore[attr-defined]
            pipe.scard(tenant_active_key(tenant))
            pipe.sismember(tenant_active_key(tenant), exclude)
            total, member = await pipe.execute()
        except Exception as exc:
            raise StoreError(f"redis: {exc}") from exc
        return int(total) - (1 if member else 0)

    async def get(self, job_id: str) -> dict[str, str]:
        """job:meta as a dict of text ({} when unknown)."""
        try:
            raw = await self._redis.hgetall(meta_key(job_id))
        except Exception as exc:
            raise StoreError(f"read job {job_id}: {exc}") from exc
        return {as_text(k): as_text(v) for k, v in raw.items()}

    async def get_payload(self, key: str) -> str | None:
        try:
            value = await self._redis.get(key)
        except Exception as exc:
            raise StoreError(f"read {key}: {exc}") from exc
        return None if value is None else as_text(value)

    async def transition_release(self, job_id: str, path: Iterable[JobState], *,
                                 only_from: Iterable[str], lock_key: str,
                                 token: str) -> tuple[TransitionResult, bool]:
        """A move without fields, DLQ entry or audit event, then the release of the
        job's lock (``lock_key`` while it holds ``token``), in one script
        (``lua/transition_release.lua``): the holder's last write and its unlock cost
        one round trip. Answers the move as :meth:`transition` does and whether the
        lock was deleted; the move's checks are :meth:`transition`'s."""
        script = self.__dict__.get("_transition_release")
        if script is None:
            from cordum.store.audit import with_audit

            body = (_LUA / "transition.lua").read_text()
            text = (_LUA / "transition_release.lua").read_text().replace(
                "-- @transition.lua@", body)
            script = self._transition_release = self._redis.register_script(with_audit(text))
        states = [JobState(s).value for s in path]
        meta_ttl = self.retention_s if JobState(states[-1]).terminal else META_TTL_S
        keys = [meta_key(job_id), events_key(job_id), RECENT_KEY, DEADLINE_KEY,
                dlq_entry_key(job_id), DLQ_INDEX_KEY, request_key(job_id), lock_key]
        args = [job_id, now_us(), meta_ttl, ",".join(states), ",".join(only_from), "",
                DLQ_TTL_S, "", 0, "", 0, token]
        status, previous, workflow_id, released = await self._call(script, keys, args)
        status, previous = as_text(status), as_text(previous)
        if status == "invalid":
            raise InvalidTransition(job_id, previous, states[-1])
        return (TransitionResult(applied=status == "ok", previous=previous,
                                 workflow_id=as_text(workflow_id)), bool(int(released)))

    async def _call(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        try:
            return await script(keys=keys, args=args)
        except Exception as exc:  # connection, timeout, script error: all leave nothing half-done
            raise StoreError(f"redis: {exc}") from exc


def decode_labels(meta: Mapping[str, str]) -> dict[str, str]:
    raw = meta.get("labels")
    if not raw:
        return {}
    try:
        labels = json.loads(raw)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
