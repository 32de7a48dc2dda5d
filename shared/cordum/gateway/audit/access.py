"""Who may read a tenant's audit chain and change its legal hold.

- Reading the events, verifying the chain and reading the hold's state take role
  ``admin`` or ``audit.read``; setting or clearing the hold takes ``admin``.
- The chain read is the caller's own tenant's: its key's. A key bound to a tenant
  reads only that tenant's chain, whatever a header, the query or a body names (a
  header naming another tenant is 403 from the authenticator; a ``tenant`` or
  ``tenant_id`` in the query or the body that is not the caller's is 403
  ``tenant_access_denied``).
- A key whose tenant is ``*`` reaches every tenant, so it must say which one with
  X-Tenant-ID (403 ``tenant_required`` otherwise, rather than reading ``default``);
  only such a key may name ``*`` itself, the system chain (the acts that govern every
  tenant, and keys that failed to authenticate).

The reach of a key is found through the authenticator's public contract, as the
policy feature does: a key may act for a tenant no key is bound to (a fresh random
name under :data:`PROBE_TENANT_PREFIX`) only when its tenant is ``*``.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import TYPE_CHECKING, Any

from cordum.gateway.core import deps, ratelimit
from cordum.gateway.core.errors import Forbidden, InvalidRequest, Unauthorized
from cordum.gateway.core.http import headers, principal, query, require_role
from cordum.store.audit import validate_tenant
from cordum.store.audit_trail import SYSTEM_TENANT

if TYPE_CHECKING:
    from collections.abc import Mapping

    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from cordum.gateway.core.auth import Principal

AUDIT_READ = "audit.read"
PROBE_TENANT_PREFIX = "cordum.audit.probe."
"""With 32 random hex after it, a tenant name no key is bound to: only a ``*`` key may
act for it."""
TENANT_FIELDS = ("tenant", "tenant_id")
"""Names of a tenant in the query or a body that must be the caller's own, if present."""


def _named(hdrs: Mapping[str, str]) -> str:
    return hdrs.get("x-tenant-id", "").strip() or hdrs.get("x-cordum-tenant", "").strip()


def _probe(hdrs: Mapping[str, str]) -> dict[str, str]:
    probe = {**hdrs, "x-tenant-id": PROBE_TENANT_PREFIX + uuid.uuid4().hex}
    probe.pop("x-cordum-tenant", None)
    return probe


def _any_tenant_caller(hdrs: Mapping[str, str]) -> Principal | None:
    """The caller when its key reaches every tenant, else None (a bad key too)."""
    try:
        return deps.authenticator().authenticate(_probe(hdrs))
    except (Unauthorized, Forbidden):
        return None


def caller(event: BaseProxyEvent, *roles: str) -> Principal:
    """The authenticated caller, with ``tenant`` the chain it acts on, when its role is
    admin or one of ``roles`` (403 otherwise); see the module for the tenant."""
    hdrs = headers(event)
    named = _named(hdrs)
    if named == SYSTEM_TENANT:
        found = _any_tenant_caller(hdrs)
        if found is None:
            # The authenticator refuses "*" as a tenant to act in (401 or 403), and
            # records the refusal as it does for every route.
            principal(event)
            raise Forbidden("tenant access denied", "tenant_access_denied")
        who = ratelimit.admit(dataclasses.replace(found, tenant=SYSTEM_TENANT), hdrs)
    else:
        who = principal(event)
        if not named and _any_tenant_caller(hdrs) is not None:
            raise Forbidden("a key for every tenant must name the tenant whose audit chain "
                            "it reads with X-Tenant-ID", "tenant_required")
    require_role(who, *roles)
    same_tenant(who, *(query(event, name) for name in TENANT_FIELDS))
    try:
        validate_tenant(who.tenant)
    except ValueError:
        raise InvalidRequest("the tenant cannot name an audit chain", "invalid_tenant") from None
    return who


def reader(event: BaseProxyEvent) -> Principal:
    """The caller of a read (events, verify, the hold's state): admin or audit.read."""
    return caller(event, AUDIT_READ)


def holder(event: BaseProxyEvent) -> Principal:
    """The caller of a hold change: admin only."""
    return caller(event)


def same_tenant(who: Principal, *named: Any) -> None:
    """403 ``tenant_access_denied`` when any of ``named`` is a tenant not the caller's."""
    for value in named:
        if isinstance(value, str) and value.strip() and value.strip() != who.tenant:
            raise Forbidden("tenant access denied", "tenant_access_denied")
        if value is not None and not isinstance(value, str):
            raise Forbidden("tenant access denied", "tenant_access_denied")
