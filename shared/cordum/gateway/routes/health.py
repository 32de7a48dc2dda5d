"""GET /health (no auth) and GET /api/v1/health (auth + tenant): Redis and NATS answer.

JSON either way, as Cordum's gateway answers: 200 ``{"status": "healthy", "redis": "ok",
"nats": "ok"}``, or 503 with ``"status": "unhealthy"`` and ``"ok"`` or ``"unavailable"``
per dependency. ``/health`` answers anyone, so the body never carries an exception text,
a host or a URL: what went wrong goes to the log. Each check is bounded by its configured
timeout and both run at once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum import runtime
from cordum.config import settings
from cordum.gateway import system
from cordum.gateway.http import json_response, principal

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import Response

log = logging.getLogger(__name__)

router = Router()


OK = "ok"
UNAVAILABLE = "unavailable"


def health_body(reach: system.Connectivity) -> tuple[int, dict[str, Any]]:
    parts = {"redis": UNAVAILABLE if reach.redis_error else OK,
             "nats": UNAVAILABLE if reach.nats_error else OK}
    if reach.healthy:
        return 200, {"status": "healthy", **parts}
    down = ", ".join(f"{name} {state}" for name, state in parts.items() if state != OK)
    return 503, {"status": "unhealthy", "error": f"unhealthy: {down}", "code": "unhealthy",
                 **parts}


def _answer() -> Response:
    reach = runtime.run(system.connectivity(settings()))
    status, body = health_body(reach)
    if status != 200:
        log.warning("unhealthy: redis: %s; nats: %s", reach.redis_error or OK,
                    reach.nats_error or OK)
    return json_response(status, body, {"Retry-After": "2"} if status != 200 else None)


@router.get("/health")
def health() -> Response:
    return _answer()


@router.get("/api/v1/health")
def health_v1() -> Response:
    principal(router.current_event)
    return _answer()
