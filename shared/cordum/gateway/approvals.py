"""Human approval of gated jobs: list, approve, reject.

The safety kernel sends a job to APPROVAL_REQUIRED; it waits there, in
``job:index:approval_required`` (the list reads the tenant's own share of it,
``store.jobs.tenant_index_key``), until a person decides. An approval is bound
to what the kernel judged: the exact request (the job hash in
``safety_job_hash``) and the policy snapshot (``safety_snapshot``). Approving
moves the job back to PENDING, rewrites its stored request with the approval
labels and announces it again on ``sys.job.submit``; the engine's approval
fast path (``Engine._decide``) then dispatches it without asking the kernel
again. Rejecting ends the job DENIED with a DLQ entry.

Both decisions run under the job's lock, the one the scheduler takes, so a
decision never crosses a scheduling pass of the same job::

    t=0     API: SET NX cordum:scheduler:job:<id> (TTL 10 s) + read job:meta
    t=0.1   engine: the re-published request arrives, waits for the lock
    t=0.2   API: PENDING + approval fields, job:req rewritten, published, released
    t=0.2   engine: gets the lock, sees PENDING and the approval record: dispatches

A gateway that dies while holding the lock blocks the job for at most the
TTL (10 s); the renewal keeps it while a slow call is still running.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, field_validator

from cordum import protocol, runtime
from cordum.gateway.errors import ApiError
from cordum.gateway.views import json_object, rfc3339
from cordum.scheduler.approval import APPROVED, HASH_FIELD, SNAPSHOT_FIELD
from cordum.scheduler.errorcodes import error_code_enum
from cordum.scheduler.jobhash import APPROVAL_GATE_TOPICS, job_hash, snapshot_base
from cordum.store.errors import InvalidTransition, LockBusy, LockUnavailable, StoreError
from cordum.store.indexes import JobIndexes
from cordum.store.jobs import (
    TERMINAL_STATES,
    JobState,
    decode_labels,
    meta_key,
    now_us,
    tenant_index_key,
)
from cordum.store.locks import JobLocks, LockPolicy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence

    from cordum.bus.publisher import NatsPublisher
    from cordum.gateway.auth import Principal
    from cordum.store.jobs import JobStore
    from cordum.store.locks import Lease

log = logging.getLogger(__name__)

T = TypeVar("T")

REJECTED = "REJECTED"
PENDING = "PENDING"

API_SENDER = "api-gateway"
"""Sender and worker id of what the API publishes about a decided job (Cordum's)."""

FREE_TEXT_MAX_BYTES = 512
"""Cordum bounds an approval's reason and note to 512 bytes."""

GATE_SNAPSHOT = "workflow-gate"
"""Snapshot label of an approved gate job that was gated without one."""

API_LOCK = LockPolicy(ttl_s=10.0, renew_every_s=3.0, acquire_timeout_s=2.0)
"""The job lock as the API holds it: 10 s TTL (Cordum's approval lock), a 2 s wait
when busy. The work under it is a few bounded Redis / NATS / kernel calls."""

DEADLINE_MARGIN_S = 1.0
"""Time kept back from the invocation's end to answer after the locked work."""

MAX_SCAN = 2000
"""Index entries one list request looks at, at most; past that the page ends early
with a cursor, so entries of other tenants cannot make a request unbounded."""


class RetryableConflict(ApiError):
    """409 that may succeed when sent again (the job's lock was busy)."""

    def __init__(self, message: str, code: str, retry_after_s: float) -> None:
        super().__init__(409, message, code,
                         {"Retry-After": str(max(1, math.ceil(retry_after_s)))})

    def body(self) -> dict[str, object]:
        return {**super().body(), "retryable": True}


def invocation_deadline(context: Any) -> float | None:
    """The ``time.monotonic()`` instant by which locked work must be over, from the
    Lambda context (None outside Lambda)."""
    end = runtime.lambda_deadline(context)
    if end is None:
        return None
    return max(time.monotonic(), end - DEADLINE_MARGIN_S)


@contextlib.asynccontextmanager
async def api_job_lock(locks: JobLocks, job_id: str, deadline: float | None,
                       busy_code: str) -> AsyncIterator[Lease]:
    """The job's lock with its meta read in the same round trip (``lease.data``).

    Busy -> 409 ``busy_code`` (retryable); Redis failing -> 503.
    """
    try:
        lease = await locks.acquire(job_id, deadline=deadline, read=meta_key(job_id))
    except LockBusy as exc:
        raise RetryableConflict("job is being changed; retry", busy_code, exc.delay_s) from exc
    except LockUnavailable as exc:
        raise ApiError(503, "store unavailable", "store_unavailable") from exc
    try:
        yield lease
    finally:
        await lease.release()


# ------------------------------------------------------------------ paging


class IndexClientProtocol(Protocol):
    """The part of ``redis.asyncio.Redis`` the list endpoints use."""

    def zrevrangebyscore(self, name: str, max: Any, min: Any, start: int | None = ...,
                         num: int | None = ..., withscores: bool = ...) -> Awaitable[Any]: ...
    def pipeline(self, transaction: bool = ...) -> Any: ...


@dataclass(frozen=True, slots=True)
class Position:
    """A place in a sorted set: its score, and the member for equal scores."""

    score: int
    member: str = ""
    inclusive: bool = False
    """True for a bare number (Cordum's integer cursor: score and below)."""

    def encode(self) -> str:
        return f"{self.score}:{self.member}"

    def passed(self, score: int, member: str) -> bool:
        """Whether an entry at (score, member) was on an earlier page."""
        if self.inclusive or score != self.score:
            return False
        # Newest first: equal scores come in descending member order.
        return member >= self.member


def parse_cursor(raw: str) -> Position | None:
    """``"<score>:<member>"`` (what this API hands out) or ``"<score>"``; "" for the start."""
    if not raw:
        return None
    score, sep, member = raw.partition(":")
    try:
        value = int(score)
    except ValueError:
        raise ApiError(400, "cursor is invalid", "invalid_request") from None
    return Position(value, member, inclusive=not sep)


Row = tuple[str, int]
"""A sorted-set member and its score (µs)."""


async def page_newest_first(
    redis: IndexClientProtocol,
    key: str,
    cursor: Position | None,
    limit: int,
    views: Callable[[Sequence[Row]], Awaitable[Sequence[T | None]]],
) -> tuple[list[T], str | None]:
    """One page of ``key``, newest first, of the entries ``views`` turns into items.

    ``views`` answers one item or None (not shown: another tenant's, gone, ...)
    per row. The cursor is the position of the last entry looked at; it is None
    when the index has nothing further.
    """
    top: int | str = cursor.score if cursor else "+inf"
    batch = limit + 10  # a few more: some entries are usually filtered out
    items: list[T] = []
    offset = scanned = 0
    last: Position | None = None
    while True:
        try:
            raw = await redis.zrevrangebyscore(key, top, "-inf", start=offset, num=batch,
                                               withscores=True)
        except Exception as exc:
            raise ApiError(503, "store unavailable", "store_unavailable") from exc
        offset += len(raw)
        rows = [(_text(m), int(s)) for m, s in raw]
        if cursor is not None:
            rows = [r for r in rows if not cursor.passed(r[1], r[0])]
        found = await views(rows)
        for i, ((member, score), item) in enumerate(zip(rows, found, strict=True)):
            last = Position(score, member)
            scanned += 1
            if item is not None:
                items.append(item)
            if len(items) == limit:
                more = i < len(rows) - 1 or len(raw) == batch
                return items, last.encode() if more else None
        if len(raw) < batch:
            return items, None
        if scanned >= MAX_SCAN and last is not None:
            return items, last.encode()


async def read_pipeline(redis: IndexClientProtocol,
                        build: Callable[[Any], object]) -> list[Any]:
    """Run the reads ``build`` queues on one pipeline (one round trip)."""
    try:
        pipe = redis.pipeline(transaction=False)
        build(pipe)
        return list(await pipe.execute())
    except Exception as exc:
        raise ApiError(503, "store unavailable", "store_unavailable") from exc


# ------------------------------------------------------------------ views


class ApprovalDecisionRequest(BaseModel):
    """Body of approve and reject: a reason is required, a note is optional."""

    model_config = ConfigDict(extra="ignore")

    reason: str
    note: str = ""

    @field_validator("reason")
    @classmethod
    def _reason(cls, value: str) -> str:
        value = bound_free_text(value)
        if not value:
            raise ValueError("must not be empty")
        return value

    @field_validator("note")
    @classmethod
    def _note(cls, value: str) -> str:
        return bound_free_text(value)


def bound_free_text(value: str) -> str:
    """Trimmed, and cut to ``FREE_TEXT_MAX_BYTES`` of UTF-8 on a character boundary."""
    data = value.strip().encode()[:FREE_TEXT_MAX_BYTES]
    return data.decode(errors="ignore").strip()


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)


