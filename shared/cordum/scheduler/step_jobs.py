"""Whose job a request's id names: the stored job's owner (:func:`check_owner`) and the
scheduler's side of workflow step job ids (:mod:`cordum.step_job_ids`, the records in
:mod:`cordum.store.step_jobs`)."""

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
    from collections.abc import Mapping

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


def check_owner(req: protocol.JobRequest, tenant: str, meta: Mapping[str, str]) -> None:
    """Refuse a request whose job id is stored with another tenant or topic.

    The gateway, the approval and the replayer re-send a stored job with its
    own tenant and topic; a packet that differs would take over (or fail)
    someone else's job. Nothing of the job is touched and the record goes to
    the queue's DLQ (``UnparseableRecord``), not under the job's id.
    """
    stored_tenant, stored_topic = meta.get("tenant", ""), meta.get("topic", "").strip()
    if (stored_tenant and stored_tenant != tenant) or (stored_topic
                                                      and stored_topic != req.topic):
        METRICS.count("requests_rejected", reason="job_id_conflict")
        log.error("refusing job request %s: tenant %r topic %r, the stored job has "
                  "tenant %r topic %r", req.job_id, tenant, req.topic, stored_tenant,
                  stored_topic)
        raise UnparseableRecord(f"job {req.job_id} exists with another tenant or topic")
