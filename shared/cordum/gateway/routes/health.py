"""GET /health (no auth) and GET /api/v1/health (auth + tenant): Redis and NATS answer.

JSON either way, as Cordum's gateway answers: 200 ``{"status": "healthy", "redis": "ok",
"nats": "ok"}``, or 503 with ``"status": "unhealthy"``, the error and what each
dependency said. Each check is bounded by its configured timeout and both run at once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum import runtime
from cordum.config import settings
from cordum.gateway import queries
from cordum.gateway.http import json_response, principal

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import Response

log = logging.getLogger(__name__)

router = Router()


def health_body(reach: queries.Connectivity) -> tuple[int, dict[str, Any]]:
    redis, nats = reach.redis_error or "ok", reach.nats_error or "ok"
    if reach.healthy:
        return 200, {"status": "healthy", "redis": redis, "nats": nats}
    problems = "; ".join(f"{name}: {err}" for name, err in
                         (("redis", reach.redis_error), ("nats", reach.nats_error)) if err)
    return 503, {"status": "unhealthy", "error": f"unhealthy: {problems}", "code": "unhealthy",
                 "redis": redis, "nats": nats}


def _answer() -> Response:
    status, body = health_body(runtime.run(queries.connectivity(settings())))
    if status != 200:
        log.warning("%s", body["error"])
    return json_response(status, body)


@router.get("/health")
def health() -> Response:
    return _answer()


@router.get("/api/v1/health")
def health_v1() -> Response:
    principal(router.current_event)
    return _answer()
