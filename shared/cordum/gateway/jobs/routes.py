"""POST /api/v1/jobs, GET /api/v1/jobs, GET /api/v1/jobs/{id}, POST /api/v1/jobs/{id}/cancel,
GET /api/v1/jobs/{id}/decisions, POST /api/v1/jobs/{id}/remediate.

Writes go through the job service (``cordum.gateway.jobs.service``); the list and a
job's decisions are read-only views of the caller's tenant (``cordum.gateway.jobs.queries``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum import runtime
from cordum.gateway.core.errors import Forbidden, GatewayError, InvalidRequest, NotFound
from cordum.gateway.core.http import (
    bounded_body,
    cursor,
    headers,
    json_body,
    json_response,
    limit,
    principal,
    principal_reading,
    query,
    require_role,
    time_query,
)
from cordum.gateway.core.models import SUBMIT_ROLES, idempotency_key_error
from cordum.gateway.jobs import deps, queries, submit_reads, traces, views
from cordum.gateway.jobs.models import SubmitJobRequest
from cordum.store.jobs import JobState

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from cordum.gateway.core.auth import Principal
    from cordum.gateway.core.openapi import ApiPart

router = Router()


def contract() -> ApiPart:
    """This feature's part of the OpenAPI document (loaded with the document)."""
    from cordum.gateway.jobs import openapi

    return openapi.PART


@router.post("/api/v1/jobs")
def submit_job() -> Response:
    event = router.current_event
    parsed: list[Any] = []

    def context_keys(who: Principal) -> tuple[str, ...]:
        # The submit's config documents and topic registration, read in the rate
        # limiter's round trip (submit_reads); the body is parsed once, here.
        try:
            bounded_body(event)
            parsed.append(json_body(event))
        except GatewayError as exc:
            parsed.append(exc)
            return ()
        parsed.append(submit_reads.plan(who.tenant, parsed[0]))
        return parsed[1].keys

    who, values = principal_reading(event, context_keys)  # authenticated, rate limited
    hdrs = headers(event)
    require_role(who, *SUBMIT_ROLES)
    if isinstance(parsed[0], GatewayError):
        raise parsed[0]
    body = SubmitJobRequest.model_validate(parsed[0])
    key = hdrs.get("idempotency-key", "").strip()
    problem = idempotency_key_error(key)
    if problem:
        raise InvalidRequest(f"Idempotency-Key: {problem}")
    submitted = runtime.run(deps.jobs().submit(who, body, idempotency_key=key,
                                               read=(parsed[1], values)))
    trace = {"X-Trace-Id": submitted.trace_id} if submitted.trace_id else {}
    if submitted.approval_required:
        return json_response(200, {"job_id": submitted.job_id, "status": submitted.status,
                                   "reason": submitted.reason}, trace)
    return json_response(200, {"job_id": submitted.job_id, "trace_id": submitted.trace_id},
                         trace)


@router.get("/api/v1/jobs/<job_id>")
def get_job(job_id: str) -> Response:
    who = principal(router.current_event)
    return json_response(200, runtime.run(deps.jobs().get(who, job_id)))


@router.post("/api/v1/jobs/<job_id>/remediate")
def remediate_job(job_id: str) -> Response:
    """Submit the job again with a remediation its policy decision offered
    (``cordum.gateway.jobs.remediation``): a submit, so the submitting roles."""
    from cordum.gateway.jobs.remediation import RemediateJobRequest, remediate

    event = router.current_event
    who = principal(event)
    require_role(who, *SUBMIT_ROLES)
    bounded_body(event)
    body = RemediateJobRequest.model_validate(json_body(event, required=False))
    key = headers(event).get("idempotency-key", "").strip()
    problem = idempotency_key_error(key)
    if problem:
        raise InvalidRequest(f"Idempotency-Key: {problem}")
    submitted = runtime.run(remediate(deps.jobs(), deps.redis(), who, job_id, body,
                                      idempotency_key=key))
    answer = {"job_id": submitted.job_id, "trace_id": submitted.trace_id}
    if submitted.approval_required:
        answer |= {"status": submitted.status, "reason": submitted.reason}
    return json_response(200, answer, {"X-Trace-Id": submitted.trace_id})


@router.post("/api/v1/jobs/<job_id>/cancel")
def cancel_job(job_id: str) -> Response:
    who = principal(router.current_event)
    require_role(who, *SUBMIT_ROLES)  # stopping a job is as much a write as starting one
    return json_response(200, runtime.run(deps.jobs().cancel(who, job_id)))


# --------------------------------------------------------------------------- reads


def _job_filter(event: BaseProxyEvent, who: Principal) -> queries.JobFilter:
    tenant = query(event, "tenant")
    if tenant and tenant != who.tenant:
        raise Forbidden("tenant access denied")
    state = query(event, "state").strip().upper()
    if state and state not in JobState.__members__:
        raise InvalidRequest(f"state must be one of {', '.join(JobState)}")
    return queries.JobFilter(
        tenant=who.tenant,
        state=state,
        topic=query(event, "topic"),
        team=query(event, "team"),
        trace_id=query(event, "trace_id"),
        after_us=time_query(event, "updated_after"),
        before_us=time_query(event, "updated_before"),
    )


@router.get("/api/v1/jobs")
def list_jobs() -> Response:
    event = router.current_event
    who = principal(event)
    flt = _job_filter(event, who)
    page = runtime.run(queries.list_jobs(deps.redis(), flt, limit(event), cursor(event)))
    return json_response(200, {"items": page.items, "next_cursor": page.next_cursor})


@router.get("/api/v1/jobs/<job_id>/decisions")
def job_decisions(job_id: str) -> Response:
    who = principal(router.current_event)
    meta = runtime.run(queries.decision_meta(deps.redis(), job_id))
    if not meta:
        raise NotFound("job not found")
    if meta.get("tenant", "") != who.tenant:
        raise Forbidden("tenant access denied")
    return json_response(200, views.safety_decisions(meta))


@router.get("/api/v1/traces/<trace_id>")
def get_trace(trace_id: str) -> Response:
    """The caller's tenant's jobs of the trace (``cordum.gateway.jobs.traces``)."""
    from cordum.config import settings

    who = principal(router.current_event)
    if len(trace_id) > traces.MAX_TRACE_ID_CHARS:
        raise InvalidRequest(f"id: a trace id is at most {traces.MAX_TRACE_ID_CHARS} characters")
    answer = runtime.run(traces.trace_jobs(deps.redis(), who.tenant, trace_id,
                                           output_policy=settings().output_policy_enabled))
    if not answer.items:
        raise NotFound("trace not found")
    return json_response(200, answer.items, answer.headers())
