"""The config service through the gateway, on the real Redis and NATS: documents written
and read per scope (flat and enveloped), the effective config merged in scope order,
stale revisions refused, the size and depth bounds, ``sys.config.changed`` after a
write (and a write that stands when the publish fails), and the write's audit event."""

from __future__ import annotations

import hashlib
import json

import nats
import pytest

from cordum import config, runtime
from cordum.gateway.core import deps
from cordum.safety.bundles import CONFIG_CHANGED_SUBJECT
from cordum.store.audit import AuditChain, parse_entry
from cordum.store.config_docs import (
    MAX_DATA_BYTES,
    MAX_DEPTH,
    ConfigDocs,
    effective,
    scope_keys,
)
from tests import helpers
from tests.conftest import NATS_URL, REDIS_URL

ROOT = "cfg-root-key"
"""An admin key for every tenant: the one that may write the system config."""
ADMIN = "cfg-admin-key"
WRITER = "cfg-writer-key"
READER = "cfg-reader-key"
OPERATOR = "cfg-operator-key"
VIEWER = "cfg-viewer-key"
OTHER_ADMIN = "cfg-other-admin-key"
PATH = "/api/v1/config"
SYSTEM_KEY = "cfg:system:default"


def keys(tenant: str, other: str) -> list[dict[str, str]]:
    return [
        {"key": ROOT, "tenant": "*", "role": "admin", "principal_id": "root-ops"},
        {"key": ADMIN, "tenant": tenant, "role": "admin", "principal_id": "t-admin"},
        {"key": WRITER, "tenant": tenant, "role": "config.write", "principal_id": "writer"},
        {"key": READER, "tenant": tenant, "role": "config.read", "principal_id": "reader"},
        {"key": OPERATOR, "tenant": tenant, "role": "operator", "principal_id": "op"},
        {"key": VIEWER, "tenant": tenant, "role": "viewer", "principal_id": "viewer"},
        {"key": OTHER_ADMIN, "tenant": other, "role": "admin", "principal_id": "o-admin"},
    ]


async def forget(tenants: list[str]) -> None:
    client = runtime.redis_client()
    doomed = [SYSTEM_KEY, "cfg:docs:*"]
    for tenant in tenants:
        async for key in client.scan_iter(match=f"cfg:*{tenant}*", count=500):
            doomed.append(key)
        doomed += [f"audit:chain:{tenant}", f"audit:head:{tenant}"]
    await client.delete(*doomed)


