"""Config documents per scope, and the effective config merged from them.

A document is Cordum's ``{scope, scope_id, data, revision, updated_at, meta}``, one
JSON string per key. The keys are Cordum's ``cfg:<scope>:<id>`` with the tenant in
every key but the system's, so one tenant's documents can never be named by
another's request:

- ``cfg:system:<id>``: applies to every tenant (``default`` is the one merged);
- ``cfg:org:<tenant>``: the tenant's own (the org id is always the tenant);
- ``cfg:team:<tenant>:<team_id>``, ``cfg:workflow:<tenant>:<workflow_id>``,
  ``cfg:step:<tenant>:<step_id>``.

An id (team, workflow, step, system) matches :data:`ID_PATTERN`, so it holds no
``:`` and the tenant before it is read back unambiguously.

**The effective config** merges the documents that apply in the order system/default,
org, team, workflow, step (:func:`scope_keys`): an object member merges into an object
member of the same name, anything else replaces what was there (Cordum's deep merge).
Its snapshot is ``{version, hash, data}``: ``version`` names each scope's revision
(``system:3|org:1|team:0|workflow:0|step:0``), ``hash`` is the SHA-256 of ``data`` as
compact JSON with sorted keys. :func:`scope_keys` and :func:`effective` are pure, so a
caller that already sends a pipeline reads the keys with one MGET in it.

**A write** (:meth:`ConfigDocs.commit`) is one Lua script (``lua/config_set.lua``):
it writes only if the document is still at the revision its writer read (0 when there
was none), counts a new document against the tenant's bound
(:data:`MAX_DOCUMENTS_PER_TENANT`, kept in ``cfg:docs:<tenant>``) and appends the
write's event to the audit chain: the write and its event, or neither.

Bounds: a document's ``data`` is at most :data:`MAX_DATA_BYTES` of compact JSON and
nests at most :data:`MAX_DEPTH` levels; a read is one GET or one MGET of at most five
keys; a write one script call.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cordum.store.audit import validate_tenant, with_audit
from cordum.store.errors import StoreError
from cordum.text import as_text

if TYPE_CHECKING:
    from collections.abc import Sequence

    from cordum.store.jobs import AuditParts

SYSTEM = "system"
ORG = "org"
TEAM = "team"
WORKFLOW = "workflow"
STEP = "step"
SCOPES = (SYSTEM, ORG, TEAM, WORKFLOW, STEP)
"""Every scope, in merge order."""
SYSTEM_DEFAULT_ID = "default"
"""The system document every tenant's effective config starts from."""
SYSTEM_TENANT = "*"
"""The tenant whose bound and audit chain a system document counts in."""

ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
"""Team, workflow, step and system ids (the workflow definitions' id grammar)."""
MAX_ID_CHARS = 128
MAX_DATA_BYTES = 64 * 1024
"""A document's ``data`` as compact JSON, at most (UTF-8 bytes)."""
MAX_DEPTH = 16
"""Levels of objects and arrays ``data`` may nest (``{"a": {"b": 1}}`` is 2)."""
MAX_DOCUMENTS_PER_TENANT = 1000
"""Documents one tenant may hold over all its scopes (system ones count under ``*``)."""
RESERVED_SYSTEM_PREFIX = "policy"
"""System ids the platform keeps for the policy (``cfg:system:policy``, its snapshots,
audit and proposals): never read or written as config documents."""
INDEX_PREFIX = "cfg:docs:"

_LUA = Path(__file__).parent / "lua" / "config_set.lua"


class ConfigIdError(ValueError):
    """An id that cannot name a config document."""


def check_id(what: str, value: str) -> str:
    """``value`` when it is a valid id; ConfigIdError naming ``what`` otherwise."""
    if not isinstance(value, str) or len(value) > MAX_ID_CHARS or not ID_PATTERN.match(value):
        raise ConfigIdError(f"{what} must match {ID_PATTERN.pattern} and be at most "
                            f"{MAX_ID_CHARS} characters")
    return value


def reserved_system_id(scope_id: str) -> bool:
    """Whether ``system/<scope_id>`` is a key the platform keeps for itself."""
    return scope_id.lower().startswith(RESERVED_SYSTEM_PREFIX)


def doc_key(scope: str, tenant: str, scope_id: str = "") -> str:
    """The Redis key of a document (see the module); ValueError for a bad id or scope."""
    if scope == SYSTEM:
        return f"cfg:system:{check_id('scope_id', scope_id or SYSTEM_DEFAULT_ID)}"
    try:
        validate_tenant(tenant)
    except ValueError as exc:
        raise ConfigIdError(f"tenant cannot name a config document: {exc}") from None
    if scope == ORG:
        return f"cfg:org:{tenant}"
    if scope in (TEAM, WORKFLOW, STEP):
        return f"cfg:{scope}:{tenant}:{check_id(f'{scope}_id', scope_id)}"
    raise ConfigIdError(f"scope must be one of {', '.join(SCOPES)}")


def index_key(chain_tenant: str) -> str:
    """The set of the keys of ``chain_tenant``'s documents (``*``: the system's)."""
    return INDEX_PREFIX + validate_tenant(chain_tenant)


