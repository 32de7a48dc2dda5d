"""GET /api/v1/me answers, for each act, what the act's route answers the same key: an
act said to be allowed is not refused for the caller's role, and one said to be refused
is refused with the code /me names (tested on the routes themselves, per role)."""

from __future__ import annotations

import uuid

import pytest

from cordum.gateway.capabilities import routes as capabilities
from cordum.gateway.schema_registry import routes as schema_routes
from tests import helpers

ROLES = ("admin", "viewer", "user", "operator", "policy.read", "policy.write",
         "audit.read", "config.write", "schemas.write", "locks.write")
ROOT = "me-root-key"

# One request per act: the route's check runs before anything it would read or write,
# and a body the route refuses (400) still proves the check passed.
PROBES: dict[str, tuple[str, str, object]] = {
    "jobs.submit": ("POST", "/api/v1/jobs", {}),
    "approvals.decide": ("GET", "/api/v1/approvals", None),
    "dlq.manage": ("GET", "/api/v1/dlq/page", None),
    "workers.read": ("GET", "/api/v1/workers", None),
    "policy.read": ("GET", "/api/v1/policy/bundles", None),
    "policy.simulate": ("POST", "/api/v1/policy/simulate", {}),
    "policy.change": ("POST", "/api/v1/policy/bundles/snapshots", {"note": 7}),
    "audit.read": ("GET", "/api/v1/audit/verify", None),
    "config.read": ("GET", "/api/v1/config/effective", None),
    "config.write": ("PUT", "/api/v1/config", {"scope": "team", "scope_id": "t1"}),
    "schemas.write": ("POST", "/api/v1/schemas", {}),
    "artifacts.write": ("POST", "/api/v1/artifacts", {}),
    "locks.write": ("POST", "/api/v1/locks/acquire", {}),
}


@pytest.fixture
def tenant(monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"me-{uuid.uuid4().hex[:8]}"
    keys = [{"key": f"me-{role}", "tenant": name, "role": role, "principal_id": f"p-{role}"}
            for role in ROLES]
    keys.append({"key": ROOT, "tenant": "*", "role": "admin", "principal_id": "root"})
    helpers.use_gateway(monkeypatch, keys)
    return name


def me(key: str, tenant: str) -> dict:
    status, body, _ = helpers.call(helpers.event("GET", "/api/v1/me", key=key, tenant=tenant))
    assert status == 200, body
    return body


def test_without_a_key_it_is_401(tenant):
    status, body, _ = helpers.call(helpers.event("GET", "/api/v1/me", tenant=tenant))
    assert status == 401, body


def test_it_names_the_caller(tenant):
    body = me("me-viewer", tenant)
    assert (body["principal_id"], body["tenant"], body["role"]) == ("p-viewer", tenant,
                                                                    "viewer")
    assert [name for name, _, _ in capabilities.ACTIONS] == list(body["actions"])


@pytest.mark.parametrize("role", ROLES)
def test_each_verdict_is_what_the_route_answers(tenant, role):
    actions = me(f"me-{role}", tenant)["actions"]
    for act, (method, path, body) in PROBES.items():
        status, answer, _ = helpers.call(helpers.event(method, path, body,
                                                       key=f"me-{role}", tenant=tenant))
        verdict = actions[act]
        if verdict["allowed"]:
            assert status != 403, (role, act, answer)
        else:
            assert status == 403, (role, act, status, answer)
            assert answer["code"] == verdict["code"], (role, act, answer)
            assert verdict["reason"], (role, act)


def test_a_tenant_admin_may_not_change_the_policy_and_is_told_why(tenant):
    change = me("me-admin", tenant)["actions"]["policy.change"]
    assert change == {"allowed": False, "code": "policy_write_requires_any_tenant_key",
                      "reason": change["reason"]}
    assert "*" in change["reason"]
    assert me(ROOT, tenant)["actions"]["policy.change"] == {"allowed": True}


def test_a_viewer_reads_workers_but_decides_nothing(tenant):
    actions = me("me-viewer", tenant)["actions"]
    assert actions["workers.read"] == {"allowed": True}
    assert actions["approvals.decide"]["allowed"] is False
    assert "admin" in actions["approvals.decide"]["reason"]


def test_the_schema_role_is_the_registry_routes_own():
    assert capabilities.SCHEMAS_WRITE == schema_routes.SCHEMAS_WRITE
