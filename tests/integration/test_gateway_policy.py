"""Policy governance through the gateway, on the real Redis and NATS: bundles written,
read and deleted, snapshots, publish and rollback, the audit of every change, a
concurrent writer refused, and ``sys.config.changed`` after each change."""

from __future__ import annotations

import json

import nats
import pytest

from cordum import config, runtime
from cordum.gateway.core import deps
from cordum.gateway.policy import store as policy_store
from cordum.gateway.policy.store import AUDIT_KEY, SNAPSHOTS_KEY, PolicyStore
from cordum.safety.bundles import CONFIG_CHANGED_SUBJECT, POLICY_DOC_KEY
from tests import helpers
from tests.conftest import NATS_URL, REDIS_URL

ROOT = "policy-root-key"
"""An admin key for every tenant: the one that may change the policy."""
GOVERNOR = "policy-governor-key"
"""A policy.write key for every tenant."""
TENANT_ADMIN = "policy-tenant-admin-key"
READER = "policy-reader-key"

DENY_BUNDLE = """\
rules:
  - id: bundle-deny-{n}
    match: {{topics: [job.policytest.{n}]}}
    decision: deny
    reason: "denied by bundle {n}"
"""


def keys(tenant: str) -> list[dict[str, str]]:
    return [
        {"key": ROOT, "tenant": "*", "role": "admin", "principal_id": "root-ops"},
        {"key": GOVERNOR, "tenant": "*", "role": "policy.write", "principal_id": "gov"},
        {"key": TENANT_ADMIN, "tenant": tenant, "role": "admin", "principal_id": "t-admin"},
        {"key": READER, "tenant": tenant, "role": "policy.read", "principal_id": "reader"},
    ]


def forget_policy() -> None:
    runtime.run(runtime.redis_client().delete(POLICY_DOC_KEY, SNAPSHOTS_KEY, AUDIT_KEY))


class Api:
    def __init__(self, unique: str, monkeypatch: pytest.MonkeyPatch, kernel: str = "") -> None:
        self.tenant = f"pt-{unique}"
        monkeypatch.setenv("CORDUM_API_KEYS", json.dumps(keys(self.tenant)))
        monkeypatch.delenv("CORDUM_API_KEY", raising=False)
        monkeypatch.setenv("REDIS_URL", REDIS_URL)
        monkeypatch.setenv("NATS_URL", NATS_URL)
        monkeypatch.setenv("CORDUM_RATE_LIMIT_RPS", "0")
        monkeypatch.setenv("SAFETY_KERNEL_ADDR", kernel)
        config.settings.cache_clear()
        deps.reset()
        runtime.reset()

    def call(self, method: str, path: str, body=None, key: str = ROOT,
             tenant: str | None = None, query: dict | None = None):
        status, answer, _ = helpers.call(helpers.event(
            method, path, body, key=key, tenant=tenant if tenant is not None else self.tenant,
            query=query))
        return status, answer

    def put(self, bundle_id: str, content: str, key: str = ROOT, **extra):
        return self.call("PUT", f"/api/v1/policy/bundles/{bundle_id}",
                         {"content": content, **extra}, key=key)

    def bundles(self) -> dict:
        status, body = self.call("GET", "/api/v1/policy/bundles", key=READER)
        assert status == 200, body
        return body

    def audit(self, **query) -> dict:
        """The audit page: its bare array of entries, and its place from the headers."""
        status, body, hdrs = helpers.call(helpers.event(
            "GET", "/api/v1/policy/audit", key=READER, tenant=self.tenant,
            query={k: str(v) for k, v in query.items()} or None))
        assert status == 200, body
        assert isinstance(body, list)
        return {"items": body, "total": int(hdrs["X-Total-Count"]),
                "has_more": {"true": True, "false": False}[hdrs["X-Has-More"]],
                "offset": int(hdrs["X-Offset"])}


@pytest.fixture
def api(unique, monkeypatch):
    a = Api(unique, monkeypatch)
    with helpers.gateway_process():
        forget_policy()
        try:
            yield a
        finally:
            forget_policy()


