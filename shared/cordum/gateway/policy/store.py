"""Where the system policy's governance lives in Redis: the bundles document (the one
the safety kernel reads), the last snapshots of its bundles and the audit of changes.

- :data:`~cordum.safety.bundles.POLICY_DOC_KEY`: the JSON document of every bundle,
  with its ``revision``.
- :data:`SNAPSHOTS_KEY`: a list of snapshot JSON ``{id, created_at, note, author,
  bundle_ids, bundles}``, newest first, at most :data:`MAX_SNAPSHOTS`.
- :data:`AUDIT_KEY`: a list of audit entry JSON, newest first, at most
  :data:`MAX_AUDIT_ENTRIES`.
- :data:`PROPOSALS_KEY`: a hash of the changes waiting for a second person's
  confirmation (id -> JSON), at most :data:`MAX_PROPOSALS` (``lua/propose.lua``).

A change is read (:meth:`PolicyStore.read`), worked out, then committed by one Lua
script (``lua/commit.lua``) that writes only if neither the document's revision nor
the newest snapshot changed in between:

    writer A: read rev 7 ........ commit(7) -> written, rev 8
    writer B:    read rev 7 ............... commit(7) -> refused (409, nothing written)

so a concurrent writer is told, never silently overwritten.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cordum.safety.bundles import POLICY_DOC_KEY
from cordum.store.audit import with_audit
from cordum.store.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Sequence

    from cordum.store.jobs import AuditParts

SNAPSHOTS_KEY = "cfg:system:policy_snapshots"
AUDIT_KEY = "cfg:system:policy_audit"
MAX_SNAPSHOTS = 10
"""Snapshots kept (Cordum's number); the oldest goes first."""
MAX_AUDIT_ENTRIES = 500
"""Audit entries kept (Cordum's number); the oldest goes first."""
PROPOSALS_KEY = "cfg:system:policy_proposals"
MAX_PROPOSALS = 20
"""Changes that may wait for confirmation at once; one more is refused (409)."""

_COMMIT_LUA = Path(__file__).parent / "lua" / "commit.lua"
_PROPOSE_LUA = Path(__file__).parent / "lua" / "propose.lua"
_UNCHANGED_LUA = Path(__file__).parent / "lua" / "unchanged.lua"


class RedisPolicyProtocol(Protocol):
    """The part of ``redis.asyncio.Redis`` the policy store uses."""

    def pipeline(self, transaction: bool = ...) -> Any: ...
    def lrange(self, name: str, start: int, end: int) -> Awaitable[Any]: ...
    def register_script(self, script: str) -> Any: ...
    def hgetall(self, name: str) -> Awaitable[Any]: ...
    def hdel(self, name: str, *keys: str) -> Awaitable[Any]: ...


@dataclass(frozen=True, slots=True)
class PolicyState:
    """What a writer read: the document (None: none yet), its revision and the newest
    snapshot (None: none yet)."""

    document: dict[str, Any] | None
    revision: int
    newest_snapshot: dict[str, Any] | None

    @property
    def newest_snapshot_id(self) -> str:
        return str((self.newest_snapshot or {}).get("id") or "")


@dataclass(frozen=True, slots=True)
class Commit:
    """One change: the new document (None: unchanged), the audit entry and the snapshots
    to push, oldest first."""

    audit_entry: dict[str, Any]
    document: dict[str, Any] | None = None
    snapshots: tuple[dict[str, Any], ...] = ()
    chain: AuditParts | None = None
    """The change's event in the system audit chain (``AuditTrail.script_parts``)."""


def _json_object(raw: Any, what: str) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise StoreError(f"{what} is not a JSON object")
    return value


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class PolicyStore:
    def __init__(self, redis: RedisPolicyProtocol, *, doc_key: str = POLICY_DOC_KEY,
                 snapshots_key: str = SNAPSHOTS_KEY, audit_key: str = AUDIT_KEY,
                 proposals_key: str = PROPOSALS_KEY) -> None:
        self._redis = redis
        self._keys = (doc_key, snapshots_key, audit_key)
        self._proposals_key = proposals_key
        unchanged = _UNCHANGED_LUA.read_text()
        self._commit = redis.register_script(with_audit(unchanged + _COMMIT_LUA.read_text()))
        self._propose = redis.register_script(with_audit(unchanged + _PROPOSE_LUA.read_text()))

    async def read(self) -> PolicyState:
        doc_key, snapshots_key, _ = self._keys
        try:
            pipe = self._redis.pipeline(transaction=True)
            pipe.get(doc_key)
            pipe.lindex(snapshots_key, 0)
            raw_doc, raw_head = await pipe.execute()
        except Exception as exc:
            raise StoreError(f"read policy: {type(exc).__name__}: {exc}") from exc
        doc = _json_object(raw_doc, doc_key)
        revision = doc.get("revision") if doc is not None else 0
        # A float revision (7.0) is what a JSON writer in another language may store.
        return PolicyState(doc, int(revision) if isinstance(revision, int | float) else 0,
                           _json_object(raw_head, snapshots_key))

    async def commit(self, read: PolicyState, change: Commit) -> bool:
        """Write ``change`` when nothing changed since ``read``; False (nothing written)
        when something did."""
        chain_keys, chain_args = change.chain or ([], [])
        args = [str(read.revision), read.newest_snapshot_id,
                "" if change.document is None else _compact(change.document),
                str(MAX_SNAPSHOTS), str(MAX_AUDIT_ENTRIES), _compact(change.audit_entry),
                len(chain_args), *chain_args, *(_compact(s) for s in change.snapshots)]
        try:
            done = await self._commit(keys=[*self._keys, *chain_keys], args=args)
        except Exception as exc:
            raise StoreError(f"commit policy: {type(exc).__name__}: {exc}") from exc
        return int(done) == 1

    async def propose(self, read: PolicyState, proposal: dict[str, Any],
                      audit_entry: dict[str, Any], expired: Sequence[str],
                      chain: AuditParts | None = None) -> str:
        """Keep ``proposal`` (under its ``id``) with its audit entry, dropping the
        ``expired`` ones first, when the policy is still as ``read``: ``"ok"``,
        ``"conflict"`` (the policy changed) or ``"full"`` (:data:`MAX_PROPOSALS`
        wait already)."""
        doc_key, snapshots_key, audit_key = self._keys
        chain_keys, chain_args = chain or ([], [])
        args = [str(read.revision), read.newest_snapshot_id, str(MAX_PROPOSALS),
                str(MAX_AUDIT_ENTRIES), str(proposal["id"]), _compact(proposal),
                _compact(audit_entry), len(chain_args), *chain_args, *expired]
        try:
            done = await self._propose(
                keys=[doc_key, snapshots_key, audit_key, self._proposals_key, *chain_keys],
                args=args)
        except Exception as exc:
            raise StoreError(f"propose policy change: {type(exc).__name__}: {exc}") from exc
        return done.decode() if isinstance(done, bytes) else str(done)

    async def proposals(self) -> dict[str, dict[str, Any]]:
        """Every proposal kept (at most :data:`MAX_PROPOSALS`), by id."""
        try:
            raw = await self._redis.hgetall(self._proposals_key)
        except Exception as exc:
            raise StoreError(f"read {self._proposals_key}: {type(exc).__name__}: {exc}"
                             ) from exc
        out: dict[str, dict[str, Any]] = {}
        for key, value in (raw or {}).items():
            try:
                found = json.loads(value)
            except ValueError:
                continue  # not ours
            if isinstance(found, dict):
                out[key.decode() if isinstance(key, bytes) else str(key)] = found
        return out

    async def drop_proposals(self, *ids: str) -> None:
        if not ids:
            return
        try:
            await self._redis.hdel(self._proposals_key, *ids)
        except Exception as exc:
            raise StoreError(f"drop proposals: {type(exc).__name__}: {exc}") from exc

    async def snapshots(self) -> list[dict[str, Any]]:
        """The snapshots kept, newest first."""
        return await self._list(self._keys[1], MAX_SNAPSHOTS)

    async def audit(self) -> list[dict[str, Any]]:
        """The audit entries kept, newest first."""
        return await self._list(self._keys[2], MAX_AUDIT_ENTRIES)

    async def _list(self, key: str, most: int) -> list[dict[str, Any]]:
        try:
            raw: Sequence[Any] = await self._redis.lrange(key, 0, most - 1)
        except Exception as exc:
            raise StoreError(f"read {key}: {type(exc).__name__}: {exc}") from exc
        out = []
        for item in raw:
            try:
                value = json.loads(item)
            except ValueError:
                continue  # not ours: skipped rather than failing every read
            if isinstance(value, dict):
                out.append(value)
        return out
