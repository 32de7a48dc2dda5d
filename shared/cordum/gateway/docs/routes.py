"""GET /api/v1/openapi.json and GET /api/v1/docs (Swagger UI): the public contract, no auth."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import TYPE_CHECKING

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum.gateway.docs.paths import DOCS_PATH, DOCUMENT_PATH

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from cordum.gateway.core.openapi import ApiPart

router = Router()


def contract() -> ApiPart:
    """This feature's part of the OpenAPI document: the document and its page."""
    from cordum.gateway.docs import openapi

    return openapi.PART


SWAGGER_UI_VERSION = "5.17.14"
"""Pinned: a new Swagger UI release must not change the page unseen."""
SWAGGER_UI = f"https://cdn.jsdelivr.net/npm/swagger-ui-dist@{SWAGGER_UI_VERSION}"

# Subresource Integrity of the pinned files: the browser refuses a file the CDN changed.
# jsDelivr serves the npm tarball's files byte for byte, so the hashes come from it
# (recompute both whenever SWAGGER_UI_VERSION changes):
#   npm pack swagger-ui-dist@5.17.14 && tar xzf swagger-ui-dist-5.17.14.tgz
#   openssl dgst -sha384 -binary package/swagger-ui-bundle.js | openssl base64 -A
#   openssl dgst -sha384 -binary package/swagger-ui.css | openssl base64 -A
BUNDLE_SRI = "sha384-wmyclcVGX/WhUkdkATwhaK1X1JtiNrr2EoYJ+diV3vj4v6OC5yCeSu+yW13SYJep"
CSS_SRI = "sha384-wxLW6kwyHktdDGr6Pv1zgm/VGJh99lfUbzSn6HNHBENZlCN7W602k9VkGdxuFvPn"

SCRIPT = """
window.onload = function () {{
  window.ui = SwaggerUIBundle({{url: {spec}, dom_id: "#swagger-ui", deepLinking: true,
                               validatorUrl: null}});
}};
"""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Cordum API</title>
<link rel="stylesheet" href="{ui}/swagger-ui.css" integrity="{css_sri}" crossorigin="anonymous">
</head>
<body>
<div id="swagger-ui"></div>
<script src="{ui}/swagger-ui-bundle.js" integrity="{bundle_sri}" crossorigin="anonymous"></script>
<script>{script}</script>
</body>
</html>
"""


def content_security_policy(script: str) -> str:
    """Only the pinned CDN files and this page's own inline script run; the page talks
    to its own origin only. Swagger UI sets inline styles, hence ``'unsafe-inline'``
    for styles (never for scripts)."""
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    return "; ".join((
        "default-src 'none'",
        f"script-src {SWAGGER_UI}/swagger-ui-bundle.js 'sha256-{digest}'",
        f"style-src {SWAGGER_UI}/swagger-ui.css 'unsafe-inline'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ))


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
    from cordum.gateway.docs import openapi  # built on first request: not at cold start

    body = openapi.document_json(base_path(router.current_event) or "/")
    return Response(status_code=200, content_type="application/json", body=body,
                    headers={"Cache-Control": "public, max-age=300"})


@router.get(DOCS_PATH)
def swagger_ui() -> Response:
    spec = json.dumps(base_path(router.current_event) + DOCUMENT_PATH)
    script = SCRIPT.format(spec=spec)
    page = PAGE.format(ui=SWAGGER_UI, css_sri=CSS_SRI, bundle_sri=BUNDLE_SRI, script=script)
    return Response(status_code=200, content_type="text/html; charset=utf-8", body=page,
                    headers={"Cache-Control": "public, max-age=300",
                             "Content-Security-Policy": content_security_policy(script),
                             "X-Content-Type-Options": "nosniff"})
