"""Who may read, change and ask about the policy.

Bundles are system-wide: they govern every tenant. So a change (PUT, DELETE, a
snapshot, publish, rollback) needs both

- role ``admin`` or ``policy.write``, and
- a key whose tenant is ``*`` (:data:`~cordum.gateway.core.auth.ANY_TENANT`): a key
  bound to one tenant, its admin's included, never changes the policy every other
  tenant runs under.

Replay and analytics read the caller's own tenant's jobs only (:func:`jobs_tenant`):
replay takes what simulate takes, analytics what a read takes.

Reads of bundles, rules, snapshots and the audit take role ``admin``,
``policy.read`` or ``policy.write`` in any tenant (a tenant's admin may see the
policy it runs under). Asking the kernel (evaluate, simulate, explain) takes role
``admin`` or ``policy.write``, for the caller's own tenant only.

The reach of a key is not part of the
:class:`~cordum.gateway.core.auth.Principal`; it is found through the
authenticator's public contract: a key may act for a tenant no key is bound to
(a fresh random name under :data:`PROBE_TENANT_PREFIX`) only when its tenant is ``*``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cordum.gateway.core import http
from cordum.gateway.core.errors import Forbidden
from cordum.gateway.core.http import headers, principal, require_role

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from cordum.gateway.core.auth import Principal

POLICY_READ = "policy.read"
POLICY_WRITE = "policy.write"
PROBE_TENANT_PREFIX = "cordum.policy.probe."
"""With 32 random hex after it, a tenant name no key is bound to: only a ``*`` key may
act for it."""


def reader(event: BaseProxyEvent) -> Principal:
    """The caller of a read: admin, policy.read or policy.write (403 otherwise)."""
    who = principal(event)
    require_role(who, POLICY_READ, POLICY_WRITE)
    return who


def asker(event: BaseProxyEvent) -> Principal:
    """The caller of evaluate, simulate or explain: admin or policy.write."""
    who = principal(event)
    require_role(who, POLICY_WRITE)
    return who


def system_writer(event: BaseProxyEvent) -> Principal:
    """The caller of a change: admin or policy.write with a key for every tenant."""
    who = principal(event)
    require_role(who, POLICY_WRITE)
    if not reaches_every_tenant(event):
        raise Forbidden("the policy governs every tenant: changing it takes a key whose "
                        "tenant is *", "policy_write_requires_any_tenant_key")
    return who


def reaches_every_tenant(event: BaseProxyEvent) -> bool:
    """Whether the caller's key may act for every tenant (its tenant is ``*``)."""
    return http.reaches_every_tenant(event, PROBE_TENANT_PREFIX)


def jobs_tenant(event: BaseProxyEvent, who: Principal, *named: str) -> str:
    """The tenant whose jobs a replay or analytics call reads: the caller's own. A key for
    every tenant must name it (X-Tenant-ID; 403 ``tenant_required`` otherwise); a tenant
    ``named`` in the body that is not it is 403 ``tenant_access_denied``."""
    hdrs = headers(event)
    named_by_header = (hdrs.get("x-tenant-id", "").strip()
                       or hdrs.get("x-cordum-tenant", "").strip())
    if not named_by_header and reaches_every_tenant(event):
        raise Forbidden("a key for every tenant must name the tenant whose jobs it reads "
                        "with X-Tenant-ID", "tenant_required")
    if any(t.strip() and t.strip() != who.tenant for t in named):
        raise Forbidden("tenant access denied", "tenant_access_denied")
    return who.tenant

