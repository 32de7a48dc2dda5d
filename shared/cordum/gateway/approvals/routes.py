"""GET /api/v1/approvals, POST /api/v1/approvals/{job_id}/approve and /reject (admin only)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum import runtime
from cordum.config import settings
from cordum.gateway.approvals.models import ApprovalDecisionRequest
from cordum.gateway.approvals.service import ApprovalService
from cordum.gateway.core import deps
from cordum.gateway.core.http import json_body, json_response, limit, principal, query, require_role
from cordum.gateway.core.locking import locked_work_deadline
from cordum.safety.snapshots import KernelSnapshots
from cordum.store.jobs import JobStore

if TYPE_CHECKING:
    from cordum.gateway.core.openapi import ApiPart

router = Router()


def contract() -> ApiPart:
    """This feature's part of the OpenAPI document (loaded with the document)."""
    from cordum.gateway.approvals import openapi

    return openapi.PART


def service() -> ApprovalService:
    # Built per request around the cached clients: it holds no connection of its own.
    cfg = settings()
    redis = deps.redis()
    return ApprovalService(JobStore(redis), redis, deps.publisher(),
                           KernelSnapshots(cfg.safety_kernel_addr, cfg.safety_timeout_s))


@router.get("/api/v1/approvals")
def list_approvals() -> Response:
    event = router.current_event
    who = principal(event)
    require_role(who)
    page = runtime.run(service().list(who, limit(event), query(event, "cursor")))
    return json_response(200, page)


@router.post("/api/v1/approvals/<job_id>/approve")
def approve_job(job_id: str) -> Response:
    who = principal(router.current_event)
    require_role(who)
    body = ApprovalDecisionRequest.model_validate(json_body(router.current_event))
    deadline = locked_work_deadline(router.lambda_context)
    answer = runtime.run(service().approve(who, job_id, body, deadline))
    return json_response(200, answer, {"X-Trace-Id": answer["trace_id"]})


@router.post("/api/v1/approvals/<job_id>/reject")
def reject_job(job_id: str) -> Response:
    who = principal(router.current_event)
    require_role(who)
    body = ApprovalDecisionRequest.model_validate(json_body(router.current_event))
    deadline = locked_work_deadline(router.lambda_context)
    return json_response(200, runtime.run(service().reject(who, job_id, body, deadline)))


@router.get("/api/v1/approvals/<job_id>/context")
def approval_context(job_id: str) -> Response:
    who = principal(router.current_event)
    require_role(who)
    return json_response(200, runtime.run(service().context(who, job_id)))
