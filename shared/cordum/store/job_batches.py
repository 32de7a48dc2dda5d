"""Many jobs' keys in one round trip: what the API's trace answer is built from.

A trace answer shows each of its jobs as ``GET /api/v1/jobs/{id}`` does. Reading
them one by one would cost two or three round trips per job; here the meta, the
event log, the DLQ entry, the output decision and the sizes of every payload key
(context, request, result and its redacted copy) of all the jobs come back in one
pipeline. The payloads themselves are not read by it: their sizes let the caller
choose which ones fit its answer, and read those with ``JobReads.values`` (one
more round trip). Any Redis failure is raised as ``StoreError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cordum import protocol
from cordum.store.jobs import dlq_entry_key, events_key, meta_key, request_key
from cordum.store.reads import execute, text
from cordum.store.results import decision_key, redacted_key

if TYPE_CHECKING:
    from collections.abc import Sequence

    from cordum.store.reads import RedisReadProtocol

_PER_JOB = 8
"""Commands queued per job (see :func:`job_batch`)."""


@dataclass(frozen=True, slots=True)
class StoredJob:
    """One job's small keys as stored, and the sizes of its payload keys."""

    job_id: str
    meta: dict[str, str]
    """The whole ``job:meta:<id>``, decoded ({} when it expired)."""
    events: list[Any] = field(default_factory=list)
    """``job:events:<id>``, oldest first, at most the count asked for."""
    dlq: Any = None
    output_decision: Any = None
    sizes: dict[str, int] = field(default_factory=dict)
    """Bytes of each payload key (``ctx:``, ``job:req:``, ``res:`` and its redacted copy)
    by key; 0 for a key that is missing."""


async def job_batch(redis: RedisReadProtocol, job_ids: Sequence[str], *,
                    events: int) -> list[StoredJob]:
    """Each job's meta (HGETALL), first ``events`` events, DLQ entry, output decision
    and payload sizes (STRLEN reads no payload), in the order given: one round trip
    of eight commands per job."""
    if not job_ids:
        return []
    pipe = redis.pipeline(transaction=False)
    sized: list[list[str]] = []
    for job_id in job_ids:
        payloads = [protocol.context_key(job_id), request_key(job_id),
                    protocol.result_key(job_id), redacted_key(job_id)]
        sized.append(payloads)
        pipe.hgetall(meta_key(job_id))
        pipe.lrange(events_key(job_id), 0, events - 1)
        pipe.get(dlq_entry_key(job_id))
        pipe.get(decision_key(job_id))
        for key in payloads:
            pipe.strlen(key)
    replies = await execute(pipe)
    out = []
    for i, job_id in enumerate(job_ids):
        meta, log, dlq, decision, *lengths = replies[i * _PER_JOB:(i + 1) * _PER_JOB]
        out.append(StoredJob(
            job_id,
            {text(k): text(v) for k, v in (meta or {}).items()},
            list(log or []), dlq, decision,
            {key: int(size or 0) for key, size in zip(sized[i], lengths, strict=True)},
        ))
    return out