class Api:
    def __init__(self, unique: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tenant = f"cfg-{unique}"
        self.other = f"cfo-{unique}"
        monkeypatch.setenv("CORDUM_API_KEYS", json.dumps(keys(self.tenant, self.other)))
        monkeypatch.delenv("CORDUM_API_KEY", raising=False)
        monkeypatch.setenv("REDIS_URL", REDIS_URL)
        monkeypatch.setenv("NATS_URL", NATS_URL)
        monkeypatch.setenv("CORDUM_RATE_LIMIT_RPS", "0")
        config.settings.cache_clear()
        deps.reset()
        runtime.reset()

    def call(self, method: str, path: str = PATH, body=None, key: str = ADMIN,
             tenant: str | None = None, query: dict | None = None):
        status, answer, _ = helpers.call(helpers.event(
            method, path, body, key=key, tenant=tenant if tenant is not None else self.tenant,
            query=query))
        return status, answer

    def put(self, scope: str, scope_id: str = "", key: str = ADMIN, **fields):
        return self.call("PUT", body={"scope": scope, "scope_id": scope_id, **fields}, key=key)

    def doc(self, scope: str, scope_id: str = "", key: str = READER):
        return self.call("GET", key=key, query={"scope": scope, "scope_id": scope_id,
                                                "envelope": "true"})

    def effective(self, key: str = READER, **ids: str):
        return self.call("GET", PATH + "/effective", key=key, query=ids or None)


@pytest.fixture
def api(unique, monkeypatch):
    a = Api(unique, monkeypatch)
    with helpers.gateway_process():
        runtime.run(forget([a.tenant, a.other]))
        try:
            yield a
        finally:
            runtime.run(forget([a.tenant, a.other]))


def test_a_document_is_written_and_read_flat_and_enveloped(api):
    status, body = api.put("team", "blue", data={"mode": "strict", "limits": {"n": 3}},
                           meta={"owner": "ops"})
    assert (status, body) == (204, "")
    status, flat = api.call("GET", key=READER, query={"scope": "team", "scope_id": "blue"})
    assert (status, flat) == (200, {"mode": "strict", "limits": {"n": 3}})
    status, doc = api.doc("team", "blue")
    assert status == 200
    assert (doc["scope"], doc["scope_id"], doc["revision"]) == ("team", "blue", 1)
    assert doc["data"] == flat and doc["meta"] == {"owner": "ops"}
    assert doc["updated_at"].endswith("Z")
    # The document sits under the tenant in its key.
    raw = runtime.run(runtime.redis_client().get(f"cfg:team:{api.tenant}:blue"))
    assert json.loads(raw)["revision"] == 1


def test_a_write_replaces_members_by_name_and_bumps_the_revision(api):
    assert api.put("team", "blue", data={"a": {"x": 1}, "b": 1})[0] == 204
    assert api.call("POST", body={"scope": "team", "scope_id": "blue",
                                  "data": {"a": {"y": 2}}}, key=WRITER)[0] == 204
    status, doc = api.doc("team", "blue")
    assert doc["revision"] == 2 and doc["data"] == {"a": {"y": 2}, "b": 1}


def test_the_effective_config_merges_system_org_team_workflow_step_in_order(api):
    assert api.call("PUT", body={"scope": "system", "data": {
        "a": 1, "nest": {"x": 1, "y": 1}, "list": [1, 2]}}, key=ROOT)[0] == 204
    assert api.put("org", data={"a": 2, "nest": {"y": 2}})[0] == 204
    assert api.put("team", "blue", data={"nest": {"z": 3}, "list": [9]})[0] == 204
    assert api.put("workflow", "wf-1", data={"a": 4})[0] == 204
    assert api.put("step", "wf-1.s1", data={"b": 5})[0] == 204
    assert api.put("step", "wf-1.s1", data={"b": 6})[0] == 204

    status, snap = api.effective(team_id="blue", workflow_id="wf-1", step_id="wf-1.s1")
    assert status == 200
    data = {"a": 4, "nest": {"x": 1, "y": 2, "z": 3}, "list": [9], "b": 6}
    assert snap["data"] == data
    assert snap["version"] == "system:1|org:1|team:1|workflow:1|step:2"
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    assert snap["hash"] == hashlib.sha256(canonical.encode()).hexdigest()
    # Without the ids only the system and the org apply; the org id may be named.
    status, partial = api.effective(key=OPERATOR, org_id=api.tenant)
    assert status == 200
    assert partial["data"] == {"a": 2, "nest": {"x": 1, "y": 2}, "list": [1, 2]}
    assert partial["version"] == "system:1|org:1|team:0|workflow:0|step:0"

    # The submitter's pure pair gives the same snapshot from one MGET.
    keys_ = scope_keys(api.tenant, "blue", "wf-1", "wf-1.s1")
    raw = runtime.run(runtime.redis_client().mget(keys_))
    assert effective(raw) == snap


def test_the_effective_config_of_nothing_is_empty_and_missing_documents_answer(api):
    status, snap = api.effective(team_id="none")
    assert status == 200
    assert snap["data"] == {} and snap["version"] == "system:0|org:0|team:0|workflow:0|step:0"
    assert effective([None, None, None]) is None
    # A fresh install has no system/default: it reads as {} (Cordum's bootstrap answer).
    assert api.call("GET", key=READER) == (200, {})
    status, body = api.doc("team", "none")
    assert (status, body["code"]) == (404, "config_not_found")


def test_a_stale_revision_is_refused_and_the_current_one_written(api):
    assert api.put("team", "blue", data={"n": 1}, revision=0)[0] == 204
    status, body = api.put("team", "blue", data={"n": 2}, revision=0)
    assert (status, body["code"]) == (409, "config_version_conflict")
    assert api.put("team", "blue", data={"n": 2}, revision=1)[0] == 204
    status, body = api.put("team", "red", data={"n": 1}, revision=5)
    assert (status, body["code"]) == (409, "config_version_conflict")
    status, doc = api.doc("team", "blue")
    assert (doc["revision"], doc["data"]) == (2, {"n": 2})
    assert api.doc("team", "red")[0] == 404


def test_the_check_and_set_refuses_a_writer_that_read_an_older_revision(api):
    docs = ConfigDocs(runtime.redis_client())
    key = f"cfg:team:{api.tenant}:race"
    first = {"scope": "team", "scope_id": "race", "data": {"w": 1}, "revision": 1}
    assert runtime.run(docs.commit(key, api.tenant, 0, first)) == 1
    # A second writer that also read "no document" loses: nothing is written.
    second = {**first, "data": {"w": 2}}
    assert runtime.run(docs.commit(key, api.tenant, 0, second)) == 0
    assert runtime.run(docs.get(key))["data"] == {"w": 1}
    # A new document past the tenant's bound is refused; an existing one may change.
    other = f"cfg:team:{api.tenant}:more"
    assert runtime.run(docs.commit(other, api.tenant, 0, first, most=1)) == -1
    assert runtime.run(docs.commit(key, api.tenant, 1, {**first, "revision": 2}, most=1)) == 1


def test_size_and_depth_bounds(api):
    big = {"blob": "x" * (MAX_DATA_BYTES + 1)}
    status, body = api.put("team", "blue", data=big)
    assert (status, body["code"]) == (400, "config_too_large")
    # Two writes that each fit but together do not.
    half = "x" * (MAX_DATA_BYTES // 2)
    assert api.put("team", "blue", data={"a": half})[0] == 204
    status, body = api.put("team", "blue", data={"b": half})
    assert (status, body["code"]) == (400, "config_too_large")
    deep: dict = {}
    node = deep
    for _ in range(MAX_DEPTH - 1):
        node["d"] = {}
        node = node["d"]
    assert api.put("team", "deep", data=deep)[0] == 204
    node["d"] = {}
    status, body = api.put("team", "deeper", data=deep)
    assert (status, body["code"]) == (400, "config_too_deep")


def test_bad_scopes_ids_and_sections_are_400_naming_the_field(api):
    status, body = api.put("galaxy", "x", data={})
    assert (status, body["code"]) == (400, "config_request_invalid")
    status, body = api.put("team", "", data={})
    assert (status, body["code"]) == (400, "config_request_invalid") and "scope_id" in \
        body["error"]
    status, body = api.put("team", "a:b", data={})
    assert (status, body["code"]) == (400, "config_request_invalid")
    status, body = api.put("team", "blue", data={"safety": {"denied_topics": "job.x"}})
    assert (status, body["code"]) == (400, "config_schema_violation")
    assert "data.safety.denied_topics" in body["error"]
    status, body = api.put("team", "blue", data=[1])
    assert status == 400 and "data" in body["error"]
    status, body = api.put("team", "blue", data={}, revision=-1)
    assert status == 400 and "revision" in body["error"]
    status, body = api.call("GET", key=READER, query={"scope": "galaxy"})
    assert (status, body["code"]) == (400, "config_request_invalid")
    status, body = api.effective(team_id="a b")
    assert (status, body["code"]) == (400, "config_request_invalid")
    status, body = api.call("PUT", body={"scope": "system", "data": {"bundles": {}}}, key=ROOT)
    assert (status, body["code"]) == (400, "config_key_forbidden")


def test_a_write_announces_itself_on_sys_config_changed(api):
    async def listen():
        nc = await nats.connect(NATS_URL)
        return nc, await nc.subscribe(CONFIG_CHANGED_SUBJECT)

    nc, sub = runtime.run(listen())
    try:
        assert api.put("team", "blue", data={"n": 1})[0] == 204
        assert api.call("PUT", body={"scope": "system", "data": {"n": 1}}, key=ROOT)[0] == 204

        async def drain():
            found = []
            while len(found) < 2:
                news = json.loads((await sub.next_msg(timeout=5)).data)
                if news.get("tenant") in (api.tenant, "*") and "changed_at" in news:
                    found.append(news)
            return found

        team, system = runtime.run(drain())
    finally:
        runtime.run(nc.close())
    assert {k: team[k] for k in ("scope", "scope_id", "tenant", "revision")} == \
        {"scope": "team", "scope_id": "blue", "tenant": api.tenant, "revision": 1}
    assert (system["scope"], system["scope_id"], system["tenant"]) == ("system", "default", "*")


def test_a_failed_publish_is_logged_and_the_write_stands(api, monkeypatch, caplog):
    class Down:
        async def publish_bytes(self, subject: str, data: bytes) -> None:
            raise RuntimeError("nats down")

    monkeypatch.setattr(deps, "publisher", lambda: Down())
    assert api.put("team", "blue", data={"n": 1})[0] == 204
    assert api.doc("team", "blue")[1]["data"] == {"n": 1}
    assert "not published" in caplog.text


def test_a_write_is_recorded_in_the_audit_chain(api):
    assert api.put("team", "blue", data={"b": 1, "a": 2}, key=WRITER)[0] == 204
    assert api.call("PUT", body={"scope": "system", "data": {"n": 1}}, key=ROOT)[0] == 204
    chain = AuditChain(runtime.redis_client())
    [entry] = runtime.run(chain.read(api.tenant))
    event = entry.decoded()
    assert (event["type"], event["severity"], event["actor"]) == ("config.set", "HIGH", "writer")
    assert event["extra"]["scope"] == "team" and event["extra"]["scope_id"] == "blue"
    assert event["extra"]["keys"] == ["a", "b"] and event["extra"]["revision"] == 1
    assert event["snapshot"]["before"] == ""
    newest = runtime.run(runtime.redis_client().xrevrange("audit:chain:*", count=50))
    system = [e for e in (parse_entry(*item).decoded() for item in newest)
              if e.get("type") == "config.set"]
    assert system[0]["actor"] == "root-ops" and system[0]["tenant"] == "*"
    assert system[0]["extra"]["acting_tenant"] == api.tenant


def test_a_write_without_revision_that_loses_a_race_is_worked_out_again(api):
    from cordum.gateway.configs.access import Target
    from cordum.gateway.configs.models import Write
    from cordum.gateway.configs.service import ConfigService
    from cordum.gateway.core.auth import Principal
    from cordum.gateway.core.errors import Conflict

    redis = runtime.redis_client()
    key = f"cfg:team:{api.tenant}:race"
    place = Target("team", "race", key, api.tenant)
    who = Principal(tenant=api.tenant, role="admin", principal_id="t-admin")

    class Racing(ConfigDocs):
        """Another writer commits between this writer's read and its commit, ``races``
        times."""

        def __init__(self, races: int) -> None:
            super().__init__(redis)
            self.races = races

        async def commit(self, key_, chain_tenant, read_revision, document, audit=None,
                         *, most=1000):
            if self.races:
                self.races -= 1
                rival = {**document, "data": {**document["data"], "rival": self.races}}
                assert await super().commit(key_, chain_tenant, read_revision, rival) == 1
            return await super().commit(key_, chain_tenant, read_revision, document, audit,
                                        most=most)

    class Quiet:
        async def publish_bytes(self, subject: str, data: bytes) -> None:
            pass

    def service(races: int) -> ConfigService:
        return ConfigService(Racing(races), Quiet(), deps.audit_trail())

    # Two lost races: the third try is made on the newest document, keeping the rival's.
    assert runtime.run(service(2).write(who, place, Write("team", "race", {"mine": 1}))) == 3
    doc = runtime.run(ConfigDocs(redis).get(key))
    assert doc["data"] == {"mine": 1, "rival": 0} and doc["revision"] == 3
    # Three lost races: 409. With a revision, the first lost race is 409 at once.
    with pytest.raises(Conflict) as lost:
        runtime.run(service(3).write(who, place, Write("team", "race", {"mine": 2})))
    assert lost.value.code == "config_version_conflict"
    racing = service(1)
    with pytest.raises(Conflict):
        runtime.run(racing.write(who, place, Write("team", "race", {"mine": 3}, revision=6)))
    assert runtime.run(ConfigDocs(redis).get(key))["revision"] == 7  # the rival's only
