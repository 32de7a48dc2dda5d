"""Who may read and write which config document, and which key a request names.

Roles (Cordum's, with its ``operator`` kept as a reader):

- reading a team, workflow, step or org document, or the effective config: ``admin``,
  ``config.read``, ``config.write`` or ``operator``;
- reading a system document: ``admin``, ``config.read`` or ``config.write`` (a
  tenant's admin may read the system config it runs under);
- writing a tenant's document: ``admin`` or ``config.write``;
- writing a system document: ``admin`` with a key whose tenant is ``*``: it applies to
  every tenant, so no key bound to one tenant changes it (403
  ``config_write_requires_any_tenant_key``).

Tenancy (stricter than Cordum, which keys team, workflow and step documents by their
id alone): every document but the system's lives under the caller's tenant in its key
(:mod:`cordum.store.config_docs`), so one tenant's request can only ever name its own.
The org id is the caller's tenant: one naming another is 403 ``tenant_access_denied``.
System ids the platform keeps (``policy`` and every id starting with it: the policy's
bundles, snapshots, audit and proposals) are 403 ``config_key_forbidden``: the policy
has its own governed routes.

The reach of a key (``*`` or not) is found as the policy feature finds it, through the
authenticator's public contract: a probe tenant no key is bound to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cordum.gateway.core import http
from cordum.gateway.core.errors import Forbidden, InvalidRequest
from cordum.gateway.core.http import ADMIN, principal, require_role
from cordum.store.config_docs import (
    ORG,
    SCOPES,
    SYSTEM,
    SYSTEM_DEFAULT_ID,
    SYSTEM_TENANT,
    ConfigIdError,
    doc_key,
    reserved_system_id,
)

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from cordum.gateway.core.auth import Principal

CONFIG_READ = "config.read"
CONFIG_WRITE = "config.write"
OPERATOR = "operator"
READERS = (CONFIG_READ, CONFIG_WRITE, OPERATOR)
SYSTEM_READERS = (CONFIG_READ, CONFIG_WRITE)
PROBE_TENANT_PREFIX = "cordum.config.probe."
"""With 32 random hex after it, a tenant name no key is bound to: only a ``*`` key may
act for it."""


@dataclass(frozen=True, slots=True)
class Target:
    """One document a request names."""

    scope: str
    scope_id: str
    key: str
    chain_tenant: str
    """Whose audit chain and document bound a write counts in (``*``: the system's)."""


def bad(message: str) -> InvalidRequest:
    return InvalidRequest(message, "config_request_invalid")


def same_tenant(who: Principal, named: str) -> None:
    """403 when ``named`` (an org id) is set and is not the caller's tenant."""
    if named and named != who.tenant:
        raise Forbidden("tenant access denied", "tenant_access_denied")


def target(who: Principal, scope: str, scope_id: str) -> Target:
    """The document ``scope``/``scope_id`` names for ``who`` (see the module)."""
    scope = scope or SYSTEM
    if scope not in SCOPES:
        raise bad(f"scope must be one of {', '.join(SCOPES)}")
    if scope == SYSTEM:
        scope_id = scope_id or SYSTEM_DEFAULT_ID
        if reserved_system_id(scope_id):
            raise Forbidden(f"system/{scope_id[:64]} is kept by the platform; the policy has "
                            "its own routes", "config_key_forbidden")
    elif scope == ORG:
        same_tenant(who, scope_id)
        scope_id = who.tenant
    elif not scope_id:
        raise bad(f"scope_id is required for scope {scope}")
    try:
        key = doc_key(scope, who.tenant, scope_id)
    except ConfigIdError as exc:
        raise bad(str(exc)) from None
    return Target(scope, scope_id, key, SYSTEM_TENANT if scope == SYSTEM else who.tenant)


def reader(event: BaseProxyEvent, scope: str) -> Principal:
    """The caller of a read of ``scope`` (403 for a role that may not)."""
    who = principal(event)
    require_role(who, *(SYSTEM_READERS if (scope or SYSTEM) == SYSTEM else READERS))
    return who


def effective_reader(event: BaseProxyEvent) -> Principal:
    who = principal(event)
    require_role(who, *READERS)
    return who


def writer(event: BaseProxyEvent) -> Principal:
    """The caller of a write: admin or config.write (the scope is checked after)."""
    who = principal(event)
    require_role(who, CONFIG_WRITE)
    return who


def may_write(event: BaseProxyEvent, who: Principal, place: Target) -> None:
    """403 unless ``who`` may write ``place``: a system document takes an admin key whose
    tenant is ``*``."""
    if place.scope != SYSTEM:
        return
    if who.role != ADMIN or not reaches_every_tenant(event):
        raise Forbidden("the system config applies to every tenant: writing it takes an "
                        "admin key whose tenant is *", "config_write_requires_any_tenant_key")


def reaches_every_tenant(event: BaseProxyEvent) -> bool:
    """Whether the caller's key may act for every tenant (its tenant is ``*``)."""
    return http.reaches_every_tenant(event, PROBE_TENANT_PREFIX)
