"""The audit chain is a tenant's record of who did what: no other tenant's key reads it,
verifies it or changes its hold, and only admin and audit.read keys read it at all.
Each test is an attempt that must fail: another tenant's key (an admin's included)
naming tenant A by a header, the query, a body or a cursor; a viewer or user key of A
itself; a key for every tenant that names none.

Keys: ``victim`` (admin, A), ``victim-reader`` (audit.read, A), ``viewer`` and
``user`` (A), ``intruder`` (admin, B), ``intruder-reader`` (audit.read, B), ``root``
(admin, ``*``), ``root-user`` (user, ``*``).
"""

from __future__ import annotations

import json

import pytest

from cordum import runtime
from cordum.store.audit import AuditChain, AuditEvent, parse_entry, stream_key
from cordum.store.audit_trail import SYSTEM_TENANT, hold_key
from tests import helpers
from tests.security.conftest import configure

VICTIM = "audit-victim-0123456789"
VICTIM_READER = "audit-victim-reader-0123456789"
VIEWER = "audit-viewer-0123456789"
USER = "audit-user-0123456789"
INTRUDER = "audit-intruder-0123456789"
INTRUDER_READER = "audit-intruder-reader-0123456789"
ROOT = "audit-root-0123456789"
ROOT_USER = "audit-root-user-0123456789"
EVENTS, VERIFY, HOLD = "/api/v1/audit/events", "/api/v1/audit/verify", "/api/v1/audit/hold"
READS = (EVENTS, VERIFY, HOLD)


class Tenants:
    def __init__(self, unique: str) -> None:
        self.a, self.b = f"audit-victim-{unique}", f"audit-intruder-{unique}"

    def call(self, method: str, path: str, key: str, *, tenant: str | None = None,
             headers: dict[str, str | None] | None = None, query: dict[str, str] | None = None,
             body: object = None) -> tuple[int, dict]:
        status, answer, _ = helpers.call(helpers.event(method, path, body, key=key,
                                                       tenant=tenant, headers=headers,
                                                       query=query))
        return status, answer

    def chain(self, tenant: str) -> list[dict]:
        items = runtime.run(runtime.redis_client().xrange(stream_key(tenant)))
        return [parse_entry(sid, fields).decoded() for sid, fields in items]


@pytest.fixture
def t(monkeypatch, unique):
    tenants = Tenants(unique)
    a, b = tenants.a, tenants.b
    configure(monkeypatch, [
        {"key": VICTIM, "tenant": a, "role": "admin", "principal_id": "victim"},
        {"key": VICTIM_READER, "tenant": a, "role": "audit.read", "principal_id": "v-reader"},
        {"key": VIEWER, "tenant": a, "role": "viewer", "principal_id": "viewer"},
        {"key": USER, "tenant": a, "role": "user", "principal_id": "user"},
        {"key": INTRUDER, "tenant": b, "role": "admin", "principal_id": "intruder"},
        {"key": INTRUDER_READER, "tenant": b, "role": "audit.read", "principal_id": "i-reader"},
        {"key": ROOT, "tenant": "*", "role": "admin", "principal_id": "root"},
        {"key": ROOT_USER, "tenant": "*", "role": "user", "principal_id": "root-user"},
    ], CORDUM_RATE_LIMIT_RPS="0")
    with helpers.gateway_process():
        async def seed() -> None:
            chain = AuditChain(runtime.redis_client())
            for tenant, n in ((a, 5), (b, 2)):
                for i in range(1, n + 1):
                    await chain.append(tenant, AuditEvent(
                        type="approval.approve", severity="HIGH", tenant=tenant,
                        actor=f"{tenant}-actor", actor_key="k", at=i, job_id=f"{tenant}-job-{i}",
                        reason=f"secret plan {i} of {tenant}"))
        runtime.run(seed())
        try:
            yield tenants
        finally:
            runtime.run(helpers.delete_keys(runtime.redis_client(), f"audit:*{unique}*"))


def assert_untouched(t: Tenants) -> None:
    """A's chain holds its five seeded events only, and no hold."""
    assert len(t.chain(t.a)) == 5
    assert runtime.run(runtime.redis_client().exists(hold_key(t.a))) == 0


@pytest.mark.parametrize("path", READS)
@pytest.mark.parametrize("key", [INTRUDER, INTRUDER_READER])
def test_another_tenants_key_naming_a_in_a_header_is_refused(t, path, key):
    for headers in ({"X-Tenant-ID": t.a}, {"X-Cordum-Tenant": t.a},
                    {"X-Tenant-ID": f"  {t.a}  "}, {"X-Tenant-ID": t.a, "X-Cordum-Tenant": t.b}):
        status, body = t.call("GET", path, key, headers=headers)
        assert status == 403, (headers, body)
        assert t.a not in json.dumps(body)
    assert_untouched(t)


@pytest.mark.parametrize("path", READS)
def test_another_tenants_key_naming_a_in_the_query_is_refused(t, path):
    for name in ("tenant", "tenant_id"):
        status, body = t.call("GET", path, INTRUDER, tenant=t.b, query={name: t.a})
        assert (status, body["code"]) == (403, "tenant_access_denied"), body
    assert_untouched(t)


