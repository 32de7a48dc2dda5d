"""What a submitted job is stored as: its JobRequest, context payload and store record
(announcing it is ``cordum.gateway.core.submission``'s, a DLQ retry's too)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from cordum import protocol
from cordum.gateway.jobs.models import PRIORITIES
from cordum.store.jobs import JobState, NewJob, now_us

if TYPE_CHECKING:
    from cordum.gateway.jobs.models import SubmitJobRequest


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
            fields: dict[str, str] | None = None, context: str | None = None) -> NewJob:
    """What the store keeps of an accepted request (payload, request, meta); ``context``
    is :func:`context_json` of the body when the caller has it already."""
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
    if state is JobState.APPROVAL_REQUIRED and req.budget.deadline_ms > 0:
        # A job gated here waits for a person before the scheduler ever sees it: its
        # deadline counts from now, so the approval context can say how long is left.
        # (The scheduler sets it at dispatch otherwise, and keeps one already set.)
        meta["deadline_unix"] = str(now_us() + req.budget.deadline_ms * 1000)
    return NewJob(
        job_id=req.job_id,
        trace_id=trace_id,
        tenant=tenant,
        topic=body.topic,
        context=context_json(body, tenant) if context is None else context,
        request=json_format.MessageToJson(req, indent=None),
        meta={k: v for k, v in meta.items() if v},
        state=state,
    )
