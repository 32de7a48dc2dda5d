"""Job submission and lookup behind the HTTP API.

A submit is checked against the policy (``submit_policy``) before anything is
announced, and may carry an idempotency key: a repeat of the same request under
the same key answers the first job, a different request under it is a 409.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from cordum import protocol
from cordum.gateway import queries, submit_policy
from cordum.gateway.errors import ApiError
from cordum.gateway.models import PRIORITIES
from cordum.gateway.submit_policy import DENIED_CODE, Outcome, PolicyDenied
from cordum.gateway.views import job_detail, json_or_text, served_result_ptr
from cordum.metrics import METRICS
from cordum.store.errors import StoreError
from cordum.store.jobs import META_TTL_S, JobState, NewJob

if TYPE_CHECKING:
    from cordum.bus.publisher import NatsPublisher
    from cordum.gateway.auth import Principal
    from cordum.gateway.models import SubmitJobRequest
    from cordum.gateway.submit_policy import SubmitDecision, SubmitPolicy
    from cordum.store.jobs import JobStore

log = logging.getLogger(__name__)

APPROVAL_REQUIRED_STATUS = "approval_required"
SAFETY_DENIED_ENUM = 300
"""CAP ErrorCode SAFETY_DENIED, sent with a denied job's DLQ notice."""
CLAIM_TTL_S = 60
"""An idempotency claim whose job was never stored lives this long. It must outlast
everything between claim and creation (the policy check, the store call): API
Gateway ends a request after 29 s."""


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


class IdempotencyKeys:
    """``job:idempotency:<tenant>:<sha256 of the key>`` -> the job a key created.

    One key's timeline::

        claim    SET NX GET, TTL CLAIM_TTL_S, value {job_id, trace_id, request_hash}
        stored   the job exists -> keep(): the TTL becomes the job meta's (7 days)
        refused  nothing was stored (throttle, 503) -> release(): the key is free again
        crashed  the claim runs out after CLAIM_TTL_S by itself

    A submit that finds a claim answers its ids. Between claim and creation those
    name a job about to exist; if the first submit then fails, its own caller got
    the error and the key is free for the retry.
    """

    def __init__(self, redis: Any) -> None:
        self._redis = redis

    @staticmethod
    def key(tenant: str, idempotency_key: str) -> str:
        digest = hashlib.sha256(idempotency_key.encode()).hexdigest()
        return f"job:idempotency:{tenant}:{digest}"

    async def claim(self, key: str, job_id: str, trace_id: str,
                    request_hash: str) -> dict[str, str] | None:
        """Claim ``key`` for a new job; the earlier claim when there is one (None: ours)."""
        value = json.dumps({"job_id": job_id, "trace_id": trace_id,
                            "request_hash": request_hash}, separators=(",", ":"))
        try:
            earlier = await self._redis.set(key, value, nx=True, get=True, ex=CLAIM_TTL_S)
        except Exception as exc:
            log.error("submit %s: idempotency claim failed: %s", job_id, exc)
            raise ApiError(503, "store unavailable", "store_unavailable") from exc
        if earlier is None:
            return None
        text = earlier.decode() if isinstance(earlier, bytes) else str(earlier)
        try:
            found = json.loads(text)
        except ValueError:
            found = None
        if not isinstance(found, dict):
            return {"job_id": text, "trace_id": "", "request_hash": ""}
        return {k: str(found.get(k) or "") for k in ("job_id", "trace_id", "request_hash")}

    async def keep(self, key: str) -> None:
        """The job is stored: the key lives as long as the job's meta."""
        try:
            await self._redis.expire(key, META_TTL_S)
        except Exception as exc:
            # The key lapses with its claim; a later repeat would make a second job.
            log.warning("idempotency key kept only %ss: %s", CLAIM_TTL_S, exc)

    async def release(self, key: str) -> None:
        """Nothing was stored under the claim: free the key for a retry."""
        try:
            await self._redis.delete(key)
        except Exception as exc:
            log.warning("idempotency claim not released (it runs out in %ss): %s",
                        CLAIM_TTL_S, exc)


