"""Named locks that agents take on a shared resource of their tenant.

Each lock is one key, ``rlock:<tenant>:<sha256 of the resource>``: the resource's name
is hashed, so no name (``lock:x``, ``cordum:scheduler:job:<id>``, ``../``) can address
another tenant's lock or any key of the platform (the job and run locks of
:mod:`cordum.store.locks` live under ``cordum:``). The key holds a JSON document: the
resource's name, its mode (``EXCLUSIVE``: one owner; ``SHARED``: up to
:data:`MAX_OWNERS`) and its owners, each an owner token with the principal that took
it, its own expiry and its fencing token. The key expires with its last owner.

Acquire, renew and release are each one EVALSHA of ``lua/resource_lock.lua`` (one round
trip, atomic, on Redis's clock, so gateways whose clocks differ agree on expiry):

- owners whose hold ran out are dropped inside the script before anything is decided;
- an owner token is bound to the principal that took it: another principal naming it
  is refused (``not_owner``), so guessing a token releases nothing;
- every successful acquire takes a new fencing token from the tenant's counter
  (``rlock:<tenant>:#fence``, INCR, never expiring): greater than every token issued
  before it in the tenant, so a resource that remembers the greatest token it has seen
  can refuse a holder whose hold has since passed to another. Renew keeps the token.

The tenant's index (``rlock:<tenant>:#index``, a sorted set of the hashes scored by
expiry) bounds the live locks of a tenant to :data:`MAX_LOCKS_PER_TENANT` and is what
:meth:`ResourceLocks.list` reads (two round trips: the index with the clock, then an
MGET of at most :data:`MAX_LOCKS_PER_TENANT` keys; each at most
:data:`MAX_OWNERS` owners).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cordum.store.errors import StoreError
from cordum.text import as_text

PREFIX = "rlock:"
EXCLUSIVE = "EXCLUSIVE"
SHARED = "SHARED"
MODES = (EXCLUSIVE, SHARED)

MIN_TTL_MS = 1_000
"""The shortest hold: one second (a shorter one would run out in the round trip)."""
MAX_TTL_MS = 3_600_000
"""The longest hold: one hour (Cordum's bound), what a crashed holder blocks others for."""
DEFAULT_TTL_MS = 30_000
"""The hold when the request names none (Cordum's default)."""
MAX_OWNERS = 64
"""Most owners of one shared lock."""
MAX_LOCKS_PER_TENANT = 500
"""Most live locks of one tenant (Cordum's admin list shows at most 500)."""

OK = "ok"
BUSY = "busy"
NOT_HELD = "not_held"
NOT_OWNER = "not_owner"
TOO_MANY_OWNERS = "too_many_owners"
TOO_MANY_LOCKS = "too_many_locks"
MISSING = "missing"

_SCRIPT = (Path(__file__).parent / "lua" / "resource_lock.lua").read_text()


def resource_hash(resource: str) -> str:
    return hashlib.sha256(resource.encode()).hexdigest()


def lock_key(tenant: str, resource: str) -> str:
    """The lock's key: the hash's 64 hex digits end it, so it never equals an index or
    a counter key (``#`` is no hex digit) nor another tenant's lock."""
    return _member_key(tenant, resource_hash(resource))


def _member_key(tenant: str, member: str) -> str:
    """The key of the lock an index member (a resource's hash) names."""
    return f"{PREFIX}{tenant}:{member}"


def index_key(tenant: str) -> str:
    return f"{PREFIX}{tenant}:#index"


def fence_key(tenant: str) -> str:
    return f"{PREFIX}{tenant}:#fence"


@dataclass(frozen=True, slots=True)
class Holder:
    owner: str
    principal: str
    expires_at_ms: int
    fence: int
    acquired_at_ms: int


@dataclass(frozen=True, slots=True)
class LockState:
    resource: str
    mode: str
    holders: tuple[Holder, ...]
    updated_at_ms: int

    @property
    def expires_at_ms(self) -> int:
        """When the lock runs out unless renewed: its last owner's expiry."""
        return max((h.expires_at_ms for h in self.holders), default=self.updated_at_ms)

    def holder(self, owner: str) -> Holder | None:
        return next((h for h in self.holders if h.owner == owner), None)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one call did: ``status`` (:data:`OK`, :data:`BUSY`, ...), Redis's clock,
    the lock as it now is (None when there is none), the owner's fencing token on
    :data:`OK`, and on :data:`BUSY` the ms until the holds in the way run out."""

    status: str
    now_ms: int
    lock: LockState | None
    fence: int | None = None
    wait_ms: int | None = None


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def parse_lock(raw: Any, now_ms: int | None = None) -> LockState | None:
    """The stored document as a :class:`LockState` (owners past ``now_ms`` left out);
    None when it is not one."""
    try:
        doc = json.loads(as_text(raw))
    except (TypeError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    owners = doc.get("owners")
    holders = []
    for o in owners if isinstance(owners, list) else []:
        if not isinstance(o, dict):
            continue
        holder = Holder(owner=str(o.get("owner") or ""), principal=str(o.get("principal") or ""),
                        expires_at_ms=_int(o.get("expires_at")), fence=_int(o.get("fence")),
                        acquired_at_ms=_int(o.get("acquired_at")))
        if now_ms is None or holder.expires_at_ms > now_ms:
            holders.append(holder)
    mode = str(doc.get("mode") or EXCLUSIVE)
    return LockState(resource=str(doc.get("resource") or ""),
                     mode=mode if mode in MODES else EXCLUSIVE, holders=tuple(holders),
                     updated_at_ms=_int(doc.get("updated_at")))


class ResourceLocks:
    """The named locks of every tenant on one Redis client (the script registered once)."""

    def __init__(self, redis: Any) -> None:
        self._redis = redis
        self._script = redis.register_script(_SCRIPT)

    async def _call(self, op: str, tenant: str, resource: str, *, owner: str = "",
                    principal: str = "", mode: str = EXCLUSIVE, ttl_ms: int = 0) -> Outcome:
        keys = [lock_key(tenant, resource), index_key(tenant), fence_key(tenant)]
        args = [op, owner, principal, mode, ttl_ms, resource, MAX_OWNERS, MAX_LOCKS_PER_TENANT,
                resource_hash(resource)]
        try:
            status, now, raw, detail = await self._script(keys=keys, args=args)
        except Exception as exc:
            raise StoreError(f"resource lock {op}: {exc}") from exc
        status, detail = as_text(status), as_text(detail)
        now_ms = _int(now)
        lock = parse_lock(raw, now_ms) if as_text(raw) else None
        if status == BUSY:
            return Outcome(status, now_ms, lock, wait_ms=max(0, _int(detail)))
        return Outcome(status, now_ms, lock, fence=_int(detail) if detail else None)

    @staticmethod
    def _check_ttl(ttl_ms: int) -> None:
        if not MIN_TTL_MS <= ttl_ms <= MAX_TTL_MS:
            raise ValueError(f"ttl_ms must be between {MIN_TTL_MS} and {MAX_TTL_MS}")

    async def acquire(self, tenant: str, resource: str, owner: str, principal: str,
                      mode: str = EXCLUSIVE, ttl_ms: int = DEFAULT_TTL_MS) -> Outcome:
        """Take (or take again: a new fencing token, the hold from now) the lock for
        ``owner``. :data:`BUSY` when held in a mode that excludes this one."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        self._check_ttl(ttl_ms)
        return await self._call("acquire", tenant, resource, owner=owner, principal=principal,
                                mode=mode, ttl_ms=ttl_ms)

    async def renew(self, tenant: str, resource: str, owner: str, principal: str,
                    ttl_ms: int = DEFAULT_TTL_MS) -> Outcome:
        """Hold on for ``ttl_ms`` from now; the fencing token stays."""
        self._check_ttl(ttl_ms)
        return await self._call("renew", tenant, resource, owner=owner, principal=principal,
                                ttl_ms=ttl_ms)

    async def release(self, tenant: str, resource: str, owner: str,
                      principal: str) -> Outcome:
        """Give up ``owner``'s hold; the lock goes with its last owner."""
        return await self._call("release", tenant, resource, owner=owner, principal=principal)

    async def get(self, tenant: str, resource: str) -> Outcome:
        """The lock with its live owners (:data:`MISSING` when it has none)."""
        return await self._call("get", tenant, resource)

    async def list(self, tenant: str) -> tuple[int, list[LockState]]:
        """Redis's clock and the tenant's live locks (at most
        :data:`MAX_LOCKS_PER_TENANT`), in two round trips."""
        try:
            pipe = self._redis.pipeline(transaction=False)
            pipe.time()
            pipe.zrevrangebyscore(index_key(tenant), "+inf", "-inf", start=0,
                                  num=MAX_LOCKS_PER_TENANT)
            clock, members = await pipe.execute()
            now_ms = int(clock[0]) * 1000 + int(clock[1]) // 1000
            names = [as_text(m) for m in members]
            raws = await self._redis.mget(
                [_member_key(tenant, name) for name in names]) if names else []
        except Exception as exc:
            raise StoreError(f"resource locks of {tenant!r}: {exc}") from exc
        found = []
        for raw in raws:
            lock = parse_lock(raw, now_ms) if raw is not None else None
            if lock is not None and lock.holders:
                found.append(lock)
        return now_ms, found