def test_bundles_are_written_as_drafts_read_and_deleted(api):
    status, body = api.put("secops~deny-1", DENY_BUNDLE.format(n=1), message="first")
    assert status == 200, body
    assert body["id"] == "secops/deny-1" and body["enabled"] is False
    assert body["updated_at"].endswith("Z")

    listed = api.bundles()
    [stored] = listed["bundles"]  # a list (cordum-sdk's shape), each with its content
    assert (stored["id"], stored["enabled"]) == ("secops/deny-1", False)
    assert stored["content"] == DENY_BUNDLE.format(n=1)
    [item] = listed["items"]
    assert {k: v for k, v in stored.items() if k != "content"} == item
    assert item["id"] == "secops/deny-1" and item["source"] == "secops"
    assert item["rule_count"] == 1 and len(item["sha256"]) == 64
    assert item["author"] == "root-ops" and item["message"] == "first"
    assert listed["updated_at"] == body["updated_at"]

    status, one = api.call("GET", "/api/v1/policy/bundles/secops~deny-1", key=READER)
    assert status == 200, one
    assert one["id"] == "secops/deny-1" and one["content"] == DENY_BUNDLE.format(n=1)
    assert one["enabled"] is False and one["created_at"] == body["updated_at"]

    status, body = api.put("secops~deny-1", DENY_BUNDLE.format(n=1), enabled=True)
    assert (status, body["enabled"]) == (200, True)
    assert api.bundles()["items"][0]["enabled"] is True
    # An edit that does not say `enabled` keeps the bundle in force: its deny never lapses.
    status, body = api.put("secops~deny-1", DENY_BUNDLE.format(n=2))
    assert (status, body["enabled"]) == (200, True)
    assert api.bundles()["items"][0]["enabled"] is True
    status, body = api.put("secops~deny-1", DENY_BUNDLE.format(n=2), enabled=False)
    assert (status, body["enabled"]) == (200, False)

    status, _ = api.call("DELETE", "/api/v1/policy/bundles/secops~deny-1")
    assert status == 204
    status, body = api.call("GET", "/api/v1/policy/bundles/secops~deny-1", key=READER)
    assert (status, body["error"]) == (404, "bundle not found")
    status, body = api.call("DELETE", "/api/v1/policy/bundles/secops~deny-1")
    assert status == 404
    assert api.bundles()["items"] == []


def test_an_empty_policy_lists_no_bundles_and_no_time(api):
    # No time at all rather than null: cordum-sdk parses any value it finds as a time.
    assert api.bundles() == {"bundles": [], "items": []}
    status, body = api.call("POST", "/api/v1/policy/publish", {})
    assert (status, body["code"]) == (400, "no_policy_bundles")


def test_publish_and_rollback_answer_their_snapshots_and_are_audited(api):
    assert api.put("secops~a", DENY_BUNDLE.format(n="a"))[0] == 200
    assert api.put("secops~b", DENY_BUNDLE.format(n="b"))[0] == 200

    status, published = api.call("POST", "/api/v1/policy/publish",
                                 {"bundle_ids": ["secops/a"], "message": "go", "note": "p1"},
                                 key=GOVERNOR)
    assert status == 200, published
    assert published["published"] == ["secops/a"]
    before, after = published["snapshot_before"], published["snapshot_after"]
    assert before and after and before != after
    enabled = {i["id"]: i["enabled"] for i in api.bundles()["items"]}
    assert enabled == {"secops/a": True, "secops/b": False}

    status, snaps = api.call("GET", "/api/v1/policy/bundles/snapshots", key=READER)
    assert status == 200
    assert [s["id"] for s in snaps["items"]] == [after, before]
    assert snaps["items"][0]["note"] == "p1"
    status, snap = api.call("GET", f"/api/v1/policy/bundles/snapshots/{before}", key=READER)
    assert status == 200 and snap["bundles"]["secops/a"]["enabled"] is False

    status, rolled = api.call("POST", "/api/v1/policy/rollback", {"snapshot_id": before})
    assert status == 200, rolled
    assert rolled["rollback_to"] == before
    # The bundles as published are the newest snapshot: the rollback reuses it.
    assert rolled["snapshot_before"] == after and rolled["snapshot_after"]
    enabled = {i["id"]: i["enabled"] for i in api.bundles()["items"]}
    assert enabled == {"secops/a": False, "secops/b": False}

    status, body = api.call("POST", "/api/v1/policy/rollback", {"snapshot_id": "nope"})
    assert (status, body["error"]) == (404, "snapshot not found")

    entries = api.audit()["items"]
    assert [e["action"] for e in entries] == ["rollback", "publish", "edit", "edit"]
    rollback, publish = entries[0], entries[1]
    assert (publish["snapshot_before"], publish["snapshot_after"]) == (before, after)
    assert publish["actor_id"] == "gov" and publish["role"] == "policy.write"
    assert publish["bundle_ids"] == ["secops/a"] and publish["message"] == "go"
    assert rollback["resource_id"] == before and rollback["actor_id"] == "root-ops"
    assert all(e["resource_type"] == "policy_bundle" for e in entries)


