"""Human approval of gated jobs: list, approve, reject.

The safety kernel sends a job to APPROVAL_REQUIRED; it waits there, in
``job:index:approval_required`` (the list reads the tenant's own share of it,
``store.jobs.tenant_index_key``), until a person decides. An approval is bound
to what the kernel judged: the exact request (the job hash in
``safety_job_hash``) and the policy snapshot (``safety_snapshot``), by the one
rule of ``cordum.approval``. Approving moves the job back to PENDING,
rewrites its stored request with the approval labels and announces it again on
``sys.job.submit``; the engine's approval fast path then dispatches it without
asking the kernel again. Rejecting ends the job DENIED with a DLQ entry.

Both decisions run under the job's lock, the one the scheduler takes
(``cordum.gateway.core.locking``), so a decision never crosses a scheduling pass of
the same job.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from cordum import protocol
from cordum.approval import (
    APPROVAL_GATE_TOPICS,
    APPROVED,
    HASH_FIELD,
    REJECTED,
    SNAPSHOT_FIELD,
    STATUS_FIELD,
    approval_binds,
    grant_record,
    is_gated,
    job_hash,
    same_policy,
)
from cordum.gateway.approvals import context, context_reads
from cordum.gateway.approvals.views import (
    APPROVAL_ITEM_FIELDS,
    approval_item,
    caller_may_decide,
    decided,
    self_decision,
)
from cordum.gateway.core.errors import Conflict, Forbidden, NotFound
from cordum.gateway.core.locking import API_LOCK, api_job_lock, lock_lost
from cordum.gateway.core.paging import page_newest_first, parse_cursor
from cordum.scheduler.errorcodes import error_code_enum
from cordum.store.audit_trail import AuditTrail, governance, process_hmac_key
from cordum.store.errors import InvalidTransition, StoreError
from cordum.store.indexes import JobIndexes
from cordum.store.jobs import TERMINAL_STATES, JobState, decode_labels, now_us, tenant_index_key
from cordum.store.locks import JobLocks
from cordum.store.reads import JobReads

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from cordum.bus.publisher import NatsPublisher
    from cordum.gateway.approvals.models import ApprovalDecisionRequest
    from cordum.gateway.core.auth import Principal
    from cordum.safety.snapshots import PolicySnapshots
    from cordum.store.jobs import JobStore
    from cordum.store.locks import Lease
    from cordum.store.reads import RedisReadProtocol, Row

log = logging.getLogger(__name__)

API_SENDER = "api-gateway"
"""Sender and worker id of what the API publishes about a decided job (Cordum's)."""

GATE_SNAPSHOT = "workflow-gate"
"""Snapshot label of an approved gate job that was gated without one."""

LOCK_BUSY = "approval_retryable_lock"
NOT_ACTIONABLE = "approval_not_actionable"
STALE_REQUEST = "approval_stale_request"
STALE_SNAPSHOT = "approval_stale_snapshot"


class ApprovalService:
    def __init__(self, store: JobStore, redis: Any, publisher: NatsPublisher,
                 snapshots: PolicySnapshots, locks: JobLocks | None = None,
                 audit: AuditTrail | None = None) -> None:
        self._store = store
        self._audit = audit or AuditTrail(redis, process_hmac_key())
        self._redis: RedisReadProtocol = redis
        self._reads = JobReads(redis)
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
            metas = await self._reads.metas([job_id for job_id, _ in rows],
                                            APPROVAL_ITEM_FIELDS)
            out: list[dict[str, Any] | None] = []
            for (job_id, score), meta in zip(rows, metas, strict=True):
                waiting = meta.get("state") == JobState.APPROVAL_REQUIRED
                mine = meta.get("tenant") == who.tenant
                out.append({**approval_item(job_id, meta, score), **caller_may_decide(who, meta)}
                           if waiting and mine else None)
            return out

        items, next_cursor = await page_newest_first(
            self._redis, tenant_index_key(who.tenant, JobState.APPROVAL_REQUIRED),
            parse_cursor(cursor), limit, views)
        return {"items": items, "next_cursor": next_cursor}

    async def approve(self, who: Principal, job_id: str, body: ApprovalDecisionRequest,
                      deadline: float | None = None) -> dict[str, Any]:
        async with api_job_lock(self._locks, job_id, deadline, LOCK_BUSY) as lease:
            meta = self._owned(who, lease.data)
            state = meta.get("state", "")
            if state != JobState.APPROVAL_REQUIRED:
                if meta.get(STATUS_FIELD) == APPROVED:
                    return decided(job_id, meta, "already_approved")
                raise self._not_awaiting(state, meta, REJECTED)
            self._not_self(who, meta, "self-approval not permitted")
            self._gated(meta)
            req = await self._request(job_id)
            request_hash = job_hash(req)
            stored_hash = meta.get("safety_job_hash", "")
            if not stored_hash:
                raise Conflict("approval job hash unavailable", STALE_REQUEST)
            if request_hash != stored_hash:
                raise Conflict("the job request changed since it was gated; resubmit",
                               STALE_REQUEST)
            record = grant_record(meta, await self._approved_snapshot(req.topic, meta))
            if not approval_binds({**meta, **record}, req.topic, request_hash):
                # The checks above name the reason; this is the rule the engine applies.
                raise Conflict("the approval would not bind the job's request; resubmit",
                               STALE_REQUEST)
            return await self._grant(who, job_id, meta, req, body, record, lease)

    async def reject(self, who: Principal, job_id: str, body: ApprovalDecisionRequest,
                     deadline: float | None = None) -> dict[str, Any]:
        async with api_job_lock(self._locks, job_id, deadline, LOCK_BUSY) as lease:
            meta = self._owned(who, lease.data)
            state = meta.get("state", "")
            if state != JobState.APPROVAL_REQUIRED:
                if meta.get(STATUS_FIELD) == REJECTED:
                    return decided(job_id, meta, "already_rejected")
                raise self._not_awaiting(state, meta, APPROVED)
            self._not_self(who, meta, "self-rejection not permitted")
            self._gated(meta)
            return await self._deny(who, job_id, meta, body, lease)

    # -------------------------------------------------------------- checks

    async def context(self, who: Principal, job_id: str) -> dict[str, Any]:
        """What an approver needs to decide about a job of the caller's tenant: the
        approval record, why it was gated, what will run, prior approvals of the same
        topic and submitter, blast radius, rollback and time left (a workflow gate's
        stored document, ``kind`` ... ``decision``, at the top). Any job of the tenant
        answers; a missing job and another tenant's answer the same 404.

        Two pipelined round trips at most; every read is bounded, whatever the tenant
        stores (the bounds: ``cordum.gateway.approvals.context_reads``).
        """
        stored = await context_reads.read_job(self._redis, who.tenant, job_id)
        meta = stored.meta
        if not meta or meta.get("tenant", "") != who.tenant:
            raise NotFound("job not found")
        topic, principal = meta.get("topic", ""), meta.get("principal", "")
        gate_topic = topic in APPROVAL_GATE_TOPICS
        candidates = [member for _, member in stored.candidates] if principal else []
        whole = gate_topic and stored.input_size > context_reads.INPUT_PREVIEW_BYTES
        metas, payload = await context_reads.read_more(self._redis, job_id, candidates, whole)
        withheld = context.input_withheld(meta, stored.output_decision)
        preview = context.InputPreview.of(stored.input_size, stored.input_head, withheld)
        gate = context.gate_document(topic, payload if whole else stored.input_head)
        return context.context_document(
            job_id, stored, req=context_reads.parse_request(stored.request), gate=gate,
            preview=preview,
            priors=context_reads.prior_approvals(candidates, metas, who.tenant, topic, principal),
            now=now_us())

    @staticmethod
    def _owned(who: Principal, meta: dict[str, str] | None) -> dict[str, str]:
        if not meta:
            raise NotFound("job not found")
        if meta.get("tenant", "") != who.tenant:
            raise Forbidden("tenant access denied")
        return meta

    @staticmethod
    def _not_awaiting(state: str, meta: Mapping[str, str], other: str) -> Conflict:
        """Why a job that is not in APPROVAL_REQUIRED cannot be decided now."""
        if meta.get(STATUS_FIELD) == other:
            return Conflict("approval already resolved", "approval_already_resolved")
        if state in TERMINAL_STATES:
            return Conflict(f"job already ended ({state}); approval no longer valid",
                            "approval_terminal_run")
        return Conflict(f"job not awaiting approval (state={state or 'none'})", NOT_ACTIONABLE)

    @staticmethod
    def _not_self(who: Principal, meta: Mapping[str, str], message: str) -> None:
        if self_decision(who, meta):
            raise Forbidden(message, "self_approval_denied")

    @staticmethod
    def _gated(meta: Mapping[str, str]) -> None:
        """The engine's fast path honours an approval only when the kernel asked for one."""
        if not is_gated(meta):
            raise Conflict("job not awaiting approval (no approval verdict)", NOT_ACTIONABLE)

    async def _request(self, job_id: str) -> protocol.JobRequest:
        req = await self._indexes.get_request(job_id)
        if req is None:
            raise NotFound("job request not found")
        return req

    async def _approved_snapshot(self, topic: str, meta: Mapping[str, str]) -> str:
        """The snapshot the approval is bound to; 409 when the policy moved on since."""
        stored = meta.get("safety_snapshot", "").strip()
        if topic in APPROVAL_GATE_TOPICS:
            return stored or GATE_SNAPSHOT
        if not stored:
            raise Conflict("approval policy snapshot unavailable", STALE_SNAPSHOT)
        current = await self._snapshots.current()
        if current is None:
            # The engine compares the approval with the job's own snapshot anyway;
            # only the drift check is lost while the kernel cannot be asked.
            log.warning("approval of a %s job: kernel snapshot unknown, drift not checked",
                        topic)
            return stored
        if not same_policy(current, stored):
            raise Conflict(f"policy changed since the job was gated (was "
                           f"{stored}, now {current}); resubmit", STALE_SNAPSHOT)
        return stored

    # -------------------------------------------------------------- decisions

    @staticmethod
    def _record(who: Principal, body: ApprovalDecisionRequest, status: str) -> dict[str, str]:
        return {
            STATUS_FIELD: status,
            "approved_by": who.principal_id,  # never empty: _not_self refused that
            "approval_reason": body.reason,
            "approval_note": body.note,
            "approval_decided_at": str(now_us()),
        }

    def _event(self, who: Principal, job_id: str, meta: Mapping[str, str], kind: str,
                body: ApprovalDecisionRequest, snapshot: str, request_hash: str) -> Any:
        """The audit event of an approval or a rejection: who, why, the job's hash and the
        policy snapshot it was bound to, written by the transition's own script."""
        event = governance(
            f"approval.{kind}", meta.get("tenant", "") or who.tenant, who.principal_id,
            who.key_id, job_id=job_id, reason=body.reason,
            snapshot={"policy_snapshot": snapshot, "job_hash": request_hash},
            extra={"topic": meta.get("topic", ""), "submitted_by": meta.get("principal", ""),
                   **({"note": body.note} if body.note else {})})
        return self._audit.script_parts(event)

    async def _transition(self, job_id: str, state: JobState, fields: Mapping[str, str],
                          lease: Lease, dlq: Mapping[str, Any] | None = None, *,
                          audit: Any = None) -> None:
        if lease.lost:  # another holder may own the job now: write nothing
            raise lock_lost(LOCK_BUSY)
        try:
            result = await self._store.transition(
                job_id, [state], only_from=(JobState.APPROVAL_REQUIRED,), fields=fields,
                dlq=dlq, audit=audit)
        except InvalidTransition as exc:  # the table allows both moves: not expected
            raise Conflict(str(exc), NOT_ACTIONABLE) from exc
        if not result.applied:
            raise Conflict(f"job not awaiting approval (state={result.previous or 'none'})",
                           NOT_ACTIONABLE)

    async def _grant(self, who: Principal, job_id: str, meta: Mapping[str, str],
                     req: protocol.JobRequest, body: ApprovalDecisionRequest,
                     record: Mapping[str, str], lease: Lease) -> dict[str, Any]:
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
            "approval_snapshot": record[SNAPSHOT_FIELD],
            "approval_reason": body.reason,
            "cordum.bus_msg_id": f"approval:{job_id}",
        }
        if body.note:
            approval_labels["approval_note"] = body.note
        # Only the request's own labels: req.meta.labels count in the job hash.
        req.labels.update(approval_labels)
        labels = {**decode_labels(meta), **approval_labels}
        fields = {**self._record(who, body, APPROVED), **record,
                  "labels": json.dumps(labels, separators=(",", ":"))}
        audit = self._event(who, job_id, meta, "approve", body, record[SNAPSHOT_FIELD],
                            record[HASH_FIELD])
        await self._transition(job_id, JobState.PENDING, fields, lease, audit=audit)
        try:
            await self._store.put_request(job_id, json_format.MessageToJson(req, indent=None))
        except StoreError:
            await self._undo_grant(job_id, meta)
            raise
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
        fields = {STATUS_FIELD: "", "approved_by": "", "approval_reason": "",
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
        audit = self._event(who, job_id, meta, "reject", body,
                            meta.get("safety_snapshot", ""), meta.get("safety_job_hash", ""))
        await self._transition(job_id, JobState.DENIED, fields, lease, dlq, audit=audit)
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
