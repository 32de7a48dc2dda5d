"""GET /health: Redis and NATS answer, or 503 with what does not."""

from __future__ import annotations

import asyncio
import logging

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum import runtime
from cordum.config import settings
from cordum.gateway.http import json_response

log = logging.getLogger(__name__)

router = Router()


async def problems() -> dict[str, str]:
    found = {}
    try:
        await asyncio.wait_for(runtime.redis_client().ping(), settings().store_timeout_s)
    except Exception as exc:
        found["redis"] = f"{type(exc).__name__}: {exc}"
    try:
        nc = await runtime.nats_client()
        await asyncio.wait_for(nc.flush(), settings().publish_timeout_s)
    except Exception as exc:
        found["nats"] = f"{type(exc).__name__}: {exc}"
    return found


@router.get("/health")
def health() -> Response:
    found = runtime.run(problems())
    if found:
        log.warning("unhealthy: %s", found)
        detail = "; ".join(f"{k}: {v}" for k, v in found.items())
        return json_response(503, {"error": f"unhealthy: {detail}", "code": "unhealthy",
                                   "status": 503})
    return Response(status_code=200, content_type="text/plain", body="ok")