def test_snapshots_are_taken_on_request_and_found_by_id(api):
    status, body = api.call("POST", "/api/v1/policy/bundles/snapshots", {"note": "x"})
    assert (status, body["code"]) == (400, "no_policy_bundles")
    api.put("core-1", DENY_BUNDLE.format(n=1))
    status, snap = api.call("POST", "/api/v1/policy/bundles/snapshots", {"note": "before"})
    assert status == 200, snap
    assert snap["note"] == "before" and snap["bundle_ids"] == ["core-1"]
    assert snap["id"].startswith(snap["created_at"] + "-") and len(snap["id"].split("-")[-1]) == 10
    status, found = api.call("GET", f"/api/v1/policy/bundles/snapshots/{snap['id']}",
                             key=READER)
    assert (status, found) == (200, snap)
    status, body = api.call("GET", "/api/v1/policy/bundles/snapshots/missing", key=READER)
    assert (status, body["error"]) == (404, "snapshot not found")
    assert api.audit(action="snapshot")["items"][0]["snapshot_after"] == snap["id"]


def test_audit_filters_and_pages(api):
    for n in range(5):
        api.put(f"pack~b{n}", DENY_BUNDLE.format(n=n), message=f"change {n}")
    api.call("DELETE", "/api/v1/policy/bundles/pack~b0")
    page = api.audit(limit=2)
    assert (page["total"], page["has_more"], page["offset"], len(page["items"])) == \
        (6, True, 0, 2)
    assert page["items"][0]["action"] == "delete"
    last = api.audit(limit=2, offset=4)
    assert (len(last["items"]), last["has_more"]) == (2, False)
    assert api.audit(action="delete")["total"] == 1
    assert api.audit(rule_id="pack/b3")["total"] == 1
    assert api.audit(search="CHANGE 2")["items"][0]["resource_id"] == "pack/b2"
    assert api.call("GET", "/api/v1/policy/audit", key=READER, query={"limit": "x"})[0] == 400


def test_a_concurrent_writer_gets_409_and_nothing_is_lost(api, monkeypatch):
    assert api.put("secops~first", DENY_BUNDLE.format(n=1))[0] == 200
    stale = runtime.run(PolicyStore(runtime.redis_client()).read())
    assert api.put("secops~second", DENY_BUNDLE.format(n=2))[0] == 200

    async def read_stale(self):
        return stale

    # A writer that read before the second PUT commits after it.
    monkeypatch.setattr(policy_store.PolicyStore, "read", read_stale)
    status, body = api.put("secops~third", DENY_BUNDLE.format(n=3))
    assert (status, body["code"]) == (409, "POLICY_VERSION_CONFLICT")
    monkeypatch.undo()
    assert {i["id"] for i in api.bundles()["items"]} == {"secops/first", "secops/second"}
    assert api.audit()["total"] == 2


