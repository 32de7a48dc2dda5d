"""POST /api/v1/jobs, GET /api/v1/jobs/{id}, POST /api/v1/jobs/{id}/cancel."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum import runtime
from cordum.gateway import deps
from cordum.gateway.http import json_body, json_response, principal
from cordum.gateway.models import SubmitJobRequest

router = Router()


@router.post("/api/v1/jobs")
def submit_job() -> Response:
    who = principal(router.current_event)
    body = SubmitJobRequest.model_validate(json_body(router.current_event))
    submitted = runtime.run(deps.jobs().submit(who, body))
    return json_response(200, {"job_id": submitted.job_id, "trace_id": submitted.trace_id},
                         {"X-Trace-Id": submitted.trace_id})


@router.get("/api/v1/jobs/<job_id>")
def get_job(job_id: str) -> Response:
    who = principal(router.current_event)
    return json_response(200, runtime.run(deps.jobs().get(who, job_id)))


@router.post("/api/v1/jobs/<job_id>/cancel")
def cancel_job(job_id: str) -> Response:
    who = principal(router.current_event)
    return json_response(200, runtime.run(deps.jobs().cancel(who, job_id)))
