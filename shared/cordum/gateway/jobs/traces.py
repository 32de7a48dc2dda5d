"""``GET /api/v1/traces/{id}``: the caller's tenant's jobs of one trace, each as
``GET /api/v1/jobs/{id}`` shows it.

Which jobs
----------
``trace:<id>`` (written with the job by ``create_job.lua``) is a plain set of job
ids, and any tenant's job may name a trace. Its members are intersected with the
tenant's twelve per-state indexes (``ZINTER``, one pipeline; Redis walks the smaller
set of each pair), so only the tenant's jobs come back, each with the µs of its last
state change, and the meta's ``tenant`` is checked again. None of them: 404
``trace_not_found``, the same answer for a trace that does not exist, one of another
tenant's, or one whose jobs have all expired.

Bounds
------
At most :data:`MAX_TRACE_JOBS` jobs, newest first (by last state change, then id).
A trace with more shows its newest ones; ``X-Total-Count`` tells how many of the
tenant's jobs the trace holds and ``X-Has-More: true`` that some were left out
(``GET /api/v1/jobs?trace_id=`` pages through all of them). The body stays a bare
array of JobDetail, which is what Cordum's client parses.

Payloads (prompts, results, requests) are read only when they fit
:data:`PAYLOAD_BUDGET` bytes in all, newest job first; a result that does not fit is
left out as the job detail leaves out one too large to carry (``result`` null,
``result_too_large``, ``result_size_bytes``, ``result_ptr`` naming where it is),
and a prompt that does not fit is ``""`` with ``prompt_omitted: true``: the job's own
``GET /api/v1/jobs/{id}`` shows either. The answer thus stays well below Lambda's
6 MB however the trace's jobs were fed.

Three round trips in all, whatever the trace holds: the intersections, the jobs'
keys (``cordum.store.job_batches``), the payloads that fit (skipped when none).

What is hidden
--------------
A result is read only when ``served_result_ptr`` allows it, as for one job: never
before the output decision is final, never a quarantined or withheld one, and after
a REDACT only the redacted copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cordum import protocol
from cordum.gateway.jobs.queries import EVENTS_READ, state_event
from cordum.gateway.jobs.views import (
    MAX_INLINE_RESULT_BYTES,
    DetailExtras,
    job_detail,
    json_or_text,
)
from cordum.store.job_batches import StoredJob, job_batch
from cordum.store.jobs import JobState, request_key, tenant_index_key
from cordum.store.json_docs import json_object
from cordum.store.reads import Entry, JobReads, text
from cordum.store.results import served_result_ptr

if TYPE_CHECKING:
    from cordum.store.reads import RedisReadProtocol

MAX_TRACE_JOBS = 200
"""Jobs one trace answer shows at most, the newest."""
PAYLOAD_BUDGET = MAX_INLINE_RESULT_BYTES
"""Bytes of prompts, requests and results one trace answer reads and carries in all:
the one job detail's inline limit, for the same reason (a byte may take seven in the
proxy response)."""
MAX_REQUEST_BYTES = 64 * 1024
"""A stored request read for its adapter id only when the meta names none and it is at
most this long."""
MAX_TRACE_ID_CHARS = 256
"""A longer trace id is refused (400): none is ever issued."""
TOTAL_HEADER = "X-Total-Count"
HAS_MORE_HEADER = "X-Has-More"


@dataclass(frozen=True, slots=True)
class TraceAnswer:
    items: list[dict[str, Any]]
    total: int
    """The tenant's jobs in the trace (``items`` holds the newest of them)."""

    @property
    def has_more(self) -> bool:
        return self.total > len(self.items)

    def headers(self) -> dict[str, str]:
        return {TOTAL_HEADER: str(self.total),
                HAS_MORE_HEADER: "true" if self.has_more else "false"}


async def _entries(redis: RedisReadProtocol, tenant: str, trace_id: str) -> list[Entry]:
    """The tenant's jobs of the trace, newest first, each once (its latest score)."""
    keys = [tenant_index_key(tenant, s) for s in JobState]
    best: dict[str, int] = {}
    for score, job_id in await JobReads(redis).in_trace(keys, trace_id):
        best[job_id] = max(score, best.get(job_id, score))
    return sorted(((score, job_id) for job_id, score in best.items()), reverse=True)


