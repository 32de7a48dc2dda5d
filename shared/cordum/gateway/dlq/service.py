"""The dead-letter queue of jobs: list, delete, retry.

Entries are written by the job store together with a terminal transition and
read through ``cordum.store.dlq``. An entry does not always name its tenant or
topic (the result path leaves the topic out); the job's meta does, for as long
as it lives (7 days against the entry's 30). An entry whose tenant is known
nowhere is shown to no one.

A retry is a new job: ``<job_id>-retry-<8 hex>``, its request a copy of the
failed one, stored PENDING and announced on ``sys.job.submit`` like any
submitted job. The entry is deleted only once the new job is announced, so a
failure on the way loses nothing; the job lock keeps two retries of one entry
from both going through.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import TYPE_CHECKING, Any

from cordum import protocol
from cordum.gateway.core.errors import Conflict, Forbidden, InvalidRequest, NotFound
from cordum.gateway.core.locking import API_LOCK, api_job_lock
from cordum.gateway.core.paging import page_newest_first, parse_cursor
from cordum.gateway.core.submission import announce
from cordum.gateway.core.times import rfc3339_us
from cordum.store.audit_trail import AuditTrail, governance, process_hmac_key
from cordum.store.dlq import DlqEntries
from cordum.store.errors import StoreError
from cordum.store.indexes import JobIndexes
from cordum.store.jobs import DLQ_INDEX_KEY, AuditParts, NewJob
from cordum.store.locks import JobLocks

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from cordum.bus.publisher import NatsPublisher
    from cordum.gateway.core.auth import Principal
    from cordum.store.jobs import JobStore
    from cordum.store.reads import Row

log = logging.getLogger(__name__)

META_FIELDS = ("tenant", "topic", "failure_reason")
"""What an entry may lack and the job's meta supplies."""

COPIED_META = ("actor_id", "actor_type", "capability", "pack_id", "risk_tags", "requires",
               "team", "memory_id")
"""job:meta fields a retry keeps from the failed job (not its idempotency key: the
retry is a new job)."""

DROPPED_LABEL_PREFIXES = ("approval_", "safety_bypass")
DROPPED_LABELS = ("cordum.bus_msg_id",)
"""Bookkeeping of the failed run that must not carry over: a retry is judged afresh."""

LOCK_BUSY = "dlq_retryable_lock"


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def entry_view(job_id: str, entry: Mapping[str, Any], meta: Mapping[str, str],
               indexed_at_us: int) -> dict[str, Any]:
    """A DLQEntry (docs/http-api.md), plus Cordum's own names of the same facts."""
    attempts = _int(entry.get("attempts"))
    failed_at = _int(entry.get("created_at")) or indexed_at_us
    last_state = str(entry.get("last_state") or "")
    reason = str(entry.get("reason") or "")
    return {
        "job_id": job_id,
        "topic": str(entry.get("topic") or meta.get("topic") or ""),
        "tenant": str(entry.get("tenant") or meta.get("tenant") or ""),
        "error": reason or meta.get("failure_reason") or "",
        "failed_at": rfc3339_us(str(failed_at)),
        "retry_count": max(0, attempts - 1),
        "original_state": last_state,
        "status": str(entry.get("status") or ""),
        "reason": reason,
        "reason_code": str(entry.get("reason_code") or ""),
        "last_state": last_state,
        "attempts": attempts,
    }


def retry_request(original: protocol.JobRequest | None, new_id: str, topic: str, tenant: str,
                  meta: Mapping[str, str], context_ptr: str,
                  failed_id: str, principal_id: str) -> protocol.JobRequest:
    """The failed job's request under a new id, marked as a retry of it.

    ``principal_id`` is whoever retries: a retry is their submission, so they
    cannot approve it should the policy gate it (separation of duties).
    """
    req = protocol.JobRequest()
    if original is not None:
        req.CopyFrom(original)
    req.job_id, req.topic, req.context_ptr, req.tenant_id = new_id, topic, context_ptr, tenant
    req.principal_id = principal_id
    for key in list(req.labels):
        if key.startswith(DROPPED_LABEL_PREFIXES) or key in DROPPED_LABELS:
            del req.labels[key]
    req.labels.update({"retry": "true", "dlq_entry": failed_id, "retry_of_job": failed_id})
    req.env["tenant_id"] = tenant
    req.env["retry_of_job"] = failed_id
    if meta.get("team"):
        req.env["team_id"] = meta["team"]
    return req


