"""Job submission and lookup behind the HTTP API."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cordum import protocol
from cordum.gateway.errors import ApiError
from cordum.gateway.models import PRIORITIES
from cordum.gateway.views import job_detail, json_or_text
from cordum.store.errors import StoreError
from cordum.store.jobs import NewJob

if TYPE_CHECKING:
    from cordum.bus.publisher import NatsPublisher
    from cordum.gateway.auth import Principal
    from cordum.gateway.models import SubmitJobRequest
    from cordum.store.jobs import JobStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Submitted:
    job_id: str
    trace_id: str


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


class JobService:
    def __init__(self, store: JobStore, publisher: NatsPublisher) -> None:
        self._store = store
        self._publisher = publisher

    async def submit(self, principal: Principal, body: SubmitJobRequest) -> Submitted:
        from google.protobuf import json_format

        if body.tenant_id and body.tenant_id != principal.tenant:
            raise ApiError(403, "tenant access denied")
        tenant = principal.tenant
        job_id, trace_id = protocol.new_id(), protocol.new_id()
        principal_id = body.principal_id or principal.principal_id
        req = build_request(body, job_id, tenant, principal_id)
        context: dict[str, Any] = {"prompt": body.prompt, "topic": body.topic, "tenant_id": tenant}
        if body.context is not None:
            context["context"] = body.context
        meta = {
            "labels": json.dumps(dict(req.labels), separators=(",", ":")),
            "priority": str(req.priority),
            "principal": principal_id,
            "actor_id": body.actor_id,
            "actor_type": body.actor_type,
            "capability": body.capability,
            "pack_id": body.pack_id,
            "idempotency_key": body.idempotency_key,
            "risk_tags": json.dumps(body.risk_tags),
            "requires": json.dumps(body.requires),
            "team": body.team_id,
            "memory_id": body.memory_id,
        }
        job = NewJob(
            job_id=job_id,
            trace_id=trace_id,
            tenant=tenant,
            topic=body.topic,
            context=json.dumps(context, separators=(",", ":")),
            request=json_format.MessageToJson(req, indent=None),
            meta={k: v for k, v in meta.items() if v},
        )
        try:
            await self._store.create(job)
        except StoreError as exc:
            log.error("submit %s: store unavailable: %s", job_id, exc)
            raise ApiError(503, "store unavailable", "store_unavailable") from exc
        packet = protocol.packet(trace_id=trace_id, sender_id=protocol.SENDER_GATEWAY,
                                 job_request=req)
        try:
            await self._publisher.publish_durable(protocol.SUBJECT_SUBMIT, packet, msg_id=job_id)
        except Exception as exc:
            log.error("submit %s: publish failed: %s", job_id, exc)
            await self._discard(job)
            raise ApiError(503, "bus unavailable", "bus_unavailable") from exc
        return Submitted(job_id, trace_id)

    async def _discard(self, job: NewJob) -> None:
        # The job was never announced: remove it, so nothing half-written stays.
        try:
            await self._store.discard(job)
        except StoreError as exc:
            log.error("submit %s: could not remove the unpublished job: %s", job.job_id, exc)

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
        meta = await self._owned_meta(principal, job_id)
        result_ptr = meta.get("result_ptr") or None
        result: Any = None
        if result_ptr:
            try:
                raw = await self._store.get_payload(protocol.key_from_pointer(result_ptr))
            except StoreError as exc:
                raise ApiError(503, "store unavailable", "store_unavailable") from exc
            result = json_or_text(raw)
        return job_detail(job_id, meta, result_ptr, result)
