"""The jobs of one worker, of the caller's tenant: ``GET /api/v1/workers/{id}/jobs``.

Where the jobs come from
------------------------
A job names its worker in its meta (``worker_id``, written with DISPATCHED by the
scheduler; an approval gate's names the scheduler). There is no per-worker index
(Cordum's ``worker:jobs:<id>`` is not kept here), so the candidates are read from
the tenant's own per-state indexes ``job:tenant:index:<tenant>:<state>`` (the ones the
job list reads, never another tenant's, never all jobs):

* the jobs a worker holds now: the newest :data:`ACTIVE_READ` of each of the tenant's
  DISPATCHED and RUNNING indexes (the states the lost-worker scan reads to find a
  worker's jobs);
* the jobs it ran: the newest :data:`HISTORY_READ` of the tenant's other indexes
  merged by the µs of their last state change.

Their metas' ``worker_id`` (and ``tenant``, again) pick the worker's. Best-effort by
design: a job of the worker older than the tenant's newest :data:`HISTORY_READ` state
changes (or its :data:`ACTIVE_READ` oldest running jobs) is not listed.

Cost: one pipelined round trip for the twelve index ranges (at most ``12 x 500``
entries), one for the metas of at most ``2 x ACTIVE_READ + HISTORY_READ`` jobs (an
HMGET of :data:`RECORD_FIELDS`, never the whole meta), and a third, the worker
snapshot, only when no job is found (to tell a quiet worker from an unknown one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cordum.store.jobs import JobState, tenant_index_key
from cordum.store.json_docs import json_value
from cordum.store.reads import Entry, JobReads

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cordum.store.reads import RedisReadProtocol

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
"""``limit``: Cordum's default and cap (a larger one is served as 100)."""
ACTIVE_READ = 500
"""Newest entries read of each of the tenant's DISPATCHED and RUNNING indexes."""
HISTORY_READ = 500
"""Newest entries read across the tenant's other state indexes."""
ACTIVE_STATES = (JobState.DISPATCHED, JobState.RUNNING)

RECORD_FIELDS = ("tenant", "state", "updated_at", "worker_id", "trace_id", "topic", "team",
                 "principal", "actor_id", "actor_type", "idempotency_key", "capability",
                 "risk_tags", "requires", "pack_id", "attempts", "safety_decision",
                 "safety_reason", "safety_rule_id", "safety_snapshot", "deadline_unix",
                 "failure_reason")
_TEXT_FIELDS = ("worker_id", "trace_id", "topic", "tenant", "team", "principal", "actor_id",
                "actor_type", "idempotency_key", "capability", "pack_id", "safety_decision",
                "safety_reason", "safety_rule_id", "safety_snapshot", "failure_reason")
_INT_FIELDS = ("attempts", "deadline_unix")
_LIST_FIELDS = ("risk_tags", "requires")


def _int(raw: str | None) -> int | None:
    try:
        return int(raw or "")
    except ValueError:
        try:
            return int(float(raw or ""))
        except ValueError:
            return None


def _list(raw: str | None) -> list[str] | None:
    value = json_value(raw)
    return [str(v) for v in value] if isinstance(value, list) else None


def job_record(job_id: str, score: int, meta: Mapping[str, str]) -> dict[str, Any]:
    """JobRecord: ``id``, ``state``, ``updated_at`` (µs, an integer: the client's model
    requires one), and each other field the meta holds."""
    out: dict[str, Any] = {
        "id": job_id,
        "state": meta.get("state", ""),
        "updated_at": _int(meta.get("updated_at")) or score,
    }
    for name in _TEXT_FIELDS:
        if meta.get(name):
            out[name] = meta[name]
    for name in _INT_FIELDS:
        value = _int(meta.get(name))
        if value is not None:
            out[name] = value
    for name in _LIST_FIELDS:
        items = _list(meta.get(name))
        if items is not None:
            out[name] = items
    return out


def _candidates(ranges: list[list[Entry]], active: int) -> list[Entry]:
    """Every entry of the first ``active`` ranges, and the newest HISTORY_READ of the
    rest; each job once, newest first."""
    history = sorted((e for rows in ranges[active:] for e in rows), reverse=True)
    best: dict[str, int] = {}
    for score, job_id in [*(e for rows in ranges[:active] for e in rows),
                          *history[:HISTORY_READ]]:
        best[job_id] = max(score, best.get(job_id, score))
    return sorted(((s, j) for j, s in best.items()), reverse=True)


async def worker_jobs(redis: RedisReadProtocol, tenant: str, worker_id: str,
                      limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` jobs of the tenant that name ``worker_id`` (see the module)."""
    reads = JobReads(redis)
    active = [tenant_index_key(tenant, s) for s in ACTIVE_STATES]
    rest = [tenant_index_key(tenant, s) for s in JobState if s not in ACTIVE_STATES]
    ranges = await reads.ranges([*active, *rest], "+inf", "-inf",
                                max(ACTIVE_READ, HISTORY_READ))
    ranges = [rows[:ACTIVE_READ] for rows in ranges[:len(active)]] + ranges[len(active):]
    entries = _candidates(ranges, len(active))
    metas = await reads.metas([job_id for _, job_id in entries], RECORD_FIELDS)
    found = []
    for (score, job_id), meta in zip(entries, metas, strict=True):
        if meta.get("tenant") == tenant and meta.get("worker_id") == worker_id:
            found.append(job_record(job_id, score, meta))
            if len(found) == limit:
                break
    return found
