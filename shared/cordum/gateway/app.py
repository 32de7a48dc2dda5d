"""The HTTP API as a powertools REST resolver (API Gateway v1 proxy events).

Each feature of the API is a package of ``cordum.gateway`` (its routes, service,
views, models, schemas and OpenAPI part) over ``cordum.gateway.core``; features
never import each other. This module wires them: :data:`FEATURES` lists each one's
package, whose routes module's Router it includes and whose part of the OpenAPI
document it publishes to the docs feature. A routes module is imported, and its Router
included, by the first request whose path is the feature's (:data:`SEGMENTS`): a cold
start pays for the one feature it serves, and a job submit never builds the models of
policies or workflows. A new feature is a new package, one more entry in both tables
and one in :func:`_import_routes` (and its name in the features layer of
tests/lint/layers.py, which the lint asks for).

Domain errors become HTTP answers here, in one place: one handler per kind of
``cordum.gateway.core.errors`` whose answer differs (headers, body fields), and the
store's failures as 503 ``store_unavailable``. Routes only authenticate, parse
and call a service.

Every answer is the gateway's own, with an ``X-Request-Id``: an exception that
left ``handle`` would reach the caller as API Gateway's bare 502. So a request
path or body that is not text the routes can take (control characters, not UTF-8)
is refused before routing, and anything unexpected becomes a 500 ``internal_error``
whose detail is only in the log, under the request id.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import threading
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response

from cordum.gateway.core.errors import (
    GatewayError,
    InvalidRequest,
    NotFound,
    PolicyDenied,
    RetryableConflict,
    StoreUnavailable,
    Throttled,
    Unavailable,
)
from cordum.gateway.core.http import body_text, check_path, json_response
from cordum.gateway.docs import contract
from cordum.metrics import METRICS
from cordum.store.errors import LockUnavailable, StoreError
from cordum.workflow.errors import WorkflowError

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from pydantic import ValidationError

    from cordum.gateway.core.feature import Feature

log = logging.getLogger(__name__)

INTERNAL_ERROR = {"error": "internal error", "code": "internal_error", "status": 500}
WORKFLOW_RETRY_AFTER_S = 1
"""Retry-After of a workflow refusal that may pass when sent again."""

FEATURES: tuple[str, ...] = ("jobs", "approvals", "dlq", "system", "workflows", "events",
                             "policy", "audit", "artifacts", "configs", "schema_registry",
                             "locks", "capabilities", "docs")
"""Every feature package, in the order the OpenAPI document lists them."""

API_PREFIX = "/api/v1/"
SEGMENTS: dict[str, str] = {
    "jobs": "jobs", "traces": "jobs", "approvals": "approvals", "dlq": "dlq",
    "health": "system", "status": "system", "workers": "system",
    "workflows": "workflows", "workflow-runs": "workflows", "policy": "policy",
    "audit": "audit", "artifacts": "artifacts", "memory": "artifacts", "config": "configs",
    "schemas": "schema_registry", "topics": "schema_registry", "locks": "locks",
    "admin": "locks", "me": "capabilities", "docs": "docs", "openapi.json": "docs",
}
"""The feature serving each first path segment (after ``/api/v1/``, or of the path when it
has no such prefix: ``/health``). A route's parameters never match a ``/``, so a path can
only match routes whose segment is its own: loading that one feature finds every route the
path could match, and as no segment is two features', the order in which features were
loaded never decides a match. tests/unit/test_gateway_features_lazy.py checks this table
against every registered route."""


def load_feature(name: str) -> Feature:
    """The routes module of feature ``name``, imported and its Router included in
    :data:`app` on first use. Each routes module imports its service, models and stores,
    so a cold start pays for the feature its first request needs, not for all thirteen."""
    with _loading:
        feature = _loaded.get(name)
        if feature is None:
            feature = _import_routes(name)
            app.include_router(feature.router)
            _loaded[name] = feature
        return feature


def load_all() -> None:
    """Every feature's routes, as the OpenAPI document and its route checks need them."""
    for name in FEATURES:
        load_feature(name)


