"""Job submission, lookup and cancel behind the HTTP API.

A submit is checked against the policy (``submit_policy``) before anything is
announced, and may carry an idempotency key (``cordum.store.idempotency``): a
repeat of the same request under the same key answers the first job, a
different request under it is a 409.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from cordum import protocol
from cordum.gateway.core.errors import Conflict, Forbidden, NotFound, PolicyDenied
from cordum.gateway.core.submission import announce, discard
from cordum.gateway.jobs import queries, submit_policy, submit_reads
from cordum.gateway.jobs.submission import build_request, context_json, new_job
from cordum.gateway.jobs.submit_policy import DENIED_CODE, SubmitOutcome
from cordum.metrics import METRICS
from cordum.store.audit_trail import AuditTrail, governance, process_hmac_key
from cordum.store.errors import StoreError
from cordum.store.idempotency import IdempotencyKeys
from cordum.store.jobs import JobState

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from cordum.bus.publisher import NatsPublisher
    from cordum.gateway.core.auth import Principal
    from cordum.gateway.jobs.models import SubmitJobRequest
    from cordum.gateway.jobs.submit_policy import SubmitDecision, SubmitPolicy
    from cordum.store.audit import AuditEvent
    from cordum.store.jobs import AuditParts, JobStore, NewJob

log = logging.getLogger(__name__)

APPROVAL_REQUIRED_STATUS = "approval_required"
SAFETY_DENIED_ENUM = 300
"""CAP ErrorCode SAFETY_DENIED, sent with a denied job's DLQ notice."""


@dataclass(frozen=True, slots=True)
class Submitted:
    job_id: str
    trace_id: str
    status: str = ""
    """``approval_required`` when the job waits for a human, else ""."""
    reason: str = ""
    """Why it waits (the policy's reason), with ``status``."""

    @property
    def approval_required(self) -> bool:
        return self.status == APPROVAL_REQUIRED_STATUS


@dataclass(frozen=True, slots=True)
class Origin:
    """The job a submitted job derives from (a remediation of it): the new job joins
    its trace, names it as parent, and carries labels only the platform writes."""

    parent_job_id: str
    trace_id: str = ""
    """The parent's trace ("": a trace of its own)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Platform labels (reserved names a caller may not send), set after validation."""


