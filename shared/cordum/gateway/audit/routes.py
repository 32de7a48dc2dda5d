"""GET /api/v1/audit/events, GET /api/v1/audit/verify and GET, PUT, DELETE
/api/v1/audit/hold: a tenant's audit chain (docs/audit.md, "The audit routes").

Who may do what, and whose chain: :mod:`cordum.gateway.audit.access`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum import runtime
from cordum.config import settings
from cordum.gateway.audit import access
from cordum.gateway.audit.models import EventFilter, HoldRequest, parse_cursor, parse_limit
from cordum.gateway.audit.service import AuditService
from cordum.gateway.core import deps
from cordum.gateway.core.errors import InvalidRequest
from cordum.gateway.core.http import json_body, json_response, query
from cordum.store.audit_trail import process_hmac_key

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import Response
    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from cordum.gateway.core.openapi import ApiPart

router = Router()

MAX_BODY_BYTES = 16 * 1024
"""A hold's body is at most 16 KiB (400 beyond): it holds a reason only."""


def contract() -> ApiPart:
    """This feature's part of the OpenAPI document (loaded with the document)."""
    from cordum.gateway.audit import openapi

    return openapi.PART


def service() -> AuditService:
    # Built per request around the cached clients: it holds no connection of its own.
    return AuditService(deps.redis(), process_hmac_key(), bucket=settings().audit_bucket)


def _body(event: BaseProxyEvent) -> dict[str, Any]:
    if len((event.body or "").encode()) > MAX_BODY_BYTES:
        raise InvalidRequest(f"request body larger than {MAX_BODY_BYTES} bytes",
                             "request_body_too_large")
    return json_body(event, required=False)


@router.get("/api/v1/audit/events")
def list_events() -> Response:
    event = router.current_event
    who = access.reader(event)
    params = event.query_string_parameters or {}
    wanted = EventFilter.parse(params)
    page = runtime.run(service().events(who, wanted, parse_limit(query(event, "limit")),
                                        parse_cursor(query(event, "cursor"))))
    return json_response(200, page)


@router.get("/api/v1/audit/verify")
def verify() -> Response:
    who = access.reader(router.current_event)
    return json_response(200, runtime.run(service().verify(who)))


@router.get("/api/v1/audit/hold")
def get_hold() -> Response:
    who = access.reader(router.current_event)
    return json_response(200, runtime.run(service().hold(who.tenant)))


@router.put("/api/v1/audit/hold")
def set_hold() -> Response:
    event = router.current_event
    who = access.holder(event)
    raw = _body(event)
    access.same_tenant(who, *(raw.get(name) for name in access.TENANT_FIELDS))
    body = HoldRequest.model_validate(raw)
    return json_response(200, runtime.run(service().set_hold(who, body.reason)))


@router.delete("/api/v1/audit/hold")
def clear_hold() -> Response:
    event = router.current_event
    who = access.holder(event)
    # No body is needed; one that names another tenant is refused, as on PUT.
    raw = _body(event)
    access.same_tenant(who, *(raw.get(name) for name in access.TENANT_FIELDS))
    return json_response(200, runtime.run(service().clear_hold(who)))