def segment(path: str) -> str:
    """The first segment of ``path`` after ``/api/v1/`` (of the path when it has no such
    prefix), which names the feature serving it in :data:`SEGMENTS`."""
    rest = path[len(API_PREFIX):] if path.startswith(API_PREFIX) else path[1:]
    return rest.partition("/")[0]


def _import_routes(name: str) -> Feature:
    # One literal import per feature, so the layer lint sees the app wiring each one.
    if name == "jobs":
        from cordum.gateway.jobs import routes as jobs

        return jobs
    elif name == "approvals":
        from cordum.gateway.approvals import routes as approvals

        return approvals
    elif name == "dlq":
        from cordum.gateway.dlq import routes as dlq

        return dlq
    elif name == "system":
        from cordum.gateway.system import routes as system

        return system
    elif name == "workflows":
        from cordum.gateway.workflows import routes as workflows

        return workflows
    elif name == "events":
        from cordum.gateway.events import routes as events

        return events
    elif name == "policy":
        from cordum.gateway.policy import routes as policy

        return policy
    elif name == "audit":
        from cordum.gateway.audit import routes as audit

        return audit
    elif name == "artifacts":
        from cordum.gateway.artifacts import routes as artifacts

        return artifacts
    elif name == "configs":
        from cordum.gateway.configs import routes as configs

        return configs
    elif name == "schema_registry":
        from cordum.gateway.schema_registry import routes as schema_registry

        return schema_registry
    elif name == "locks":
        from cordum.gateway.locks import routes as locks

        return locks
    elif name == "capabilities":
        # Not a feature: it asks every feature's access checks (a layer of its own).
        from cordum.gateway.capabilities import routes as capabilities

        return capabilities
    elif name == "docs":
        from cordum.gateway.docs import routes as docs

        return docs
    raise KeyError(name)


def _load_for(event: Mapping[str, Any]) -> None:
    """The feature serving the event's path, loaded (none for a path no feature serves)."""
    path = event.get("path") if isinstance(event, Mapping) else None
    if isinstance(path, str):
        name = SEGMENTS.get(segment(path))
        if name is not None and name not in _loaded:
            load_feature(name)


