"""POST, GET /api/v1/schemas, GET, DELETE /api/v1/schemas/{id}; GET, POST
/api/v1/topics, DELETE /api/v1/topics/{name}: the tenant's JSON schemas and the topics
that name an input schema (what a submit to the topic is checked against:
:mod:`cordum.gateway.core.input_schemas`).

Who: every key of the tenant reads; a write takes role ``admin``, or Cordum's
``schemas.write`` (schemas) or ``topics.write`` (topics). Whose: the key's tenant
only (a key for every tenant names one with X-Tenant-ID); another tenant's schema or
topic answers exactly as one that does not exist.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum import runtime
from cordum.gateway.core import deps
from cordum.gateway.core.errors import InvalidRequest, PayloadTooLarge
from cordum.gateway.core.http import json_body, json_response, principal, query, require_role
from cordum.gateway.schema_registry import models
from cordum.gateway.schema_registry.service import SchemaRegistry
from cordum.gateway.schema_registry.topics import TopicRegistry
from cordum.store.audit import validate_tenant

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from cordum.gateway.core.auth import Principal
    from cordum.gateway.core.openapi import ApiPart

router = Router()

MAX_BODY_BYTES = 256 * 1024
"""A schema's body is at most 256 KiB as sent (413 beyond); the schema itself is at
most 64 KiB as compact JSON."""
SCHEMA_LIMIT = (50, 100)
"""Schemas per list page: (default, most)."""
TOPIC_LIMIT = (100, 200)
SCHEMAS_WRITE = "schemas.write"
TOPICS_WRITE = "topics.write"


def contract() -> ApiPart:
    """This feature's part of the OpenAPI document (loaded with the document)."""
    from cordum.gateway.schema_registry import openapi

    return openapi.PART


def _schemas() -> SchemaRegistry:
    return SchemaRegistry(deps.redis(), deps.audit_trail())


def _topics() -> TopicRegistry:
    return TopicRegistry(deps.redis(), deps.audit_trail())


def _writer(event: BaseProxyEvent, role: str) -> Principal:
    """The caller of a write: admin or ``role``, of a tenant an audit chain can name."""
    who = principal(event)
    require_role(who, role)
    try:
        validate_tenant(who.tenant)
    except ValueError:
        raise InvalidRequest("the tenant cannot name an audit chain", "invalid_tenant") from None
    return who


def _body(event: BaseProxyEvent) -> dict[str, Any]:
    if len((event.body or "").encode()) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"request body larger than {MAX_BODY_BYTES} bytes")
    return json_body(event)


def _limit(event: BaseProxyEvent, bounds: tuple[int, int]) -> int:
    raw = query(event, "limit").strip()
    if not raw:
        return bounds[0]
    if not raw.isascii() or not raw.isdigit() or int(raw) < 1:
        raise InvalidRequest("limit must be a positive integer")
    return min(int(raw), bounds[1])


def _cursor(event: BaseProxyEvent, check: Any) -> str:
    raw = query(event, "cursor").strip()
    if raw:
        try:
            check(raw)
        except InvalidRequest:
            raise InvalidRequest("cursor is invalid") from None
    return raw


def _no_content() -> Response:
    return Response(status_code=204, body="")


# -- schemas ------------------------------------------------------------------------------

@router.post("/api/v1/schemas")
def register_schema() -> Response:
    event = router.current_event
    who = _writer(event, SCHEMAS_WRITE)
    new = models.parse_schema(_body(event))
    runtime.run(_schemas().register(who, new))
    return _no_content()


@router.get("/api/v1/schemas")
def list_schemas() -> Response:
    event = router.current_event
    who = principal(event)
    items, cursor = runtime.run(_schemas().list(
        who, _cursor(event, models.schema_id), _limit(event, SCHEMA_LIMIT)))
    return json_response(200, {"schemas": items, "next_cursor": cursor})


@router.get("/api/v1/schemas/<schema_id>")
def get_schema(schema_id: str) -> Response:
    who = principal(router.current_event)
    return json_response(200, runtime.run(_schemas().get(who, models.schema_id(schema_id))))


@router.delete("/api/v1/schemas/<schema_id>")
def delete_schema(schema_id: str) -> Response:
    who = _writer(router.current_event, SCHEMAS_WRITE)
    runtime.run(_schemas().delete(who, models.schema_id(schema_id)))
    return _no_content()


# -- topics -------------------------------------------------------------------------------

@router.get("/api/v1/topics")
def list_topics() -> Response:
    event = router.current_event
    who = principal(event)
    cursor = _cursor(event, models.topic_name)
    items, after = runtime.run(_topics().list(who, cursor, _limit(event, TOPIC_LIMIT)))
    return json_response(200, {"items": items, "next_cursor": after,
                               "registry_empty": not items and not cursor})


@router.post("/api/v1/topics")
def create_topic() -> Response:
    event = router.current_event
    who = _writer(event, TOPICS_WRITE)
    record = models.parse_topic(_body(event), who.tenant)
    stored, replaced = runtime.run(_topics().set(who, record))
    return json_response(200 if replaced else 201, stored)


@router.delete("/api/v1/topics/<name>")
def delete_topic(name: str) -> Response:
    who = _writer(router.current_event, TOPICS_WRITE)
    runtime.run(_topics().delete(who, models.topic_name(name.strip())))
    return _no_content()
