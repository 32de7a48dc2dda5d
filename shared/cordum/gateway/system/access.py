"""Who may read the workers: the role ``admin``, or one that reads workers in Cordum
(``viewer``, ``operator``, or the permission's own name ``workers.read``). Submitting
roles (``user``, ``jobs.write``) may not: a worker's load, pool and labels describe the
deployment every tenant shares, not the caller's jobs.

Workers carry no tenant (the heartbeat names none, and one worker may run the jobs of
several tenants), so a reader sees every worker of the registry, as the list shows
them; the jobs shown of a worker are only the caller's tenant's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cordum.gateway.core.http import principal, require_role

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from cordum.gateway.core.auth import Principal

WORKER_READ_ROLES = ("viewer", "operator", "workers.read")
"""Beside ``admin``, which always passes."""


def worker_reader(event: BaseProxyEvent) -> Principal:
    """The authenticated caller (401), when it may read workers (403 otherwise)."""
    who = principal(event)
    require_role(who, *WORKER_READ_ROLES)
    return who
