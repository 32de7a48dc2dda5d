"""Applying a remediation the policy offered for a job: POST /api/v1/jobs/{id}/remediate.

When the kernel answers a job with remediations (a safer topic, another capability,
labels to add or drop), the decision record in the job's meta keeps them
(``safety_remediations``, bounded by ``cordum.scheduler.constraints``). Applying one
submits a new job: the original's input (its stored request and the payload at
``ctx:<id>``) with the remediation's changes, through the whole submit path of
``JobService.submit``, so the policy decides the new job as it would any other (a
remediation that is still denied is a 403, stored DENIED like any denied submit).

The new job is the caller's (the API key's principal, never the original
submitter's), joins the original's trace, names it as ``parent_job_id`` and carries
two labels only the platform writes: ``remediation_of=<job id>`` and
``remediation_id=<id>``. Caller labels of the original are kept, reserved ones
(approvals, bypass marks, ``_source`` ...) are not; the remediation's
``add_labels`` (reserved names left out) and then ``remove_labels`` apply to them.

As in Cordum, every call submits a new job; an ``Idempotency-Key`` header makes a
repeat answer the first job, exactly as on a submit.

Cost: one Redis round trip reads the job (meta fields, request, payload), then the
submit's own, then one more appends the ``job.remediate`` audit event.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format
from pydantic import BaseModel, ConfigDict, Field, field_validator

from cordum import protocol
from cordum.gateway.core.errors import Conflict, InvalidRequest, NotFound, PolicyDenied
from cordum.gateway.core.models import no_default
from cordum.gateway.jobs.models import PRIORITIES, SubmitJobRequest
from cordum.gateway.jobs.service import Origin
from cordum.labels import has_control_chars, is_reserved_label
from cordum.scheduler.constraints import MAX_REMEDIATION_NAME
from cordum.store.audit_trail import AuditTrail, governance, process_hmac_key
from cordum.store.errors import StoreError
from cordum.store.jobs import meta_key, request_key

if TYPE_CHECKING:
    from cordum.gateway.core.auth import Principal
    from cordum.gateway.jobs.service import JobService, Submitted

log = logging.getLogger(__name__)

REMEDIATION_OF_LABEL = "remediation_of"
REMEDIATION_ID_LABEL = "remediation_id"
_META_FIELDS = ("tenant", "trace_id", "safety_remediations")
_PRIORITY_NAMES = {number: name for name, number in PRIORITIES.items()}
_ACTOR_TYPES = {1: "human", 2: "service"}


class RemediateJobRequest(BaseModel):
    """The body (optional): which of the offered remediations to apply. Without it the
    only one offered is applied; with several, it is required."""

    # Unknown fields are accepted and ignored, as the document says.
    model_config = ConfigDict(extra="ignore", json_schema_extra={"additionalProperties": True})

    remediation_id: str = Field(
        default="", max_length=MAX_REMEDIATION_NAME, json_schema_extra=no_default,
        description="An id from the job's safety_remediations; optional when it offers one.")

    @field_validator("remediation_id")
    @classmethod
    def _id(cls, value: str) -> str:
        if has_control_chars(value):
            raise ValueError("must not contain control characters")
        return value.strip()


def offered(raw: str | None) -> list[dict[str, Any]]:
    """The remediations a stored decision offers ([] when none or unreadable)."""
    try:
        value = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


def choose(remediations: list[dict[str, Any]], remediation_id: str) -> dict[str, Any]:
    """The remediation to apply: Cordum's 409 / 404 / 400 when there is none to pick."""
    if not remediations:
        raise Conflict("no remediations available", "no_remediations")
    if remediation_id:
        for rem in remediations:
            if str(rem.get("id") or "") == remediation_id:
                return rem
        raise NotFound("remediation not found", "remediation_not_found")
    if len(remediations) == 1:
        return remediations[0]
    raise InvalidRequest("remediation_id required")


def _text_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def remediated_labels(original: dict[str, str], rem: dict[str, Any]) -> dict[str, str]:
    """The caller labels of the new job: the original's without reserved names, then the
    remediation's ``add_labels`` (reserved names left out), then ``remove_labels``."""
    labels = {k: v for k, v in original.items() if not is_reserved_label(k)}
    labels.update({k: v for k, v in _text_map(rem.get("add_labels")).items()
                   if k.strip() and not is_reserved_label(k)})
    removed = rem.get("remove_labels")
    for key in removed if isinstance(removed, list) else []:
        labels.pop(str(key), None)
    return labels


