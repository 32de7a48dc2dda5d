"""Named locks are a tenant's, and a hold is its taker's. Each test is an attempt that
must fail:

- another principal of the same tenant releasing, renewing or taking over a hold by
  naming its owner token (the token is shown to every reader of the lock, so it is no
  secret: the hold is bound to the principal that took it);
- another tenant's key (an admin's included) reading, taking, renewing or releasing a
  lock by its resource name, or seeing it in the admin list;
- any resource name reaching the platform's own job, run, saga or reconciler locks;
- names, owner tokens, owners and locks past their bounds.

Keys: ``agent-a`` and ``agent-b`` (locks.write, tenant A), ``admin-a`` (admin, A),
``intruder`` (admin, B), ``root`` (admin, ``*``).
"""

from __future__ import annotations

import time

import pytest

from cordum import runtime
from cordum.store import resource_locks as store
from cordum.store.locks import job_lock_key
from cordum.store.saga import lock_key as saga_lock_key
from cordum.workflow.keys import RECONCILER_LOCK_KEY, run_lock_key
from tests import helpers
from tests.security.conftest import configure

AGENT_A = "locks-agent-a-0123456789"
AGENT_B = "locks-agent-b-0123456789"
ADMIN_A = "locks-admin-a-0123456789"
INTRUDER = "locks-intruder-0123456789"
ROOT = "locks-root-0123456789"
LOCKS = "/api/v1/locks"


class Tenants:
    def __init__(self, unique: str) -> None:
        self.unique = unique
        self.a, self.b = f"locks-victim-{unique}", f"locks-intruder-{unique}"

    def call(self, method: str, path: str, key: str, *, tenant: str | None = None,
             body: object = None, query: dict[str, str] | None = None) -> tuple[int, dict]:
        status, answer, _ = helpers.call(helpers.event(method, path, body, key=key,
                                                       tenant=tenant, query=query))
        assert isinstance(answer, dict)
        return status, answer

    def op(self, route: str, key: str, resource: str, owner: str, *,
           tenant: str | None = None, **fields: object) -> tuple[int, dict]:
        return self.call("POST", f"{LOCKS}/{route}", key, tenant=tenant,
                         body={"resource": resource, "owner": owner, **fields})

    def get(self, key: str, resource: str, *, tenant: str | None = None) -> tuple[int, dict]:
        return self.call("GET", LOCKS, key, tenant=tenant, query={"resource": resource})


@pytest.fixture
def t(monkeypatch, unique):
    tenants = Tenants(unique)
    configure(monkeypatch, [
        {"key": AGENT_A, "tenant": tenants.a, "role": "locks.write", "principal_id": "agent-a"},
        {"key": AGENT_B, "tenant": tenants.a, "role": "locks.write", "principal_id": "agent-b"},
        {"key": ADMIN_A, "tenant": tenants.a, "role": "admin", "principal_id": "admin-a"},
        {"key": INTRUDER, "tenant": tenants.b, "role": "admin", "principal_id": "agent-a"},
        {"key": ROOT, "tenant": "*", "role": "admin", "principal_id": "root"},
    ], CORDUM_RATE_LIMIT_RPS="0")
    with helpers.gateway_process():
        try:
            yield tenants
        finally:
            runtime.run(helpers.delete_keys(runtime.redis_client(), f"rlock:*{unique}*"))


MISMATCH = {"error": "the owner token is held by another principal",
            "code": "lock_owner_mismatch", "status": 403}


# --- a hold is its taker's ------------------------------------------------------------------

def test_another_principal_cannot_release_renew_or_take_over_a_hold_by_its_token(t):
    status, held = t.op("acquire", AGENT_A, "deploy", "worker-1", ttl_ms=60_000)
    assert status == 200, held
    # The token is public to every reader of the lock.
    assert t.get(AGENT_B, "deploy")[1]["owners"] == ["worker-1"]

    assert t.op("release", AGENT_B, "deploy", "worker-1") == (403, MISMATCH)
    assert t.op("renew", AGENT_B, "deploy", "worker-1", ttl_ms=3_600_000) == (403, MISMATCH)
    # Taking it again under the same token would be a re-acquire by the holder.
    assert t.op("acquire", AGENT_B, "deploy", "worker-1") == (403, MISMATCH)
    # Not even the tenant's admin.
    assert t.op("release", ADMIN_A, "deploy", "worker-1") == (403, MISMATCH)

    status, still = t.get(AGENT_B, "deploy")
    assert (status, still["owners"], still["fencing_token"]) == (
        200, ["worker-1"], held["fencing_token"])
    assert still["expires_at"] == held["expires_at"]  # the renew changed nothing
    assert t.op("release", AGENT_A, "deploy", "worker-1")[0] == 200