def build_request(body: SubmitJobRequest, job_id: str, tenant: str,
                  principal_id: str) -> protocol.JobRequest:
    labels = dict(body.labels)
    labels["_source"] = "api"
    env = {"tenant_id": tenant, "max_input_tokens": str(body.max_input_tokens),
           "max_output_tokens": str(body.max_output_tokens)}
    for name in ("team_id", "project_id", "memory_id", "context_mode"):
        if getattr(body, name):
            env[name] = getattr(body, name)
    req = protocol.JobRequest(
        job_id=job_id,
        topic=body.topic,
        priority=PRIORITIES[body.priority],
        context_ptr=protocol.pointer(protocol.context_key(job_id)),
        adapter_id=body.adapter_id,
        env=env,
        memory_id=body.memory_id,
        tenant_id=tenant,
        principal_id=principal_id,
        labels=labels,
    )
    req.meta.tenant_id = tenant
    req.meta.actor_id = body.actor_id
    req.meta.actor_type = {"human": 1, "service": 2}.get(body.actor_type, 0)
    req.meta.idempotency_key = body.idempotency_key
    req.meta.capability = body.capability
    req.meta.risk_tags.extend(body.risk_tags)
    req.meta.requires.extend(body.requires)
    req.meta.pack_id = body.pack_id
    req.meta.labels.update(labels)
    req.context_hints.max_input_tokens = body.max_input_tokens
    req.context_hints.allow_summarization = body.allow_summarization
    req.context_hints.allow_retrieval = body.allow_retrieval
    req.context_hints.tags.extend(body.tags)
    req.budget.max_input_tokens = body.max_input_tokens
    req.budget.max_output_tokens = body.max_output_tokens
    req.budget.max_total_tokens = body.max_total_tokens
    req.budget.deadline_ms = body.deadline_ms
    return req


def context_json(body: SubmitJobRequest, tenant: str) -> str:
    """The payload stored at ``ctx:<job id>``: what the worker reads."""
    context: dict[str, Any] = {"prompt": body.prompt, "topic": body.topic, "tenant_id": tenant}
    if body.context is not None:
        context["context"] = body.context
    return json.dumps(context, separators=(",", ":"))


def new_job(body: SubmitJobRequest, req: protocol.JobRequest, trace_id: str,
            state: JobState = JobState.PENDING,
            fields: dict[str, str] | None = None) -> NewJob:
    """What the store keeps of an accepted request (payload, request, meta)."""
    from google.protobuf import json_format

    tenant = req.tenant_id
    meta = {
        "labels": json.dumps(dict(req.labels), separators=(",", ":")),
        "priority": str(req.priority),
        "principal": req.principal_id,
        "actor_id": body.actor_id,
        "actor_type": body.actor_type,
        "capability": body.capability,
        "pack_id": body.pack_id,
        "idempotency_key": body.idempotency_key,
        "risk_tags": json.dumps(body.risk_tags),
        "requires": json.dumps(body.requires),
        "team": body.team_id,
        "memory_id": body.memory_id,
        **(fields or {}),
    }
    return NewJob(
        job_id=req.job_id,
        trace_id=trace_id,
        tenant=tenant,
        topic=body.topic,
        context=context_json(body, tenant),
        request=json_format.MessageToJson(req, indent=None),
        meta={k: v for k, v in meta.items() if v},
        state=state,
    )


async def announce(store: JobStore, publisher: NatsPublisher, job: NewJob,
                   req: protocol.JobRequest) -> None:
    """Publish a stored job on sys.job.submit; when the bus refuses it, remove the job
    (never announced, it must not stay half-written) and answer 503."""
    packet = protocol.packet(trace_id=job.trace_id, sender_id=protocol.SENDER_GATEWAY,
                             job_request=req)
    try:
        await publisher.publish_durable(protocol.SUBJECT_SUBMIT, packet, msg_id=job.job_id)
    except Exception as exc:
        log.error("job %s: publish failed: %s", job.job_id, exc)
        await discard(store, job)
        raise ApiError(503, "bus unavailable", "bus_unavailable") from exc


