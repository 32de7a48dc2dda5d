"""The workflow functions' entry points: a batch of run events, and the reconciler tick.

Run events come from two queues: the FIFO event queue (one message group per
run) and the timer queue. Within a FIFO batch, once an event of a run is to be
retried, the run's later events in the batch are reported failed too, so they
are delivered again after it and in order (SQS FIFO's rule for partial batch
responses). Events of different runs are applied concurrently.
"""

from __future__ import annotations

import asyncio
import logging
from functools import lru_cache
from typing import Any

from cordum import runtime
from cordum.bus.workflow_events import InvalidRunEvent, RunEvent
from cordum.metrics import METRICS
from cordum.scheduler.batch import VisibilityDelayer
from cordum.scheduler.errors import RetryAfter

log = logging.getLogger(__name__)

RETRY_DELAY_S = 1.0
"""When a retried run event (its run locked, Redis or NATS down) is delivered again."""


@lru_cache(maxsize=2)
def _delayer_for(fifo: bool) -> VisibilityDelayer:
    from cordum.config import settings

    cfg = settings()
    return VisibilityDelayer(cfg.workflow_queue_url if fifo else cfg.workflow_timer_queue_url)


def _delayer(record: dict[str, Any]) -> VisibilityDelayer:
    return _delayer_for(str(record.get("eventSourceARN", "")).endswith(".fifo"))


def handle_batch(event: dict[str, Any], context: Any = None) -> dict[str, list[dict[str, str]]]:
    """The partial batch response of a batch of run events."""
    from cordum.workflow.wiring import default_runner

    runner = default_runner()
    records = event.get("Records") or []
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        group = (record.get("attributes") or {}).get("MessageGroupId") \
            or record.get("messageId", "")
        groups.setdefault(group, []).append(record)
    failed: set[str] = set()

    async def run_group(group: list[dict[str, Any]]) -> None:
        for index, record in enumerate(group):
            if not await _apply(runner, record):
                failed.update(r.get("messageId", "") for r in group[index:])
                return

    async def run_all() -> None:
        runtime.invocation_deadline.set(runtime.lambda_deadline(context))
        await asyncio.gather(*(run_group(g) for g in groups.values()))

    runtime.run(run_all())
    METRICS.flush()
    for record in records:
        if record.get("messageId", "") in failed:
            # Back in a second, not after the queue's visibility timeout (minutes):
            # a retried event holds up its run's later ones.
            _delayer(record).delay(record.get("receiptHandle", ""), RETRY_DELAY_S)
    return {"batchItemFailures": [{"itemIdentifier": r.get("messageId", "")}
                                  for r in records if r.get("messageId", "") in failed]}


async def _apply(runner: Any, record: dict[str, Any]) -> bool:
    message_id = record.get("messageId", "?")
    try:
        event = RunEvent.parse(record.get("body") or "")
    except InvalidRunEvent as exc:
        # Never parseable: failed, so the redrive keeps it in the queue's DLQ.
        log.error("run event %s is not one: %s", message_id, exc)
        METRICS.count("workflow_events_invalid")
        return False
    try:
        outcome = await runner.apply(event)
    except RetryAfter as exc:
        log.info("run event %s (%s %s) retried: %s", message_id, event.kind, event.run_id, exc)
        return False
    except Exception:
        log.exception("run event %s (%s %s) failed", message_id, event.kind, event.run_id)
        return False
    log.info("run %s: %s", event.run_id, outcome)
    METRICS.count("workflow_events", kind=event.kind)
    return True


def tick(context: Any) -> dict[str, Any]:
    """The workflow reconciler, ticking until the invocation's time runs short."""
    from cordum.workflow.reconciler import tick_invocation

    report = runtime.run(tick_invocation(context.get_remaining_time_in_millis))
    METRICS.flush()
    return report
