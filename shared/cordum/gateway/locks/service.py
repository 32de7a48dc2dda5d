"""The named locks as the API answers them: each outcome of the store
(:mod:`cordum.store.resource_locks`) as a body or a refusal with Cordum's code.

| what happened | answer |
| --- | --- |
| acquire: held in a mode that excludes this one | 409 ``lock_unavailable`` (retryable) |
| acquire: the shared lock has its most owners | 409 ``too_many_owners`` |
| acquire: the tenant has its most live locks | 409 ``too_many_locks`` |
| renew: the owner holds no such lock | 404 ``lock_not_held`` (Cordum's) |
| release: the owner holds no such lock | 409 ``lock_not_held`` (Cordum's) |
| any: the owner token is held by another principal | 403 ``lock_owner_mismatch`` |
| read: no live lock (or another tenant's) | 404 ``lock_not_found`` |

Retry-After on a busy lock is the whole seconds until the holds in the way run out
unless renewed, at least 1 and at most :data:`MAX_RETRY_AFTER_S` (a release may free
it sooner); the body's ``retry_after_ms`` is the exact figure.

Each call is one round trip (one script call); the admin list is two.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cordum.gateway.core.errors import Conflict, Forbidden, NotFound, RetryableConflict
from cordum.gateway.core.times import rfc3339_us
from cordum.store import resource_locks as store

if TYPE_CHECKING:
    from cordum.gateway.core.auth import Principal
    from cordum.gateway.locks.models import LockCall
    from cordum.store.resource_locks import LockState, Outcome, ResourceLocks

MAX_RETRY_AFTER_S = 5.0
"""The longest Retry-After a busy lock answers: a holder may release at any time."""
ADMIN_TYPE = "resource"


class LockBusy(RetryableConflict):
    """409 ``lock_unavailable``: the answer carries ``retry_after_ms``."""

    def __init__(self, wait_ms: int) -> None:
        super().__init__("lock unavailable", "lock_unavailable",
                         min(MAX_RETRY_AFTER_S, max(1.0, wait_ms / 1000)))
        self.wait_ms = wait_ms

    def body(self) -> dict[str, object]:
        return {**super().body(), "retry_after_ms": self.wait_ms}


def _time(ms: int) -> str | None:
    return rfc3339_us(ms * 1000)


def lock_view(lock: LockState, *, owner: str = "", fence: int | None = None,
              resource: str = "") -> dict[str, Any]:
    """``Lock``: the lock and its owners; for acquire and renew, the caller's hold."""
    view: dict[str, Any] = {
        "resource": lock.resource or resource, "mode": lock.mode,
        "owners": [h.owner for h in lock.holders],
        "updated_at": _time(lock.updated_at_ms),
        "expires_at": _time(lock.expires_at_ms),
    }
    if fence is not None:
        view["fencing_token"] = fence
    elif lock.holders:
        view["fencing_token"] = max(h.fence for h in lock.holders)
    mine = lock.holder(owner) if owner else None
    if mine is not None:
        view["owner"] = mine.owner
        view["owner_expires_at"] = _time(mine.expires_at_ms)
    return view


def _refused(outcome: Outcome, *, not_held: type[Conflict | NotFound]) -> None:
    status = outcome.status
    if status == store.OK:
        return
    if status == store.BUSY:
        raise LockBusy(outcome.wait_ms or 0)
    if status == store.NOT_OWNER:
        raise Forbidden("the owner token is held by another principal", "lock_owner_mismatch")
    if status == store.TOO_MANY_OWNERS:
        raise Conflict(f"the shared lock has its most owners ({store.MAX_OWNERS})",
                       "too_many_owners")
    if status == store.TOO_MANY_LOCKS:
        raise Conflict(f"the tenant holds its most locks ({store.MAX_LOCKS_PER_TENANT})",
                       "too_many_locks")
    if status == store.NOT_HELD:
        raise not_held("lock not held", "lock_not_held")
    raise NotFound("lock not found", "lock_not_found")


class LockService:
    def __init__(self, locks: ResourceLocks) -> None:
        self._locks = locks

    async def get(self, who: Principal, resource: str) -> dict[str, Any]:
        outcome = await self._locks.get(who.tenant, resource)
        if outcome.status != store.OK or outcome.lock is None:
            raise NotFound("lock not found", "lock_not_found")
        return lock_view(outcome.lock, resource=resource)

    async def acquire(self, who: Principal, call: LockCall) -> dict[str, Any]:
        outcome = await self._locks.acquire(who.tenant, call.resource, call.owner,
                                            who.principal_id, call.mode, call.ttl_ms)
        _refused(outcome, not_held=NotFound)
        return self._held(outcome, call)

    async def renew(self, who: Principal, call: LockCall) -> dict[str, Any]:
        outcome = await self._locks.renew(who.tenant, call.resource, call.owner,
                                          who.principal_id, call.ttl_ms)
        _refused(outcome, not_held=NotFound)
        return self._held(outcome, call)

    async def release(self, who: Principal, call: LockCall) -> dict[str, Any]:
        outcome = await self._locks.release(who.tenant, call.resource, call.owner,
                                            who.principal_id)
        _refused(outcome, not_held=Conflict)
        view = lock_view(outcome.lock, resource=call.resource) if outcome.lock else {
            "resource": call.resource, "owners": []}
        return {"lock": view, "released": True}

    @staticmethod
    def _held(outcome: Outcome, call: LockCall) -> dict[str, Any]:
        if outcome.lock is None:  # pragma: no cover - the script answers ok with the lock
            raise NotFound("lock not found", "lock_not_found")
        return lock_view(outcome.lock, owner=call.owner, fence=outcome.fence,
                         resource=call.resource)

    async def admin_list(self, who: Principal) -> dict[str, Any]:
        now_ms, found = await self._locks.list(who.tenant)
        found.sort(key=lambda lock: lock.resource)
        entries = [{
            "key": lock.resource, "holder": lock.holders[0].owner,
            "ttl_remaining_ms": max(0, lock.expires_at_ms - now_ms), "type": ADMIN_TYPE,
            "mode": lock.mode, "owner_count": len(lock.holders),
            "fencing_token": max(h.fence for h in lock.holders),
        } for lock in found]
        return {"locks": entries}