def test_another_principal_cannot_join_a_shared_lock_under_a_holders_token(t):
    assert t.op("acquire", AGENT_A, "dataset", "reader", mode="SHARED")[0] == 200
    assert t.op("acquire", AGENT_B, "dataset", "reader", mode="SHARED") == (403, MISMATCH)
    assert t.op("acquire", AGENT_B, "dataset", "reader-b", mode="SHARED")[0] == 200
    assert t.op("release", AGENT_B, "dataset", "reader") == (403, MISMATCH)
    assert t.get(AGENT_A, "dataset")[1]["owners"] == ["reader", "reader-b"]


def test_a_token_is_free_again_once_its_hold_runs_out(t):
    assert t.op("acquire", AGENT_A, "brief", "w", ttl_ms=1_000)[0] == 200
    time.sleep(1.2)
    status, taken = t.op("acquire", AGENT_B, "brief", "w")
    assert status == 200 and taken["owners"] == ["w"]
    assert t.op("release", AGENT_A, "brief", "w") == (403, MISMATCH)


# --- tenants --------------------------------------------------------------------------------

def test_another_tenants_lock_is_invisible_and_untouchable(t):
    assert t.op("acquire", AGENT_A, "shared-name", "worker-1")[0] == 200
    missing = t.get(INTRUDER, "never-locked")
    assert t.get(INTRUDER, "shared-name") == missing == (404, {
        "error": "lock not found", "code": "lock_not_found", "status": 404})
    # The intruder's principal id is agent-a too: the tenant still keeps it out.
    assert t.op("release", INTRUDER, "shared-name", "worker-1") == (409, {
        "error": "lock not held", "code": "lock_not_held", "status": 409})
    assert t.op("renew", INTRUDER, "shared-name", "worker-1")[0] == 404
    # The same name is a lock of its own in tenant B, taken at once.
    status, own = t.op("acquire", INTRUDER, "shared-name", "worker-1")
    assert status == 200 and own["owners"] == ["worker-1"]
    assert t.call("GET", "/api/v1/admin/locks", INTRUDER)[1]["locks"][0]["key"] == "shared-name"
    assert len(t.call("GET", "/api/v1/admin/locks", ADMIN_A)[1]["locks"]) == 1
    # Naming tenant A by a header is refused before any lock is read.
    assert t.get(INTRUDER, "shared-name", tenant=t.a)[0] == 403
    assert t.op("release", INTRUDER, "shared-name", "worker-1", tenant=t.a)[0] == 403
    assert t.get(AGENT_A, "shared-name")[1]["owners"] == ["worker-1"]


def test_a_key_for_every_tenant_acts_in_the_tenant_it_names(t):
    assert t.op("acquire", AGENT_A, "r", "w")[0] == 200
    assert t.get(ROOT, "r", tenant=t.a)[1]["owners"] == ["w"]
    assert t.get(ROOT, "r", tenant=t.b)[0] == 404
    assert t.op("release", ROOT, "r", "w", tenant=t.a) == (403, MISMATCH)


def test_a_tenant_or_a_resource_name_cannot_reach_another_key(t):
    """The tenant and the name never meet in a key unhashed: "B:x" in A is not "x" in B."""
    assert t.op("acquire", AGENT_A, f"{t.b}:x", "w")[0] == 200
    assert t.get(INTRUDER, "x")[0] == 404
    assert store.lock_key(t.a, f"{t.b}:x") != store.lock_key(t.b, "x")
    keys = runtime.run(_keys(f"rlock:*{t.unique}*"))
    assert set(keys) == {store.lock_key(t.a, f"{t.b}:x"), store.index_key(t.a),
                         store.fence_key(t.a)}


# --- the platform's own locks ---------------------------------------------------------------

async def _keys(pattern: str) -> list[str]:
    redis = runtime.redis_client()
    return [k.decode() async for k in redis.scan_iter(match=pattern, count=1000)]


