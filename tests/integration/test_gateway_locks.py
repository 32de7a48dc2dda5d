"""The named-lock routes through the gateway, on the real Redis: acquire, read, renew and
release; a hold that runs out; shared against exclusive; fencing tokens that only grow;
two clients contending at once with exactly one holder; the bad requests and the roles
(docs: /tmp/docs-locks.md, "Named locks")."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

import pytest
import redis.asyncio as aioredis

from cordum import runtime
from cordum.store import resource_locks as store
from cordum.store.resource_locks import ResourceLocks
from tests import helpers
from tests.conftest import REDIS_URL

ADMIN = "locks-admin-key"
AGENT_A = "locks-agent-a-key"
AGENT_B = "locks-agent-b-key"
VIEWER = "locks-viewer-key"
USER = "locks-user-key"
LOCKS = "/api/v1/locks"


class Api:
    def __init__(self, unique: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.unique = unique
        self.tenant = f"lk-{unique}"
        self.other = f"lk-other-{unique}"
        helpers.use_gateway(monkeypatch, [
            {"key": ADMIN, "tenant": self.tenant, "role": "admin", "principal_id": "ops"},
            {"key": AGENT_A, "tenant": self.tenant, "role": "locks.write",
             "principal_id": "agent-a"},
            {"key": AGENT_B, "tenant": self.tenant, "role": "locks.write",
             "principal_id": "agent-b"},
            {"key": VIEWER, "tenant": self.tenant, "role": "viewer", "principal_id": "viewer"},
            {"key": USER, "tenant": self.tenant, "role": "user", "principal_id": "user"},
            {"key": "locks-other-admin", "tenant": self.other, "role": "admin",
             "principal_id": "agent-a"},
            {"key": "locks-root", "tenant": "*", "role": "admin", "principal_id": "root"}])

    def call(self, method: str, path: str, body: object = None, *, key: str = AGENT_A,
             tenant: str | None = None, query: dict[str, str] | None = None,
             ) -> tuple[int, object, dict[str, str]]:
        return helpers.call(helpers.event(method, path, body, key=key,
                                          tenant=tenant or self.tenant, query=query))

    def op(self, name: str, resource: str, owner: str, *, key: str = AGENT_A,
           expect: int = 200, tenant: str | None = None, **fields: object) -> dict:
        status, body, _ = self.call("POST", f"{LOCKS}/{name}",
                                    {"resource": resource, "owner": owner, **fields}, key=key,
                                    tenant=tenant)
        assert status == expect, body
        assert isinstance(body, dict)
        return body

    def get(self, resource: str, *, key: str = VIEWER, expect: int = 200) -> dict:
        status, body, _ = self.call("GET", LOCKS, key=key, query={"resource": resource})
        assert status == expect, body
        assert isinstance(body, dict)
        return body


@pytest.fixture
def api(unique, monkeypatch):
    a = Api(unique, monkeypatch)
    with helpers.gateway_process():
        try:
            yield a
        finally:
            runtime.run(helpers.delete_keys(runtime.redis_client(), f"rlock:*{unique}*"))


def at(text: object) -> float:
    assert isinstance(text, str)
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# --- the life of a lock ---------------------------------------------------------------

def test_acquire_read_renew_release(api):
    before = time.time()
    got = api.op("acquire", "deploy/prod", "agent-a-1", mode="EXCLUSIVE", ttl_ms=10_000)
    assert {k: got[k] for k in ("resource", "mode", "owners", "owner")} == {
        "resource": "deploy/prod", "mode": "EXCLUSIVE", "owners": ["agent-a-1"],
        "owner": "agent-a-1"}
    assert isinstance(got["fencing_token"], int) and got["fencing_token"] >= 1
    assert before + 9 < at(got["expires_at"]) < time.time() + 11
    assert got["owner_expires_at"] == got["expires_at"]
    assert abs(at(got["updated_at"]) - time.time()) < 5

    read = api.get("deploy/prod")
    assert (read["owners"], read["mode"], read["fencing_token"]) == (
        ["agent-a-1"], "EXCLUSIVE", got["fencing_token"])
    assert "owner" not in read

    renewed = api.op("renew", "deploy/prod", "agent-a-1", ttl_ms=60_000)
    assert renewed["fencing_token"] == got["fencing_token"]  # renew keeps the token
    assert at(renewed["expires_at"]) > at(got["expires_at"]) + 40

    released = api.op("release", "deploy/prod", "agent-a-1")
    assert released["released"] is True
    assert released["lock"]["owners"] == [] and released["lock"]["resource"] == "deploy/prod"
    missing = api.get("deploy/prod", expect=404)
    assert missing == {"error": "lock not found", "code": "lock_not_found", "status": 404}


def test_defaults_are_exclusive_for_30_s_and_mode_is_read_in_any_case(api):
    got = api.op("acquire", "defaults", "a")
    assert got["mode"] == "EXCLUSIVE"
    assert 28 < at(got["expires_at"]) - time.time() < 32
    assert api.op("acquire", "lower", "a", mode="shared", ttl_ms=0)["mode"] == "SHARED"


def test_a_held_lock_refuses_another_owner_with_retry_after(api):
    api.op("acquire", "db", "a", ttl_ms=3_000)
    status, body, headers = api.call("POST", f"{LOCKS}/acquire",
                                     {"resource": "db", "owner": "b"}, key=AGENT_B)
    assert status == 409
    assert isinstance(body, dict)
    assert (body["code"], body["error"], body["retryable"]) == (
        "lock_unavailable", "lock unavailable", True)
    assert 1_000 < body["retry_after_ms"] <= 3_000
    assert headers["Retry-After"] == str(-(-body["retry_after_ms"] // 1000))  # whole s, up
    api.op("acquire", "long", "a", ttl_ms=600_000)
    _, body, headers = api.call("POST", f"{LOCKS}/acquire", {"resource": "long", "owner": "b"},
                                key=AGENT_B)
    assert headers["Retry-After"] == "5"  # at most 5 s: a release may come sooner


def test_a_hold_runs_out_after_its_ttl(api):
    first = api.op("acquire", "short", "a", ttl_ms=1_000)
    api.op("acquire", "short", "b", key=AGENT_B, expect=409)
    time.sleep(1.2)
    api.get("short", expect=404)
    assert api.op("renew", "short", "a", expect=404)["code"] == "lock_not_held"
    assert api.op("release", "short", "a", expect=409)["code"] == "lock_not_held"
    second = api.op("acquire", "short", "b", key=AGENT_B)
    assert second["owners"] == ["b"] and second["fencing_token"] > first["fencing_token"]


def test_renew_and_release_of_a_lock_never_held(api):
    assert api.op("renew", "nothing", "a", expect=404) == {
        "error": "lock not held", "code": "lock_not_held", "status": 404}
    assert api.op("release", "nothing", "a", expect=409) == {
        "error": "lock not held", "code": "lock_not_held", "status": 409}
    api.op("acquire", "held", "a")
    # Another owner token of the same principal holds nothing here.
    assert api.op("renew", "held", "a-2", expect=404)["code"] == "lock_not_held"
    assert api.op("release", "held", "a-2", expect=409)["code"] == "lock_not_held"


# --- shared and exclusive --------------------------------------------------------------

def test_shared_holds_many_owners_and_excludes_an_exclusive_one(api):
    api.op("acquire", "dataset", "reader-1", mode="SHARED")
    both = api.op("acquire", "dataset", "reader-2", key=AGENT_B, mode="SHARED", ttl_ms=5_000)
    assert (both["mode"], both["owners"]) == ("SHARED", ["reader-1", "reader-2"])
    assert at(both["owner_expires_at"]) < at(both["expires_at"])  # reader-1 holds 30 s
    assert api.op("acquire", "dataset", "writer", mode="EXCLUSIVE", expect=409)["code"] == \
        "lock_unavailable"
    left = api.op("release", "dataset", "reader-1")
    assert left["lock"]["owners"] == ["reader-2"] and left["lock"]["mode"] == "SHARED"
    # The sole owner of a shared lock may make it exclusive; then no one shares it.
    upgraded = api.op("acquire", "dataset", "reader-2", key=AGENT_B, mode="EXCLUSIVE")
    assert (upgraded["mode"], upgraded["owners"]) == ("EXCLUSIVE", ["reader-2"])
    api.op("acquire", "dataset", "reader-1", mode="SHARED", expect=409)


def test_an_exclusive_lock_refuses_a_shared_owner(api):
    api.op("acquire", "x", "writer")
    assert api.op("acquire", "x", "reader", key=AGENT_B, mode="SHARED", expect=409)["code"] \
        == "lock_unavailable"


# --- fencing ----------------------------------------------------------------------------

def test_every_acquire_takes_a_greater_fencing_token(api):
    tokens = []
    for i in range(4):
        key, owner = (AGENT_A, "a") if i % 2 == 0 else (AGENT_B, "b")
        tokens.append(api.op("acquire", "fenced", owner, key=key)["fencing_token"])
        assert api.op("renew", "fenced", owner, key=key)["fencing_token"] == tokens[-1]
        api.op("release", "fenced", owner, key=key)
    tokens.append(api.op("acquire", "other-resource", "a")["fencing_token"])
    again = api.op("acquire", "other-resource", "a")["fencing_token"]  # the holder again
    assert tokens == sorted(set(tokens)) and again > tokens[-1]
    assert api.get("other-resource")["fencing_token"] == again


# --- two clients at once ------------------------------------------------------------------

def test_two_clients_contending_at_once_have_one_holder_at_a_time(api):
    async def contend() -> list[int]:
        clients = [aioredis.from_url(REDIS_URL) for _ in range(2)]
        locks = [ResourceLocks(c) for c in clients]
        owners = [("a", "agent-a"), ("b", "agent-b")]
        tokens: list[int] = []
        try:
            for _ in range(20):
                outcomes = await asyncio.gather(*(
                    lk.acquire(api.tenant, "contended", owner, who, ttl_ms=5_000)
                    for lk, (owner, who) in zip(locks, owners, strict=True)))
                won = [i for i, o in enumerate(outcomes) if o.status == store.OK]
                assert len(won) == 1, outcomes
                lost = 1 - won[0]
                assert outcomes[lost].status == store.BUSY
                winner = outcomes[won[0]]
                assert winner.lock is not None
                assert [h.owner for h in winner.lock.holders] == [owners[won[0]][0]]
                assert winner.fence is not None
                tokens.append(winner.fence)
                # While it holds, the other cannot; then it lets go.
                assert (await locks[lost].acquire(api.tenant, "contended", *owners[lost],
                                                  ttl_ms=5_000)).status == store.BUSY
                done = await locks[won[0]].release(api.tenant, "contended", *owners[won[0]])
                assert done.status == store.OK
        finally:
            for c in clients:
                await c.aclose()
        return tokens

    tokens = runtime.run(contend())
    assert tokens == sorted(set(tokens)) and len(tokens) == 20
    api.get("contended", expect=404)


# --- bad requests -------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "message"), [
    ({"owner": "a"}, "resource is required"),
    ({"resource": "  ", "owner": "a"}, "resource is required"),
    ({"resource": "r"}, "owner is required"),
    ({"resource": 5, "owner": "a"}, "resource must be a string"),
    ({"resource": "r" * 257, "owner": "a"}, "resource is longer than 256 bytes"),
    ({"resource": "é" * 129, "owner": "a"}, "resource is longer than 256 bytes"),
    ({"resource": "r\n1", "owner": "a"}, "resource must not contain control characters"),
    ({"resource": "r", "owner": "a\x00"}, "owner must not contain control characters"),
    ({"resource": "r", "owner": "o" * 257}, "owner is longer than 256 bytes"),
    ({"resource": "r", "owner": "a", "mode": "sharde"}, "mode must be EXCLUSIVE or SHARED"),
    ({"resource": "r", "owner": "a", "ttl_ms": 999}, "ttl_ms must be between 1000 and 3600000"),
    ({"resource": "r", "owner": "a", "ttl_ms": 3_600_001},
     "ttl_ms must be between 1000 and 3600000"),
    ({"resource": "r", "owner": "a", "ttl_ms": -1}, "ttl_ms must be between 1000 and 3600000"),
    ({"resource": "r", "owner": "a", "ttl_ms": "30s"}, "ttl_ms must be an integer"),
    ({"resource": "r", "owner": "a", "ttl_ms": True}, "ttl_ms must be an integer"),
])
def test_a_bad_field_is_400_naming_it(api, body, message):
    for route in ("acquire", "renew", "release"):
        status, answer, _ = api.call("POST", f"{LOCKS}/{route}", body)
        assert status == 400, (route, answer)
        assert isinstance(answer, dict)
        assert answer["error"].startswith(message) and answer["code"] == "invalid_request"


def test_bodies_and_queries_that_are_no_lock_request(api):
    assert api.call("POST", f"{LOCKS}/acquire", "[1]")[0] == 400
    assert api.call("POST", f"{LOCKS}/acquire", "{")[1]["code"] == "invalid_json"
    assert api.call("POST", f"{LOCKS}/acquire", None)[0] == 400
    status, body, _ = api.call("POST", f"{LOCKS}/acquire",
                               {"resource": "r", "owner": "a", "pad": "x" * 9000})
    assert (status, body["code"]) == (413, "payload_too_large")
    assert api.call("GET", LOCKS)[1]["error"] == "resource is required"
    assert api.call("GET", LOCKS, query={"resource": "a\tb"})[0] == 400


# --- roles --------------------------------------------------------------------------------

@pytest.mark.parametrize("key", [VIEWER, USER])
def test_a_read_only_role_reads_but_cannot_take_renew_or_release(api, key):
    api.op("acquire", "guarded", "a")
    for route in ("acquire", "renew", "release"):
        assert api.op(route, "guarded", "a", key=key, expect=403) == {
            "error": "forbidden", "code": "forbidden", "status": 403}
    assert api.get("guarded", key=key)["owners"] == ["a"]
    assert api.call("GET", "/api/v1/admin/locks", key=key)[0] == 403


def test_admin_takes_locks_and_lists_the_tenants_live_locks(api):
    api.op("acquire", "b-lock", "ops-1", key=ADMIN, ttl_ms=20_000)
    api.op("acquire", "a-lock", "r1", mode="SHARED")
    api.op("acquire", "a-lock", "r2", key=AGENT_B, mode="SHARED")
    api.op("acquire", "gone", "x", ttl_ms=1_000)
    api.op("acquire", "elsewhere", "o", key="locks-other-admin", tenant=api.other)
    api.op("release", "b-lock", "ops-1", key=ADMIN)
    api.op("acquire", "b-lock", "ops-2", key=ADMIN, ttl_ms=20_000)
    time.sleep(1.1)
    status, body, _ = api.call("GET", "/api/v1/admin/locks", key=ADMIN)
    assert status == 200, body
    assert isinstance(body, dict)
    locks = body["locks"]
    assert [(e["key"], e["holder"], e["type"], e["mode"], e["owner_count"]) for e in locks] == [
        ("a-lock", "r1", "resource", "SHARED", 2), ("b-lock", "ops-2", "resource", "EXCLUSIVE", 1)]
    assert 15_000 < locks[1]["ttl_remaining_ms"] <= 20_000
    assert all(isinstance(e["fencing_token"], int) for e in locks)
