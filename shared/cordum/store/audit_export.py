"""Export the tenants' audit chains to S3 in order, then trim what Redis no longer needs.

Interface (docs/audit.md, "Export and retention"):

- :func:`export_tenant` writes the next entries of a tenant after its export mark
  (``audit:exported:<tenant>`` = ``<seq>:<hash>``) as ONE object
  ``audit/<tenant, percent-encoded>/<first:012d>-<last:012d>.jsonl`` and moves the mark
  to its last entry, compare-and-set: exports go strictly in order, none skipped, none
  marked twice.
- :func:`trim_tenant` drops from the stream the entries that are both exported and
  older than the last ``keep``; nothing under a legal hold (``audit:hold:<tenant>``).
- :func:`export_all` is one tick over the tenants (outboxes drained first).
- :func:`cordum.store.audit_export_verify.verify_exported` checks a tenant's objects as
  one chain and returns the ``(last_seq, last_hash)`` to seed the verification of what
  Redis still holds.

A range is claimed before its object is written (``audit:exporting:<tenant>`` =
``<first>-<last>``, set only while the mark is the one read), so an exporter that died
between the write and the mark, or a second exporter racing the first, writes the same
range under the same name again: the object is the same bytes, its write is a no-op
(``If-None-Match: *``; an object of other bytes under that name is an error, not
overwritten), and only one mark update succeeds.

The S3 client is boto3's (blocking): its calls run in a worker thread.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from cordum.store.audit import (
    HEAD_PREFIX,
    AuditEntry,
    head_key,
    parse_entry,
    parse_head,
    stream_key,
    validate_tenant,
)
from cordum.store.audit_trail import AuditTrail, exported_key, hold_key
from cordum.store.errors import StoreError
from cordum.text import as_text

log = logging.getLogger(__name__)

OBJECT_PREFIX = "audit/"
CONTENT_TYPE = "application/x-ndjson"
SEQ_DIGITS = 12
"""Object names hold seqs in 12 digits: key order is seq order up to 10^12 entries."""
DEFAULT_BATCH = 1000
MAX_BATCH = 10_000
DEFAULT_KEEP = 10_000
"""Entries of a chain kept in Redis after their export (``CORDUM_AUDIT_KEEP_ENTRIES``)."""
DEFAULT_MAX_TENANTS = 100
EXPORTING_PREFIX = "audit:exporting:"
"""``audit:exporting:<tenant>`` = ``<first>-<last>``: the range being exported."""
TENANTS_KEY = "audit:export:tenants"
"""Sorted set of the tenants with a chain, scored by when their export was last tried
(µs): a tick takes the longest-waiting first."""
SCAN_CURSOR_KEY = "audit:export:scan"
"""Where the discovery SCAN of ``audit:head:*`` resumes at the next tick."""
SCAN_COUNT = 1000
SCAN_CALLS = 10
"""SCAN calls a tick makes at most (COUNT each): a bounded share of the keyspace."""

# KEYS[1] mark  KEYS[2] exporting
# ARGV[1] the mark read ('' for none)  ARGV[2] the first seq  ARGV[3] the last seq proposed
# Returns the range to export {first, last}, or {} when the mark moved on.
_CLAIM = """
local mark = redis.call('GET', KEYS[1]) or ''
if mark ~= ARGV[1] then return {} end
local claimed = redis.call('GET', KEYS[2])
if claimed then
  local first, last = string.match(claimed, '^(%d+)-(%d+)$')
  if first == ARGV[2] then return {tonumber(first), tonumber(last)} end
