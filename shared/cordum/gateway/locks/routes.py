"""GET /api/v1/locks, POST /api/v1/locks/acquire, /renew and /release, and GET
/api/v1/admin/locks: named locks for agents that share a resource of their tenant.

Who may do what: :mod:`cordum.gateway.locks.access`; the answers and their codes:
:mod:`cordum.gateway.locks.service`; what a request may hold:
:mod:`cordum.gateway.locks.models`. Each route costs the authentication's round trip
and one script call (the admin list: two round trips).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum import runtime
from cordum.gateway.core import deps
from cordum.gateway.core.http import json_body, json_response, query
from cordum.gateway.locks import access, models
from cordum.gateway.locks.service import LockService
from cordum.store.resource_locks import ResourceLocks

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import Response

    from cordum.gateway.core.openapi import ApiPart
    from cordum.gateway.locks.models import LockCall

router = Router()


def contract() -> ApiPart:
    """This feature's part of the OpenAPI document (loaded with the document)."""
    from cordum.gateway.locks import openapi

    return openapi.PART


def service() -> LockService:
    # Built per request around the cached Redis client (registering the script is a
    # local SHA-1, no round trip): it holds no connection of its own.
    return LockService(ResourceLocks(deps.redis()))


def _call() -> LockCall:
    event = router.current_event
    models.body_size(event.body)
    return models.lock_call(json_body(event))


@router.get("/api/v1/locks")
def get_lock() -> Response:
    event = router.current_event
    who = access.reader(event)
    resource = models.name(query(event, "resource"), "resource")
    return json_response(200, runtime.run(service().get(who, resource)))


@router.post("/api/v1/locks/acquire")
def acquire_lock() -> Response:
    who = access.writer(router.current_event)
    return json_response(200, runtime.run(service().acquire(who, _call())))


@router.post("/api/v1/locks/renew")
def renew_lock() -> Response:
    who = access.writer(router.current_event)
    return json_response(200, runtime.run(service().renew(who, _call())))


@router.post("/api/v1/locks/release")
def release_lock() -> Response:
    who = access.writer(router.current_event)
    return json_response(200, runtime.run(service().release(who, _call())))


@router.get("/api/v1/admin/locks")
def list_admin_locks() -> Response:
    who = access.admin(router.current_event)
    return json_response(200, runtime.run(service().admin_list(who)))
