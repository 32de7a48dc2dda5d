"""GET /health (no auth), GET /api/v1/health, GET /api/v1/workers, GET /api/v1/workers/{id},
GET /api/v1/workers/{id}/jobs, GET /api/v1/status: the control plane as a whole, read-only;
the work is in ``cordum.gateway.system.service`` (a worker's jobs:
``cordum.gateway.system.worker_jobs``; who may read workers: ``cordum.gateway.system.access``).

Health is JSON either way, as Cordum's gateway answers: 200 ``{"status": "healthy",
"redis": "ok", "nats": "ok"}``, or 503 with ``"status": "unhealthy"`` and ``"ok"`` or
``"unavailable"`` per dependency. ``/health`` answers anyone, so the body never carries
an exception text, a host or a URL: what went wrong goes to the log. Each check is
bounded by its configured timeout and both run at once.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum import runtime
from cordum.config import settings
from cordum.gateway.core import deps
from cordum.gateway.core.errors import InvalidRequest, NotFound
from cordum.gateway.core.http import ADMIN, json_response, limit, principal
from cordum.gateway.system import service, views, worker_jobs
from cordum.gateway.system.access import worker_reader

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import Response

    from cordum.gateway.core.openapi import ApiPart

log = logging.getLogger(__name__)

router = Router()


def contract() -> ApiPart:
    """This feature's part of the OpenAPI document (loaded with the document)."""
    from cordum.gateway.system import openapi

    return openapi.PART


OK = "ok"
UNAVAILABLE = "unavailable"


def health_body(reach: service.Connectivity) -> tuple[int, dict[str, Any]]:
    parts = {"redis": UNAVAILABLE if reach.redis_error else OK,
             "nats": UNAVAILABLE if reach.nats_error else OK}
    if reach.healthy:
        return 200, {"status": "healthy", **parts}
    down = ", ".join(f"{name} {state}" for name, state in parts.items() if state != OK)
    return 503, {"status": "unhealthy", "error": f"unhealthy: {down}", "code": "unhealthy",
                 **parts}


def _answer() -> Response:
    reach = runtime.run(service.connectivity(settings()))
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


@router.get("/api/v1/workers")
def list_workers() -> Response:
    worker_reader(router.current_event)
    snapshot = runtime.run(service.worker_snapshot(deps.redis()))
    now = time.time()
    items = [views.worker_runtime(w, now)
             for w in sorted(snapshot.workers, key=lambda w: w.worker_id)]
    return json_response(200, {"items": items})


MAX_WORKER_ID_CHARS = 256
"""A longer worker id is refused (400): subjects and keys are built of it."""
WORKER_NOT_FOUND = "WORKER_NOT_FOUND"
"""Cordum's code for a worker neither the registry nor the caller's jobs know."""


def _worker_id(raw: str) -> str:
    worker_id = raw.strip()
    if not worker_id:
        raise InvalidRequest("id: worker id required")
    if len(worker_id) > MAX_WORKER_ID_CHARS:
        raise InvalidRequest(f"id: a worker id is at most {MAX_WORKER_ID_CHARS} characters")
    return worker_id


@router.get("/api/v1/workers/<worker_id>")
def get_worker(worker_id: str) -> Response:
    """One worker of the registry's snapshot (one round trip); 404 when it is not in it."""
    worker_reader(router.current_event)
    wanted = _worker_id(worker_id)
    snapshot = runtime.run(service.worker_snapshot(deps.redis()))
    found = next((w for w in snapshot.workers if w.worker_id == wanted), None)
    if found is None:
        raise NotFound("worker not found", WORKER_NOT_FOUND)
    return json_response(200, views.worker_runtime(found, time.time()))


@router.get("/api/v1/workers/<worker_id>/jobs")
def get_worker_jobs(worker_id: str) -> Response:
    """The caller's tenant's newest jobs of the worker (``worker_jobs``): ``limit`` 20 by
    default, at most 100. 404 when neither the registry nor those jobs know the worker."""
    event = router.current_event
    who = worker_reader(event)
    wanted = _worker_id(worker_id)
    count = limit(event, default=worker_jobs.DEFAULT_LIMIT, maximum=worker_jobs.MAX_LIMIT)
    items = runtime.run(worker_jobs.worker_jobs(deps.redis(), who.tenant, wanted, count))
    if not items:
        snapshot = runtime.run(service.worker_snapshot(deps.redis()))
        if all(w.worker_id != wanted for w in snapshot.workers):
            raise NotFound("worker not found", WORKER_NOT_FOUND)
    return json_response(200, {"items": items})


@router.get("/api/v1/status")
def get_status() -> Response:
    who = principal(router.current_event)
    body = runtime.run(service.status(deps.redis(), settings(), admin=who.role == ADMIN))
    return json_response(200, body)
