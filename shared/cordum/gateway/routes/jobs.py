"""POST /api/v1/jobs, GET /api/v1/jobs/{id}, POST /api/v1/jobs/{id}/cancel."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum import runtime
from cordum.gateway import deps
from cordum.gateway.errors import InvalidRequest, PayloadTooLarge
from cordum.gateway.http import headers, json_body, json_response, principal, require_role
from cordum.gateway.models import (
    MAX_BODY_BYTES_ENV,
    SUBMIT_ROLES,
    SubmitJobRequest,
    idempotency_key_error,
    max_body_bytes,
)

router = Router()


@router.post("/api/v1/jobs")
def submit_job() -> Response:
    event = router.current_event
    who = principal(event)  # authenticated and rate limited
    hdrs = headers(event)
    require_role(who, *SUBMIT_ROLES)
    limit = max_body_bytes()
    if len((event.body or "").encode()) > limit:
        raise PayloadTooLarge(f"request body larger than {limit} bytes ({MAX_BODY_BYTES_ENV})")
    body = SubmitJobRequest.model_validate(json_body(event))
    key = hdrs.get("idempotency-key", "").strip()
    problem = idempotency_key_error(key)
    if problem:
        raise InvalidRequest(f"Idempotency-Key: {problem}")
    submitted = runtime.run(deps.jobs().submit(who, body, idempotency_key=key))
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


@router.post("/api/v1/jobs/<job_id>/cancel")
def cancel_job(job_id: str) -> Response:
    who = principal(router.current_event)
    require_role(who, *SUBMIT_ROLES)  # stopping a job is as much a write as starting one
    return json_response(200, runtime.run(deps.jobs().cancel(who, job_id)))
