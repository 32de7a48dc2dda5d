"""Request and response helpers shared by the route modules."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.event_handler import Response

from cordum.gateway import deps, ratelimit
from cordum.gateway.errors import ApiError

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from cordum.gateway.auth import Principal

ADMIN = "admin"


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(status_code=status, content_type="application/json",
                    body=json.dumps(body, separators=(",", ":")), headers=headers or {})


def headers(event: BaseProxyEvent) -> dict[str, str]:
    """The request's headers with lower-case names."""
    return {k.lower(): v for k, v in (event.headers or {}).items()}


def principal(event: BaseProxyEvent) -> Principal:
    """The caller, authenticated (401), authorised for the tenant asked for (403) and
    within its key's rate limit (429)."""
    hdrs = headers(event)
    return ratelimit.admit(deps.authenticator().authenticate(hdrs), hdrs)


def require_role(who: Principal, *roles: str) -> None:
    """403 unless ``who`` has one of ``roles`` (admin always passes)."""
    if who.role != ADMIN and who.role not in roles:
        raise ApiError(403, "forbidden", "forbidden")


def json_body(event: BaseProxyEvent, *, required: bool = True) -> dict[str, Any]:
    raw = event.body
    if not raw:
        if not required:
            return {}
        raise ApiError(400, "request body is required", "invalid_request")
    try:
        body = json.loads(raw)
    except ValueError:
        raise ApiError(400, "request body is not valid JSON", "invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object", "invalid_request")
    return body


def query(event: BaseProxyEvent, name: str, default: str = "") -> str:
    return (event.query_string_parameters or {}).get(name) or default


def limit(event: BaseProxyEvent, default: int = 50, maximum: int = 1000) -> int:
    """The ``limit`` query parameter: 400 unless a positive integer; clamped to ``maximum``."""
    raw = query(event, "limit")
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, "limit must be an integer", "invalid_request") from None
    if value <= 0:
        raise ApiError(400, "limit must be positive", "invalid_request")
    return min(value, maximum)
