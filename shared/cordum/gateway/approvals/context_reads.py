"""What the approval context reads of Redis, and the prior approvals it finds there
(:mod:`cordum.gateway.approvals.context` builds the document).

Cost: two round trips, each one pipeline, whatever the tenant stores:

1. the job: ``HGETALL job:meta``, ``STRLEN`` and ``GETRANGE`` (the first
   :data:`INPUT_PREVIEW_BYTES` + 1 bytes) of ``ctx:<id>``, ``GET job:req:<id>``,
   ``GET`` of its output decision; and the candidates of the prior approvals: the
   newest :data:`PRIOR_SCAN` entries of each of the tenant's own per-state indexes
   (``store.jobs.tenant_index_key``) a decided job can be in (all but
   APPROVAL_REQUIRED). They are read before the job's tenant is known, so a missing
   job and another tenant's cost the same.
2. ``HMGET`` of :data:`PRIOR_FIELDS` of the :data:`PRIOR_SCAN` most recently changed
   of those candidates; and, for a workflow gate whose context document is longer
   than the preview, the whole document. Skipped when there is nothing to read.

Prior approvals are a bounded look back, not a history: at most :data:`PRIOR_SCAN`
(200) of the tenant's most recently changed jobs are examined, and at most
:data:`PRIOR_LIMIT` (10) decided approvals of the same topic and the same submitter
are listed, newest decision first. An older one is not found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cordum import protocol
from cordum.approval import APPROVED, REJECTED, STATUS_FIELD
from cordum.store.jobs import JobState, meta_key, request_key, tenant_index_key
from cordum.store.reads import execute, text
from cordum.store.results import decision_key

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from cordum.store.reads import Entry, RedisReadProtocol

INPUT_PREVIEW_BYTES = 4096
"""The job's input (its ``ctx:`` payload) is shown up to this many bytes of UTF-8."""
PRIOR_SCAN = 200
"""Candidates examined for prior approvals at most: the tenant's most recently changed
jobs (see the module docstring)."""
PRIOR_LIMIT = 10
"""Prior approvals listed at most."""
PRIOR_STATES = tuple(s for s in JobState if s is not JobState.APPROVAL_REQUIRED)
"""Where a decided approval can be: an approved job moves on from PENDING, a rejected
one ends DENIED."""
PRIOR_FIELDS = ("tenant", "topic", "principal", STATUS_FIELD, "approved_by",
                "approval_decided_at")


@dataclass(frozen=True, slots=True)
class StoredContext:
    """What the first round trip read of one job."""

    meta: dict[str, str]
    input_size: int
    input_head: bytes
    request: Any
    output_decision: Any
    candidates: list[Entry]


async def read_job(redis: RedisReadProtocol, tenant: str, job_id: str) -> StoredContext:
    """Round trip 1: the job's keys and the newest prior-approval candidates of ``tenant``."""
    ctx = protocol.context_key(job_id)
    pipe = redis.pipeline(transaction=False)
    pipe.hgetall(meta_key(job_id))
    pipe.strlen(ctx)
    pipe.getrange(ctx, 0, INPUT_PREVIEW_BYTES)  # inclusive: one byte more tells a cut
    pipe.get(request_key(job_id))
    pipe.get(decision_key(job_id))
    for state in PRIOR_STATES:
        pipe.zrevrange(tenant_index_key(tenant, state), 0, PRIOR_SCAN - 1, withscores=True)
    meta_raw, size, head, request, output, *ranges = await execute(pipe)
    meta = {text(k): text(v) for k, v in (meta_raw or {}).items()}
    candidates = sorted(((int(score), text(member)) for rows in ranges
                         for member, score in rows if text(member) != job_id), reverse=True)
    return StoredContext(meta, int(size or 0), as_bytes(head), request, output,
                         candidates[:PRIOR_SCAN])


async def read_more(redis: RedisReadProtocol, job_id: str, candidates: Sequence[str],
                    whole_input: bool) -> tuple[list[dict[str, str]], bytes | None]:
    """Round trip 2: :data:`PRIOR_FIELDS` of each candidate, and the whole ``ctx:`` payload
    when ``whole_input``."""
    if not candidates and not whole_input:
        return [], None
    pipe = redis.pipeline(transaction=False)
    for candidate in candidates:
        pipe.hmget(meta_key(candidate), *PRIOR_FIELDS)
    if whole_input:
        pipe.get(protocol.context_key(job_id))
    replies = await execute(pipe)
    metas = [{name: text(v) for name, v in zip(PRIOR_FIELDS, values, strict=True)}
             for values in replies[:len(candidates)]]
    return metas, (as_bytes(replies[-1]) if whole_input else None)


def as_bytes(value: Any) -> bytes:
    if value is None:
        return b""
    return value if isinstance(value, bytes) else str(value).encode()


def parse_request(raw: Any) -> protocol.JobRequest | None:
    """The stored JobRequest (``job:req:<id>``); None when there is none or it is broken."""
    if not raw:
        return None
    from google.protobuf import json_format

    try:
        return json_format.Parse(text(raw), protocol.JobRequest(), ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError):
        return None


def micros(raw: str | None) -> int | None:
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


def prior_approvals(candidates: Sequence[str], metas: Sequence[Mapping[str, str]],
                    tenant: str, topic: str, principal: str) -> list[dict[str, Any]]:
    """The decided approvals among ``candidates`` of the same tenant, topic and submitter,
    newest decision first, at most :data:`PRIOR_LIMIT`. None without a submitter: an
    unnamed one is nobody in particular."""
    if not principal:
        return []
    found: list[tuple[int, str, dict[str, Any]]] = []
    for job_id, meta in zip(candidates, metas, strict=True):
        status = meta.get(STATUS_FIELD, "")
        if (status not in (APPROVED, REJECTED) or meta.get("tenant") != tenant
                or meta.get("topic") != topic or meta.get("principal") != principal):
            continue
        at = micros(meta.get("approval_decided_at")) or 0
        found.append((at, job_id, {
            "job_id": job_id, "topic": topic, "tenant": tenant, "decision": status,
            "resolved_by": meta.get("approved_by", ""), "resolved_at": at,
            "was_approved": status == APPROVED}))
    found.sort(key=lambda row: (row[0], row[1]), reverse=True)
    return [doc for _, _, doc in found[:PRIOR_LIMIT]]
