"""Verify a tenant's audit chain (cordum.store.audit): every finding named by its seq.

:class:`ChainVerifier` judges stored entries in stream order, a batch at a time, in
memory that grows with the findings, not with the chain; :func:`verify_entries` runs
it over a sequence, :func:`verify_chain` over a tenant's stream read in bounded XRANGE
batches. Each entry's hash is recomputed from its stored prev, seq and the SHA-256 of
its stored event bytes (hashed here: an event edited after the append, or a writer
that chained another event's digest, is a ``hash_mismatch``).

Findings (``Gap.type``):

``missing``        no entry holds this seq (deleted, or a tail past the last entry
                   that the head still names); ``count`` seqs from ``at_seq`` on
``out_of_order``   the entry stands after a later one, or under a stream id not its own
``duplicate``      a second entry with a seq already seen (a fork or a replay)
``hash_mismatch``  the stored hash is not the hash of the stored prev, seq and event
                   digest
``hmac_mismatch``  a key is configured and the stored HMAC is not the one it gives
``hmac_missing``   a key is configured and the entry has no HMAC
``broken_link``    the entry's prev is not the hash of the entry before it
``bad_genesis``    entry 1 has a prev (a chain starts with "")
``malformed``      an entry whose seq, prev or hash cannot be read
``head_missing``   the head is gone while the chain has entries
``head_mismatch``  the head names another seq or hash than the last entry (stale, edited)

The status is ``compromised`` with any finding; else ``partial`` when the check
started from a ``seed`` (the seq and hash of the last entry of a prefix verified
elsewhere, such as an exported and trimmed part), else ``ok``.
"""

from __future__ import annotations

import hmac as hmac_lib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cordum.store.audit import (
    AuditEntry,
    entry_hash,
    entry_hmac,
    head_key,
    parse_entry,
    parse_head,
    stream_key,
)
from cordum.store.errors import StoreError

MAX_GAPS = 1000
"""Findings kept in a result; past it ``gaps_truncated`` is set (the status stands)."""
MAX_BATCH = 1000

_HEX64 = re.compile(r"[0-9a-f]{64}")
_HMAC_TYPES = frozenset({"hmac_mismatch", "hmac_missing"})


@dataclass(frozen=True, slots=True)
class Gap:
    at_seq: int
    type: str
    count: int = 1
    """How many seqs from ``at_seq`` on (a ``missing`` range); 1 for the other types."""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"at_seq": self.at_seq, "type": self.type}
        if self.count != 1:
            out["count"] = self.count
        return out


@dataclass(frozen=True, slots=True)
class VerifyResult:
    status: str
    """``ok`` | ``compromised`` | ``partial``."""
    total_events: int
    verified_events: int
    """Entries whose hash (and HMAC, with a key) match and whose link to the entry
    before them holds."""
    first_seq: int
    last_seq: int
    """The lowest and highest seq among the entries judged (0 when none)."""
    gaps: tuple[Gap, ...]
    hmac_verified: bool
    """A key was configured and every entry's HMAC matched it."""
    gaps_truncated: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "total_events": self.total_events,
                "verified_events": self.verified_events, "first_seq": self.first_seq,
                "last_seq": self.last_seq, "gaps": [g.as_dict() for g in self.gaps],
                "hmac_verified": self.hmac_verified, "gaps_truncated": self.gaps_truncated}


