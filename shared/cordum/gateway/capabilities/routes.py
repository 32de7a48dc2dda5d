"""GET /api/v1/me: who the caller is and which acts its key may take, each with the
reason when it may not.

The dashboard shows an act the key may not take as unavailable, with the reason,
instead of sending a request the gateway refuses. The answer comes from the very checks
the routes run (each feature's ``access`` functions and role sets), so it cannot drift
from what the routes enforce: an act is ``allowed`` exactly when its route's check
passes for this key and tenant. A route may still refuse an allowed act for what it is
about (another tenant's object, a self-approval, a stale snapshot); that is said by
the route, as before.

It sits between the app and the features, not in a feature: features never import each other, and
this module asks all of them. Cost: no Redis round trip beyond authentication's rate
limit; three of the checks authenticate a probe tenant (a key lookup in memory).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aws_lambda_powertools.event_handler.api_gateway import Router

from cordum.gateway.artifacts import access as artifacts_access
from cordum.gateway.audit import access as audit_access
from cordum.gateway.configs import access as configs_access
from cordum.gateway.core.errors import Forbidden, InvalidRequest
from cordum.gateway.core.http import json_response, principal, require_role
from cordum.gateway.core.models import SUBMIT_ROLES
from cordum.gateway.locks import access as locks_access
from cordum.gateway.policy import access as policy_access
from cordum.gateway.system import access as system_access

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import Response
    from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

    from cordum.gateway.core.auth import Principal
    from cordum.gateway.core.openapi import ApiPart

router = Router()

SCHEMAS_WRITE = "schemas.write"
"""The role the schema registry's writes take beside admin (its routes' ``SCHEMAS_WRITE``;
tests/unit/test_capabilities.py checks the two agree)."""


def _admin(event: BaseProxyEvent) -> Principal:
    who = principal(event)
    require_role(who)
    return who


def _submitter(event: BaseProxyEvent) -> Principal:
    who = principal(event)
    require_role(who, *SUBMIT_ROLES)
    return who


def _schemas_writer(event: BaseProxyEvent) -> Principal:
    who = principal(event)
    require_role(who, SCHEMAS_WRITE)
    return who


Check = Callable[["BaseProxyEvent"], object]

ACTIONS: tuple[tuple[str, Check, str], ...] = (
    ("jobs.submit", _submitter,
     "Submitting, cancelling and remediating jobs and starting runs takes role admin, "
     "user or jobs.write."),
    ("approvals.decide", _admin, "Deciding approvals takes an admin key of the tenant."),
    ("dlq.manage", _admin, "Reading, retrying and deleting DLQ entries takes an admin key."),
    ("workers.read", system_access.worker_reader,
     "Reading workers takes role admin, viewer, operator or workers.read."),
    ("policy.read", policy_access.reader,
     "Reading the policy takes role admin, policy.read or policy.write."),
    ("policy.simulate", policy_access.asker,
     "Simulating, explaining and replaying decisions takes role admin or policy.write."),
    ("policy.change", policy_access.system_writer,
     "Changing the policy takes role admin or policy.write with a key of every tenant "
     "(*)."),
    ("audit.read", audit_access.reader, "Reading the audit log takes role admin or "
     "audit.read."),
    ("audit.hold", audit_access.holder, "Setting or clearing the legal hold takes an admin "
     "key."),
    ("config.read", configs_access.effective_reader,
     "Reading config takes role admin, config.read, config.write or operator."),
    ("config.write", configs_access.writer,
     "Writing config takes role admin or config.write."),
    ("schemas.write", _schemas_writer,
     "Registering and deleting schemas takes role admin or schemas.write."),
    ("artifacts.write", artifacts_access.writer,
     "Storing artifacts takes role admin, user or jobs.write."),
    ("locks.write", locks_access.writer, "Taking and releasing locks takes role admin or "
     "locks.write."),
)
"""(act, the check its routes run, why it is refused when the check's own message is only
``forbidden``), in the order the answer lists them."""


def contract() -> ApiPart:
    from cordum.gateway.capabilities import openapi

    return openapi.PART


def _verdict(event: BaseProxyEvent, check: Check, why: str) -> dict[str, object]:
    try:
        check(event)
    except (Forbidden, InvalidRequest) as refused:
        reason = why if refused.code == "forbidden" else refused.message
        return {"allowed": False, "reason": reason, "code": refused.code}
    return {"allowed": True}


def capabilities(event: BaseProxyEvent) -> dict[str, object]:
    """The caller (401 without a key) and each act of :data:`ACTIONS` with its verdict."""
    who = principal(event)
    return {
        "principal_id": who.principal_id, "tenant": who.tenant, "role": who.role,
        "actions": {name: _verdict(event, check, why) for name, check, why in ACTIONS},
    }


@router.get("/api/v1/me")
def get_me() -> Response:
    return json_response(200, capabilities(router.current_event))
