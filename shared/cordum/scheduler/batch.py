"""SQS batches for the submit and result functions: partial batch responses.

A record that is done is left out of ``batchItemFailures`` (SQS deletes it).
``RetryAfter`` sets that record's visibility timeout to the delay and reports
it failed, so SQS delivers it again after the delay. A record that is not a
CAP packet is reported failed and made visible again at once: after the
queue's maxReceiveCount it moves to the DLQ, and it never fails the rest of
the batch.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import math
import os
from typing import TYPE_CHECKING, Any

from cordum import runtime
from cordum.metrics import METRICS
from cordum.scheduler.errors import RetryAfter, UnparseableRecord

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from cordum.scheduler.packets import Outcome

log = logging.getLogger(__name__)

MAX_VISIBILITY_S = 12 * 3600


def record_bytes(body: str) -> bytes:
    try:
        return base64.b64decode(body.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise UnparseableRecord(f"body is not base64: {exc}") from exc


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


def process_batch(
    event: dict[str, Any],
    handle: Callable[[bytes], Awaitable[Outcome]],
    delayer: VisibilityDelayer,
    context: Any = None,
) -> dict[str, list[dict[str, str]]]:
    """The partial batch response: ``{"batchItemFailures": [{"itemIdentifier": id}, ...]}``.

    Records are handled concurrently on the container's event loop. (The
    powertools batch processor would do the same inside Lambda, but outside it
    runs ``asyncio.run`` on a new loop, which the cached clients are not bound
    to; it also costs about 190 ms of import at cold start.) ``context`` is the
    Lambda context: the records see its deadline as ``runtime.invocation_deadline``.
    """
    records = event.get("Records") or []
    deadline = runtime.lambda_deadline(context)

    async def on_record(record: dict[str, Any]) -> bool:
        message_id = record.get("messageId", "?")
        try:
            outcome = await handle(record_bytes(record.get("body") or ""))
        except RetryAfter as exc:
            log.info("retry %s: %s", message_id, exc)
            delayer.delay(record.get("receiptHandle", ""), exc.delay_s)
            return False
        except UnparseableRecord as exc:
            # Waiting will not make it parseable: back at once, so the redrive
            # moves it to the DLQ after maxReceiveCount receives, not hours.
            log.error("unparseable record %s: %s", message_id, exc)
            delayer.delay(record.get("receiptHandle", ""), 0)
            return False
        except Exception:
            log.exception("record %s failed", message_id)
            return False
        log.info("%s %s %s %s", outcome.action, outcome.job_id, outcome.state, outcome.detail)
        return True

    async def run_all() -> list[bool]:
        # Set in the run's own task, which the records' tasks copy: the deadline
        # ends with this batch instead of staying behind in the caller's context.
        runtime.invocation_deadline.set(deadline)
        return list(await asyncio.gather(*(on_record(r) for r in records)))

    done = runtime.run(run_all())
    METRICS.flush()
    return {"batchItemFailures": [{"itemIdentifier": r.get("messageId", "")}
                                  for r, ok in zip(records, done, strict=True) if not ok]}


def queue_url(env_var: str) -> str | None:
    return os.environ.get(env_var) or None
