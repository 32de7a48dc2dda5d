"""Who may read, take and list the named locks, as Cordum has it.

- Reading one lock (``GET /api/v1/locks``) takes any role of the tenant: in this
  gateway every role reads (Cordum: admin, operator, viewer or ``locks.read``).
- Acquire, renew and release take role ``admin`` or ``locks.write`` (Cordum: admin,
  with its ``locks.write`` permission): a read-only key (viewer, operator, user)
  cannot take a lock.
- The admin list (``GET /api/v1/admin/locks``) takes ``admin``.

The tenant is the key's (a ``*`` key's: the one X-Tenant-ID names); nothing in a body
or the query chooses it. The caller's principal is recorded beside every owner token
it takes, and only that principal may renew or release the hold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cordum.gateway.core.http import principal, require_role

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from cordum.gateway.core.auth import Principal

LOCKS_WRITE = "locks.write"


def reader(event: BaseProxyEvent) -> Principal:
    """Any authenticated caller of its tenant."""
    return principal(event)


def writer(event: BaseProxyEvent) -> Principal:
    """admin or locks.write (403 ``forbidden`` otherwise)."""
    who = principal(event)
    require_role(who, LOCKS_WRITE)
    return who


def admin(event: BaseProxyEvent) -> Principal:
    """admin only."""
    who = principal(event)
    require_role(who)
    return who
