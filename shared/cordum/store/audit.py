"""The per-tenant audit chain: hash-chained, tamper-evident events on Redis streams.

Each tenant has a stream ``audit:chain:<tenant>`` of entries and a head
``audit:head:<tenant>`` holding ``<seq>:<hash>`` of its last entry. An event is a JSON
object in canonical form (:func:`encode_event`); one Lua script appends it, reading
the head, hashing and writing entry and head in one step (``lua/audit_chain.lua``)::

    hash = SHA-256(prev_hash_hex + "\\n" + str(seq) + "\\n" + sha256_hex(event_bytes))
    hmac = HMAC-SHA256(hmac_key, the same bytes)          ("" without a key)

The event's digest is computed here, in Python, and passed to the script beside the
event, so the Lua hashes a fixed ~150 bytes whatever the event's size. The entry
(stream id ``<seq>-1``) holds fields ``seq``, ``prev``, ``hash``, ``hmac`` and ``event``
(the exact bytes whose digest was chained); :mod:`cordum.store.audit_verify` checks a
chain, hashing each stored event itself.

A script of another store that must write its act and the act's event together is
built with :func:`with_audit` and calls ``audit_append`` itself; :func:`audit_keys` and
:meth:`AuditChain.script_args` give what it passes (docs/audit.md, "The chain").
"""

from __future__ import annotations

import hashlib
import hmac
import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from cordum.store.errors import StoreError
from cordum.text import as_text

STREAM_PREFIX = "audit:chain:"
HEAD_PREFIX = "audit:head:"
"""Two prefixes, neither a prefix of the other's keys: no tenant's stream can be
another tenant's head (``audit:chain:head:<t>`` would be the stream of tenant ``head:<t>``)."""

MAX_EVENT_BYTES = 16 * 1024
"""The largest encoded event; the Lua script holds the same bound (AUDIT_EVENT_MAX)."""
MAX_TENANT_CHARS = 256
MAX_READ = 1000
"""The most entries one :meth:`AuditChain.read` returns."""
SAFE_INT = 2**53 - 1
"""Integers beyond ±(2^53 - 1) have no exact JSON number in most readers (RFC 8785, I-JSON)."""

_LUA = Path(__file__).parent / "lua"
AUDIT_CHAIN_LUA = (_LUA / "audit_chain.lua").read_text()
"""The library chunk: ``sha256_hex``, ``hmac_sha256_hex``, ``audit_append``."""


class Severity(StrEnum):
    CRITICAL = "CRITICAL"
    HIGH = "HIGH"
    MEDIUM = "MEDIUM"
    LOW = "LOW"
    INFO = "INFO"


class AuditEncodingError(ValueError):
    """An event that has no canonical encoding (a float, a non-text key, a lone
    surrogate, an integer past 2^53) or is over :data:`MAX_EVENT_BYTES`."""


# --------------------------------------------------------------------------- keys


def validate_tenant(tenant: str) -> str:
    """``tenant`` when it can name a chain: non-empty text of at most
    :data:`MAX_TENANT_CHARS` characters, none of them whitespace or a control, format or
    unassigned character; ValueError otherwise."""
    if not isinstance(tenant, str) or not tenant:
        raise ValueError("audit tenant must be non-empty text")
    if len(tenant) > MAX_TENANT_CHARS:
        raise ValueError(f"audit tenant is over {MAX_TENANT_CHARS} characters")
    for ch in tenant:
        if ch.isspace() or unicodedata.category(ch).startswith("C"):
            raise ValueError(f"audit tenant {tenant!r} holds whitespace or a control character")
    return tenant


def stream_key(tenant: str) -> str:
    return STREAM_PREFIX + validate_tenant(tenant)


def head_key(tenant: str) -> str:
    return HEAD_PREFIX + validate_tenant(tenant)


def audit_keys(tenant: str) -> list[str]:
    """[stream, head]: the two keys ``audit_append`` takes, in its order."""
    return [stream_key(tenant), head_key(tenant)]


def entry_id(seq: int) -> str:
    """The stream id of entry ``seq``."""
    return f"{seq}-1"


# --------------------------------------------------------------------------- encoding