class ChainVerifier:
    """Feed it a chain's entries in stream order (:meth:`feed`, any number of times),
    then :meth:`finish` with the head.

    ``seed``: (seq, hash) of the last entry before the ones fed, verified elsewhere; the
    first entry fed must then be seq + 1 linking to hash, and entries at or below seq
    are passed over. Without it the chain must start at seq 1 with prev "".
    """

    def __init__(self, *, hmac_key: bytes | None = None,
                 seed: tuple[int, str] | None = None) -> None:
        if seed is not None and (seed[0] < 1 or not _HEX64.fullmatch(seed[1])):
            raise ValueError("seed must be (seq >= 1, a 64-digit lowercase hex hash)")
        self._key = hmac_key or None
        self._seed = seed
        self._base = seed[0] if seed else 0
        self._max_seq = self._base
        """The highest seq seen (the seed's before any)."""
        self._max_hash = seed[1] if seed else ""
        self._pending: list[list[int]] = []
        """Seqs skipped over so far, as [first, last] ranges in order: missing unless
        they turn up later (out of order)."""
        self._gaps: list[Gap] = []
        self._seen_gaps: set[tuple[int, str]] = set()
        self._truncated = False
        self._total = 0
        self._verified = 0
        self._first = 0
        self._hmac_failed = False

    @property
    def start_after(self) -> int:
        """The seq the entries fed should start after (the seed's, else 0)."""
        return self._base

    # ------------------------------------------------------------------ findings

    def _gap(self, at_seq: int, kind: str, count: int = 1) -> None:
        if kind in _HMAC_TYPES:
            self._hmac_failed = True
        if (at_seq, kind) in self._seen_gaps:
            return
        if len(self._gaps) >= MAX_GAPS:
            self._truncated = True
            return
        self._seen_gaps.add((at_seq, kind))
        self._gaps.append(Gap(at_seq, kind, count))

    def _skip_to(self, seq: int) -> None:
        """``seq`` arrived above max + 1: the seqs between are pending."""
        self._pending.append([self._max_seq + 1, seq - 1])

    def _claim(self, seq: int) -> bool:
        """Take ``seq`` out of the pending ranges; False when it was not pending."""
        for i, (lo, hi) in enumerate(self._pending):
            if lo <= seq <= hi:
                parts = [[lo, seq - 1]] if lo < seq else []
                parts += [[seq + 1, hi]] if seq < hi else []
                self._pending[i:i + 1] = parts
                return True
        return False

    # ------------------------------------------------------------------ judging

    def feed(self, entries: Iterable[AuditEntry]) -> None:
        for entry in entries:
            self._judge(entry)

    def _judge(self, entry: AuditEntry) -> None:
        seq = entry.seq_number
        if seq is not None and seq <= self._base:
            return  # the seeded prefix, verified elsewhere
        self._total += 1
        if seq is None or seq < 1:
            self._gap(self._max_seq + 1, "malformed")
            return
        if not self._first or seq < self._first:
            self._first = seq
        good = True
        readable = bool(_HEX64.fullmatch(entry.hash)) and (
            entry.prev == "" or bool(_HEX64.fullmatch(entry.prev)))
        if not readable:
            self._gap(seq, "malformed")
            good = False
        if entry.stream_id != f"{seq}-1":
            self._gap(seq, "out_of_order")
            good = False
        if readable and not hmac_lib.compare_digest(
                entry_hash(entry.prev, seq, entry.event), entry.hash):
            self._gap(seq, "hash_mismatch")
            good = False
        if readable and self._key is not None:
            if not entry.hmac:
                self._gap(seq, "hmac_missing")
                good = False
            elif not hmac_lib.compare_digest(
                    entry_hmac(self._key, entry.prev, seq, entry.event), entry.hmac):
                self._gap(seq, "hmac_mismatch")
                good = False
        if seq == self._max_seq + 1:
            if readable and seq == 1 and entry.prev != "":
                self._gap(seq, "bad_genesis")
                good = False
            elif readable and seq > 1 and entry.prev != self._max_hash:
                self._gap(seq, "broken_link")
                good = False
            self._max_seq, self._max_hash = seq, entry.hash
        elif seq > self._max_seq + 1:
            # What lies between is missing, or out of order if it turns up later; the
            # link of this entry is not judged (its predecessor is not at hand).
            self._skip_to(seq)
            self._max_seq, self._max_hash = seq, entry.hash
        else:
            self._gap(seq, "out_of_order" if self._claim(seq) else "duplicate")
            good = False
        if good:
            self._verified += 1

    def finish(self, head: tuple[int, str] | None) -> VerifyResult:
        """The result, given the head as stored: (seq, hash), or None when it is absent
        (a malformed head is passed as (-1, its text))."""
        for lo, hi in self._pending:
            self._gap(lo, "missing", hi - lo + 1)
        self._pending = []
        has_entries = self._max_seq > 0
        if head is None:
            if has_entries:
                self._gap(self._max_seq, "head_missing")
        else:
            head_seq, head_hash = head
            if head_seq > self._max_seq:
                # The head names entries past the last one: the tail is gone.
                self._gap(self._max_seq + 1, "missing", head_seq - self._max_seq)
            elif head_seq != self._max_seq or head_hash != self._max_hash:
                self._gap(self._max_seq, "head_mismatch")
        gaps = tuple(sorted(self._gaps, key=lambda g: (g.at_seq, g.type)))
        status = "compromised" if gaps or self._truncated else (
            "partial" if self._seed else "ok")
        return VerifyResult(
            status=status, total_events=self._total, verified_events=self._verified,
            first_seq=self._first, last_seq=self._max_seq if self._total else 0, gaps=gaps,
            hmac_verified=self._key is not None and not self._hmac_failed,
            gaps_truncated=self._truncated)


def verify_entries(entries: Iterable[AuditEntry], head: tuple[int, str] | None, *,
                   hmac_key: bytes | None = None,
                   seed: tuple[int, str] | None = None) -> VerifyResult:
    """Judge ``entries`` (in stream order) and ``head`` (None: absent); see the module."""
    verifier = ChainVerifier(hmac_key=hmac_key, seed=seed)
    verifier.feed(entries)
    return verifier.finish(head)


async def verify_chain(redis: Any, tenant: str, *, hmac_key: bytes | None = None,
                       seed: tuple[int, str] | None = None, batch: int = 500) -> VerifyResult:
    """Verify ``tenant``'s chain on Redis: the head and the stream's last entry are read
    together (one MULTI), then the entries up to that one in XRANGE batches of ``batch``
    (at most :data:`MAX_BATCH`); appends made meanwhile are left for the next check."""
    batch = max(1, min(batch, MAX_BATCH))
    stream = stream_key(tenant)
    verifier = ChainVerifier(hmac_key=hmac_key, seed=seed)
    try:
        pipe = redis.pipeline(transaction=True)
        pipe.get(head_key(tenant))
        pipe.xrevrange(stream, max="+", min="-", count=1)
        raw_head, last = await pipe.execute()
        try:
            head = parse_head(raw_head)
        except ValueError:
            head = (-1, str(raw_head))
        if last:
            end = last[0][0]
            start: Any = f"{verifier.start_after + 1}-0"
            while True:
                items = await redis.xrange(stream, min=start, max=end, count=batch)
                verifier.feed(parse_entry(sid, fields) for sid, fields in items)
                if len(items) < batch:
                    break
                sid = items[-1][0]
                start = "(" + (sid.decode() if isinstance(sid, bytes) else str(sid))
    except Exception as exc:
        raise StoreError(f"audit verify of {tenant!r}: {exc}") from exc
    return verifier.finish(head)
