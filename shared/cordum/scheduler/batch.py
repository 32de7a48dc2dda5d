"""The submit and result queues' records, handed to the engine: what their failures mean.

Each record's body is a base64 CAP packet. The batch loop itself (partial batch
responses, visibility delays, the invocation's deadline) is
:func:`cordum.lambdas.sqs_batch.run_batch`; here a record's outcome is mapped to it:

- ``RetryAfter``: delivered again after its delay;
- not a CAP packet (:class:`UnparseableRecord`): waiting will not make it parseable,
  so it is made visible again at once and the redrive moves it to the DLQ after the
  queue's maxReceiveCount receives, not hours;
- anything else raised: back after the queue's visibility timeout.
"""

from __future__ import annotations

import base64
import binascii
import logging
from typing import TYPE_CHECKING, Any

from cordum.errors import RetryAfter
from cordum.lambdas.sqs_batch import Redeliver, run_batch
from cordum.scheduler.errors import UnparseableRecord

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from cordum.lambdas.sqs_batch import Record, RecordHandler, VisibilityDelayer
    from cordum.scheduler.packets import Outcome

log = logging.getLogger(__name__)


def record_bytes(body: str) -> bytes:
    try:
        return base64.b64decode(body.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise UnparseableRecord(f"body is not base64: {exc}") from exc


def packet_handler(handle: Callable[[bytes], Awaitable[Outcome]]) -> RecordHandler:
    """The record handler of an engine entry point that takes a packet's bytes."""

    async def on_record(record: Record) -> Redeliver | None:
        message_id = record.get("messageId", "?")
        try:
            outcome = await handle(record_bytes(record.get("body") or ""))
        except RetryAfter as exc:
            log.info("retry %s: %s", message_id, exc)
            return Redeliver(exc.delay_s)
        except UnparseableRecord as exc:
            log.error("unparseable record %s: %s", message_id, exc)
            return Redeliver(0)
        log.info("%s %s %s %s", outcome.action, outcome.job_id, outcome.state, outcome.detail)
        return None

    return on_record


def process_batch(
    event: dict[str, Any],
    handle: Callable[[bytes], Awaitable[Outcome]],
    delayer: VisibilityDelayer,
    context: Any = None,
) -> dict[str, list[dict[str, str]]]:
    """The partial batch response of a batch of packets for ``handle`` (the engine's
    ``handle_request`` or ``handle_result``)."""
    return run_batch(event, packet_handler(handle), delayer, context)
