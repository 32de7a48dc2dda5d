"""Policy governance: bundles govern every tenant, so only a key for every tenant may
change them. Each test is an attack on that, or on who the audit says did it.

Keys: alice (admin, tenant default), bob (user, default), carol (admin, acme) from
the conftest; root (admin, ``*``), gov (policy.write, ``*``), rooted-user (user, ``*``)
and acme-writer (policy.write, acme) here.
"""

from __future__ import annotations

import json

import pytest

from cordum import runtime
from cordum.gateway.policy.store import AUDIT_KEY, SNAPSHOTS_KEY
from cordum.safety.bundles import POLICY_DOC_KEY
from tests import helpers
from tests.security.conftest import ALICE, BOB, CAROL, KEYS, configure

ROOT = "policy-root-0123456789"
GOV = "policy-gov-0123456789"
ROOTED_USER = "policy-rooted-user-0123456789"
ACME_WRITER = "policy-acme-writer-0123456789"
POLICY_KEYS = [*KEYS,
               {"key": ROOT, "tenant": "*", "role": "admin", "principal_id": "root"},
               {"key": GOV, "tenant": "*", "role": "policy.write", "principal_id": "gov"},
               {"key": ROOTED_USER, "tenant": "*", "role": "user", "principal_id": "ru"},
               {"key": ACME_WRITER, "tenant": "acme", "role": "policy.write",
                "principal_id": "acme-writer"}]
BUNDLE = "rules:\n  - id: sec-deny\n    match: {topics: [job.sec]}\n    decision: deny\n"
WRITES = [
    ("PUT", "/api/v1/policy/bundles/secops~x", {"content": BUNDLE, "enabled": True}),
    ("DELETE", "/api/v1/policy/bundles/secops~seed", None),
    ("POST", "/api/v1/policy/bundles/snapshots", {"note": "n"}),
    ("POST", "/api/v1/policy/publish", {}),
    ("POST", "/api/v1/policy/rollback", {"snapshot_id": "whatever"}),
]


def forget_policy() -> None:
    runtime.run(runtime.redis_client().delete(POLICY_DOC_KEY, SNAPSHOTS_KEY, AUDIT_KEY))


@pytest.fixture
def policy(monkeypatch):
    configure(monkeypatch, POLICY_KEYS, CORDUM_RATE_LIMIT_RPS="0")
    with helpers.gateway_process():
        forget_policy()
        status, body, _ = send("PUT", "/api/v1/policy/bundles/secops~seed",
                               {"content": BUNDLE}, ROOT)
        assert status == 200, body
        try:
            yield
        finally:
            forget_policy()


def send(method, path, body=None, key=ROOT, tenant=None, headers=None):
    return helpers.call(helpers.event(method, path, body, key=key, tenant=tenant,
                                      headers=headers))


def stored() -> dict:
    raw = runtime.run(runtime.redis_client().get(POLICY_DOC_KEY))
    return json.loads(raw) if raw else {}


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
@pytest.mark.parametrize("key", [ALICE, CAROL, ACME_WRITER])
def test_a_tenant_bound_key_cannot_change_the_system_policy(policy, method, path, body, key):
    before = stored()
    status, answer, _ = send(method, path, body, key)
    assert (status, answer["code"]) == (403, "policy_write_requires_any_tenant_key")
    assert stored() == before


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_naming_another_tenant_does_not_lend_a_tenant_key_reach(policy, method, path, body):
    # carol asks as tenant "*", as "default", and through the SDK's header.
    for headers in ({"X-Tenant-ID": "*"}, {"X-Tenant-ID": "default"},
                    {"X-Cordum-Tenant": "*"}):
        status, _, _ = send(method, path, body, CAROL, headers=headers)
        assert status == 403


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
@pytest.mark.parametrize("key", [BOB, ROOTED_USER])
def test_users_cannot_change_the_policy_even_with_every_tenant(policy, method, path, body,
                                                                 key):
    status, answer, _ = send(method, path, body, key)
    assert (status, answer["code"]) == (403, "forbidden")


@pytest.mark.parametrize("path", ["/api/v1/policy/bundles", "/api/v1/policy/audit",
                                  "/api/v1/policy/rules", "/api/v1/policy/bundles/snapshots"])
