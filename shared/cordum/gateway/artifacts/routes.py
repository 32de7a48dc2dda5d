"""POST /api/v1/artifacts, POST /api/v1/artifacts/uploads, GET /api/v1/artifacts,
GET /api/v1/artifacts/{ptr} and GET /api/v1/memory: artifacts and what ``redis://``
pointers hold.

- An artifact of up to 4 MiB is sent inline (``content_base64``, or text ``content``)
  and kept in Redis; a larger one (up to 5 GiB) is declared by its size on
  ``/uploads``, which answers a presigned S3 PUT the client uploads through.
- ``GET /api/v1/artifacts/{ptr}`` takes the id, ``art:<id>``, the pointer
  percent-encoded, or the pointer as it is (``/api/v1/artifacts/redis://art:<id>``,
  the path cordum-sdk builds).
- ``GET /api/v1/artifacts?limit=&cursor=`` lists the caller's tenant's artifacts,
  newest first, metadata only (any role of the tenant, as reading one).

Who may do what: :mod:`cordum.gateway.artifacts.access`; bounds and round trips:
:mod:`cordum.gateway.artifacts.models` and :mod:`cordum.gateway.artifacts.service`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum import runtime
from cordum.config import settings
from cordum.gateway.artifacts import access
from cordum.gateway.artifacts.models import (
    MAX_REQUEST_BYTES,
    ArtifactUploadRequest,
    CreateArtifactRequest,
    list_cursor,
    list_limit,
    memory_key,
)
from cordum.gateway.artifacts.service import ArtifactService
from cordum.gateway.core import deps
from cordum.gateway.core.errors import PayloadTooLarge
from cordum.gateway.core.http import json_body, json_response, query

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import Response
    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from cordum.gateway.core.openapi import ApiPart

router = Router()


def contract() -> ApiPart:
    """This feature's part of the OpenAPI document (loaded with the document)."""
    from cordum.gateway.artifacts import openapi

    return openapi.PART


def service() -> ArtifactService:
    # Built per request around the cached clients: it holds no connection of its own.
    cfg = settings()
    return ArtifactService(deps.redis(), bucket=cfg.artifact_bucket,
                           output_policy=cfg.output_policy_enabled)


def _body(event: BaseProxyEvent) -> dict[str, Any]:
    if len((event.body or "").encode()) > MAX_REQUEST_BYTES:
        raise PayloadTooLarge(f"request body larger than {MAX_REQUEST_BYTES} bytes: upload "
                              "a large artifact with POST /api/v1/artifacts/uploads")
    return json_body(event)


@router.post("/api/v1/artifacts")
def create_artifact() -> Response:
    event = router.current_event
    who = access.writer(event)
    body = CreateArtifactRequest.model_validate(_body(event))
    labels = access.stamped(who, body.labels)
    return json_response(200, runtime.run(service().create(who, body, labels)))


@router.post("/api/v1/artifacts/uploads")
def upload_artifact() -> Response:
    event = router.current_event
    who = access.writer(event)
    body = ArtifactUploadRequest.model_validate(_body(event))
    labels = access.stamped(who, body.labels)
    return json_response(200, runtime.run(service().reserve(who, body, labels)))


@router.get("/api/v1/artifacts")
def list_artifacts() -> Response:
    event = router.current_event
    who = access.reader(event)
    limit, after = list_limit(query(event, "limit")), list_cursor(query(event, "cursor"))
    return json_response(200, runtime.run(service().page(who, limit, after)))


@router.get("/api/v1/artifacts/<ptr>")
def get_artifact(ptr: str) -> Response:
    who = access.reader(router.current_event)
    return json_response(200, runtime.run(service().detail(who, unquote(ptr))))


@router.get("/api/v1/artifacts/redis://<key>")
def get_artifact_by_pointer(key: str) -> Response:
    who = access.reader(router.current_event)
    return json_response(200, runtime.run(service().detail(who, unquote(key))))


@router.get("/api/v1/memory")
def get_memory() -> Response:
    event = router.current_event
    who = access.reader(event)
    pointer, key = memory_key(query(event, "ptr"), query(event, "key"))
    return json_response(200, runtime.run(service().memory(who, pointer, key)))
