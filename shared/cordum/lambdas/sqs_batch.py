"""SQS batches with partial batch responses: the one loop every queue-fed function runs.

A record that is done is left out of ``batchItemFailures`` (SQS deletes it). A record
whose handler asks for it again (:class:`Redeliver`) is reported failed and its
visibility timeout set to the delay, so SQS delivers it again then instead of after
the queue's visibility timeout (minutes). A handler that raises has its record reported
failed as it is, back after that timeout. One record never fails the rest of the batch.

FIFO queues: the records of one message group are handled in order, and once one of
them is to come again the group's later records in the batch are reported failed too,
with the same delay, so SQS delivers them again after it and in order (SQS FIFO's rule
for partial batch responses). Records of different groups, and all records of a
standard queue (which has no groups), are handled concurrently.

What a record means and which of its failures are worth a retry is the handler's: the
scheduler's CAP packets (:mod:`cordum.scheduler.batch`), the workflow's run events
(:mod:`cordum.workflow.service`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from cordum import runtime
from cordum.metrics import METRICS

log = logging.getLogger(__name__)

MAX_VISIBILITY_S = 12 * 3600
"""SQS's longest visibility timeout."""

Record = dict[str, Any]
"""One SQS record of a Lambda event (``messageId``, ``receiptHandle``, ``body``, ...)."""


@dataclass(frozen=True, slots=True)
class Redeliver:
    """What a handler returns for a record that must come again: after ``delay_s``
    seconds (0: at once, so a record that can never be handled reaches the queue's DLQ
    after its maxReceiveCount receives, not hours)."""

    delay_s: float


RecordHandler = Callable[[Record], Awaitable[Redeliver | None]]
"""Handles one record: None when it is done, :class:`Redeliver` when it must come
again; anything it raises is logged and the record comes back after the queue's
visibility timeout."""


class VisibilityDelayer:
    """Sets a record's visibility timeout (boto3 is imported only when needed)."""

    def __init__(self, queue_url: str | None) -> None:
        self._queue_url = queue_url
        self._client: Any = None

    def delay(self, receipt_handle: str, seconds: float) -> None:
        if not self._queue_url:
            log.warning("no queue URL configured: retry uses the queue's visibility timeout")
            return
        if self._client is None:
            from cordum import aws

            self._client = aws.client("sqs")
        try:
            self._client.change_message_visibility(
                QueueUrl=self._queue_url,
                ReceiptHandle=receipt_handle,
                VisibilityTimeout=min(MAX_VISIBILITY_S, max(0, math.ceil(seconds))),
            )
        except Exception as exc:  # the record still retries, after the default timeout
            log.warning("change_message_visibility failed: %s", exc)


def queue_url(env_var: str) -> str | None:
    """The URL of a function's queue, from the environment the stack sets (None: unset)."""
    return os.environ.get(env_var) or None


def run_batch(
    event: dict[str, Any],
    handle: RecordHandler,
    delayer: VisibilityDelayer | Callable[[Record], VisibilityDelayer],
    context: Any = None,
) -> dict[str, list[dict[str, str]]]:
    """The partial batch response: ``{"batchItemFailures": [{"itemIdentifier": id}, ...]}``.

    Records are handled on the container's event loop. (The powertools batch processor
    would do the same inside Lambda, but outside it runs ``asyncio.run`` on a new loop,
    which the cached clients are not bound to; it also costs about 190 ms of import at
    cold start.) ``context`` is the Lambda context: the records see its deadline as
    ``runtime.invocation_deadline``. ``delayer`` is the queue's, or picks one per record
    for a function fed by more than one queue.
    """
    records: list[Record] = event.get("Records") or []
    deadline = runtime.lambda_deadline(context)
    delayer_of = (lambda _record: delayer) if isinstance(delayer, VisibilityDelayer) \
        else delayer
    groups: dict[str, list[int]] = {}
    for index, record in enumerate(records):
        groups.setdefault(_group(record, index), []).append(index)
    done = [True] * len(records)

    async def run_group(indexes: list[int]) -> None:
        for position, index in enumerate(indexes):
            redeliver = await _outcome(handle, records[index])
            if redeliver is True:
                continue
            for later in indexes[position:]:
                done[later] = False
                if isinstance(redeliver, Redeliver):
                    delayer_of(records[later]).delay(
                        records[later].get("receiptHandle", ""), redeliver.delay_s)
            return

    async def run_all() -> None:
        # Set in the run's own task, which the records' tasks copy: the deadline
        # ends with this batch instead of staying behind in the caller's context.
        runtime.invocation_deadline.set(deadline)
        await asyncio.gather(*(run_group(g) for g in groups.values()))

    try:
        runtime.run(run_all())
    finally:
        METRICS.flush()
    return {"batchItemFailures": [{"itemIdentifier": r.get("messageId", "")}
                                  for r, ok in zip(records, done, strict=True) if not ok]}


async def _outcome(handle: RecordHandler, record: Record) -> Redeliver | bool:
    """True when the record is done; else how it comes again (False: after the queue's
    visibility timeout)."""
    try:
        redeliver = await handle(record)
    except Exception:
        log.exception("record %s failed", record.get("messageId", "?"))
        return False
    return True if redeliver is None else redeliver


def _group(record: Record, index: int) -> str:
    """The record's FIFO message group; a record of a standard queue is a group of one."""
    group = (record.get("attributes") or {}).get("MessageGroupId")
    return f"group {group}" if group else f"record {index}"