class DlqService:
    def __init__(self, store: JobStore, redis: Any, publisher: NatsPublisher,
                 locks: JobLocks | None = None, audit: AuditTrail | None = None) -> None:
        self._store = store
        self._redis = redis
        self._audit = audit or AuditTrail(redis, process_hmac_key())
        self._entries = DlqEntries(redis)
        self._indexes = JobIndexes(redis)
        self._publisher = publisher
        self._locks = locks or JobLocks(redis, API_LOCK)

    async def page(self, who: Principal, limit: int, cursor: str) -> dict[str, Any]:
        """The caller's tenant's entries, newest first."""

        async def views(rows: Sequence[Row]) -> list[dict[str, Any] | None]:
            found = await self._entries.with_meta([job_id for job_id, _ in rows], META_FIELDS)
            out: list[dict[str, Any] | None] = []
            for (job_id, score), (entry, meta) in zip(rows, found, strict=True):
                if entry is None:  # expired; its index member outlives it
                    out.append(None)
                    continue
                view = entry_view(job_id, entry, meta, score)
                out.append(view if view["tenant"] == who.tenant else None)
            return out

        items, next_cursor = await page_newest_first(self._redis, DLQ_INDEX_KEY,
                                                     parse_cursor(cursor), limit, views)
        return {"items": items, "next_cursor": next_cursor}

    async def delete(self, who: Principal, job_id: str) -> None:
        entry, meta = await self._owned_entry(who, job_id)
        event = governance("dlq.delete", who.tenant, who.principal_id, who.key_id,
                           job_id=job_id, reason=str(entry.get("reason") or "") or None,
                           extra={"topic": str(entry.get("topic") or meta.get("topic") or ""),
                                  "reason_code": str(entry.get("reason_code") or "")})
        await self._entries.remove(job_id, audit=event)
        await self._audit.drain_quietly(who.tenant)

    async def retry(self, who: Principal, job_id: str, deadline: float | None = None) -> str:
        """Submit the failed job again as a new job; its id."""
        from google.protobuf import json_format

        async with api_job_lock(self._locks, job_id, deadline, LOCK_BUSY) as lease:
            entry, meta = await self._owned_entry(who, job_id, lease.data)
            topic = str(entry.get("topic") or meta.get("topic") or "")
            if not topic:
                raise InvalidRequest("missing topic for retry", "missing_topic_for_retry")
            tenant = who.tenant
            original = await self._indexes.get_request(job_id)
            context = await self._store.get_payload(protocol.context_key(job_id))
            new_id = f"{job_id}-retry-{uuid.uuid4().hex[:8]}"
            trace_id = f"dlq-retry-{job_id}"
            # Without its payload (gone after 24 h) the job is sent without a context.
            ptr = protocol.pointer(protocol.context_key(new_id)) if context is not None else ""
            req = retry_request(original, new_id, topic, tenant, meta, ptr, job_id,
                                who.principal_id)
            fields = {name: meta.get(name, "") for name in COPIED_META}
            fields.update({"labels": json.dumps(dict(req.labels), separators=(",", ":")),
                           "priority": str(req.priority), "principal": req.principal_id,
                           "retry_of_job": job_id})
            job = NewJob(
                job_id=new_id, trace_id=trace_id, tenant=tenant, topic=topic,
                context=context or "", request=json_format.MessageToJson(req, indent=None),
                meta={k: v for k, v in fields.items() if v},
            )
            event = governance("dlq.retry", tenant, who.principal_id, who.key_id,
                               job_id=job_id, extra={"topic": topic, "new_job_id": new_id})
            await self._submit(job, req, self._audit.script_parts(event))
            try:
                await self._entries.remove(job_id)
            except StoreError as exc:
                # The retry is announced; the entry stays listed until deleted by hand.
                log.error("dlq retry: entry %s not deleted: %s", job_id, exc)
        log.info("dlq entry %s retried as %s", job_id, new_id)
        return new_id

    async def _owned_entry(self, who: Principal, job_id: str,
                           meta: dict[str, str] | None = None
                           ) -> tuple[dict[str, Any], dict[str, str]]:
        """The entry and the job's meta; 404 when there is no entry, 403 when it is
        another tenant's (404 when no tenant is known for it)."""
        entry = await self._entries.entry(job_id)
        if meta is None:
            meta = await self._store.get(job_id)
        if entry is None:
            raise NotFound("dlq entry not found")
        tenant = str(entry.get("tenant") or meta.get("tenant") or "")
        if not tenant:
            raise NotFound("dlq entry not found")
        if tenant != who.tenant:
            raise Forbidden("tenant access denied")
        return entry, meta

    async def _submit(self, job: NewJob, req: protocol.JobRequest, audit: AuditParts) -> None:
        """Store the job PENDING (and the retry's event) and announce it, as the
        gateway's submit does."""
        if not await self._store.create(job, audit=audit):
            raise Conflict("retry job id already taken; retry", "dlq_retry_conflict")
        await announce(self._store, self._publisher, job, req)