def remediated_body(req: protocol.JobRequest, context: dict[str, Any],
                    rem: dict[str, Any]) -> SubmitJobRequest:
    """The submit body of the new job: the original's input with ``rem`` applied.
    Validated as any submit (a replacement topic the API refuses is a 400)."""
    env = req.env
    doc: dict[str, Any] = {
        "prompt": context.get("prompt"),
        "topic": str(rem.get("replacement_topic") or "") or req.topic,
        "adapter_id": req.adapter_id,
        "priority": _PRIORITY_NAMES.get(req.priority, "interactive"),
        "memory_id": req.memory_id,
        "context_mode": env.get("context_mode", ""),
        "actor_id": req.meta.actor_id,
        "actor_type": _ACTOR_TYPES.get(req.meta.actor_type, ""),
        "pack_id": req.meta.pack_id,
        "capability": str(rem.get("replacement_capability") or "") or req.meta.capability,
        "team_id": env.get("team_id", ""),
        "project_id": env.get("project_id", ""),
        "risk_tags": list(req.meta.risk_tags),
        "requires": list(req.meta.requires),
        "tags": list(req.context_hints.tags),
        "labels": remediated_labels(dict(req.labels), rem),
        "max_input_tokens": req.budget.max_input_tokens,
        "max_output_tokens": req.budget.max_output_tokens,
        "max_total_tokens": req.budget.max_total_tokens,
        "deadline_ms": req.budget.deadline_ms,
        "allow_summarization": req.context_hints.allow_summarization,
        "allow_retrieval": req.context_hints.allow_retrieval,
    }
    if "context" in context:
        doc["context"] = context["context"]
    return SubmitJobRequest.model_validate(doc)


async def _read(redis: Any, job_id: str) -> tuple[dict[str, str], str | None, str | None]:
    """The job's meta fields, stored request and payload: one round trip."""
    try:
        pipe = redis.pipeline(transaction=False)
        pipe.hmget(meta_key(job_id), _META_FIELDS)
        pipe.get(request_key(job_id))
        pipe.get(protocol.context_key(job_id))
        values, req, ctx = await pipe.execute()
    except Exception as exc:
        raise StoreError(f"read job {job_id}: {exc}") from exc

    def text(v: Any) -> str | None:
        return v.decode() if isinstance(v, bytes) else v

    meta = {name: text(v) or "" for name, v in zip(_META_FIELDS, values, strict=True)}
    return meta, text(req), text(ctx)


def _parse_request(raw: str | None) -> protocol.JobRequest | None:
    if not raw:
        return None
    try:
        return json_format.Parse(raw, protocol.JobRequest(), ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError):
        return None


def _parse_context(raw: str | None) -> dict[str, Any] | None:
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("prompt"), str):
        return None
    return value


async def remediate(service: JobService, redis: Any, principal: Principal, job_id: str,
                    body: RemediateJobRequest, *, idempotency_key: str = "") -> Submitted:
    """Submit the remediated job in ``principal``'s name (the route checked the role).

    404 ``job not found`` for an unknown job and another tenant's alike; 409 when the
    decision offered nothing, or the original's input has expired (its request and
    payload are kept 24 hours); the submit's own answers after that.
    """
    meta, raw_req, raw_ctx = await _read(redis, job_id)
    if not meta["tenant"] or meta["tenant"] != principal.tenant:
        raise NotFound("job not found")
    rem = choose(offered(meta["safety_remediations"]), body.remediation_id)
    req, context = _parse_request(raw_req), _parse_context(raw_ctx)
    if req is None or context is None:
        raise Conflict("the job's input is no longer stored", "job_input_expired")
    new_body = remediated_body(req, context, rem)
    rem_id = str(rem.get("id") or "")
    labels = {REMEDIATION_OF_LABEL: job_id}
    if rem_id:
        labels[REMEDIATION_ID_LABEL] = rem_id
    origin = Origin(parent_job_id=job_id, trace_id=meta["trace_id"], labels=labels)
    try:
        submitted = await service.submit(principal, new_body, idempotency_key=idempotency_key,
                                         origin=origin)
    except PolicyDenied as denied:
        await _audit(redis, principal, job_id, rem_id, denied.job_id, new_body.topic,
                     "denied by policy")
        raise
    await _audit(redis, principal, job_id, rem_id, submitted.job_id, new_body.topic,
                 submitted.status or "submitted")
    return submitted


async def _audit(redis: Any, principal: Principal, original: str, rem_id: str, new_job: str,
                 topic: str, outcome: str) -> None:
    """The ``job.remediate`` event, naming the new job. Redis down: the job stands (it is
    stored), and the lost event is logged."""
    event = governance("job.remediate", principal.tenant, principal.principal_id,
                       principal.key_id, job_id=new_job, reason=outcome,
                       extra={"remediation_of": original, "remediation_id": rem_id,
                              "topic": topic})
    try:
        await AuditTrail(redis, process_hmac_key()).record(event)
    except StoreError as exc:
        log.error("audit: job.remediate of %s (new job %s) not recorded: %s", original,
                  new_job, exc)
