"""The HTTP API as a powertools REST resolver (API Gateway v1 proxy events).

Each area of the API is a Router in ``cordum.gateway.routes``. Domain errors
become HTTP answers here, in one place; routes only authenticate, parse and
call a service.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from pydantic import ValidationError

from cordum.gateway.errors import ApiError
from cordum.gateway.http import json_response
from cordum.gateway.routes import approvals as approval_routes
from cordum.gateway.routes import dlq as dlq_routes
from cordum.gateway.routes import docs as doc_routes
from cordum.gateway.routes import health as health_routes
from cordum.gateway.routes import jobs as job_routes
from cordum.gateway.routes import reads as read_routes
from cordum.metrics import METRICS

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

app = APIGatewayRestResolver()

# One line per router.
app.include_router(job_routes.router)
app.include_router(health_routes.router)
app.include_router(approval_routes.router)
app.include_router(dlq_routes.router)
app.include_router(read_routes.router)
app.include_router(doc_routes.router)


@app.exception_handler(ApiError)
def _api_error(exc: ApiError) -> Response:
    return json_response(exc.status, exc.body(), exc.headers)


@app.exception_handler(ValidationError)
def _invalid_body(exc: ValidationError) -> Response:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    missing = first["type"] == "missing"
    message = f"{where} is required" if missing else f"{where}: {first['msg']}"
    return json_response(400, {"error": message, "code": "invalid_request", "status": 400})


@app.not_found
def _not_found(exc: Exception) -> Response:
    return json_response(404, {"error": "not found", "code": "not_found", "status": 404})


def handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    try:
        response = app.resolve(event, context)
    finally:
        METRICS.flush()  # submit-time decisions, idempotent repeats, ...
    # Every answer, errors and 404s included, carries the id a caller quotes to us.
    request_id = (event.get("requestContext") or {}).get("requestId") or uuid.uuid4().hex
    response.setdefault("multiValueHeaders", {})["X-Request-Id"] = [request_id]
    return response
