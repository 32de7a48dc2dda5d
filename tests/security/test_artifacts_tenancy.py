"""Artifacts and memory pointers across tenants: another tenant's artifact, context or
result answers exactly as a missing one, and is never in the caller's list (whose index
no worker and no read reaches); a key that is not a job's context or result or an
artifact is refused, whatever it holds (the memory read is no generic Redis reader);
sizes beyond the limits are 413; a quarantined, denied, redacted or unchecked output is
never shown raw."""

from __future__ import annotations

import base64
import json

import pytest

from cordum import runtime
from cordum.redis_acl import WORKERS
from cordum.store.artifact_index import index_key
from cordum.store.artifacts import KEY_PREFIX, MAX_INLINE_BYTES
from cordum.store.jobs import JobState
from tests.artifacts_world import World, final


@pytest.fixture
def world(unique: str, monkeypatch: pytest.MonkeyPatch) -> World:
    return World(unique, monkeypatch)


MISSING_ART = "redis://art:00000000-0000-4000-8000-000000000000"


def test_another_tenants_artifact_is_404_exactly_like_a_missing_one(world: World) -> None:
    ptr = world.put("tenant secret")["artifact_ptr"]
    missing = world.call("GET", f"/api/v1/artifacts/{MISSING_ART}", key=world.other,
                         tenant=world.other_tenant)
    foreign = world.call("GET", f"/api/v1/artifacts/{ptr}", key=world.other,
                         tenant=world.other_tenant)
    assert foreign == missing and foreign[0] == 404
    assert world.memory(ptr, as_key=world.other, tenant=world.other_tenant) == \
        world.memory(MISSING_ART, as_key=world.other, tenant=world.other_tenant)
    # A key bound to one tenant cannot name the other in the header.
    assert world.call("GET", f"/api/v1/artifacts/{ptr}", key=world.other,
                      tenant=world.tenant)[0] == 403
    # A key of every tenant reads as the tenant X-Tenant-ID names, and only that one.
    assert world.call("GET", f"/api/v1/artifacts/{ptr}", key=world.every,
                      tenant=world.tenant)[0] == 200
    assert world.call("GET", f"/api/v1/artifacts/{ptr}", key=world.every,
                      tenant=world.other_tenant) == missing


def test_the_list_holds_the_callers_tenants_artifacts_only(world: World) -> None:
    mine = world.put("mine")["artifact_ptr"]
    status, made = world.call("POST", "/api/v1/artifacts", {"content": "theirs"},
                              key=world.other, tenant=world.other_tenant)
    assert status == 200, made
    theirs = made["artifact_ptr"]

    def listed(key: str, tenant: str) -> list[str]:
        status, body = world.call("GET", "/api/v1/artifacts", key=key, tenant=tenant)
        assert status == 200, body
        return [item["artifact_ptr"] for item in body["items"]]

    assert listed(world.viewer, world.tenant) == [mine]
    assert listed(world.other, world.other_tenant) == [theirs]
    # A key of every tenant lists the tenant X-Tenant-ID names, and only that one.
    assert listed(world.every, world.tenant) == [mine]
    assert listed(world.every, world.other_tenant) == [theirs]
    # A key bound to one tenant cannot name the other in the header.
    assert world.call("GET", "/api/v1/artifacts", key=world.other,
                      tenant=world.tenant)[0] == 403


def test_the_index_is_out_of_the_workers_reach_and_splits_one_way() -> None:
    # Workers read art:* (a job's artifact): the index, every id of a tenant, is not there.
    assert f"%R~{KEY_PREFIX}*" in WORKERS.rules
    for tenant in ("default", "a", "a:b", "a%3Ab", "*"):
        assert not index_key(tenant).startswith(KEY_PREFIX)
    assert len({index_key(t) for t in ("a:b", "a%3Ab", "a%253Ab", "a")}) == 4


def test_the_index_is_served_by_no_read(world: World) -> None:
    world.put("x")
    key = index_key(world.tenant)
    status, body = world.memory(key)
    assert (status, body["code"]) == (400, "unsupported_pointer")
    assert world.memory(f"redis://{key}")[0] == 400
    assert world.call("GET", f"/api/v1/artifacts/{key}")[0] == 404


def test_the_tenant_label_is_stamped_and_cannot_name_another_tenant(world: World) -> None:
    status, body = world.call("POST", "/api/v1/artifacts", {
        "content": "x", "labels": {"tenant_id": world.other_tenant}})
    assert (status, body["code"]) == (403, "tenant_access_denied")
    made = world.put("x", labels={"tenant_id": world.tenant})
    status, body = world.call("GET", f"/api/v1/artifacts/{made['artifact_ptr']}")
    assert body["metadata"]["labels"] == {"tenant_id": world.tenant}


