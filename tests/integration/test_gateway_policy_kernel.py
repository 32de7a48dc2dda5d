"""The policy routes that ask the safety kernel (evaluate, simulate, explain, its
snapshots) through a real kernel, and those that evaluate the bundles in the gateway
(a bundle's simulate) or read them (rules)."""

from __future__ import annotations

import pytest

from tests import helpers
from tests.integration.test_gateway_policy import (
    DENY_BUNDLE,
    GOVERNOR,
    READER,
    ROOT,
    TENANT_ADMIN,
    Api,
    forget_policy,
)

CHECK = {"topic": "job.default", "job_id": "policy-check-1", "labels": {"team": "blue"}}


@pytest.fixture
def api(unique, kernel, monkeypatch):
    a = Api(unique, monkeypatch, kernel)
    with helpers.gateway_process():
        forget_policy()
        try:
            yield a
        finally:
            forget_policy()


@pytest.mark.parametrize("mode", ["evaluate", "simulate", "explain"])
def test_the_kernel_answers_in_cordums_shape_with_sdk_aliases(api, mode):
    status, body = api.call("POST", f"/api/v1/policy/{mode}", CHECK, key=TENANT_ADMIN)
    assert status == 200, body
    assert (body["decision"], body["decision_type"]) == ("ALLOW", "DECISION_TYPE_ALLOW")
    assert body["ruleId"] == body["rule_id"] == "default-topic-allow"
    assert body["policySnapshot"] == body["policy_snapshot"] != ""
    assert body["constraints"] is None and body["remediations"] == []
    assert body["approvalRequired"] is False
    if mode == "explain":
        assert "decided by default-topic-allow" in body["reason"]


def test_a_denied_topic_carries_remediations(api):
    status, body = api.call("POST", "/api/v1/policy/evaluate",
                            {"topic": "job.echo.denied"}, key=GOVERNOR)
    assert status == 200, body
    assert (body["decision"], body["decision_type"]) == ("DENY", "DECISION_TYPE_DENY")
    assert body["remediations"][0]["replacementTopic"] == "job.echo"


def test_approval_answers_name_the_job(api):
    status, body = api.call("POST", "/api/v1/policy/simulate",
                            {"topic": "job.echo.approval", "job_id": "j-7"}, key=ROOT)
    assert status == 200, body
    # The kernel's REQUIRE_HUMAN under the jobs API's (and cordum-sdk's) name.
    assert (body["decision"], body["decision_type"]) == \
        ("REQUIRE_APPROVAL", "DECISION_TYPE_REQUIRE_HUMAN")
    assert body["approvalRequired"] is True and body["approvalRef"] == "j-7"


def test_a_question_without_topic_is_400(api):
    status, body = api.call("POST", "/api/v1/policy/evaluate", {"job_id": "x"},
                            key=TENANT_ADMIN)
    assert (status, body["error"]) == (400, "topic is required")
    status, body = api.call("POST", "/api/v1/policy/evaluate",
                            {"topic": "job.default", "priority": "urgent"}, key=TENANT_ADMIN)
    assert status == 400 and "priority" in body["error"]


def test_the_kernels_snapshots_are_listed(api):
    status, body = api.call("GET", "/api/v1/policy/snapshots", key=READER)
    assert status == 200, body
    assert isinstance(body, list) and body
    assert [s["in_force"] for s in body] == [True] + [False] * (len(body) - 1)
    assert body[0]["id"] == api.call("POST", "/api/v1/policy/simulate", CHECK,
                                     key=ROOT)[1]["policySnapshot"]


def test_an_unreachable_kernel_is_503(unique, monkeypatch):
    a = Api(unique, monkeypatch, f"127.0.0.1:{helpers.free_port()}")
    with helpers.gateway_process():
        status, body = a.call("POST", "/api/v1/policy/evaluate", CHECK, key=TENANT_ADMIN)
        assert (status, body["code"], body["unavailable"]) == \
            (503, "kernel_unavailable", "safety-kernel")
        assert headers_retry(a)
        status, body = a.call("GET", "/api/v1/policy/snapshots", key=READER)
        assert status == 503


def headers_retry(api: Api) -> bool:
    """A 503 from the policy routes says when to try again."""
    _, _, headers = helpers.call(helpers.event("POST", "/api/v1/policy/explain", CHECK,
                                               key=TENANT_ADMIN, tenant=api.tenant))
    return headers.get("Retry-After", "").isdigit()


