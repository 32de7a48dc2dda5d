"""Config documents never cross tenants, and the system's are guarded: another tenant's
team document is invisible and unwritable, the org id is the caller's tenant, the
system config takes an admin key for every tenant, the policy's keys are out of reach,
and read-only roles write nothing."""

from __future__ import annotations

import json

import pytest

from cordum import runtime
from cordum.safety.bundles import POLICY_DOC_KEY
from tests import helpers
from tests.integration.test_gateway_config import (
    ADMIN,
    OPERATOR,
    OTHER_ADMIN,
    READER,
    ROOT,
    VIEWER,
    WRITER,
    Api,
    forget,
)

POLICY_DOC = {"scope": "system", "scope_id": "policy", "data": {"bundles": {}}, "revision": 3}


@pytest.fixture
def api(unique, monkeypatch):
    a = Api(unique, monkeypatch)
    with helpers.gateway_process():
        runtime.run(forget([a.tenant, a.other]))
        try:
            yield a
        finally:
            runtime.run(forget([a.tenant, a.other]))


def test_another_tenants_team_document_is_invisible_and_unwritable(api):
    assert api.put("team", "blue", data={"secret": 1})[0] == 204
    missing = api.doc("team", "nobody")
    # The other tenant reads "blue" exactly as a document that does not exist.
    other = api.call("GET", key=OTHER_ADMIN, tenant=api.other,
                     query={"scope": "team", "scope_id": "blue", "envelope": "true"})
    assert other == missing and other[0] == 404
    status, snap = api.call("GET", "/api/v1/config/effective", key=OTHER_ADMIN,
                            tenant=api.other, query={"team_id": "blue"})
    assert status == 200 and snap["data"] == {}
    # Its write of the same team id is its own document; ours is untouched.
    assert api.call("PUT", body={"scope": "team", "scope_id": "blue", "data": {"secret": 2}},
                    key=OTHER_ADMIN, tenant=api.other)[0] == 204
    assert api.doc("team", "blue")[1]["data"] == {"secret": 1}
    # A key bound to our tenant cannot act for the other one (nor the other for ours).
    status, _ = api.call("PUT", body={"scope": "team", "scope_id": "blue", "data": {}},
                         key=ADMIN, tenant=api.other)
    assert status == 403
    status, _ = api.call("GET", key=OTHER_ADMIN, tenant=api.tenant,
                         query={"scope": "team", "scope_id": "blue"})
    assert status == 403


def test_the_org_id_is_always_the_callers_tenant(api):
    status, body = api.put("org", api.other, data={"x": 1})
    assert (status, body["code"]) == (403, "tenant_access_denied")
    status, body = api.call("GET", key=READER, query={"scope": "org", "scope_id": api.other})
    assert (status, body["code"]) == (403, "tenant_access_denied")
    status, body = api.effective(org_id=api.other)
    assert (status, body["code"]) == (403, "tenant_access_denied")
    assert api.put("org", "", data={"x": 1})[0] == 204
    status, doc = api.doc("org")
    assert (doc["scope_id"], doc["data"]) == (api.tenant, {"x": 1})
    assert runtime.run(runtime.redis_client().exists(f"cfg:org:{api.other}")) == 0
    # A key for every tenant writes the org of the tenant it names, and only that one.
    status, _ = api.call("PUT", body={"scope": "org", "data": {"y": 1}}, key=ROOT,
                         tenant=api.other)
    assert status == 204
    assert api.doc("org")[1]["data"] == {"x": 1}


def test_the_system_config_takes_an_admin_key_for_every_tenant(api):
    for key in (ADMIN, WRITER):
        status, body = api.call("PUT", body={"scope": "system", "data": {"x": 1}}, key=key)
        assert (status, body["code"]) == (403, "config_write_requires_any_tenant_key"), key
    # Cordum's flat body is a system/default write too.
    status, body = api.call("POST", body={"x": 1}, key=ADMIN)
    assert (status, body["code"]) == (403, "config_write_requires_any_tenant_key")
    assert runtime.run(runtime.redis_client().exists("cfg:system:default")) == 0
    assert api.call("POST", body={"x": 1}, key=ROOT)[0] == 204
    # A tenant's admin and config.read may read it; an operator and a viewer may not.
    for key in (ADMIN, READER):
        assert api.call("GET", key=key) == (200, {"x": 1}), key
    for key in (OPERATOR, VIEWER):
        assert api.call("GET", key=key)[0] == 403, key


def test_the_policys_keys_are_out_of_reach(api):
    redis = runtime.redis_client()
    runtime.run(redis.set(POLICY_DOC_KEY, json.dumps(POLICY_DOC)))
    try:
        for scope_id in ("policy", "policy_snapshots", "policy_audit", "Policy"):
            status, body = api.call("GET", key=ROOT, query={"scope": "system",
                                                            "scope_id": scope_id})
            assert (status, body["code"]) == (403, "config_key_forbidden"), scope_id
            status, body = api.call("PUT", key=ROOT, body={
                "scope": "system", "scope_id": scope_id, "data": {"bundles": {"x": "rules: []"}}})
            assert (status, body["code"]) == (403, "config_key_forbidden"), scope_id
        assert json.loads(runtime.run(redis.get(POLICY_DOC_KEY))) == POLICY_DOC
    finally:
        runtime.run(redis.delete(POLICY_DOC_KEY))


def test_read_only_roles_write_nothing_and_a_viewer_reads_nothing(api):
    for key in (READER, OPERATOR, VIEWER):
        status, body = api.put("team", "blue", key=key, data={"x": 1})
        assert (status, body["code"]) == (403, "forbidden"), key
    assert api.doc("team", "blue", key=ADMIN)[0] == 404
    assert api.put("team", "blue", key=WRITER, data={"x": 1})[0] == 204
    for key in (READER, OPERATOR, WRITER, ADMIN):
        assert api.doc("team", "blue", key=key)[0] == 200, key
    assert api.doc("team", "blue", key=VIEWER)[0] == 403
    assert api.effective(key=VIEWER)[0] == 403