def decision_of(meta: Mapping[str, str]) -> str:
    """PENDING while the job waits in APPROVAL_REQUIRED, else the recorded decision."""
    status = meta.get("approval_status", "")
    if meta.get("state") == JobState.APPROVAL_REQUIRED or status not in (APPROVED, REJECTED):
        return PENDING
    return status


APPROVAL_ITEM_FIELDS = ("tenant", "state", "topic", "updated_at", "approval_status",
                        "safety_snapshot", "safety_rule_id", "safety_reason",
                        "safety_constraints", "safety_checked_at", "approval_decided_at",
                        "approved_by", "safety_decision")
"""The meta fields :func:`approval_item` reads: all a list page fetches of a job."""


def approval_item(job_id: str, meta: Mapping[str, str], gated_at_us: int) -> dict[str, Any]:
    """An ApprovalItem (gateway-api.md), plus the kernel's verdict as ``safety_decision``."""
    decision = decision_of(meta)
    decided = decision != PENDING
    return {
        "job": {
            "id": job_id,
            "state": meta.get("state", ""),
            "topic": meta.get("topic", ""),
            "tenant": meta.get("tenant", ""),
            "updated_at": rfc3339(meta.get("updated_at") or str(gated_at_us)),
        },
        "decision": decision,
        "policy_snapshot": meta.get("safety_snapshot") or None,
        "policy_rule_id": meta.get("safety_rule_id") or None,
        "policy_reason": meta.get("safety_reason") or None,
        "constraints": json_object(meta.get("safety_constraints", "")),
        "approval_required": True,
        "requested_at": rfc3339(meta.get("safety_checked_at") or str(gated_at_us)),
        "decided_at": rfc3339(meta.get("approval_decided_at")) if decided else None,
        "decided_by": (meta.get("approved_by") or None) if decided else None,
        "safety_decision": meta.get("safety_decision", ""),
    }