def scope_keys(tenant: str, team_id: str = "", workflow_id: str = "",
               step_id: str = "") -> list[str]:
    """The keys of the documents that apply to a job of ``tenant`` (with these ids), in
    merge order; an empty id leaves its scope out. ConfigIdError for an id that cannot
    name a document. Read them with one MGET and hand the values to :func:`effective`."""
    keys = [doc_key(SYSTEM, tenant, SYSTEM_DEFAULT_ID), doc_key(ORG, tenant)]
    for scope, scope_id in ((TEAM, team_id), (WORKFLOW, workflow_id), (STEP, step_id)):
        if scope_id:
            keys.append(doc_key(scope, tenant, scope_id))
    return keys


def parse_document(raw: bytes | str | None) -> dict[str, Any] | None:
    """A stored document (None when absent); StoreError when it is not a JSON object
    (only this module writes the keys: anything else was put there by hand)."""
    if raw is None:
        return None
    try:
        value = json.loads(as_text(raw))
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise StoreError("a config document is not a JSON object")
    return value


def revision_of(doc: dict[str, Any] | None) -> int:
    """A document's revision; 0 for none (and for one without a usable number)."""
    value = (doc or {}).get("revision")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return int(value)


def merge_deep(dst: dict[str, Any], src: dict[str, Any]) -> dict[str, Any]:
    """``src`` merged into ``dst`` (in place, returned): members that are objects on both
    sides merge, anything else replaces. ``src``'s objects are copied, not shared."""
    for key, value in src.items():
        if isinstance(value, dict) and isinstance(dst.get(key), dict):
            merge_deep(dst[key], value)
        else:
            dst[key] = _copy(value)
    return dst


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def canonical(data: Any) -> str:
    """``data`` as compact JSON with sorted keys (what :func:`data_hash` hashes)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def data_hash(data: Any) -> str:
    return hashlib.sha256(canonical(data).encode()).hexdigest()


def snapshot(raw_docs: Sequence[bytes | str | None]) -> dict[str, Any]:
    """The effective snapshot ``{version, hash, data}`` of the documents read from
    :func:`scope_keys`'s keys (None for a missing one); each document's own ``scope``
    names its place in ``version``. With no document: empty data, every revision 0."""
    data: dict[str, Any] = {}
    revisions = dict.fromkeys(SCOPES, 0)
    for raw in raw_docs:
        doc = parse_document(raw)
        if doc is None:
            continue
        scope = doc.get("scope")
        if scope in revisions:
            revisions[scope] = revision_of(doc)
        if isinstance(doc.get("data"), dict):
            merge_deep(data, doc["data"])
    version = "|".join(f"{scope}:{revisions[scope]}" for scope in SCOPES)
    return {"version": version, "hash": data_hash(data), "data": data}


def effective(raw_docs: Sequence[bytes | str | None]) -> dict[str, Any] | None:
    """:func:`snapshot`, or None when no document exists (nothing to attach to a job).
    StoreError when a stored value is not a JSON object."""
    if all(raw is None for raw in raw_docs):
        return None
    return snapshot(raw_docs)


def depth_of(value: Any, most: int = MAX_DEPTH) -> int:
    """How deep ``value`` nests (a scalar is 0), counted up to ``most + 1`` at most, so
    the walk stops early on a deeper value."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            level += 1
            deepest = max(deepest, level)
            if deepest > most:
                return deepest
            stack.extend((child, level) for child in
                         (node.values() if isinstance(node, dict) else node))
    return deepest


class ConfigDocs:
    """The documents in ``redis`` (``redis.asyncio.Redis`` or one of its shape)."""

    def __init__(self, redis: Any) -> None:
        self._redis = redis
        self._set = redis.register_script(with_audit(_LUA.read_text()))

    async def get(self, key: str) -> dict[str, Any] | None:
        """One document (None when absent): one GET."""
        try:
            raw = await self._redis.get(key)
        except Exception as exc:
            raise StoreError(f"config read {key!r}: {type(exc).__name__}: {exc}") from exc
        return parse_document(raw)

    async def read_many(self, keys: Sequence[str]) -> list[Any]:
        """The raw values of ``keys`` (None for a missing one): one MGET."""
        try:
            return list(await self._redis.mget(list(keys)))
        except Exception as exc:
            raise StoreError(f"config read: {type(exc).__name__}: {exc}") from exc

    async def commit(self, key: str, chain_tenant: str, read_revision: int,
                     document: dict[str, Any], audit: AuditParts | None = None,
                     *, most: int = MAX_DOCUMENTS_PER_TENANT) -> int:
        """Write ``document`` at ``key`` if it is still at ``read_revision``, counting it
        in ``chain_tenant``'s documents and appending ``audit`` (the event's
        ``AuditTrail.script_parts``). 1: written; 0: the revision moved (nothing
        written); -1: a new document beyond the tenant's bound (nothing written)."""
        chain_keys, chain_args = audit or ([], [])
        text = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
        try:
            return int(await self._set(
                keys=[key, index_key(chain_tenant), *chain_keys],
                args=[str(read_revision), text, str(most), len(chain_args), *chain_args]))
        except Exception as exc:
            raise StoreError(f"config write {key!r}: {type(exc).__name__}: {exc}") from exc
