"""Lambda: saga rollback of one failed workflow.

Invoked asynchronously by the result function with
``{"tenant": "...", "workflow_id": "..."}``, the failed job's stored tenant and
workflow. Dispatches that tenant's compensation jobs of the workflow, newest
first, and returns the counts. When compensation jobs are left on the stack (a
publish failed, or the invocation ran out of time) the handler raises, so
Lambda's own retry of the asynchronous event runs the rollback again and it
resumes where it stopped.
"""

from __future__ import annotations

import logging
from typing import Any

from cordum import runtime
from cordum.logs import setup
from cordum.scheduler.saga import CompensationPublishError, default_saga

setup()
log = logging.getLogger("cordum.saga")

END_MARGIN_S = 3.0
"""Kept free before the invocation's hard end: the push-back of an entry and the
lock release (one Redis call each) may run past the rollback's deadline."""


class RollbackIncomplete(RuntimeError):
    """Compensation jobs are left on the stack; raised so the event is retried."""


def _text(event: Any, name: str) -> str:
    value = event.get(name) if isinstance(event, dict) else None
    return value.strip() if isinstance(value, str) else ""


def handler(event: Any, context: Any) -> dict[str, Any]:
    workflow_id, tenant = _text(event, "workflow_id"), _text(event, "tenant")
    # A retry cannot fix the event: answer instead of raising. Without a tenant
    # there is no saga to name (an event of the earlier shape has none).
    if not workflow_id:
        log.error("saga rollback: event without workflow_id ignored: %r", event)
        return {"error": "workflow_id required"}
    if not tenant:
        log.error("saga rollback: event without tenant ignored: %r", event)
        return {"error": "tenant required"}
    end = runtime.lambda_deadline(context)
    deadline = None if end is None else end - END_MARGIN_S
    try:
        report = runtime.run(default_saga().rollback(tenant, workflow_id, deadline=deadline))
    except CompensationPublishError as exc:
        log.error("%s; counts %s", exc, exc.report.counts())
        raise
    counts = report.counts()
    if not report.complete:
        raise RollbackIncomplete(
            f"saga rollback of {workflow_id} (tenant {tenant}) stopped: {counts}")
    return counts
