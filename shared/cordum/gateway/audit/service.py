"""Reading a tenant's audit chain, verifying it, and its legal hold.

**Events**, newest first: the stream is walked down with XREVRANGE in batches of
:data:`SCAN_FACTOR` × ``limit`` entries, at most :data:`SCAN_ROUNDS` batches per
request (so at most 32 × ``limit`` entries, 6,400 at the largest page, are read for one
page). When the bound is reached before the page is full, the page comes back short
with a ``next_cursor`` to go on from; ``next_cursor`` is null only once the stream's
oldest entry has been read. Keys of an event's ``extra`` that name a secret are left
out of what is shown (:data:`SECRET_KEY`); the chain keeps them.

**Verify** runs :func:`cordum.store.audit_verify.verify_chain` with this process's HMAC
key. When the stream no longer starts at seq 1 and an export mark
(``audit:exported:<tenant>``) exists, the check starts from the mark (status
``partial``; ``exported_through_seq`` names it).

**The hold** (``audit:hold:<tenant>``, JSON ``{by, at, reason}``) keeps the export's
trim from removing any of the tenant's entries. Setting and clearing it are
transactions that stage their event in the tenant's outbox.

Every events read and every verify appends its own event (``audit.read``,
``audit.verify``, INFO) before the answer is sent: a read that cannot be recorded is
not served (503).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from cordum.gateway.core.times import rfc3339_s, rfc3339_us
from cordum.store.audit import AuditEntry, Severity, parse_entry, parse_head, stream_key
from cordum.store.audit_trail import AuditTrail, act, exported_key, hold_key, now_us
from cordum.store.audit_verify import verify_chain
from cordum.store.errors import StoreError
from cordum.text import as_text

if TYPE_CHECKING:
    from cordum.gateway.audit.models import EventFilter
    from cordum.gateway.core.auth import Principal
    from cordum.store.audit_export_verify import ExportVerifyResult

SCAN_FACTOR = 4
"""Entries one XREVRANGE batch reads, per entry of the page asked for."""
SCAN_ROUNDS = 8
"""Batches one page reads at most."""
SECRET_KEY = re.compile(r"secret|token|password|apikey|privatekey")
"""Matched against a key of ``extra`` lower-cased with everything but letters and digits
removed (``api_key``, ``API-Key`` and ``apiKey`` alike)."""

READ_EVENT = "audit.read"
VERIFY_EVENT = "audit.verify"
HOLD_SET_EVENT = "audit.hold.set"
HOLD_CLEAR_EVENT = "audit.hold.clear"


def redact(value: Any) -> Any:
    """``value`` (an event's extra) without the members whose key names a secret, at
    every level."""
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()
                if not SECRET_KEY.search(re.sub(r"[^a-z0-9]", "", str(k).lower()))}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def _position(stream_id: str) -> int:
    """The seq part of a stream id (``<seq>-1``); 0 when it has none."""
    head = stream_id.partition("-")[0]
    return int(head) if head.isascii() and head.isdigit() else 0


def event_view(entry: AuditEntry) -> dict[str, Any]:
    """An entry as the events route shows it: the event's fields, its ``seq`` and
    ``hash``, and ``occurred_at`` (``at`` as RFC 3339)."""
    try:
        view = entry.decoded()
    except (ValueError, RecursionError):  # not a JSON object (an edited entry)
        view = {"malformed": True}
    if "extra" in view:
        view["extra"] = redact(view["extra"])
    at = view.get("at")
    if isinstance(at, int) and not isinstance(at, bool):
        view["occurred_at"] = rfc3339_us(at)
    view["seq"] = entry.seq_number if entry.seq_number is not None else _position(
        entry.stream_id)
    view["hash"] = entry.hash
    return view


class AuditService:
    def __init__(self, redis: Any, hmac_key: bytes | None, *, bucket: str = "",
                 s3: Any = None) -> None:
        """``bucket``: where the chains are exported (``CORDUM_AUDIT_BUCKET``; "" for
        none), read through ``s3`` (a boto3 client, made on first use when None)."""
        self._redis = redis
        self._hmac_key = hmac_key
        self._bucket = bucket
        self._s3 = s3
        self._trail = AuditTrail(redis, hmac_key)

    # -- events ---------------------------------------------------------------------

    async def events(self, who: Principal, wanted: EventFilter, limit: int,
                     cursor: int | None) -> dict[str, Any]:
        """A page of ``who.tenant``'s events matching ``wanted``, newest first."""
        items, next_cursor, scanned = await self._scan(who.tenant, wanted, limit, cursor)
        await self._record(who, READ_EVENT, extra={
            "filters": wanted.as_dict(), "limit": limit, "cursor": cursor,
            "returned": len(items), "scanned": scanned, "next_cursor": next_cursor})
        return {"items": items, "next_cursor": next_cursor, "returned": len(items)}

    async def _scan(self, tenant: str, wanted: EventFilter, limit: int,
                    cursor: int | None) -> tuple[list[dict[str, Any]], str | None, int]:
        stream = stream_key(tenant)
        batch = SCAN_FACTOR * limit
        upper = "+" if cursor is None else f"({cursor}-0"
        items: list[dict[str, Any]] = []
        scanned = 0
        for _ in range(SCAN_ROUNDS):
            try:
                rows = await self._redis.xrevrange(stream, max=upper, min="-", count=batch)
            except Exception as exc:
                raise StoreError(f"audit events of {tenant!r}: {exc}") from exc
            scanned += len(rows)
            for i, (sid, fields) in enumerate(rows):
                entry = parse_entry(sid, fields)
                view = event_view(entry)
                if wanted.matches(view):
                    items.append(view)
                if len(items) == limit:
                    more = i < len(rows) - 1 or len(rows) == batch
                    return items, str(_position(entry.stream_id)) if more else None, scanned
            if len(rows) < batch:
                return items, None, scanned  # the oldest entry has been read
            last = _position(as_text(rows[-1][0]))
            if last <= 1:
                return items, None, scanned
            upper = f"({last}-0"
        # The scan bound: a short page, and where to go on from.
        return items, upper[1:].partition("-")[0], scanned

    # -- verify ---------------------------------------------------------------------

    async def verify(self, who: Principal) -> dict[str, Any]:
        """The verification of ``who.tenant``'s chain (docs/audit.md, "Verify")."""
        tenant = who.tenant
        stream = stream_key(tenant)
        try:
            raw_mark = await self._redis.get(exported_key(tenant))
            first = await self._redis.xrange(stream, min="-", max="+", count=1)
        except Exception as exc:
            raise StoreError(f"audit verify of {tenant!r}: {exc}") from exc
        try:
            mark = parse_head(raw_mark)
        except ValueError:
            mark = None  # unreadable: the chain is checked from seq 1 (a trimmed one fails)
        trimmed = not first or parse_entry(*first[0]).seq_number != 1
        exported = await self._exported(tenant)
        seed = mark if mark is not None and trimmed else None
        if trimmed and exported is not None and exported.seed is not None:
            # What Redis no longer holds was checked in the bucket: its remainder must
            # link to the last entry exported (trimmed past it: "missing").
            seed = exported.seed
        result = await verify_chain(self._redis, tenant, hmac_key=self._hmac_key, seed=seed)
        body = result.as_dict()
        body.update({
            "tenant": tenant,
            "exported_through_seq": seed[0] if seed else None,
            "exported": None if exported is None else exported.as_dict(),
            "checked_at": rfc3339_s(now_us() / 1e6),
        })
        if exported is not None:
            if exported.status == "compromised":
                body["status"] = "compromised"
            elif trimmed and exported.seed is not None and exported.status == "ok" and \
                    body["status"] == "partial" and not result.gaps:
                # The whole chain was checked, the bucket's part and Redis's.
                body["status"] = "ok"
        await self._record(who, VERIFY_EVENT, extra={
            "status": result.status, "total_events": result.total_events,
            "verified_events": result.verified_events, "first_seq": result.first_seq,
            "last_seq": result.last_seq, "gaps": len(result.gaps),
            "exported_through_seq": body["exported_through_seq"]})
        return body

    async def _exported(self, tenant: str) -> ExportVerifyResult | None:
        """The check of the tenant's exported objects (``verify_exported``: in seq order,
        at most 10,000 objects), None when no bucket is configured."""
        from cordum.store.audit_export_verify import verify_exported

        if not self._bucket:
            return None
        if self._s3 is None:
            from cordum import aws

            self._s3 = aws.client("s3")
        return await verify_exported(self._s3, self._bucket, tenant, self._hmac_key)

    # -- the hold -------------------------------------------------------------------

    async def hold(self, tenant: str) -> dict[str, Any]:
        try:
            raw = await self._redis.get(hold_key(tenant))
        except Exception as exc:
            raise StoreError(f"audit hold of {tenant!r}: {exc}") from exc
        return _hold_view(tenant, raw)

    async def set_hold(self, who: Principal, reason: str) -> dict[str, Any]:
        tenant = who.tenant
        value = {"by": who.principal_id, "at": rfc3339_us(now_us()), "reason": reason}
        text = json.dumps(value, separators=(",", ":"), sort_keys=True)
        event = act(HOLD_SET_EVENT, Severity.HIGH, tenant, who.principal_id, who.key_id,
                    reason=reason or None, snapshot=value)
        await self._transact(tenant, event, lambda pipe: pipe.set(hold_key(tenant), text))
        return _hold_view(tenant, text)

    async def clear_hold(self, who: Principal) -> dict[str, Any]:
        tenant = who.tenant
        before = await self.hold(tenant)
        event = act(HOLD_CLEAR_EVENT, Severity.HIGH, tenant, who.principal_id, who.key_id,
                    snapshot={k: before[k] for k in ("by", "at", "reason") if k in before}
                    if before["held"] else None)
        await self._transact(tenant, event, lambda pipe: pipe.delete(hold_key(tenant)))
        return {**_hold_view(tenant, None), "cleared": bool(before["held"])}

    async def _transact(self, tenant: str, event: Any, write: Any) -> None:
        """``write`` and the staging of ``event`` in one MULTI/EXEC, then the drain."""
        try:
            pipe = self._redis.pipeline(transaction=True)
            write(pipe)
            AuditTrail.stage(pipe, event)
            await pipe.execute()
        except Exception as exc:
            raise StoreError(f"audit hold of {tenant!r}: {exc}") from exc
        await self._trail.drain_quietly(tenant)

    # -- the reads' own events ------------------------------------------------------

    async def _record(self, who: Principal, kind: str, extra: dict[str, Any]) -> None:
        await self._trail.record(act(kind, Severity.INFO, who.tenant, who.principal_id,
                                     who.key_id, extra=extra))


def _hold_view(tenant: str, raw: Any) -> dict[str, Any]:
    if raw is None:
        return {"tenant": tenant, "held": False}
    try:
        value = json.loads(as_text(raw))
    except ValueError:
        value = None
    view: dict[str, Any] = {"tenant": tenant, "held": True}
    if isinstance(value, dict):
        for name in ("by", "at", "reason"):
            if isinstance(value.get(name), str):
                view[name] = value[name]
    return view