class JobService:
    """Submit, look up and cancel jobs.

    ``policy`` and ``redis`` (for idempotency keys) default to the process's own:
    the kernel and fail mode from the settings, the cached Redis client.
    """

    def __init__(self, store: JobStore, publisher: NatsPublisher, *,
                 policy: SubmitPolicy | None = None, redis: Any = None) -> None:
        from cordum import runtime
        from cordum.config import settings

        self._store = store
        self._publisher = publisher
        redis = runtime.redis_client() if redis is None else redis
        self._redis = redis
        self._idempotency = IdempotencyKeys(redis)
        self._audit = AuditTrail(redis, process_hmac_key())
        self._policy = submit_policy.from_settings(settings(), redis) if policy is None \
            else policy

    async def submit(self, principal: Principal, body: SubmitJobRequest, *,
                     idempotency_key: str = "", origin: Origin | None = None,
                     read: tuple[submit_reads.Plan, Sequence[Any] | None] | None = None,
                     ) -> Submitted:
        """Accept a job: its input checked against the topic's schema, its effective
        config attached, the policy asked, then stored (and announced unless gated).

        ``idempotency_key`` (the header) wins over the body's ``idempotency_key``.
        ``read`` is what the route already read of the submit's context
        (:mod:`cordum.gateway.jobs.submit_reads`): its plan and the values (None when
        not read); without it the context is read here.
        """
        if body.tenant_id and body.tenant_id != principal.tenant:
            raise Forbidden("tenant access denied")
        if body.principal_id and body.principal_id != principal.principal_id:
            # Only the key says who submits: the approval check compares with this.
            raise Forbidden("principal_id does not match the API key's principal",
                            "principal_mismatch")
        tenant = principal.tenant
        planned, values = read if read is not None else (
            submit_reads.plan(tenant, {"topic": body.topic, "team_id": body.team_id}), None)
        context = await submit_reads.resolve(self._redis, planned, body, values)
        await submit_reads.check_input(self._redis, tenant, body, context)
        key = idempotency_key or body.idempotency_key
        if key != body.idempotency_key:
            body = body.model_copy(update={"idempotency_key": key})
        job_id = protocol.new_id()
        trace_id = origin.trace_id if origin is not None and origin.trace_id \
            else protocol.new_id()
        claim = ""
        if key:
            claim = IdempotencyKeys.key(tenant, key)
            fingerprint = body.fingerprint()
            if origin is not None:  # the same body derived from another job is another act
                fingerprint = hashlib.sha256(f"{fingerprint}|{origin.parent_job_id}|"
                                             f"{sorted(origin.labels.items())}".encode()
                                             ).hexdigest()
            earlier = await self._idempotency.claim(claim, job_id, trace_id, fingerprint)
            if earlier is not None:
                if earlier["request_hash"] and earlier["request_hash"] != fingerprint:
                    raise Conflict("idempotency key reused with a different request",
                                   "IDEMPOTENCY_CONFLICT")
                METRICS.count("submit_idempotent_repeat")
                return Submitted(earlier["job_id"], earlier["trace_id"])
        try:
            return await self._accept(principal, body, job_id, trace_id, claim, origin,
                                      context)
        except PolicyDenied:
            raise  # the job exists (DENIED): the key keeps naming it
        except BaseException:
            if claim:
                await self._idempotency.release(claim)
            raise

    async def _accept(self, principal: Principal, body: SubmitJobRequest, job_id: str,
                      trace_id: str, claim: str, origin: Origin | None,
                      context: submit_reads.SubmitContext) -> Submitted:
        tenant = principal.tenant
        req = build_request(body, job_id, tenant, principal.principal_id)
        submit_reads.attach(req, context)
        if origin is not None:
            req.parent_job_id = origin.parent_job_id
            req.labels.update(origin.labels)
            req.meta.labels.update(origin.labels)
        payload = context_json(body, tenant)  # asked of the policy, then stored
        decision = await self._policy.decide(req, tenant, payload=payload.encode())
        verdict = decision.verdict
        if decision.outcome is SubmitOutcome.THROTTLE:
            # Nothing is stored: the event is the act's only record, sampled (one per key
            # and topic a minute, 60 a minute in the tenant's chain), as a caller may
            # repeat it at will.
            await self._record(self._submit_event("job.submit.throttled", principal, body,
                                                  job_id, verdict.reason, decision),
                               f"{principal.key_id}|{body.topic}")
            raise submit_policy.throttled(verdict.reason)
        if decision.outcome is SubmitOutcome.UNAVAILABLE:
            log.warning("submit %s refused: %s", job_id, verdict.reason)
            raise submit_policy.unavailable(verdict.reason)
        if decision.outcome is SubmitOutcome.DENY:
            await self._deny(principal, body, req, trace_id, decision, claim)
        if decision.outcome is SubmitOutcome.APPROVAL:
            job = new_job(body, req, trace_id, JobState.APPROVAL_REQUIRED, dict(decision.fields),
                          payload)
            await self._create(job, audit=self._audit.script_parts(self._submit_event(
                "job.submit.gated", principal, body, job_id, verdict.reason, decision)))
            if claim:
                await self._idempotency.keep(claim)
            # Not announced: the approval endpoint publishes it once a human said yes.
            return Submitted(job_id, trace_id, APPROVAL_REQUIRED_STATUS,
                             verdict.reason or "approval required")
        job = new_job(body, req, trace_id, context=payload)
        await self._create(job)
        if not claim:
            await self._announce(job, req)
            return Submitted(job_id, trace_id)
        # The key's TTL is extended while NATS acks the publish: no added latency.
        announced, _ = await asyncio.gather(self._announce(job, req),
                                            self._idempotency.keep(claim),
                                            return_exceptions=True)
        if isinstance(announced, BaseException):
            raise announced
        return Submitted(job_id, trace_id)

    async def _create(self, job: NewJob, *, audit: AuditParts | None = None) -> None:
        try:
            await self._store.create(job, audit=audit)
        except StoreError as exc:
            log.error("submit %s: store unavailable: %s", job.job_id, exc)
            raise

    async def _announce(self, job: NewJob, req: protocol.JobRequest) -> None:
        await announce(self._store, self._publisher, job, req)

    async def _deny(self, principal: Principal, body: SubmitJobRequest,
                    req: protocol.JobRequest, trace_id: str, decision: SubmitDecision,
                    claim: str) -> NoReturn:
        """Store the job DENIED with its DLQ entry, as the scheduler would, then 403."""
        job_id = req.job_id
        reason = decision.verdict.reason or "denied by policy"
        job = new_job(body, req, trace_id)
        await self._create(job)
        try:
            await self._store.transition(
                job_id, [JobState.DENIED], only_from=(JobState.PENDING,),
                fields={**decision.fields, "failure_reason": reason},
                dlq={"topic": body.topic, "status": JobState.DENIED.value, "reason": reason,
                     "reason_code": DENIED_CODE},
                audit=self._audit.script_parts(self._submit_event(
                    "job.submit.denied", principal, body, job_id, reason, decision)))
        except StoreError as exc:
            log.error("submit %s: denial not stored: %s", job_id, exc)
            await self._discard(job)
            raise
        if claim:
            await self._idempotency.keep(claim)
        METRICS.count("safety_denied", topic=body.topic)
        await self._notify_dlq(job_id, reason)
        raise PolicyDenied(reason, DENIED_CODE, job_id, trace_id)

    @staticmethod
    def _submit_event(type_: str, principal: Principal, body: SubmitJobRequest, job_id: str,
                      reason: str, decision: SubmitDecision) -> AuditEvent:
        """The event of a submit the policy did not simply allow."""
        verdict = decision.verdict
        return governance(type_, principal.tenant, principal.principal_id, principal.key_id,
                          job_id=job_id, reason=reason or None,
                          snapshot=verdict.policy_snapshot or None,
                          extra={"topic": body.topic, "rule_id": verdict.rule_id})

    async def _record(self, event: AuditEvent, bucket: str) -> None:
        """Append an event of an act that writes nothing else, sampled by ``bucket``.
        Redis down: the act's own answer stands (it stored nothing), and the lost event
        is logged."""
        try:
            await self._audit.record_sampled(event, bucket)
        except StoreError as exc:
            log.error("audit: %s event of job %s not recorded: %s", event.type, event.job_id,
                      exc)

    async def _notify_dlq(self, job_id: str, reason: str) -> None:
        """The sys.job.dlq notice the scheduler sends with a DLQ entry (best effort)."""
        res = protocol.JobResult(job_id=job_id, status=protocol.JobStatus.JOB_STATUS_DENIED,
                                 error_code=DENIED_CODE, error_code_enum=SAFETY_DENIED_ENUM,
                                 error_message=reason, worker_id=protocol.SENDER_GATEWAY)
        packet = protocol.packet(trace_id=job_id, sender_id=protocol.SENDER_GATEWAY,
                                 job_result=res)
        try:
            await self._publisher.publish(protocol.SUBJECT_DLQ, packet)
        except Exception as exc:
            # The DLQ entry is in Redis already; only the notification is lost.
            log.error("publish %s for %s failed: %s", protocol.SUBJECT_DLQ, job_id, exc)

    async def _discard(self, job: NewJob) -> None:
        await discard(self._store, job)

    async def cancel(self, principal: Principal, job_id: str) -> dict[str, Any]:
        """Cancel an open job: CANCELLED in the store first, then the bus is told.

        The worker learns it from ``sys.job.cancel``; the result path sees a
        CANCELLED result from the API (its late real result is then ignored).
        """
        from cordum.store.jobs import OPEN_STATES, TERMINAL_STATES, JobState

        meta = await self._owned_meta(principal, job_id)
        if meta.get("state") in TERMINAL_STATES:
            return {"id": job_id, "state": meta["state"], "reason": "job already terminal"}
        event = governance("job.cancel", principal.tenant, principal.principal_id,
                           principal.key_id, job_id=job_id, reason="cancelled via api",
                           extra={"topic": meta.get("topic", ""),
                                  "state_before": meta.get("state", "")})
        result = await self._store.transition(
            job_id, [JobState.CANCELLED], only_from=OPEN_STATES,
            fields={"failure_reason": "cancelled via api"},
            audit=self._audit.script_parts(event))
        if not result.applied:  # it finished meanwhile
            return {"id": job_id, "state": result.previous, "reason": "job already terminal"}
        trace_id = meta.get("trace_id") or job_id
        cancelled = protocol.JobResult(job_id=job_id,
                                       status=protocol.JobStatus.JOB_STATUS_CANCELLED,
                                       worker_id="api-gateway")
        notice = protocol.JobCancel(job_id=job_id, reason="cancelled via api",
                                    requested_by="api-gateway")
        try:
            await self._publisher.publish_durable(
                protocol.SUBJECT_RESULT,
                protocol.packet(trace_id=trace_id, sender_id="api-gateway",
                                job_result=cancelled), msg_id=f"cancel-result:{job_id}")
            await self._publisher.publish_durable(
                protocol.SUBJECT_CANCEL,
                protocol.packet(trace_id=trace_id, sender_id="api-gateway", job_cancel=notice),
                msg_id=f"cancel:{job_id}")
        except Exception as exc:
            # The job is CANCELLED already; only the worker's notice is late.
            log.error("cancel %s: publish failed: %s", job_id, exc)
        return {"id": job_id, "state": JobState.CANCELLED.value}

    async def _owned_meta(self, principal: Principal, job_id: str) -> dict[str, str]:
        """The job's meta; 404 when unknown, 403 when another tenant's."""
        meta = await self._store.get(job_id)
        if not meta:
            raise NotFound("job not found")
        if meta.get("tenant", "") != principal.tenant:
            raise Forbidden("tenant access denied")
        return meta

    async def get(self, principal: Principal, job_id: str) -> dict[str, Any]:
        from cordum.config import settings

        meta = await self._owned_meta(principal, job_id)
        return await queries.job_view(self._redis, job_id, meta,
                                      output_policy=settings().output_policy_enabled)

