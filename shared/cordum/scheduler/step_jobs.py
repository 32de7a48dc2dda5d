"""The scheduler's side of workflow step job ids (:mod:`cordum.step_job_ids`, the
records in :mod:`cordum.store.step_jobs`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cordum.approval import job_hash
from cordum.errors import RetryAfter
from cordum.metrics import METRICS
from cordum.scheduler.errors import UnparseableRecord
from cordum.step_job_ids import parse_step_job_id
from cordum.store.errors import StoreError
from cordum.store.step_jobs import StepJobRecord, step_job_key

if TYPE_CHECKING:
    from cordum import protocol
    from cordum.store.jobs import JobStore

log = logging.getLogger(__name__)


async def check_step_job(store: JobStore, req: protocol.JobRequest, tenant: str,
                         retry_s: float) -> None:
    """Refuse a request under a workflow step job's id that the engine did not send
    (any other id passes, at no cost).

    The engine records each step job it sends (tenant and request hash) with the run,
    before the publish. Anything else under such an id (a forged approval gate made
    first from the bus, a step's job sent again with another input) is refused
    untouched: ``UnparseableRecord`` sends the record to the queue's DLQ, the refusal
    is counted (``requests_rejected``, reason ``step_job_not_sent``), and the job
    under that id stays the engine's to create. A record without a hash (written
    before hashes were recorded) checks the tenant only.
    """
    if parse_step_job_id(req.job_id) is None:
        return
    try:
        raw = await store.get_payload(step_job_key(req.job_id))
    except StoreError as exc:
        raise RetryAfter(str(exc), retry_s) from exc
    record = StepJobRecord.from_json(raw)
    if record is None:
        why = "the workflow engine sent no job under this id"
    elif record.tenant != tenant:
        why = f"the engine's job under this id is tenant {record.tenant!r}'s"
    elif record.request_hash and record.request_hash != job_hash(req):
        why = "the request is not the one the workflow engine sent"
    else:
        return
    METRICS.count("requests_rejected", reason="step_job_not_sent")
    log.error("refusing job request %s (tenant %r, topic %r): %s", req.job_id, tenant,
              req.topic, why)
    raise UnparseableRecord(f"step job {req.job_id}: {why}")