def _canonical(value: Any, path: str) -> Any:
    """``value`` checked for the canonical subset, with every object's members in the
    order RFC 8785 sorts them (by their names' UTF-16 code units)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not -SAFE_INT <= value <= SAFE_INT:
            raise AuditEncodingError(f"{path}: integer {value} is beyond ±(2^53 - 1)")
        return int(value)
    if isinstance(value, float):
        raise AuditEncodingError(f"{path}: floats have no canonical encoding here; "
                                 "send an integer (a scaled unit) or a string")
    if isinstance(value, str):
        _check_text(value, path)
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key in sorted(value, key=_utf16_order):
            if not isinstance(key, str):
                raise AuditEncodingError(f"{path}: object key {key!r} is not text")
            out[key] = _canonical(value[key], f"{path}.{key}")
        return out
    if isinstance(value, list | tuple):
        return [_canonical(v, f"{path}[{i}]") for i, v in enumerate(value)]
    raise AuditEncodingError(f"{path}: {type(value).__name__} is not a JSON value")


def _utf16_order(key: Any) -> bytes:
    if not isinstance(key, str):
        raise AuditEncodingError(f"object key {key!r} is not text")
    _check_text(key, "key")
    return key.encode("utf-16-be")


def _check_text(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise AuditEncodingError(f"{path}: text is not valid Unicode ({exc.reason})") from exc


def canonical_json(value: Any) -> bytes:
    """``value`` as canonical JSON: members sorted, no whitespace, UTF-8 as it is (no
    ``\\u`` escapes but for control characters), no floats. For the values it accepts
    (text, integers within ±(2^53 - 1), true/false/null, arrays, objects with text
    keys) it is the encoding of RFC 8785."""
    normal = _canonical(value, "$")
    return json.dumps(normal, ensure_ascii=False, allow_nan=False, separators=(",", ":"),
                      sort_keys=False).encode("utf-8")


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One governance act. ``at`` is in µs since the epoch; optional fields left None
    are left out of the encoding."""

    type: str
    """What happened, dotted (``approval.approve``, ``policy.publish``)."""
    severity: Severity | str
    tenant: str
    actor: str
    """The principal that acted."""
    actor_key: str
    """The id of the key it acted with."""
    at: int
    job_id: str | None = None
    run_id: str | None = None
    workflow_id: str | None = None
    reason: str | None = None
    snapshot: Any = None
    """Any JSON value: what the act saw or changed."""
    extra: Mapping[str, Any] | None = field(default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.type, str) or not self.type or any(
                c.isspace() or unicodedata.category(c).startswith("C") for c in self.type):
            raise ValueError(f"audit event type {self.type!r} must be non-empty, "
                             "with no whitespace or control characters")
        try:
            object.__setattr__(self, "severity", Severity(self.severity))
        except ValueError:
            raise ValueError(f"audit severity {self.severity!r} is not one of "
                             f"{', '.join(Severity)}") from None
        validate_tenant(self.tenant)
        for name in ("actor", "actor_key"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"audit event {name} must be text")
        for name in ("job_id", "run_id", "workflow_id", "reason"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"audit event {name} must be text or None")
        if isinstance(self.at, bool) or not isinstance(self.at, int) or self.at < 0:
            raise ValueError("audit event at must be a non-negative integer (µs)")
        if self.extra is not None and not isinstance(self.extra, Mapping):
            raise ValueError("audit event extra must be an object")

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "severity": str(self.severity),
                               "tenant": self.tenant, "actor": self.actor,
                               "actor_key": self.actor_key, "at": self.at}
        for name in ("job_id", "run_id", "workflow_id", "reason", "snapshot", "extra"):
            value = getattr(self, name)
            if value is not None:
                out[name] = dict(value) if name == "extra" else value
        return out


def encode_event(event: AuditEvent) -> bytes:
    """The canonical bytes of ``event``, the bytes the chain hashes and stores;
    :class:`AuditEncodingError` when they are over :data:`MAX_EVENT_BYTES`."""
    data = canonical_json(event.as_dict())
    if len(data) > MAX_EVENT_BYTES:
        raise AuditEncodingError(f"audit event of {len(data)} bytes is over "
                                 f"{MAX_EVENT_BYTES} (shorten its snapshot or extra)")
    return data


def decode_event(data: bytes | str) -> dict[str, Any]:
    """A stored event's bytes as a dict."""
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ValueError("an audit event is a JSON object")
    return value


# --------------------------------------------------------------------------- hashing


def event_digest(event: bytes) -> str:
    """SHA-256 of an event's bytes in lowercase hex: what the chain links, not the bytes."""
    return hashlib.sha256(event).hexdigest()


def hashed_bytes(prev: str, seq: int, event: bytes) -> bytes:
    """What an entry's hash and HMAC are computed over: ``prev``, ``seq`` and the
    event's digest (:func:`event_digest`), on lines."""
    return b"%s\n%d\n%s" % (prev.encode("ascii"), seq, event_digest(event).encode("ascii"))


def entry_hash(prev: str, seq: int, event: bytes) -> str:
    return hashlib.sha256(hashed_bytes(prev, seq, event)).hexdigest()


def entry_hmac(key: bytes, prev: str, seq: int, event: bytes) -> str:
    return hmac.new(key, hashed_bytes(prev, seq, event), hashlib.sha256).hexdigest()


