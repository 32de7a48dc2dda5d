"""GET /api/v1/jobs, GET /api/v1/jobs/{id}/decisions, GET /api/v1/workers, GET /api/v1/status.

Read-only views of the caller's tenant; the work is in ``cordum.gateway.queries`` (jobs)
and ``cordum.gateway.system`` (workers, status).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum import runtime
from cordum.config import settings
from cordum.gateway import deps, queries, system, views
from cordum.gateway.errors import Forbidden, InvalidRequest, NotFound
from cordum.gateway.http import ADMIN, json_response, limit, principal, query, require_role
from cordum.gateway.paging import Position
from cordum.store.jobs import JobState

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from cordum.gateway.auth import Principal

router = Router()


def _time(event: BaseProxyEvent, name: str) -> int | None:
    raw = query(event, name)
    if not raw:
        return None
    try:
        return queries.parse_time_us(raw)
    except ValueError:
        raise InvalidRequest(f"{name} must be an RFC 3339 time or an epoch number") from None


def _job_filter(event: BaseProxyEvent, who: Principal) -> queries.JobFilter:
    tenant = query(event, "tenant")
    if tenant and tenant != who.tenant:
        raise Forbidden("tenant access denied")
    state = query(event, "state").strip().upper()
    if state and state not in JobState.__members__:
        raise InvalidRequest(f"state must be one of {', '.join(JobState)}")
    return queries.JobFilter(
        tenant=who.tenant,
        state=state,
        topic=query(event, "topic"),
        team=query(event, "team"),
        trace_id=query(event, "trace_id"),
        after_us=_time(event, "updated_after"),
        before_us=_time(event, "updated_before"),
    )


def _cursor(event: BaseProxyEvent) -> Position | None:
    raw = query(event, "cursor")
    if not raw:
        return None
    try:
        return Position.decode(raw)
    except ValueError:
        raise InvalidRequest("cursor is not valid") from None


@router.get("/api/v1/jobs")
def list_jobs() -> Response:
    event = router.current_event
    who = principal(event)
    flt = _job_filter(event, who)
    page = runtime.run(queries.list_jobs(deps.redis(), flt, limit(event), _cursor(event)))
    return json_response(200, {"items": page.items, "next_cursor": page.next_cursor})


@router.get("/api/v1/jobs/<job_id>/decisions")
def job_decisions(job_id: str) -> Response:
    who = principal(router.current_event)
    meta = runtime.run(queries.decision_meta(deps.redis(), job_id))
    if not meta:
        raise NotFound("job not found")
    if meta.get("tenant", "") != who.tenant:
        raise Forbidden("tenant access denied")
    return json_response(200, views.safety_decisions(meta))


@router.get("/api/v1/workers")
def list_workers() -> Response:
    require_role(principal(router.current_event))
    snapshot = runtime.run(system.worker_snapshot(deps.redis()))
    now = time.time()
    items = [views.worker_runtime(w, now)
             for w in sorted(snapshot.workers, key=lambda w: w.worker_id)]
    return json_response(200, {"items": items})


@router.get("/api/v1/status")
def get_status() -> Response:
    who = principal(router.current_event)
    body = runtime.run(system.status(deps.redis(), settings(), admin=who.role == ADMIN))
    return json_response(200, body)
