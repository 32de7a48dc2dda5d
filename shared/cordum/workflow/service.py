"""The workflow functions' entry points: a batch of run events, and the reconciler tick.

Run events come from two queues: the FIFO event queue (one message group per run) and
the timer queue, and go through the one SQS batch loop
(:func:`cordum.lambdas.sqs_batch.run_batch`): events of one run are applied in order,
and once one of them is to come again its run's later events in the batch come again
after it; events of different runs are applied concurrently. Any event not applied
comes back in a second, not after the queue's visibility timeout (minutes): a retried
event holds up its run's later ones.
"""

from __future__ import annotations

import logging
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any

from cordum.bus.workflow_events import InvalidRunEvent, RunEvent
from cordum.errors import RetryAfter
from cordum.lambdas.sqs_batch import Redeliver, VisibilityDelayer, run_batch
from cordum.lambdas.ticks import scheduled
from cordum.metrics import METRICS

if TYPE_CHECKING:
    from cordum.lambdas.sqs_batch import Record
    from cordum.workflow.runner import WorkflowRunner

log = logging.getLogger(__name__)

RETRY_DELAY_S = 1.0
"""When a retried run event (its run locked, Redis or NATS down) is delivered again."""
RETRY = Redeliver(RETRY_DELAY_S)


@lru_cache(maxsize=2)
def _delayer_for(fifo: bool) -> VisibilityDelayer:
    from cordum.config import settings

    cfg = settings()
    return VisibilityDelayer(cfg.workflow_queue_url if fifo else cfg.workflow_timer_queue_url)


def _delayer(record: Record) -> VisibilityDelayer:
    return _delayer_for(str(record.get("eventSourceARN", "")).endswith(".fifo"))


def handle_batch(event: dict[str, Any], context: Any = None) -> dict[str, list[dict[str, str]]]:
    """The partial batch response of a batch of run events."""
    from cordum.workflow.wiring import default_runner

    return run_batch(event, partial(_apply, default_runner()), _delayer, context)


async def _apply(runner: WorkflowRunner, record: Record) -> Redeliver | None:
    message_id = record.get("messageId", "?")
    try:
        event = RunEvent.parse(record.get("body") or "")
    except InvalidRunEvent as exc:
        # Never parseable: failed, so the redrive keeps it in the queue's DLQ.
        log.error("run event %s is not one: %s", message_id, exc)
        METRICS.count("workflow_events_invalid")
        return RETRY
    try:
        outcome = await runner.apply(event)
    except RetryAfter as exc:
        log.info("run event %s (%s %s) retried: %s", message_id, event.kind, event.run_id, exc)
        return RETRY
    except Exception:
        log.exception("run event %s (%s %s) failed", message_id, event.kind, event.run_id)
        return RETRY
    log.info("run %s: %s", event.run_id, outcome)
    METRICS.count("workflow_events", kind=event.kind)
    return None


def tick(context: Any) -> dict[str, Any]:
    """The workflow reconciler, ticking until the invocation's time runs short."""
    from cordum.workflow.reconciler import tick_invocation

    return scheduled(context, tick_invocation)