def test_a_cursor_taken_from_a_reads_only_the_callers_own_chain(t):
    status, page = t.call("GET", EVENTS, VICTIM, query={"limit": "1"})
    assert status == 200 and page["next_cursor"] == "5"
    status, page = t.call("GET", EVENTS, INTRUDER, query={"cursor": "5", "limit": "200"})
    assert status == 200
    assert {item["tenant"] for item in page["items"]} == {t.b}
    assert t.a not in json.dumps(page)


def test_another_tenants_admin_cannot_set_or_clear_as_hold_by_any_means(t):
    runtime.run(runtime.redis_client().set(hold_key(t.a), json.dumps({"by": "victim"})))
    attempts = [
        {"headers": {"X-Tenant-ID": t.a}},
        {"headers": {"X-Cordum-Tenant": t.a}},
        {"tenant": t.b, "query": {"tenant": t.a}},
        {"tenant": t.b, "body": {"reason": "mine now", "tenant": t.a}},
        {"tenant": t.b, "body": {"reason": "x", "tenant_id": t.a}},
        {"tenant": t.b, "body": {"reason": "x", "tenant": ["list"]}},
    ]
    for how in attempts:
        for method in ("PUT", "DELETE"):
            status, body = t.call(method, HOLD, INTRUDER, **how)  # type: ignore[arg-type]
            assert status == 403, (method, how, body)
    assert json.loads(runtime.run(runtime.redis_client().get(hold_key(t.a)))) == {
        "by": "victim"}
    assert runtime.run(runtime.redis_client().exists(hold_key(t.b))) == 0
    assert len(t.chain(t.a)) == 5


@pytest.mark.parametrize("key", [VIEWER, USER, ROOT_USER])
@pytest.mark.parametrize("path", READS)
def test_viewer_and_user_keys_read_nothing_and_leave_no_trace(t, key, path):
    status, body = t.call("GET", path, key, tenant=t.a)
    assert (status, body["code"]) == (403, "forbidden"), body
    assert_untouched(t)


@pytest.mark.parametrize("key", [VICTIM_READER, VIEWER, USER, ROOT_USER])
def test_only_an_admin_changes_the_hold(t, key):
    for method in ("PUT", "DELETE"):
        status, body = t.call(method, HOLD, key, tenant=t.a, body={"reason": "x"})
        assert (status, body["code"]) == (403, "forbidden"), body
    assert_untouched(t)


def test_a_bound_key_cannot_name_the_system_chain(t):
    for key in (INTRUDER, VICTIM, VICTIM_READER):
        for path in READS:
            status, body = t.call("GET", path, key, tenant=SYSTEM_TENANT)
            assert (status, body["code"]) == (403, "tenant_access_denied"), body
        status, body = t.call("PUT", HOLD, key, tenant=SYSTEM_TENANT, body={"reason": "x"})
        assert status == 403


def test_a_key_for_every_tenant_must_name_one(t):
    for path in READS:
        status, body = t.call("GET", path, ROOT)
        assert (status, body["code"]) == (403, "tenant_required"), body
    status, body = t.call("PUT", HOLD, ROOT, body={"reason": "x"})
    assert (status, body["code"]) == (403, "tenant_required")
    # It is not taken to mean tenant "default".
    assert t.chain("default") == [] or all(
        e.get("actor") != "root" for e in t.chain("default"))


def test_a_key_for_every_tenant_reads_the_tenant_it_names_and_the_system_chain(t):
    status, page = t.call("GET", EVENTS, ROOT, tenant=t.a)
    assert status == 200
    assert {item["tenant"] for item in page["items"]} == {t.a}
    read = t.chain(t.a)[-1]
    assert (read["type"], read["actor"], read["tenant"]) == ("audit.read", "root", t.a)
    status, page = t.call("GET", EVENTS, ROOT, tenant=SYSTEM_TENANT, query={"limit": "5"})
    assert status == 200, page
    assert all(item["tenant"] == SYSTEM_TENANT for item in page["items"])
    last = t.chain(SYSTEM_TENANT)[-1]
    assert (last["type"], last["actor"]) == ("audit.read", "root")


def test_the_identity_in_a_read_or_hold_event_is_the_keys_only(t):
    spoof = {"X-Principal-Id": "someone-else", "X-Actor": "someone-else",
             "X-Cordum-Principal": "someone-else"}
    status, _ = t.call("GET", EVENTS, VICTIM_READER, tenant=t.a, headers=spoof,
                       query={"actor": "someone-else"})
    assert status == 200
    read = t.chain(t.a)[-1]
    assert (read["actor"], read["type"]) == ("v-reader", "audit.read")
    status, held = t.call("PUT", HOLD, VICTIM, tenant=t.a, headers=spoof,
                          body={"reason": "r", "by": "someone-else", "actor": "someone-else"})
    assert (status, held["by"]) == (200, "victim")
    event = t.chain(t.a)[-1]
    assert (event["type"], event["actor"]) == ("audit.hold.set", "victim")


def test_an_unauthenticated_caller_reads_nothing(t):
    for path in READS:
        status, _ = t.call("GET", path, "no-such-key", tenant=t.a)
        assert status == 401
        status, _ = t.call("GET", path, "no-such-key", tenant=SYSTEM_TENANT)
        assert status == 401
    assert_untouched(t)