def test_a_bundle_is_simulated_over_the_base_file_and_the_other_bundles(api):
    request = {"topic": "job.policytest.9", "job_id": "sim-1"}
    assert api.put("secops~sim", DENY_BUNDLE.format(n=9))[0] == 200  # a draft
    status, body = api.call("POST", "/api/v1/policy/bundles/secops~sim/simulate",
                            {"request": request}, key=TENANT_ADMIN)
    assert status == 200, body
    assert (body["decision"], body["rule_id"]) == ("DENY", "bundle-deny-9")
    assert "|cfg:" in body["policy_snapshot"]

    allow = "rules:\n  - id: sim-allow\n    match: {topics: [job.policytest.9]}\n" \
            "    decision: allow\n"
    status, body = api.call("POST", "/api/v1/policy/bundles/secops~sim/simulate",
                            {"request": request, "content": allow}, key=TENANT_ADMIN)
    assert (status, body["decision"], body["ruleId"]) == \
        (200, "ALLOW", "sim-allow")
    # Nothing was stored by simulating.
    assert {b["id"]: b["content"] for b in api.bundles()["bundles"]} == \
        {"secops/sim": DENY_BUNDLE.format(n=9)}

    status, body = api.call("POST", "/api/v1/policy/bundles/secops~none/simulate",
                            {"request": request}, key=TENANT_ADMIN)
    assert (status, body["error"]) == (404, "bundle not found")
    status, body = api.call("POST", "/api/v1/policy/bundles/secops~sim/simulate",
                            {"request": request, "content": "rules: [1"}, key=TENANT_ADMIN)
    assert (status, body["code"]) == (400, "POLICY_VALIDATION_FAILED")


def test_rules_come_from_enabled_bundles_with_their_source(api):
    api.put("secops~on", DENY_BUNDLE.format(n="on"), enabled=True)
    api.put("secops~off", DENY_BUNDLE.format(n="off"))
    status, body = api.call("GET", "/api/v1/policy/rules", key=READER)
    assert status == 200, body
    assert [(r["id"], r["source"]["bundle_id"]) for r in body["items"]] == \
        [("bundle-deny-on", "secops/on")]
    assert "errors" not in body
    status, body = api.call("GET", "/api/v1/policy/rules", key=READER,
                            query={"include_disabled": "true"})
    assert sorted(r["id"] for r in body["items"]) == ["bundle-deny-off", "bundle-deny-on"]


@pytest.fixture
def live_kernel(own_redis_env):
    """A kernel as deployed: the shipped file merged with the bundles in Redis, read
    again on ``sys.config.changed`` (its periodic read set to a minute, so a change seen
    within seconds came by the message)."""
    import redis

    from cordum.config import load_settings
    from cordum.safety.config_changes import ConfigChangeListener
    from cordum.safety.kernel import serve
    from cordum.safety.kernel_service import PolicyKernel
    from cordum.safety.live_policy import BundleReload, LivePolicy, RedisPolicyDocs
    from cordum.safety.policy_file import Policy
    from tests.conftest import NATS_URL

    client = redis.Redis.from_url(own_redis_env)
    live = LivePolicy(Policy(helpers.SHIPPED_POLICY), RedisPolicyDocs(client),
                      reload=BundleReload(interval_s=60))
    listener = ConfigChangeListener(
        load_settings(env={"REDIS_URL": own_redis_env, "NATS_URL": NATS_URL}), live.notify)
    listener.start()
    assert listener.subscribed.wait(5)
    live.start()
    addr = f"127.0.0.1:{helpers.free_port()}"
    server = serve(addr, PolicyKernel(live))
    try:
        yield addr
    finally:
        server.stop(grace=0)
        listener.close()
        live.close()
        client.close()


def test_a_published_bundle_is_in_force_at_the_kernel_within_seconds(unique, monkeypatch,
                                                                        live_kernel):
    import time

    a = Api(unique, monkeypatch, live_kernel)
    deny_default = "rules:\n  - id: live-deny-default\n    match: {topics: [job.default]}\n" \
                   "    decision: deny\n    reason: governed\n"

    def decided() -> tuple[str, str]:
        status, body = a.call("POST", "/api/v1/policy/simulate", CHECK, key=TENANT_ADMIN)
        assert status == 200, body
        return body["decision"], body["rule_id"]

    def wait_for(expected: tuple[str, str]) -> float:
        start = time.monotonic()
        while decided() != expected:
            assert time.monotonic() - start < 5, decided()
            time.sleep(0.02)
        return time.monotonic() - start

    with helpers.gateway_process():
        forget_policy()
        try:
            assert decided() == ("ALLOW", "default-topic-allow")
            assert a.put("secops~live", deny_default)[0] == 200  # a draft: nothing changes
            time.sleep(0.3)
            assert decided() == ("ALLOW", "default-topic-allow")
            status, published = a.call("POST", "/api/v1/policy/publish", {}, key=GOVERNOR)
            assert status == 200, published
            wait_for(("DENY", "live-deny-default"))
            status, body = a.call("POST", "/api/v1/policy/explain", CHECK, key=TENANT_ADMIN)
            assert "live-deny-default" in body["reason"]
            status, _ = a.call("POST", "/api/v1/policy/rollback",
                               {"snapshot_id": published["snapshot_before"]})
            assert status == 200
            wait_for(("ALLOW", "default-topic-allow"))
        finally:
            forget_policy()