end
redis.call('SET', KEYS[2], ARGV[2] .. '-' .. ARGV[3])
return {tonumber(ARGV[2]), tonumber(ARGV[3])}
"""

# KEYS[1] mark  KEYS[2] exporting
# ARGV[1] the mark read ('' for none)  ARGV[2] the range '<first>-<last>'  ARGV[3] new mark
# Returns 1 when the mark moved, 0 when another exporter moved it first.
_MARK = """
local mark = redis.call('GET', KEYS[1]) or ''
if mark ~= ARGV[1] then return 0 end
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[1], ARGV[3])
redis.call('DEL', KEYS[2])
return 1
"""

# KEYS[1] stream  KEYS[2] head  KEYS[3] mark  KEYS[4] hold
# ARGV[1] entries to keep
# Returns -1 under a hold, else the number of entries removed.
_TRIM = """
if redis.call('EXISTS', KEYS[4]) == 1 then return -1 end
local mark = redis.call('GET', KEYS[3])
local head = redis.call('GET', KEYS[2])
if not mark or not head then return 0 end
local exported = tonumber(string.match(mark, '^(%d+):'))
local last = tonumber(string.match(head, '^(%d+):'))
if not exported or not last then return 0 end
local below = math.min(exported + 1, last - tonumber(ARGV[1]) + 1)
if below <= 1 then return 0 end
return redis.call('XTRIM', KEYS[1], 'MINID', tostring(below) .. '-0')
"""


class AuditExportError(StoreError):
    """An export could not be completed (S3 refused it, or a different object already
    holds the range's name)."""


def exporting_key(tenant: str) -> str:
    return EXPORTING_PREFIX + validate_tenant(tenant)


def tenant_prefix(tenant: str) -> str:
    """``audit/<tenant>/``, the tenant percent-encoded (every byte but letters, digits
    and ``-_~``), so a tenant holding ``/`` or ``.`` is one path segment of its own."""
    text = quote(validate_tenant(tenant), safe="-_~").replace(".", "%2E")
    return f"{OBJECT_PREFIX}{text}/"


def object_key(tenant: str, first: int, last: int) -> str:
    return f"{tenant_prefix(tenant)}{first:0{SEQ_DIGITS}d}-{last:0{SEQ_DIGITS}d}.jsonl"


def encode_lines(entries: list[AuditEntry]) -> bytes:
    """One JSON object a line: id, seq, prev, hash, hmac (null: none stored) and the
    event as text (events are canonical JSON, so UTF-8)."""
    lines = []
    for e in entries:
        lines.append(json.dumps({
            "id": e.stream_id, "seq": e.seq, "prev": e.prev, "hash": e.hash,
            "hmac": e.hmac, "event": e.event.decode("utf-8")},
            ensure_ascii=False, separators=(",", ":")))
    return ("\n".join(lines) + "\n").encode("utf-8")


def decode_lines(data: bytes) -> list[AuditEntry]:
    """The entries of an object; ValueError when a line is not one."""
    out = []
    for line in data.decode("utf-8").splitlines():
        if not line:
            continue
        raw = json.loads(line)
        if not isinstance(raw, dict) or not isinstance(raw.get("event"), str):
            raise ValueError("an exported line is a JSON object with an event")
        seq = str(raw.get("seq", ""))
        mac = raw.get("hmac")
        out.append(AuditEntry(stream_id=str(raw.get("id") or f"{seq}-1"), seq=seq,
                              prev=str(raw.get("prev", "")), hash=str(raw.get("hash", "")),
                              hmac=None if mac is None else str(mac),
                              event=raw["event"].encode("utf-8")))
    return out


def _parse_mark(value: Any) -> tuple[int, str] | None:
    try:
        return parse_head(value)
    except ValueError as exc:
        raise AuditExportError(f"malformed audit export mark {as_text(value)!r}") from exc


def _s3_code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str((response.get("Error") or {}).get("Code") or "")


# --------------------------------------------------------------------------- export


@dataclass(frozen=True, slots=True)
class Exported:
    """What one :func:`export_tenant` did."""

    entries: int = 0
    """Entries in the object written (0: nothing to export)."""
    first_seq: int = 0
    last_seq: int = 0
    key: str = ""
    marked: bool = False
    """The mark moved to ``last_seq`` (False: another exporter moved it first)."""


async def export_tenant(redis: Any, s3: Any, bucket: str, tenant: str, *,
                        batch: int = DEFAULT_BATCH) -> Exported:
    """Export up to ``batch`` entries after ``tenant``'s mark as one object, then move
    the mark to the last of them (compare-and-set). See the module."""
    batch = max(1, min(batch, MAX_BATCH))
    mark_key, claim_key = exported_key(tenant), exporting_key(tenant)
    stream = stream_key(tenant)
    try:
        raw_mark = await redis.get(mark_key)
        mark = _parse_mark(raw_mark)
        after = mark[0] if mark else 0
        items = await redis.xrange(stream, min=f"{after + 1}-0", max="+", count=batch)
        if not items:
            return Exported()
        proposed = parse_entry(*items[-1]).seq_number or after + len(items)
        claimed = await redis.eval(_CLAIM, 2, mark_key, claim_key, as_text(raw_mark),
                                   str(after + 1), str(max(proposed, after + 1)))
        if not claimed:
            return Exported()  # the mark moved meanwhile: the next tick goes on from it
        first, last = int(claimed[0]), int(claimed[1])
        if last != proposed:
            # Another exporter claimed this range first: write exactly its range.
            items = await redis.xrange(stream, min=f"{first}-0", max=str(last),
                                       count=MAX_BATCH)
        else:
            items = [i for i in items if _id_seq(i[0]) <= last]
    except StoreError:
        raise
    except Exception as exc:
        raise StoreError(f"audit export of {tenant!r}: {exc}") from exc
    entries = [parse_entry(sid, fields) for sid, fields in items]
    if not entries:
        raise AuditExportError(f"audit export of {tenant!r}: seqs {first}-{last} are gone")
    key = object_key(tenant, first, last)
    await _put_once(s3, bucket, key, encode_lines(entries))
    new_mark = f"{last}:{entries[-1].hash}"
    try:
        moved = await redis.eval(_MARK, 2, mark_key, claim_key, as_text(raw_mark),
                                 f"{first}-{last}", new_mark)
    except Exception as exc:
        raise StoreError(f"audit export mark of {tenant!r}: {exc}") from exc
    return Exported(entries=len(entries), first_seq=first, last_seq=last, key=key,
                    marked=bool(moved))


def _id_seq(stream_id: Any) -> int:
    ms, _, _ = as_text(stream_id).partition("-")
    return int(ms) if ms.isdigit() else 0


async def _put_once(s3: Any, bucket: str, key: str, body: bytes) -> None:
    """Write ``body`` at ``key`` unless an object is there; one holding the same bytes
    (an earlier attempt) is success, one holding others is :class:`AuditExportError`."""
    digest = hashlib.sha256(body).digest()
    checksum = base64.b64encode(digest).decode("ascii")
    try:
        await asyncio.to_thread(
            s3.put_object, Bucket=bucket, Key=key, Body=body, ContentType=CONTENT_TYPE,
            ChecksumAlgorithm="SHA256", ChecksumSHA256=checksum, IfNoneMatch="*")
        return
    except Exception as exc:
        if _s3_code(exc) not in ("PreconditionFailed", "412"):
            raise AuditExportError(f"audit export to s3://{bucket}/{key}: {exc}") from exc
    try:
        existing = await asyncio.to_thread(s3.get_object, Bucket=bucket, Key=key)
        data = await asyncio.to_thread(existing["Body"].read)
    except Exception as exc:
        raise AuditExportError(f"audit export, reading s3://{bucket}/{key}: {exc}") from exc
    if hashlib.sha256(data).digest() != digest:
        raise AuditExportError(f"audit export: s3://{bucket}/{key} already holds other "
                               "bytes than the chain's entries (not overwritten)")


# --------------------------------------------------------------------------- trim


async def trim_tenant(redis: Any, tenant: str, keep: int = DEFAULT_KEEP) -> int | None:
    """Remove from ``tenant``'s stream the entries at or below its export mark that are
    not among the last ``keep`` (by the head's seq): after it the stream holds every
    entry above ``min(mark, head - keep)``. None under a legal hold (nothing removed);
    else how many were removed. The head is never touched."""
    if keep < 0:
        raise ValueError("keep must be >= 0")
    try:
        removed = await redis.eval(_TRIM, 4, stream_key(tenant), head_key(tenant),
                                   exported_key(tenant), hold_key(tenant), str(keep))
    except Exception as exc:
        raise StoreError(f"audit trim of {tenant!r}: {exc}") from exc
    return None if int(removed) < 0 else int(removed)


# --------------------------------------------------------------------------- the tick


@dataclass(slots=True)
class ExportSummary:
    tenants: int = 0
    """Tenants looked at."""
    exported: int = 0
    """Entries written to S3."""
    trimmed: int = 0
    """Entries removed from Redis."""
    held: int = 0
    """Tenants under a legal hold (not trimmed)."""
    drained: int = 0
    """Outbox events moved into their chains first."""
    failed: list[str] = field(default_factory=list)
    """Tenants whose export or trim failed (logged; the next tick tries again)."""

    def as_dict(self) -> dict[str, Any]:
        return {"tenants": self.tenants, "exported": self.exported, "trimmed": self.trimmed,
                "held": self.held, "drained": self.drained, "failed": len(self.failed)}


async def discover_tenants(redis: Any, *, count: int = SCAN_COUNT,
                           calls: int = SCAN_CALLS) -> int:
    """Add to :data:`TENANTS_KEY` the tenants whose head a bounded SCAN of
    ``audit:head:*`` finds, resuming where the last one stopped; how many were new."""
    cursor = int(as_text(await redis.get(SCAN_CURSOR_KEY)) or 0)
    found: set[str] = set()
    for _ in range(max(1, calls)):
        cursor, keys = await redis.scan(cursor=cursor, match=f"{HEAD_PREFIX}*", count=count)
        found.update(as_text(k)[len(HEAD_PREFIX):] for k in keys)
        if int(cursor) == 0:
            break
    await redis.set(SCAN_CURSOR_KEY, str(int(cursor)))
    if not found:
        return 0
    return int(await redis.zadd(TENANTS_KEY, {t: 0 for t in sorted(found)}, nx=True))


async def export_all(redis: Any, s3: Any, bucket: str, *, max_tenants: int = DEFAULT_MAX_TENANTS,
                     batch: int = DEFAULT_BATCH, keep: int = DEFAULT_KEEP,
                     hmac_key: bytes | None = None, deadline: float | None = None
                     ) -> ExportSummary:
    """One tick: drain the outboxes, discover tenants, then for the ``max_tenants`` whose
    export was tried longest ago export one object (at most ``batch`` entries) and
    trim. At most ``max_tenants`` x ``batch`` entries per tick. ``deadline`` (a
    ``time.monotonic()`` instant) stops it between tenants."""
    summary = ExportSummary()
    trail = AuditTrail(redis, hmac_key)
    summary.drained = await trail.drain_all(max_tenants)
    await discover_tenants(redis)
    members = await redis.zrange(TENANTS_KEY, 0, max(1, max_tenants) - 1)
    for member in members:
        if deadline is not None and time.monotonic() >= deadline:
            break
        tenant = as_text(member)
        summary.tenants += 1
        await redis.zadd(TENANTS_KEY, {tenant: time.time_ns() // 1000}, xx=True)
        try:
            validate_tenant(tenant)
            done = await export_tenant(redis, s3, bucket, tenant, batch=batch)
            summary.exported += done.entries if done.marked else 0
            removed = await trim_tenant(redis, tenant, keep)
        except (StoreError, ValueError) as exc:
            log.error("audit export of %r: %s", tenant, exc)
            summary.failed.append(tenant)
            continue
        if removed is None:
            summary.held += 1
        else:
            summary.trimmed += removed
    return summary


def tenant_of_prefix(prefix: str) -> str:
    """The tenant an ``audit/<tenant>/`` prefix names (the inverse of :func:`tenant_prefix`)."""
    return unquote(prefix.removeprefix(OBJECT_PREFIX).rstrip("/"))