def test_users_cannot_read_the_policy_and_tenant_admins_can(policy, path):
    assert send("GET", path, key=BOB)[0] == 403
    assert send("GET", path, key=ROOTED_USER)[0] == 403
    assert send("GET", path, key=CAROL)[0] == 200


def test_users_cannot_ask_the_kernel(policy):
    status, answer, _ = send("POST", "/api/v1/policy/evaluate", {"topic": "job.default"}, BOB)
    assert (status, answer["code"]) == (403, "forbidden")


def test_the_audit_names_the_key_not_the_body(policy):
    status, _, _ = send("PUT", "/api/v1/policy/bundles/secops~who",
                        {"content": BUNDLE, "author": "mallory", "actor_id": "mallory",
                         "role": "admin"}, GOV)
    assert status == 200
    status, page, _ = send("GET", "/api/v1/policy/audit", key=CAROL)
    entry = page[0]
    assert (entry["actor_id"], entry["role"], entry["resource_id"]) == \
        ("gov", "policy.write", "secops/who")
    assert stored()["data"]["bundles"]["secops/who"]["author"] == "gov"
    status, _, _ = send("POST", "/api/v1/policy/publish",
                        {"bundle_ids": ["secops/who"], "author": "mallory"}, ROOT)
    assert status == 200
    entry = send("GET", "/api/v1/policy/audit", key=CAROL)[1][0]
    assert (entry["action"], entry["actor_id"]) == ("publish", "root")
    assert "mallory" not in json.dumps(stored())


def test_tilde_stands_for_slash_and_ids_cannot_escape(policy):
    status, body, _ = send("PUT", "/api/v1/policy/bundles/pack~one~two", {"content": BUNDLE})
    assert (status, body["id"]) == (200, "pack/one/two")
    assert "pack/one/two" in stored()["data"]["bundles"]
    status, body, _ = send("GET", "/api/v1/policy/bundles/pack~one~two", key=CAROL)
    assert (status, body["id"]) == (200, "pack/one/two")
    for bad in ("pack~~two", "~lead", "trail~", "a~..~b", ".hidden", "snapshots",
                "x" * 200, "sp%20ace"):
        status, body, _ = send("PUT", f"/api/v1/policy/bundles/{bad}", {"content": BUNDLE})
        assert status in (400, 404), bad
        if status == 400:
            assert body["code"] in ("invalid_bundle_id", "invalid_request"), bad
    assert set(stored()["data"]["bundles"]) == {"secops/seed", "pack/one/two"}


def test_a_validation_error_names_the_line_and_the_rule(policy):
    content = "rules:\n  - id: ok\n    match: {topics: [job.a]}\n    decision: allow\n" \
              "  - id: broken\n    match: {topics: [job.b]}\n    decision: maybe\n"
    status, body, _ = send("PUT", "/api/v1/policy/bundles/secops~bad", {"content": content})
    assert (status, body["code"]) == (400, "POLICY_VALIDATION_FAILED")
    assert "line 7" in body["error"] and "broken" in body["error"]
    assert "secops/bad" not in stored()["data"]["bundles"]


def test_evaluate_is_asked_for_the_callers_tenant_and_key(policy, monkeypatch):
    from cordum.gateway.policy import routes

    asked = []

    class Recorder:
        def __init__(self, addr, timeout_s):
            pass

        async def ask(self, mode, request):
            asked.append(request)
            from cordum.agent.v1 import safety_pb2

            return safety_pb2.PolicyCheckResponse(decision=1, rule_id="r")

    monkeypatch.setattr(routes, "GrpcPolicyKernel", Recorder)
    status, body, _ = send("POST", "/api/v1/policy/evaluate",
                           {"topic": "job.default", "tenant": "default", "org_id": "default",
                            "principal_id": "alice", "meta": {"tenant_id": "default"},
                            "labels": {"_content.payload_json": "{}", "ok": "1"}}, CAROL)
    assert status == 200, body
    [req] = asked
    assert (req.tenant, req.meta.tenant_id, req.principal_id) == ("acme", "acme", "carol")
    assert dict(req.labels) == {"ok": "1"}
