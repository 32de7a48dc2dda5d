"""A key grants only what its entry says: no role is a user, no tenant is tenant default.

Before, an entry without ``role`` was an admin, one without ``tenant`` acted for
any tenant, and plain keys (a comma-separated CORDUM_API_KEYS, CORDUM_API_KEY)
were admins of every tenant.
"""

from __future__ import annotations

import pytest

from cordum import runtime
from cordum.gateway.core import deps
from cordum.gateway.core.auth import key_id
from tests.helpers import call, event
from tests.security.conftest import ALICE, KEYS, configure, meta_of
from tests.security.test_identity import forget

NO_ROLE = "no-role-key-0123456789"
NO_TENANT = "no-tenant-key-0123456789"
ANY_TENANT = "any-tenant-key-0123456789"
PLAIN = "plain-key-0123456789"
SINGLE = "single-key-0123456789"

_made: list[str] = []


@pytest.fixture(autouse=True)
def _forget_jobs(gateway):
    yield
    runtime.run(forget(_made))
    _made.clear()


def submit(key: str, tenant: str | None = None) -> tuple[int, dict]:
    status, body, _ = call(event("POST", "/api/v1/jobs", {"topic": "job.default",
                                                          "prompt": "hi"}, key=key,
                                 tenant=tenant))
    if isinstance(body, dict) and body.get("job_id"):
        _made.append(body["job_id"])
    return status, body


def test_a_key_without_role_is_a_user(monkeypatch):
    # Given a key entry that names a tenant and a principal but no role
    configure(monkeypatch, [*KEYS, {"key": NO_ROLE, "tenant": "default",
                                    "principal_id": "nora"}])
    status, body = submit(ALICE)
    assert status == 200, body
    job_id = body["job_id"]
    # Then it cannot do what only admins do
    status, out, _ = call(event("GET", "/api/v1/approvals", key=NO_ROLE))
    assert (status, out.get("code")) == (403, "forbidden"), out
    for verb in ("approve", "reject"):
        status, out, _ = call(event("POST", f"/api/v1/approvals/{job_id}/{verb}",
                                    {"reason": "r"}, key=NO_ROLE))
        assert (status, out.get("code")) == (403, "forbidden"), (verb, out)
    # And it may do what users do
    status, body = submit(NO_ROLE)
    assert status == 200, body
    assert meta_of(body["job_id"])["principal"] == "nora"


def test_a_key_without_tenant_is_bound_to_default(monkeypatch):
    configure(monkeypatch, [
        *KEYS,
        {"key": NO_TENANT, "role": "user", "principal_id": "nick"},
        {"key": ANY_TENANT, "tenant": "*", "role": "user", "principal_id": "ann"},
    ])
    # Given a key entry without a tenant, asking for tenant acme
    status, out = submit(NO_TENANT, tenant="acme")
    # Then it is refused
    assert (status, out.get("code")) == (403, "tenant_access_denied"), out
    # And without a tenant header it acts for tenant default
    status, body = submit(NO_TENANT)
    assert status == 200, body
    assert meta_of(body["job_id"])["tenant"] == "default"
    # And only an explicit "*" acts for any tenant
    status, body = submit(ANY_TENANT, tenant="acme")
    assert status == 200, body
    assert meta_of(body["job_id"])["tenant"] == "acme"
    status, body = submit(ANY_TENANT)
    assert status == 200, body
    assert meta_of(body["job_id"])["tenant"] == "default"


@pytest.mark.parametrize("key", [PLAIN, SINGLE])
def test_plain_keys_are_users_of_the_default_tenant(monkeypatch, key):
    # Given plain keys: a comma-separated CORDUM_API_KEYS and CORDUM_API_KEY
    monkeypatch.setenv("CORDUM_API_KEYS", f"{PLAIN},other-plain-key-0123456789")
    monkeypatch.setenv("CORDUM_API_KEY", SINGLE)
    deps.reset()
    # Then they are not admins
    status, out, _ = call(event("GET", "/api/v1/approvals", key=key))
    assert (status, out.get("code")) == (403, "forbidden"), out
    # And not bound to any other tenant than default
    status, out = submit(key, tenant="acme")
    assert (status, out.get("code")) == (403, "tenant_access_denied"), out
    # And they submit as users of tenant default, named by their key id
    status, body = submit(key)
    assert status == 200, body
    meta = meta_of(body["job_id"])
    assert (meta["tenant"], meta["principal"]) == ("default", f"key:{key_id(key)}")