# ------------------------------------------------------------------ kernel


class SnapshotSource(Protocol):
    """Where the policy snapshot currently in force comes from."""

    async def current(self) -> str | None:
        """The kernel's current snapshot; None when it cannot be asked."""
        ...


class KernelSnapshots:
    """``ListSnapshots`` of the safety kernel (its first entry is the one in force).

    A channel per call: approvals are rare, and a channel kept across frozen
    Lambda invocations would have to be checked before every use anyway.
    """

    def __init__(self, addr: str, timeout_s: float) -> None:
        from cordum.safety.tls import client_tls_from_env

        self._addr = addr
        self._timeout_s = timeout_s
        self._tls = client_tls_from_env()  # the kernel's transport, as every client

    async def current(self) -> str | None:
        from cordum.agent.v1 import safety_pb2, safety_pb2_grpc

        try:
            async with self._tls.channel(self._addr) as channel:
                stub = safety_pb2_grpc.SafetyKernelStub(channel)
                resp = await stub.ListSnapshots(safety_pb2.ListSnapshotsRequest(),
                                                timeout=self._timeout_s)
        except Exception as exc:  # unreachable, deadline, any RPC error
            log.warning("safety kernel %s: ListSnapshots failed: %s", self._addr, exc)
            return None
        snapshots = [s.strip() for s in resp.snapshots if s.strip()]
        return snapshots[0] if snapshots else None


# ------------------------------------------------------------------ service


def _conflict(message: str, code: str) -> ApiError:
    return ApiError(409, message, code)


