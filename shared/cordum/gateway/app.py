"""The HTTP API as a powertools REST resolver (API Gateway v1 proxy events).

Domain errors become HTTP answers in one place (``_api_error`` and friends);
routes only authenticate, parse and call the job service.
"""

from __future__ import annotations

import asyncio
import json
import logging
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from pydantic import ValidationError

from cordum import runtime
from cordum.bus.publisher import NatsPublisher
from cordum.config import settings
from cordum.gateway.auth import Authenticator, Principal, load_keys
from cordum.gateway.errors import ApiError
from cordum.gateway.jobs import JobService
from cordum.gateway.models import SubmitJobRequest
from cordum.store.jobs import JobStore

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

log = logging.getLogger(__name__)

app = APIGatewayRestResolver()


@lru_cache(maxsize=1)
def _authenticator() -> Authenticator:
    return Authenticator(load_keys())


@lru_cache(maxsize=1)
def _jobs() -> JobService:
    cfg = settings()
    return JobService(JobStore(runtime.redis_client(cfg)), NatsPublisher(cfg))


def _principal() -> Principal:
    headers = {k.lower(): v for k, v in (app.current_event.headers or {}).items()}
    return _authenticator().authenticate(headers)


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(status_code=status, content_type="application/json",
                    body=json.dumps(body, separators=(",", ":")), headers=headers or {})


@app.exception_handler(ApiError)
def _api_error(exc: ApiError) -> Response:
    return _json(exc.status, exc.body(), exc.headers)


@app.exception_handler(ValidationError)
def _invalid_body(exc: ValidationError) -> Response:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    missing = first["type"] == "missing"
    message = f"{where} is required" if missing else f"{where}: {first['msg']}"
    return _json(400, {"error": message, "code": "invalid_request", "status": 400})


@app.not_found
def _not_found(exc: Exception) -> Response:
    return _json(404, {"error": "not found", "code": "not_found", "status": 404})


def _body() -> dict[str, Any]:
    raw = app.current_event.body
    if not raw:
        raise ApiError(400, "request body is required", "invalid_request")
    try:
        body = json.loads(raw)
    except ValueError:
        raise ApiError(400, "request body is not valid JSON", "invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object", "invalid_request")
    return body


@app.post("/api/v1/jobs")
def submit_job() -> Response:
    principal = _principal()
    body = SubmitJobRequest.model_validate(_body())
    submitted = runtime.run(_jobs().submit(principal, body))
    return _json(200, {"job_id": submitted.job_id, "trace_id": submitted.trace_id},
                 {"X-Trace-Id": submitted.trace_id})


@app.get("/api/v1/jobs/<job_id>")
def get_job(job_id: str) -> Response:
    principal = _principal()
    return _json(200, runtime.run(_jobs().get(principal, job_id)))


async def _health() -> dict[str, str]:
    problems = {}
    try:
        await asyncio.wait_for(runtime.redis_client().ping(), settings().store_timeout_s)
    except Exception as exc:
        problems["redis"] = f"{type(exc).__name__}: {exc}"
    try:
        nc = await runtime.nats_client()
        await asyncio.wait_for(nc.flush(), settings().publish_timeout_s)
    except Exception as exc:
        problems["nats"] = f"{type(exc).__name__}: {exc}"
    return problems


@app.post("/api/v1/jobs/<job_id>/cancel")
def cancel_job(job_id: str) -> Response:
    principal = _principal()
    return _json(200, runtime.run(_jobs().cancel(principal, job_id)))


@app.get("/health")
def health() -> Response:
    problems = runtime.run(_health())
    if problems:
        log.warning("unhealthy: %s", problems)
        detail = "; ".join(f"{k}: {v}" for k, v in problems.items())
        return _json(503, {"error": f"unhealthy: {detail}", "code": "unhealthy", "status": 503})
    return Response(status_code=200, content_type="text/plain", body="ok")


def handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