# --------------------------------------------------------------------------- entries


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One stored entry as read back, its fields unparsed beyond their types: the
    verifier judges them."""

    stream_id: str
    seq: str
    prev: str
    hash: str
    hmac: str | None
    """None when the entry has no hmac field at all ("" when written without a key)."""
    event: bytes

    @property
    def seq_number(self) -> int | None:
        return int(self.seq) if self.seq.isascii() and self.seq.isdigit() else None

    def decoded(self) -> dict[str, Any]:
        return decode_event(self.event)


def parse_entry(stream_id: Any, fields: Mapping[Any, Any]) -> AuditEntry:
    """An XRANGE item as an :class:`AuditEntry` (bytes or decoded replies alike)."""
    raw = {as_text(k): v for k, v in fields.items()}
    event = raw.get("event", b"")
    mac = raw.get("hmac")
    return AuditEntry(stream_id=as_text(stream_id), seq=as_text(raw.get("seq")),
                      prev=as_text(raw.get("prev")), hash=as_text(raw.get("hash")),
                      hmac=None if mac is None else as_text(mac),
                      event=event.encode("utf-8") if isinstance(event, str) else bytes(event))


def parse_head(value: Any) -> tuple[int, str] | None:
    """A head's ``<seq>:<hash>`` as (seq, hash); None when absent; ValueError when malformed."""
    if value is None:
        return None
    text = as_text(value)
    seq, sep, digest = text.partition(":")
    if not sep or not seq.isascii() or not seq.isdigit() or len(digest) != 64:
        raise ValueError(f"malformed audit head {text!r}")
    return int(seq), digest


# --------------------------------------------------------------------------- scripts


def with_audit(script: str) -> str:
    """A script's source with the chain's library chunk before it: its body may call
    ``audit_append(stream_key, head_key, event, event_sha256, hmac_key)`` (and the hash
    functions).

    The body passes the chain's keys among its KEYS (:func:`audit_keys`) and the event,
    its digest and the HMAC key among its ARGV (:meth:`AuditChain.script_args`), at
    positions it documents. Redis does not undo a script's writes when it fails part way, so the
    body makes its own checks first, then calls ``audit_append`` (which checks before
    it writes), then makes its own writes."""
    return f"{AUDIT_CHAIN_LUA}\n-- ---- the script's own body ----\n{script}"


class AuditChain:
    """Appends to and reads the tenants' chains. ``hmac_key``, when given, signs every
    entry this instance appends (an HMAC beside each hash)."""

    def __init__(self, redis: Any, hmac_key: bytes | None = None) -> None:
        if hmac_key is not None and (not isinstance(hmac_key, bytes) or not hmac_key):
            raise ValueError("hmac_key must be non-empty bytes or None")
        self._redis = redis
        self.hmac_key = hmac_key
        self._append = redis.register_script(
            with_audit((_LUA / "audit_append.lua").read_text()))

    def script_args(self, event: AuditEvent | bytes) -> list[bytes]:
        """[event bytes, their SHA-256 in lowercase hex, HMAC key or b""]: the three ARGV
        ``audit_append`` takes after its keys."""
        data = encode_event(event) if isinstance(event, AuditEvent) else event
        if not isinstance(data, bytes) or not data or len(data) > MAX_EVENT_BYTES:
            raise AuditEncodingError("audit event bytes must be non-empty and at most "
                                     f"{MAX_EVENT_BYTES}")
        return [data, event_digest(data).encode("ascii"), self.hmac_key or b""]

    async def append(self, tenant: str, event: AuditEvent) -> tuple[int, str]:
        """Append ``event`` to ``tenant``'s chain in one round trip; (seq, hash)."""
        if event.tenant != tenant:
            raise ValueError(f"audit event of tenant {event.tenant!r} appended to {tenant!r}")
        keys = audit_keys(tenant)
        args = self.script_args(event)
        try:
            seq, digest = await self._append(keys=keys, args=args)
        except Exception as exc:
            raise StoreError(f"audit append to {tenant!r}: {exc}") from exc
        return int(seq), as_text(digest)

    async def head(self, tenant: str) -> tuple[int, str] | None:
        try:
            value = await self._redis.get(head_key(tenant))
        except Exception as exc:
            raise StoreError(f"audit head of {tenant!r}: {exc}") from exc
        return parse_head(value)

    async def read(self, tenant: str, after_seq: int = 0, count: int = 100) -> list[AuditEntry]:
        """Up to ``count`` (at most :data:`MAX_READ`) entries of ``tenant`` after
        ``after_seq``, oldest first."""
        if after_seq < 0:
            raise ValueError("after_seq must be >= 0")
        count = max(1, min(count, MAX_READ))
        try:
            items = await self._redis.xrange(stream_key(tenant), min=f"{after_seq + 1}-0",
                                             max="+", count=count)
        except Exception as exc:
            raise StoreError(f"audit read of {tenant!r}: {exc}") from exc
        return [parse_entry(sid, fields) for sid, fields in items]