def test_the_platforms_job_run_and_saga_locks_are_unreachable(t):
    redis = runtime.redis_client()
    internal = [job_lock_key(f"job-{t.unique}"), run_lock_key(f"run-{t.unique}"),
                saga_lock_key(t.a, f"wf-{t.unique}"), RECONCILER_LOCK_KEY]
    async def hold() -> None:
        for key in internal:
            await redis.set(key, "platform-token", px=60_000)
    runtime.run(hold())
    try:
        names = [n for key in internal for n in (
            key, f"lock:{key}", f"tenant:{t.a}:{key}", f"lock:tenant:{t.a}:{key}",
            key.rsplit(":", 1)[-1], f"../{key}", f"{key}\u200b")]
        names += ["*", "lock:*", "cordum:*", "rlock:*", f"rlock:{t.a}:#index",
                  f"rlock:{t.a}:#fence", "#index", "#fence"]
        for name in names:
            assert t.get(AGENT_A, name)[0] == 404, name
            assert t.op("release", AGENT_A, name, "platform-token")[0] == 409, name
            assert t.op("renew", AGENT_A, name, "platform-token")[0] == 404, name
            status, taken = t.op("acquire", AGENT_A, name, "platform-token", ttl_ms=1_000)
            assert status == 200 and taken["resource"] == name, name
            assert t.op("release", AGENT_A, name, "platform-token")[0] == 200, name

        async def untouched() -> list[tuple[bytes | None, int]]:
            return [(await redis.get(k), await redis.pttl(k)) for k in internal]
        for value, ttl in runtime.run(untouched()):
            assert value == b"platform-token" and 50_000 < ttl <= 60_000
        # Every key the routes wrote is one of tenant A's under rlock:.
        written = runtime.run(_keys(f"rlock:*{t.unique}*"))
        assert all(k.startswith(f"rlock:{t.a}:") for k in written)
    finally:
        runtime.run(redis.delete(*internal))


# --- bounds ---------------------------------------------------------------------------------

def test_names_and_tokens_past_their_bounds_are_refused(t):
    assert t.op("acquire", AGENT_A, "r" * 256, "o" * 256)[0] == 200
    for resource, owner in (("r" * 257, "o"), ("r", "o" * 257), ("a\u0085b", "o"),
                            ("r", "a\x1bb"), ("a\u0000", "o"), ("é" * 129, "o")):
        status, body = t.op("acquire", AGENT_A, resource, owner)
        assert (status, body["code"]) == (400, "invalid_request"), (resource, owner)
    assert t.get(AGENT_A, "r" * 257)[0] == 400
    assert t.op("acquire", AGENT_A, "r", "o", ttl_ms=3_600_001)[0] == 400
    assert t.op("acquire", AGENT_A, "r", "o", ttl_ms=999)[0] == 400
    status, body = t.op("acquire", AGENT_A, "r", "o", pad="x" * 10_000)
    assert (status, body["code"]) == (413, "payload_too_large")


def test_a_shared_lock_has_at_most_64_owners(t):
    for i in range(store.MAX_OWNERS):
        assert t.op("acquire", AGENT_A, "crowd", f"r{i}", mode="SHARED")[0] == 200
    status, body = t.op("acquire", AGENT_B, "crowd", "one-too-many", mode="SHARED")
    assert (status, body["code"]) == (409, "too_many_owners")
    assert len(t.get(AGENT_A, "crowd")[1]["owners"]) == store.MAX_OWNERS
    assert t.op("acquire", AGENT_A, "crowd", "r0", mode="SHARED")[0] == 200  # a holder again


def test_a_tenant_holds_a_bounded_number_of_locks(t, monkeypatch):
    monkeypatch.setattr(store, "MAX_LOCKS_PER_TENANT", 3)
    for name in ("l1", "l2", "l3"):
        assert t.op("acquire", AGENT_A, name, "w")[0] == 200
    assert t.op("acquire", AGENT_A, "l4", "w")[1]["code"] == "too_many_locks"
    assert t.op("acquire", AGENT_B, "l1", "w2", mode="SHARED")[0] == 409  # held: busy
    assert t.op("renew", AGENT_A, "l3", "w")[0] == 200  # the locks it has go on
    assert t.op("acquire", INTRUDER, "l4", "w")[0] == 200  # another tenant's own bound
    assert t.op("release", AGENT_A, "l1", "w")[0] == 200
    assert t.op("acquire", AGENT_A, "l4", "w")[0] == 200
    # A lock whose hold ran out no longer counts.
    assert t.op("release", AGENT_A, "l4", "w")[0] == 200
    assert t.op("acquire", AGENT_A, "l5", "w", ttl_ms=1_000)[0] == 200
    time.sleep(1.2)
    assert t.op("acquire", AGENT_A, "l6", "w")[0] == 200