def test_two_writers_of_one_revision_one_wins(api):
    store = PolicyStore(runtime.redis_client())
    from cordum.gateway.policy.store import Commit

    read = runtime.run(store.read())
    doc = {"scope": "system", "scope_id": "policy", "data": {"bundles": {}}, "revision": 1}
    outcomes = [runtime.run(store.commit(read, Commit({"id": str(n)}, {**doc, "n": n})))
                for n in range(2)]
    assert outcomes == [True, False]
    assert runtime.run(store.read()).document["n"] == 0
    assert [e["id"] for e in runtime.run(store.audit())] == ["0"]


def test_every_change_announces_itself_on_sys_config_changed(api):
    async def listen():
        nc = await nats.connect(NATS_URL)
        return nc, await nc.subscribe(CONFIG_CHANGED_SUBJECT)

    nc, sub = runtime.run(listen())
    try:
        api.put("secops~n", DENY_BUNDLE.format(n=1))
        status, published = api.call("POST", "/api/v1/policy/publish", {})
        api.call("POST", "/api/v1/policy/rollback",
                 {"snapshot_id": published["snapshot_before"]})
        api.call("DELETE", "/api/v1/policy/bundles/secops~n")

        async def drain():
            return [json.loads((await sub.next_msg(timeout=5)).data) for _ in range(4)]

        news = runtime.run(drain())
    finally:
        runtime.run(nc.close())
    assert [(n["action"], n["revision"]) for n in news] == \
        [("edit", 1), ("publish", 2), ("rollback", 3), ("delete", 4)]
    assert all(n["scope"] == "system" and n["scope_id"] == "policy" for n in news)


def test_bounds_refuse_big_bundles_bodies_and_too_many_bundles(api):
    big = "# " + "x" * (256 * 1024) + "\n"
    status, body = api.put("secops~big", big)
    assert status == 400 and "262144" in body["error"]
    status, body = api.call("PUT", "/api/v1/policy/bundles/secops~big",
                            json.dumps({"content": "rules: []", "pad": "x" * (2 * 1024 * 1024)}))
    assert (status, body["code"]) == (400, "request_body_too_large")
    full = {f"b{n:03}": {"content": "rules: []", "enabled": False} for n in range(100)}
    runtime.run(runtime.redis_client().set(POLICY_DOC_KEY, json.dumps(
        {"scope": "system", "scope_id": "policy", "data": {"bundles": full}, "revision": 7})))
    status, body = api.put("b100", "rules: []")
    assert (status, body["code"]) == (409, "too_many_policy_bundles")
    assert api.put("b000", "rules: []")[0] == 200  # an existing one may still change


def test_two_writers_at_once_one_is_refused_and_the_other_kept(api):
    import asyncio

    from cordum.gateway.core.auth import Principal
    from cordum.gateway.core.errors import Conflict
    from cordum.gateway.policy.models import BundleWrite
    from cordum.gateway.policy.service import PolicyService

    class ReadTogether(PolicyStore):
        """Both writers have read before either commits (the race, made certain)."""

        def __init__(self, redis, barrier: asyncio.Barrier) -> None:
            super().__init__(redis)
            self._barrier = barrier

        async def read(self):
            state = await super().read()
            await self._barrier.wait()
            return state

    class Quiet:
        async def publish_bytes(self, subject: str, data: bytes) -> None:
            pass

    who = Principal("default", "admin", "root-ops")

    async def both(n: int):
        barrier = asyncio.Barrier(2)
        return await asyncio.gather(*(
            PolicyService(ReadTogether(runtime.redis_client(), barrier), Quiet(),
                          lambda: (b"", "none")).put_bundle(
                who, f"race/{n}-{side}", BundleWrite(content=DENY_BUNDLE.format(n=side)))
            for side in ("a", "b")), return_exceptions=True)

    outcomes = [runtime.run(both(n)) for n in range(3)]
    for results in outcomes:
        refused = [r for r in results if isinstance(r, Conflict)]
        assert len(refused) == 1, results
        assert refused[0].code == "POLICY_VERSION_CONFLICT"
    won = {r["id"] for results in outcomes for r in results if isinstance(r, dict)}
    # What each winner was told it wrote is there, and nothing else.
    assert {i["id"] for i in api.bundles()["items"]} == won and len(won) == 3
    assert api.audit()["total"] == 3
