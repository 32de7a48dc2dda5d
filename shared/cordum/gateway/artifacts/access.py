"""Who may make and read artifacts, and read memory pointers.

- Making an artifact (inline or by upload) takes role ``admin``, ``user`` or
  ``jobs.write``, the roles that submit jobs (an artifact is a job's input).
- Reading an artifact or a pointer, or listing the tenant's artifacts, takes any role
  of the tenant, as reading a job does.
- The tenant is the caller's key's (or, for a key of every tenant, X-Tenant-ID's): an
  artifact is recorded with it and is read by that tenant only; a job's context or
  result only when the job is that tenant's. Another tenant's object answers the 404 of
  a missing one. A ``tenant_id`` label naming another tenant is 403
  ``tenant_access_denied``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cordum.gateway.core.errors import Forbidden
from cordum.gateway.core.http import principal, require_role
from cordum.gateway.core.models import SUBMIT_ROLES

if TYPE_CHECKING:
    from collections.abc import Mapping

    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from cordum.gateway.core.auth import Principal

TENANT_LABEL = "tenant_id"


def writer(event: BaseProxyEvent) -> Principal:
    who = principal(event)
    require_role(who, *SUBMIT_ROLES)
    return who


def reader(event: BaseProxyEvent) -> Principal:
    return principal(event)


def stamped(who: Principal, labels: Mapping[str, str]) -> dict[str, str]:
    """``labels`` with ``tenant_id`` the caller's tenant: 403 when it names another."""
    named = labels.get(TENANT_LABEL, "").strip()
    if named and named != who.tenant:
        raise Forbidden("tenant access denied", "tenant_access_denied")
    return {**labels, TENANT_LABEL: who.tenant}