@dataclass(slots=True)
class _Plan:
    """Which payload keys are read, within the budget."""

    left: int
    keys: list[str]

    def take(self, key: str, size: int) -> bool:
        if size <= 0 or size > self.left:
            return False
        self.left -= size
        self.keys.append(key)
        return True


@dataclass(slots=True)
class _Job:
    stored: StoredJob
    result_ptr: str | None
    result_key: str | None
    result_size: int | None
    prompt_read: bool
    prompt_omitted: bool
    request_read: bool


def _plan_job(job: StoredJob, plan: _Plan, *, output_policy: bool) -> _Job:
    job_id, meta = job.job_id, job.meta
    ctx = protocol.context_key(job_id)
    prompt_read = plan.take(ctx, job.sizes.get(ctx, 0))
    ptr = served_result_ptr(job_id, meta, output_policy=output_policy)
    key = protocol.key_from_pointer(ptr) if ptr else None
    size = job.sizes.get(key, 0) if key else None
    if key and size is not None and size <= MAX_INLINE_RESULT_BYTES:
        plan.take(key, size)
    req = request_key(job_id)
    req_size = job.sizes.get(req, 0)
    request_read = (not meta.get("adapter_id") and req_size <= MAX_REQUEST_BYTES
                    and plan.take(req, req_size))
    return _Job(job, ptr, key, size, prompt_read, job.sizes.get(ctx, 0) > 0 and not prompt_read,
                request_read)


def _extras(job: _Job, payloads: dict[str, Any]) -> DetailExtras:
    stored = job.stored
    job_id = stored.job_id
    prompt = None
    if job.prompt_read:
        context = json_object(payloads.get(protocol.context_key(job_id)))
        value = context.get("prompt") if context is not None else None
        prompt = value if isinstance(value, str) else None
    req = json_object(payloads.get(request_key(job_id))) if job.request_read else None
    return DetailExtras(
        events=[e for raw in stored.events if (e := state_event(text(raw))) is not None],
        dlq=json_object(stored.dlq),
        output_decision=json_object(stored.output_decision),
        prompt=prompt,
        adapter_id=str((req or {}).get("adapterId") or (req or {}).get("adapter_id") or ""),
    )


def _render(job: _Job, payloads: dict[str, Any]) -> dict[str, Any]:
    stored = job.stored
    key, size = job.result_key, job.result_size
    in_reach = key is not None and key in payloads
    result = json_or_text(text(payloads[key])) if in_reach and key is not None else None
    out = job_detail(stored.job_id, stored.meta, job.result_ptr, result, _extras(job, payloads),
                     result_size=size)
    if key and not in_reach and out["state"] == JobState.SUCCEEDED and size:
        # Stored, may be shown, but past this answer's budget: by pointer only.
        out["result"] = None
        out["result_too_large"] = True
        out["result_size_bytes"] = size
    if job.prompt_omitted:
        out["prompt_omitted"] = True
    return out


async def trace_jobs(redis: RedisReadProtocol, tenant: str, trace_id: str, *,
                     output_policy: bool) -> TraceAnswer:
    """The tenant's jobs of the trace as job details (see the module docstring); an
    empty answer when it holds none of them."""
    entries = await _entries(redis, tenant, trace_id)
    stored = await job_batch(redis, [job_id for _, job_id in entries[:MAX_TRACE_JOBS]],
                             events=EVENTS_READ)
    mine = [job for job in stored if job.meta.get("tenant") == tenant]
    plan = _Plan(PAYLOAD_BUDGET, [])
    jobs = [_plan_job(job, plan, output_policy=output_policy) for job in mine]
    payloads: dict[str, Any] = {}
    if plan.keys:
        values = await JobReads(redis).values(*plan.keys)
        payloads = {k: v for k, v in zip(plan.keys, values, strict=True) if v is not None}
    total = len(entries) - (len(stored) - len(mine))
    return TraceAnswer([_render(job, payloads) for job in jobs], total)
