"""Response bodies of the lock routes: Cordum's ``Lock`` and ``AdminLock`` with this
gateway's extras beside them (the conventions of ``cordum.gateway.core.schemas`` hold:
every field may be absent, extras are allowed)."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime

from cordum.gateway.core.schemas import Body, optional


class Lock(Body):
    """A lock and its live owners."""

    resource: str = optional()
    """The name the caller gave (never the key it is stored under)."""
    mode: Literal["EXCLUSIVE", "SHARED"] = optional()
    owners: list[str] = optional()
    """The owner tokens holding it, oldest hold first; empty once released."""
    updated_at: AwareDatetime = optional()
    """The last acquire, renew or release."""
    expires_at: AwareDatetime = optional()
    """When the lock runs out unless renewed (its last owner's expiry)."""
    fencing_token: int = optional()
    """Acquire and renew: the caller's hold's token; a read: the greatest of the live
    holds'. Every acquire takes a new one, greater than all before it in the tenant: a
    resource that keeps the greatest it has seen can refuse an older holder."""
    owner: str = optional()
    """Acquire and renew: the caller's owner token."""
    owner_expires_at: AwareDatetime = optional()
    """Acquire and renew: when the caller's own hold runs out (a shared lock's other
    owners have their own)."""


class ReleaseLockResponse(Body):
    """The lock after the release (no owners when it was the last) and ``released``."""

    lock: Lock = optional()
    released: bool = optional()


class AdminLock(Body):
    """One live lock of the tenant."""

    key: str
    """The resource's name."""
    holder: str
    """Its oldest owner token (``GET /api/v1/locks`` names them all)."""
    ttl_remaining_ms: int
    """Until the lock runs out unless renewed."""
    type: str
    """``resource``: a named lock of this API."""
    mode: Literal["EXCLUSIVE", "SHARED"] = optional()
    owner_count: int = optional()
    """How many owners hold it (the list names one, so its size stays bounded)."""
    fencing_token: int = optional()


class AdminLockList(Body):
    locks: list[AdminLock]
