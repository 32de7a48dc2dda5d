"""The check of a tenant's exported audit objects (:mod:`cordum.store.audit_export`
writes them): read back in seq order as one chain, the seed of the check of what Redis
still holds (docs/audit.md, "Verify across the export").

The S3 client is boto3's (blocking): its calls run in a worker thread.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from cordum.store.audit import AuditEntry
from cordum.store.audit_export import AuditExportError, decode_lines, tenant_prefix
from cordum.store.audit_verify import ChainVerifier, Gap

LIST_PAGE = 1000
"""Keys one ListObjectsV2 call asks for."""
MAX_VERIFY_OBJECTS = 10_000
"""Objects one verification reads at most, past them ``partial`` (10M entries at the
default batch)."""


@dataclass(frozen=True, slots=True)
class ExportVerifyResult:
    status: str
    """``ok`` | ``compromised`` (any finding) | ``partial`` (more than
    :data:`MAX_VERIFY_OBJECTS` objects: the rest was not read)."""
    objects: int
    first_seq: int
    last_seq: int
    last_hash: str
    """The seed for the chain's remainder in Redis: ``verify_chain(seed=(last_seq,
    last_hash))`` (none when no object was found: verify Redis from seq 1)."""
    gaps: tuple[Gap, ...]
    total_events: int = 0
    hmac_verified: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "objects": self.objects, "first_seq": self.first_seq,
                "last_seq": self.last_seq, "last_hash": self.last_hash,
                "gaps": [g.as_dict() for g in self.gaps], "total_events": self.total_events,
                "hmac_verified": self.hmac_verified}

    @property
    def seed(self) -> tuple[int, str] | None:
        return (self.last_seq, self.last_hash) if self.last_seq else None


def _range_of(key: str) -> tuple[int, int] | None:
    name = key.rsplit("/", 1)[-1]
    first, sep, rest = name.partition("-")
    last = rest.removesuffix(".jsonl")
    if not sep or not first.isdigit() or not last.isdigit():
        return None
    return int(first), int(last)


async def verify_exported(s3: Any, bucket: str, tenant: str, hmac_key: bytes | None = None,
                          *, max_objects: int = MAX_VERIFY_OBJECTS) -> ExportVerifyResult:
    """Verify ``tenant``'s exported objects as one chain from seq 1: in key order (seq
    order), each object's entries checked with :class:`ChainVerifier` (hash, HMAC with a
    key, links across objects, missing and out-of-order seqs), and each object's entries
    must span the seqs its name says (``object_mismatch`` at its first seq otherwise;
    ``object_unreadable`` when it does not parse).

    The caller then verifies Redis seeded with :attr:`ExportVerifyResult.seed`; entries
    still in Redis at or below it are passed over there."""
    prefix = tenant_prefix(tenant)
    keys: list[str] = []
    truncated = False
    token: str | None = None
    try:
        while True:
            kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": LIST_PAGE}
            if token:
                kwargs["ContinuationToken"] = token
            page = await asyncio.to_thread(s3.list_objects_v2, **kwargs)
            keys.extend(o["Key"] for o in page.get("Contents") or [])
            if len(keys) > max_objects:
                keys, truncated = keys[:max_objects], True
                break
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                break
    except Exception as exc:
        raise AuditExportError(f"audit export listing of {tenant!r}: {exc}") from exc
    keys.sort()
    verifier = ChainVerifier(hmac_key=hmac_key)
    extra: list[Gap] = []
    last: AuditEntry | None = None
    for key in keys:
        span = _range_of(key)
        at = span[0] if span else (last.seq_number or 0) + 1 if last else 1
        try:
            obj = await asyncio.to_thread(s3.get_object, Bucket=bucket, Key=key)
            entries = decode_lines(await asyncio.to_thread(obj["Body"].read))
        except (ValueError, UnicodeDecodeError):
            extra.append(Gap(at, "object_unreadable"))
            continue
        except Exception as exc:
            raise AuditExportError(f"audit export read of s3://{bucket}/{key}: {exc}") from exc
        seqs = [e.seq_number for e in entries]
        if span is None or not entries or (seqs[0], seqs[-1]) != span:
            extra.append(Gap(at, "object_mismatch"))
        verifier.feed(entries)
        for e in entries:
            if last is None or (e.seq_number or 0) > (last.seq_number or 0):
                last = e
    head = (last.seq_number or 0, last.hash) if last is not None else None
    result = verifier.finish(head)
    gaps = tuple(sorted((*result.gaps, *extra), key=lambda g: (g.at_seq, g.type)))
    status = "compromised" if gaps or result.gaps_truncated else (
        "partial" if truncated else "ok")
    return ExportVerifyResult(
        status=status, objects=len(keys), first_seq=result.first_seq,
        last_seq=head[0] if head else 0, last_hash=head[1] if head else "", gaps=gaps,
        total_events=result.total_events, hmac_verified=result.hmac_verified)