def test_another_tenants_context_and_result_are_404_like_a_missing_job(world: World) -> None:
    theirs = world.job(tenant=world.other_tenant, context={"secret": "ctx"},
                       result={"secret": "res"})
    for kind in ("ctx", "res"):
        foreign = world.memory(f"{kind}:{theirs}")
        missing = world.memory(f"{kind}:no-such-job")
        assert foreign == missing and foreign[0] == 404
    # Their own key reads them.
    assert world.memory(f"ctx:{theirs}", as_key=world.other,
                        tenant=world.other_tenant)[0] == 200


@pytest.mark.parametrize("key", [
    "job:meta:{job}", "redis://job:meta:{job}", "job:req:{job}", "cfg:system:default",
    "mem:run:r1:events", "mem:{job}:x", "art:meta:{art}", "redis://art:meta:{art}",
    "ctx:{job}:other", "res:{job}:other", "ctx:", "res:", "art:", "audit:stream:x",
    "redis://redis://ctx:{job}", "ctx:*", "ctx:a b",
])
def test_keys_that_are_not_pointers_are_refused_whatever_they_hold(world: World,
                                                                   key: str) -> None:
    job = world.job(result={"x": 1})
    art = world.put("x")["artifact_ptr"].removeprefix("redis://art:")
    runtime.run(world.redis.set("cfg:system:default", json.dumps({"secret": "cfg"})))
    status, body = world.memory(key.format(job=job, art=art))
    assert status in (400, 404), body
    if status == 400:
        assert body["code"] in ("unsupported_pointer", "invalid_pointer")
    text = json.dumps(body)
    assert world.tenant not in text and "secret" not in text and "base64" not in body


def test_sizes_beyond_the_limits_are_413(world: World) -> None:
    over = base64.b64encode(b"z" * (MAX_INLINE_BYTES + 1)).decode()
    status, body = world.call("POST", "/api/v1/artifacts", {"content_base64": over})
    assert (status, body["code"]) == (413, "payload_too_large")
    status, body = world.call("POST", "/api/v1/artifacts",
                              {"content": "z" * (MAX_INLINE_BYTES + 1)})
    assert status == 413
    status, body = world.call("POST", "/api/v1/artifacts", "{" + " " * (6 * 1024 * 1024) + "}")
    assert status == 413
    # Exactly the limit is taken.
    at = base64.b64encode(b"z" * MAX_INLINE_BYTES).decode()
    status, body = world.call("POST", "/api/v1/artifacts", {"content_base64": at})
    assert status == 200 and body["size_bytes"] == MAX_INLINE_BYTES
    status, got = world.call("GET", f"/api/v1/artifacts/{body['artifact_ptr']}")
    assert status == 200 and len(json.dumps(got)) < 6 * 1000 * 1000


@pytest.mark.parametrize(("state", "meta", "decision"), [
    (JobState.OUTPUT_QUARANTINED, {}, None),
    (JobState.SUCCEEDED, {"output_safety": final("QUARANTINE", quarantined=True)}, None),
    (JobState.SUCCEEDED, {"output_safety": final("DENY")}, None),
    (JobState.SUCCEEDED, {"output_safety": final("REDACT")}, None),
    (JobState.SUCCEEDED, {}, {"decision": "QUARANTINE", "quarantined": True}),
    (JobState.SUCCEEDED, {"safety_constraints": json.dumps({"redactionLevel": "pii"})},
     None),
])
def test_a_withheld_output_is_never_shown_raw(world: World, state: JobState,
                                              meta: dict[str, str],
                                              decision: dict[str, object] | None) -> None:
    job = world.job(state, context={"prompt": "RAW-INPUT"}, result={"out": "RAW-OUTPUT"},
                    meta=meta, decision=decision)
    for key in (f"res:{job}", f"ctx:{job}", f"res:{job}:redacted"):
        status, body = world.memory(key)
        assert status in (403, 404), (key, body)
        if status == 403:
            assert body["code"] == "output_withheld"
        assert "RAW-" not in json.dumps(body)


def test_an_unchecked_output_waits_while_the_output_policy_is_on(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    job = world.job(result={"out": "RAW-OUTPUT"})
    assert world.memory(f"res:{job}")[0] == 200
    monkeypatch.setenv("OUTPUT_POLICY_ENABLED", "true")
    World.reset()
    status, body = world.memory(f"res:{job}")
    assert (status, body["code"]) == (403, "output_withheld")
    assert "RAW-" not in json.dumps(body)
