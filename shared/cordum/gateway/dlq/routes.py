"""GET /api/v1/dlq, GET /api/v1/dlq/page, DELETE /api/v1/dlq/{job_id},
POST /api/v1/dlq/{job_id}/retry (admin only)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum import runtime
from cordum.gateway.core import deps
from cordum.gateway.core.http import json_response, limit, principal, query, require_role
from cordum.gateway.core.locking import locked_work_deadline
from cordum.gateway.dlq.service import DlqService
from cordum.store.jobs import JobStore

if TYPE_CHECKING:
    from cordum.gateway.core.openapi import ApiPart

router = Router()


def contract() -> ApiPart:
    """This feature's part of the OpenAPI document (loaded with the document)."""
    from cordum.gateway.dlq import openapi

    return openapi.PART


def service() -> DlqService:
    # Built per request around the cached clients: it holds no connection of its own.
    redis = deps.redis()
    return DlqService(JobStore(redis), redis, deps.publisher())


@router.get("/api/v1/dlq")
def list_dlq() -> Response:
    # A bare array: what Cordum's published client iterates (docs/http-api.md).
    event = router.current_event
    who = principal(event)
    require_role(who)
    return json_response(200, runtime.run(service().page(who, limit(event), ""))["items"])


@router.get("/api/v1/dlq/page")
def list_dlq_page() -> Response:
    event = router.current_event
    who = principal(event)
    require_role(who)
    page = runtime.run(service().page(who, limit(event), query(event, "cursor")))
    return json_response(200, page)


@router.delete("/api/v1/dlq/<job_id>")
def delete_dlq_entry(job_id: str) -> Response:
    who = principal(router.current_event)
    require_role(who)
    runtime.run(service().delete(who, job_id))
    return Response(status_code=204, body="")


@router.post("/api/v1/dlq/<job_id>/retry")
def retry_dlq_entry(job_id: str) -> Response:
    who = principal(router.current_event)
    require_role(who)
    deadline = locked_work_deadline(router.lambda_context)
    new_id = runtime.run(service().retry(who, job_id, deadline))
    return json_response(200, {"job_id": new_id})