class ApprovalService:
    def __init__(self, store: JobStore, redis: Any, publisher: NatsPublisher,
                 snapshots: SnapshotSource, locks: JobLocks | None = None) -> None:
        self._store = store
        self._redis = redis
        self._indexes = JobIndexes(redis)
        self._publisher = publisher
        self._snapshots = snapshots
        self._locks = locks or JobLocks(redis, API_LOCK)

    async def list(self, who: Principal, limit: int, cursor: str) -> dict[str, Any]:
        """The caller's tenant's jobs waiting for approval, newest first.

        Reads the tenant's own index and only the meta fields an item shows, so a
        page costs the same whatever other tenants store.
        """

        async def views(rows: Sequence[Row]) -> list[dict[str, Any] | None]:
            metas = await read_pipeline(self._redis, lambda p: [
                p.hmget(meta_key(job_id), *APPROVAL_ITEM_FIELDS) for job_id, _ in rows])
            out: list[dict[str, Any] | None] = []
            for (job_id, score), values in zip(rows, metas, strict=True):
                meta = {name: _text(v) for name, v in
                        zip(APPROVAL_ITEM_FIELDS, values, strict=True) if v is not None}
                waiting = meta.get("state") == JobState.APPROVAL_REQUIRED
                mine = meta.get("tenant") == who.tenant
                out.append(approval_item(job_id, meta, score) if waiting and mine else None)
            return out

        items, next_cursor = await page_newest_first(
            self._redis, tenant_index_key(who.tenant, JobState.APPROVAL_REQUIRED),
            parse_cursor(cursor), limit, views)
        return {"items": items, "next_cursor": next_cursor}

    async def approve(self, who: Principal, job_id: str, body: ApprovalDecisionRequest,
                      deadline: float | None = None) -> dict[str, Any]:
        async with api_job_lock(self._locks, job_id, deadline,
                                "approval_retryable_lock") as lease:
            meta = self._owned(who, lease.data)
            state = meta.get("state", "")
            if state != JobState.APPROVAL_REQUIRED:
                if meta.get("approval_status") == APPROVED:
                    return self._repeat(job_id, meta, "already_approved")
                raise self._not_awaiting(state, meta, REJECTED)
            self._not_self(who, meta, "self-approval not permitted")
            self._gated(meta)
            req = await self._request(job_id)
            stored_hash = meta.get("safety_job_hash", "")
            if not stored_hash:
                raise _conflict("approval job hash unavailable", "approval_stale_request")
            if job_hash(req) != stored_hash:
                raise _conflict("the job request changed since it was gated; resubmit",
                                "approval_stale_request")
            snapshot = await self._approved_snapshot(req.topic, meta)
            return await self._grant(who, job_id, meta, req, body, snapshot, lease)

    async def reject(self, who: Principal, job_id: str, body: ApprovalDecisionRequest,
                     deadline: float | None = None) -> dict[str, Any]:
        async with api_job_lock(self._locks, job_id, deadline,
                                "approval_retryable_lock") as lease:
            meta = self._owned(who, lease.data)
            state = meta.get("state", "")
            if state != JobState.APPROVAL_REQUIRED:
                if meta.get("approval_status") == REJECTED:
                    return self._repeat(job_id, meta, "already_rejected")
                raise self._not_awaiting(state, meta, APPROVED)
            self._not_self(who, meta, "self-rejection not permitted")
            self._gated(meta)
            return await self._deny(who, job_id, meta, body, lease)

    # -------------------------------------------------------------- checks

    @staticmethod
    def _owned(who: Principal, meta: dict[str, str] | None) -> dict[str, str]:
        if not meta:
            raise ApiError(404, "job not found")
        if meta.get("tenant", "") != who.tenant:
            raise ApiError(403, "tenant access denied")
        return meta

    @staticmethod
    def _repeat(job_id: str, meta: Mapping[str, str], status: str) -> dict[str, Any]:
        return {"job_id": job_id, "trace_id": meta.get("trace_id", ""), "status": status,
                "decided_by": meta.get("approved_by", ""),
                "decided_at": rfc3339(meta.get("approval_decided_at"))}

    @staticmethod
    def _not_awaiting(state: str, meta: Mapping[str, str], other: str) -> ApiError:
        """Why a job that is not in APPROVAL_REQUIRED cannot be decided now."""
        if meta.get("approval_status") == other:
            return _conflict("approval already resolved", "approval_already_resolved")
        if state in TERMINAL_STATES:
            return _conflict(f"job already ended ({state}); approval no longer valid",
                             "approval_terminal_run")
        return _conflict(f"job not awaiting approval (state={state or 'none'})",
                         "approval_not_actionable")

    @staticmethod
    def _not_self(who: Principal, meta: Mapping[str, str], message: str) -> None:
        # Separation of duties: whoever submitted the job cannot decide about it.
        # The gateway names every key (principal_id, else key:<key id>); a caller
        # without a name could be anyone, the submitter included.
        if not who.principal_id or who.principal_id == meta.get("principal", ""):
            raise ApiError(403, message, "self_approval_denied")

    @staticmethod
    def _gated(meta: Mapping[str, str]) -> None:
        """The engine's fast path honours an approval only when the kernel asked for one."""
        if not (meta.get("safety_decision") == "REQUIRE_APPROVAL"
                or meta.get("safety_approval_required") == "true"):
            raise _conflict("job not awaiting approval (no approval verdict)",
                            "approval_not_actionable")

    async def _request(self, job_id: str) -> protocol.JobRequest:
        try:
            req = await self._indexes.get_request(job_id)
        except StoreError as exc:
            raise ApiError(503, "store unavailable", "store_unavailable") from exc
        if req is None:
            raise ApiError(404, "job request not found")
        return req

    async def _approved_snapshot(self, topic: str, meta: Mapping[str, str]) -> str:
        """The snapshot the approval is bound to; 409 when the policy moved on since."""
        stored = meta.get("safety_snapshot", "").strip()
        if topic in APPROVAL_GATE_TOPICS:
            return stored or GATE_SNAPSHOT
        if not stored:
            raise _conflict("approval policy snapshot unavailable", "approval_stale_snapshot")
        current = await self._snapshots.current()
        if current is None:
            # The engine compares the approval with the job's own snapshot anyway;
            # only the drift check is lost while the kernel cannot be asked.
            log.warning("approval of a %s job: kernel snapshot unknown, drift not checked",
                        topic)
            return stored
        if snapshot_base(current) != snapshot_base(stored):
            raise _conflict(f"policy changed since the job was gated (was "
                            f"{snapshot_base(stored)}, now {snapshot_base(current)}); "
                            "resubmit", "approval_stale_snapshot")
        return stored

    # -------------------------------------------------------------- decisions

    @staticmethod
    def _record(who: Principal, body: ApprovalDecisionRequest, status: str) -> dict[str, str]:
        return {
            "approval_status": status,
            "approved_by": who.principal_id,  # never empty: _not_self refused that
            "approval_reason": body.reason,
            "approval_note": body.note,
            "approval_decided_at": str(now_us()),
        }

    async def _transition(self, job_id: str, state: JobState, fields: Mapping[str, str],
                          lease: Lease, dlq: Mapping[str, Any] | None = None) -> None:
        if lease.lost:  # another holder may own the job now: write nothing
            raise RetryableConflict("job lock lost; retry", "approval_retryable_lock", 1.0)
        try:
            result = await self._store.transition(
                job_id, [state], only_from=(JobState.APPROVAL_REQUIRED,), fields=fields,
                dlq=dlq)
        except InvalidTransition as exc:  # the table allows both moves: not expected
            raise _conflict(str(exc), "approval_not_actionable") from exc
        except StoreError as exc:
            raise ApiError(503, "store unavailable", "store_unavailable") from exc
        if not result.applied:
            raise _conflict(f"job not awaiting approval (state={result.previous or 'none'})",
                            "approval_not_actionable")

    async def _grant(self, who: Principal, job_id: str, meta: Mapping[str, str],
                     req: protocol.JobRequest, body: ApprovalDecisionRequest, snapshot: str,
                     lease: Lease) -> dict[str, Any]:
        """PENDING with the approval record first, then the request with its approval
        labels, then the publish.

        The record (status, approved snapshot and job hash, in the meta under the
        job lock) is what the engine honours; the labels only tell workers. A
        failed request write undoes the record; an approved job not yet published
        is dispatched by the replayer.
        """
        from google.protobuf import json_format

        approval_labels = {
            "approval_granted": "true",
            "approval_snapshot": snapshot,
            "approval_reason": body.reason,
            "cordum.bus_msg_id": f"approval:{job_id}",
        }
        if body.note:
            approval_labels["approval_note"] = body.note
        # Only the request's own labels: req.meta.labels count in the job hash.
        req.labels.update(approval_labels)
        labels = {**decode_labels(meta), **approval_labels}
        fields = {**self._record(who, body, APPROVED),
                  SNAPSHOT_FIELD: snapshot, HASH_FIELD: meta.get("safety_job_hash", ""),
                  "labels": json.dumps(labels, separators=(",", ":"))}
        await self._transition(job_id, JobState.PENDING, fields, lease)
        try:
            await self._store.put_request(job_id, json_format.MessageToJson(req, indent=None))
        except StoreError as exc:
            await self._undo_grant(job_id, meta)
            raise ApiError(503, "store unavailable", "store_unavailable") from exc
        trace_id = meta.get("trace_id") or job_id
        packet = protocol.packet(trace_id=trace_id, sender_id=protocol.SENDER_GATEWAY,
                                 job_request=req)
        try:
            await self._publisher.publish_durable(protocol.SUBJECT_SUBMIT, packet,
                                                  msg_id=f"approval:{job_id}")
        except Exception as exc:
            # Recorded and stored: the replayer re-drives the PENDING job from job:req.
            log.error("approve %s: publish failed, the replayer will dispatch it: %s",
                      job_id, exc)
        log.info("job %s approved by %s", job_id, fields["approved_by"])
        return {"job_id": job_id, "trace_id": trace_id}

    async def _undo_grant(self, job_id: str, meta: Mapping[str, str]) -> None:
        fields = {"approval_status": "", "approved_by": "", "approval_reason": "",
                  "approval_note": "", "approval_decided_at": "",
                  SNAPSHOT_FIELD: "", HASH_FIELD: "", "labels": meta.get("labels", "{}")}
        try:
            await self._store.transition(job_id, [JobState.APPROVAL_REQUIRED],
                                         only_from=(JobState.PENDING,), fields=fields)
        except StoreError as exc:
            # Left PENDING with its unapproved request: a replay gates it again.
            log.error("approve %s: could not return the job to APPROVAL_REQUIRED: %s",
                      job_id, exc)

    async def _deny(self, who: Principal, job_id: str, meta: Mapping[str, str],
                    body: ApprovalDecisionRequest, lease: Lease) -> dict[str, Any]:
        topic, tenant = meta.get("topic", ""), meta.get("tenant", "")
        fields = {**self._record(who, body, REJECTED), "failure_reason": body.reason}
        dlq = {"topic": topic, "tenant": tenant, "status": JobState.DENIED.value,
               "reason": body.reason, "reason_code": "approval_rejected"}
        await self._transition(job_id, JobState.DENIED, fields, lease, dlq)
        result = protocol.JobResult(
            job_id=job_id, status=protocol.JobStatus.JOB_STATUS_DENIED, worker_id=API_SENDER,
            error_code="approval_rejected", error_code_enum=error_code_enum("approval_rejected"),
            error_message=body.reason or "approval rejected")
        packet = protocol.packet(trace_id=meta.get("trace_id") or job_id, sender_id=API_SENDER,
                                 job_result=result)
        try:
            # Not a stream subject: a plain publish, as the engine sends its DLQ notices.
            await self._publisher.publish(protocol.SUBJECT_DLQ, packet)
            if topic == "job.cordum.approval-gate":
                # The workflow waiting on the gate learns the outcome from the result path.
                await self._publisher.publish_durable(protocol.SUBJECT_RESULT, packet,
                                                      msg_id=f"approval-reject:{job_id}")
        except Exception as exc:
            # DENIED and its DLQ entry are stored; only the notice is lost.
            log.error("reject %s: publish failed: %s", job_id, exc)
        log.info("job %s rejected by %s", job_id, fields["approved_by"])
        return {"job_id": job_id}