class _Resolver(APIGatewayRestResolver):
    """The REST resolver, loading the feature a request's path needs before it routes."""

    def resolve(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        _load_for(event)
        return super().resolve(event, context)

    async def resolve_async(self, event: Mapping[str, Any],
                            context: LambdaContext) -> dict[str, Any]:
        _load_for(event)
        return await super().resolve_async(event, context)

    def load_all(self) -> None:
        """Every feature's routes included (what ``docs.openapi.registered_routes`` lists)."""
        load_all()


_loading = threading.RLock()
_loaded: dict[str, Feature] = {}
app = _Resolver()
contract.publish(lambda: [load_feature(name).contract() for name in FEATURES])


def _retry_after(seconds: float) -> dict[str, str]:
    """Retry-After in whole seconds, at least 1."""
    return {"Retry-After": str(max(1, math.ceil(seconds)))}


@app.exception_handler(GatewayError)
def _refused(exc: GatewayError) -> Response:
    """Every kind whose answer is its status and its body alone."""
    return json_response(exc.status, exc.body())


@app.exception_handler(RetryableConflict)
def _retryable_conflict(exc: RetryableConflict) -> Response:
    return json_response(exc.status, {**exc.body(), "retryable": True},
                         _retry_after(exc.retry_after_s))


@app.exception_handler(Throttled)
def _throttled(exc: Throttled) -> Response:
    return json_response(exc.status, exc.body(), _retry_after(exc.retry_after_s))


@app.exception_handler(Unavailable)
def _unavailable(exc: Unavailable) -> Response:
    """503: which part is down, and when to try again."""
    return json_response(exc.status, {**exc.body(), "unavailable": exc.part},
                         _retry_after(exc.retry_after_s))


@app.exception_handler(PolicyDenied)
def _policy_denied(exc: PolicyDenied) -> Response:
    # The denied job exists: its ids let the caller look it up.
    return json_response(exc.status, {**exc.body(), "job_id": exc.job_id,
                                      "trace_id": exc.trace_id},
                         {"X-Trace-Id": exc.trace_id})


@app.exception_handler(WorkflowError)
def _workflow_refused(exc: WorkflowError) -> Response:
    body = {"error": exc.message, "code": exc.code, "status": exc.status}
    if not exc.retryable:
        return json_response(exc.status, body)
    # A run lock held for a moment, or the tenant's open runs at their limit.
    return json_response(exc.status, {**body, "retryable": True},
                         _retry_after(WORKFLOW_RETRY_AFTER_S))


@app.exception_handler([StoreError, LockUnavailable])
def _store_unavailable(exc: Exception) -> Response:
    return _unavailable(StoreUnavailable())


@app.exception_handler(ValueError)
def _value_error(exc: ValueError) -> Response:
    """pydantic's ValidationError (a ValueError) as a 400. The handler is registered on
    ValueError so that the app need not import pydantic at cold start (the routes whose
    models raise it do); any other ValueError gets the answer of the handler the resolver
    would have found without this one."""
    core = sys.modules.get("pydantic_core")
    if core is not None and isinstance(exc, core.ValidationError):
        return _invalid_body(exc)
    handlers = app.exception_handler_manager.get_registered_handlers()
    handler = next(handlers[cls] for cls in type(exc).__mro__
                   if cls is not ValueError and cls in handlers)  # Exception's at worst
    return handler(exc)


def _invalid_body(exc: ValidationError) -> Response:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    missing = first["type"] == "missing"
    refused = InvalidRequest(f"{where} is required" if missing else f"{where}: {first['msg']}")
    return json_response(refused.status, refused.body())


@app.not_found
def _not_found(exc: Exception) -> Response:
    refused = NotFound("not found")
    return json_response(refused.status, refused.body())


@app.exception_handler(Exception)
def _unexpected(exc: Exception) -> Response:
    log.error("unhandled error, request %s", request_id(app.current_event.raw_event),
              exc_info=exc)
    return json_response(500, INTERNAL_ERROR)


def request_id(event: dict[str, Any]) -> str:
    """The id API Gateway gave the request (``handle`` fills one in when it has none)."""
    seen = event.get("requestContext")
    return str(seen.get("requestId") or "") if isinstance(seen, dict) else ""


def _error(status: int, body: dict[str, Any]) -> dict[str, Any]:
    """A proxy response built without the resolver, shaped as the resolver's are."""
    return {"statusCode": status, "body": json.dumps(body, separators=(",", ":")),
            "isBase64Encoded": False, "multiValueHeaders": {"Content-Type": ["application/json"]}}


def _resolve(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    try:
        check_path(event.get("path"))
        text = body_text(event)
    except GatewayError as exc:
        return _error(exc.status, exc.body())
    # The routes read the body as the UTF-8 text it now is, however it arrived.
    return app.resolve({**event, "body": text, "isBase64Encoded": False}, context)


def handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    rid = request_id(event) or uuid.uuid4().hex
    # The id goes into the event, so the log line of a failure names the one the caller sees.
    seen = event.get("requestContext")
    event = {**event, "requestContext": {**(seen if isinstance(seen, dict) else {}),
                                         "requestId": rid}}
    try:
        response = _resolve(event, context)
    except Exception:  # what the resolver lets through: a bare 502 otherwise
        log.exception("unhandled error, request %s", rid)
        response = _error(500, INTERNAL_ERROR)
    try:
        METRICS.flush()  # submit-time decisions, idempotent repeats, ...
    except Exception:
        log.exception("metrics flush failed, request %s", rid)
    # Every answer, errors and 404s included, carries the id a caller quotes to us.
    response.setdefault("multiValueHeaders", {})["X-Request-Id"] = [rid]
    return response


def write_openapi(path: str) -> None:
    """The OpenAPI document of every feature published above, as a file: the dashboard's
    build (dashboard/build.py) generates its API types from it, so a changed route or
    answer breaks the dashboard's type check. ``python -m cordum.gateway.app PATH``."""
    from pathlib import Path

    from cordum.gateway.docs import openapi

    Path(path).write_text(json.dumps(openapi.document(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m cordum.gateway.app OPENAPI_PATH")
    write_openapi(sys.argv[1])
