"""The publish that announces a stored job on ``sys.job.submit``, and the removal of one
never announced: a submitted job and a DLQ retry are announced alike."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cordum import protocol
from cordum.gateway.core.errors import BusUnavailable
from cordum.store.errors import StoreError

if TYPE_CHECKING:
    from cordum.bus.publisher import NatsPublisher
    from cordum.store.jobs import JobStore, NewJob

log = logging.getLogger(__name__)


async def announce(store: JobStore, publisher: NatsPublisher, job: NewJob,
                   req: protocol.JobRequest) -> None:
    """Publish a stored job on sys.job.submit; when the bus refuses it, remove the job
    (never announced, it must not stay half-written): BusUnavailable."""
    packet = protocol.packet(trace_id=job.trace_id, sender_id=protocol.SENDER_GATEWAY,
                             job_request=req)
    try:
        await publisher.publish_durable(protocol.SUBJECT_SUBMIT, packet, msg_id=job.job_id)
    except Exception as exc:
        log.error("job %s: publish failed: %s", job.job_id, exc)
        await discard(store, job)
        raise BusUnavailable from exc


async def discard(store: JobStore, job: NewJob) -> None:
    """Remove a job that was stored and never announced (a failure is only logged)."""
    try:
        await store.discard(job)
    except StoreError as exc:
        log.error("job %s: could not remove the unpublished job: %s", job.job_id, exc)
