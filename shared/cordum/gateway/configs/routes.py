"""GET /api/v1/config, GET /api/v1/config/effective, PUT and POST /api/v1/config: the
config documents per scope and the effective config merged from them.

Who may do what, and which document a request names: :mod:`cordum.gateway.configs.access`;
what a write takes: :mod:`cordum.gateway.configs.models`; how it is written:
:mod:`cordum.gateway.configs.service`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum import runtime
from cordum.gateway.configs import access
from cordum.gateway.configs.models import MAX_BODY_BYTES, parse_write
from cordum.gateway.configs.service import ConfigService, not_found
from cordum.gateway.core import deps
from cordum.gateway.core.errors import InvalidRequest
from cordum.gateway.core.http import json_body, json_response, query
from cordum.store.config_docs import SYSTEM, SYSTEM_DEFAULT_ID, ConfigDocs, ConfigIdError

if TYPE_CHECKING:
    from cordum.gateway.core.openapi import ApiPart

router = Router()

PATH = "/api/v1/config"


def contract() -> ApiPart:
    """This feature's part of the OpenAPI document (loaded with the document)."""
    from cordum.gateway.configs import openapi

    return openapi.PART


def service() -> ConfigService:
    # Built per request around the cached clients: it holds no connection of its own.
    return ConfigService(ConfigDocs(deps.redis()), deps.publisher(), deps.audit_trail())


@router.get(PATH)
def get_config() -> Response:
    """The document's data; the whole document with ``envelope=true``. A missing
    system/default is ``{}`` (a fresh install has none), any other missing one 404."""
    event = router.current_event
    scope = query(event, "scope").strip()
    who = access.reader(event, scope)
    place = access.target(who, scope, query(event, "scope_id").strip())
    doc = runtime.run(service().document(place))
    if doc is None:
        if place.scope == SYSTEM and place.scope_id == SYSTEM_DEFAULT_ID:
            return json_response(200, {})
        raise not_found()
    if query(event, "envelope").strip().lower() == "true":
        return json_response(200, doc)
    data = doc.get("data")
    return json_response(200, data if isinstance(data, dict) else {})


@router.get(PATH + "/effective")
def get_effective() -> Response:
    """The effective config of the caller's tenant (``org_id``, when given, must be it)
    and the team, workflow and step named."""
    event = router.current_event
    who = access.effective_reader(event)
    access.same_tenant(who, query(event, "org_id").strip())
    ids = [query(event, name).strip() for name in ("team_id", "workflow_id", "step_id")]
    try:
        return json_response(200, runtime.run(service().effective(who.tenant, *ids)))
    except ConfigIdError as exc:
        raise access.bad(str(exc)) from None


def _write() -> Response:
    event = router.current_event
    who = access.writer(event)
    if len((event.body or "").encode()) > MAX_BODY_BYTES:
        raise InvalidRequest(f"request body larger than {MAX_BODY_BYTES} bytes",
                             "config_too_large")
    change = parse_write(json_body(event))
    place = access.target(who, change.scope, change.scope_id)
    access.may_write(event, who, place)
    runtime.run(service().write(who, place, change))
    return Response(status_code=204, body="")


@router.put(PATH)
def replace_config() -> Response:
    """Cordum answers PUT and POST alike: the body's members are set (see the service)."""
    return _write()


@router.post(PATH)
def set_config() -> Response:
    return _write()