async def discard(store: JobStore, job: NewJob) -> None:
    """Remove a job that was stored and never announced (a failure is only logged)."""
    try:
        await store.discard(job)
    except StoreError as exc:
        log.error("job %s: could not remove the unpublished job: %s", job.job_id, exc)


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
        self._policy = submit_policy.from_settings(settings(), redis) if policy is None \
            else policy

    async def submit(self, principal: Principal, body: SubmitJobRequest, *,
                     idempotency_key: str = "") -> Submitted:
        """Accept a job: policy check, then store (and announce unless it is gated).

        ``idempotency_key`` (the header) wins over the body's ``idempotency_key``.
        """
        if body.tenant_id and body.tenant_id != principal.tenant:
            raise ApiError(403, "tenant access denied")
        if body.principal_id and body.principal_id != principal.principal_id:
            # Only the key says who submits: the approval check compares with this.
            raise ApiError(403, "principal_id does not match the API key's principal",
                           "principal_mismatch")
        tenant = principal.tenant
        key = idempotency_key or body.idempotency_key
        if key != body.idempotency_key:
            body = body.model_copy(update={"idempotency_key": key})
        job_id, trace_id = protocol.new_id(), protocol.new_id()
        claim = ""
        if key:
            claim = IdempotencyKeys.key(tenant, key)
            fingerprint = body.fingerprint()
            earlier = await self._idempotency.claim(claim, job_id, trace_id, fingerprint)
            if earlier is not None:
                if earlier["request_hash"] and earlier["request_hash"] != fingerprint:
                    raise ApiError(409, "idempotency key reused with a different request",
                                   "IDEMPOTENCY_CONFLICT")
                METRICS.count("submit_idempotent_repeat")
                return Submitted(earlier["job_id"], earlier["trace_id"])
        try:
            return await self._accept(principal, body, job_id, trace_id, claim)
        except PolicyDenied:
            raise  # the job exists (DENIED): the key keeps naming it
        except BaseException:
            if claim:
                await self._idempotency.release(claim)
            raise

    async def _accept(self, principal: Principal, body: SubmitJobRequest, job_id: str,
                      trace_id: str, claim: str) -> Submitted:
        tenant = principal.tenant
        req = build_request(body, job_id, tenant, principal.principal_id)
        decision = await self._policy.decide(req, tenant,
                                             payload=context_json(body, tenant).encode())
        verdict = decision.verdict
        if decision.outcome is Outcome.THROTTLE:
            raise submit_policy.throttled(verdict.reason)
        if decision.outcome is Outcome.UNAVAILABLE:
            log.warning("submit %s refused: %s", job_id, verdict.reason)
            raise submit_policy.unavailable(verdict.reason)
        if decision.outcome is Outcome.DENY:
            await self._deny(body, req, trace_id, decision, claim)
        if decision.outcome is Outcome.APPROVAL:
            job = new_job(body, req, trace_id, JobState.APPROVAL_REQUIRED, dict(decision.fields))
            await self._create(job)
            if claim:
                await self._idempotency.keep(claim)
            # Not announced: the approval endpoint publishes it once a human said yes.
            return Submitted(job_id, trace_id, APPROVAL_REQUIRED_STATUS,
                             verdict.reason or "approval required")
        job = new_job(body, req, trace_id)
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

    async def _create(self, job: NewJob) -> None:
        try:
            await self._store.create(job)
        except StoreError as exc:
            log.error("submit %s: store unavailable: %s", job.job_id, exc)
            raise ApiError(503, "store unavailable", "store_unavailable") from exc

    async def _announce(self, job: NewJob, req: protocol.JobRequest) -> None:
        await announce(self._store, self._publisher, job, req)

    async def _deny(self, body: SubmitJobRequest, req: protocol.JobRequest, trace_id: str,
                    decision: SubmitDecision, claim: str) -> NoReturn:
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
                     "reason_code": DENIED_CODE})
        except StoreError as exc:
            log.error("submit %s: denial not stored: %s", job_id, exc)
            await self._discard(job)
            raise ApiError(503, "store unavailable", "store_unavailable") from exc
        if claim:
            await self._idempotency.keep(claim)
        METRICS.count("safety_denied", topic=body.topic)
        await self._notify_dlq(job_id, reason)
        raise PolicyDenied(reason, job_id, trace_id)

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
        try:
            result = await self._store.transition(
                job_id, [JobState.CANCELLED], only_from=OPEN_STATES,
                fields={"failure_reason": "cancelled via api"})
        except StoreError as exc:
            raise ApiError(503, "store unavailable", "store_unavailable") from exc
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
        try:
            meta = await self._store.get(job_id)
        except StoreError as exc:
            raise ApiError(503, "store unavailable", "store_unavailable") from exc
        if not meta:
            raise ApiError(404, "job not found")
        if meta.get("tenant", "") != principal.tenant:
            raise ApiError(403, "tenant access denied")
        return meta

    async def get(self, principal: Principal, job_id: str) -> dict[str, Any]:
        from cordum.config import settings

        meta = await self._owned_meta(principal, job_id)
        # Read only when it may be served: SUCCEEDED, own pointer, output decision final.
        result_ptr = served_result_ptr(job_id, meta,
                                       output_policy=settings().output_policy_enabled)
        result: Any = None
        if result_ptr:
            try:
                raw = await self._store.get_payload(protocol.key_from_pointer(result_ptr))
            except StoreError as exc:
                raise ApiError(503, "store unavailable", "store_unavailable") from exc
            result = json_or_text(raw)
        try:
            extras = await queries.detail_extras(self._redis, job_id)
        except StoreError as exc:
            raise ApiError(503, "store unavailable", "store_unavailable") from exc
        return job_detail(job_id, meta, result_ptr, result, extras)
