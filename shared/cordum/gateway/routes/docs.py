"""GET /api/v1/openapi.json and GET /api/v1/docs (Swagger UI): the public contract, no auth."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

DOCUMENT_PATH = "/api/v1/openapi.json"
DOCS_PATH = "/api/v1/docs"

router = Router()

SWAGGER_UI = "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5.17.14"
"""Pinned: a new Swagger UI release must not change the page unseen."""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Cordum API</title>
<link rel="stylesheet" href="{ui}/swagger-ui.css" crossorigin="anonymous">
</head>
<body>
<div id="swagger-ui"></div>
<script src="{ui}/swagger-ui-bundle.js" crossorigin="anonymous"></script>
<script>
window.onload = function () {{
  window.ui = SwaggerUIBundle({{url: {spec}, dom_id: "#swagger-ui", deepLinking: true}});
}};
</script>
</body>
</html>
"""

_PREFIX = re.compile(r"^(/[A-Za-z0-9._~-]+)*$")


def base_path(event: BaseProxyEvent) -> str:
    """The part of the caller's URL before the route: the stage (``/prod``) or a
    custom domain's base path, so "Try it out" and the page's links reach the API."""
    seen = str((event.raw_event.get("requestContext") or {}).get("path") or "")
    path = event.path or ""
    prefix = seen[: -len(path)] if path and seen.endswith(path) else ""
    return prefix if _PREFIX.match(prefix) else ""


@router.get(DOCUMENT_PATH)
def openapi_document() -> Response:
    from cordum.gateway import openapi  # built on first request: not at cold start

    body = openapi.document_json(base_path(router.current_event) or "/")
    return Response(status_code=200, content_type="application/json", body=body,
                    headers={"Cache-Control": "public, max-age=300"})


@router.get(DOCS_PATH)
def swagger_ui() -> Response:
    spec = json.dumps(base_path(router.current_event) + DOCUMENT_PATH)
    return Response(status_code=200, content_type="text/html; charset=utf-8",
                    body=PAGE.format(ui=SWAGGER_UI, spec=spec),
                    headers={"Cache-Control": "public, max-age=300"})
