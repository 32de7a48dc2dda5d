"""Policy bundles on the local stack: a bundle published over HTTP changes what the running
safety kernel decides at submit within seconds, with no redeploy or restart, and a
rollback undoes it; both acts are in the policy audit."""

from __future__ import annotations

import time
import uuid

import pytest

LIVE_WITHIN_S = 5.0


def submit_status(stack, mark: str) -> tuple[int, dict]:
    # job.echo is allowed by the shipped policy; the label is what the bundle matches,
    # so no other test's jobs are touched while the bundle is in force.
    return stack.http("POST", "/api/v1/jobs", {"topic": "job.echo", "prompt": "policy e2e",
                                               "labels": {"e2e-mark": mark}})


def wait_for(stack, topic: str, want_denied: bool) -> float:
    """Seconds until a submit marked ``topic`` is (or is no longer) denied by the policy."""
    started = time.monotonic()
    while time.monotonic() - started < 30:
        status, body = submit_status(stack, topic)
        denied = status == 403 or body.get("state") == "DENIED" \
            or body.get("status") == "denied"
        if denied == want_denied:
            return time.monotonic() - started
        time.sleep(0.25)
    pytest.fail(f"{topic}: still {'allowed' if want_denied else 'denied'} after 30 s: "
                f"{status} {body}")


def test_a_published_bundle_denies_a_topic_at_submit_and_a_rollback_allows_it(stack):
    platform = stack.env.get("CORDUM_PLATFORM_KEY", "")
    if not platform:
        pytest.fail("CORDUM_PLATFORM_KEY unknown: `make up` writes it")
    as_owner = {"X-API-Key": platform}
    bundle_id = f"e2e/deny-{uuid.uuid4().hex[:8]}"
    topic = uuid.uuid4().hex[:12]
    content = (f"rules:\n  - id: {bundle_id.replace('/', '-')}\n"
               f"    match: {{topics: [job.echo], labels: {{e2e-mark: '{topic}'}}}}\n"
               f"    decision: deny\n    reason: denied by an e2e bundle\n")

    # Before: the job goes through (the shipped policy allows job.echo).
    assert wait_for(stack, topic, want_denied=False) < 1

    status, body = stack.http("PUT", f"/api/v1/policy/bundles/{bundle_id.replace('/', '~')}",
                              {"content": content, "message": "e2e"}, headers=as_owner)
    assert status == 200 and body["enabled"] is False, body
    status, published = stack.http("POST", "/api/v1/policy/publish",
                                   {"bundle_ids": [bundle_id], "message": "deny the topic"},
                                   headers=as_owner)
    assert status == 200, published
    assert published["snapshot_before"] != published["snapshot_after"]

    took = wait_for(stack, topic, want_denied=True)
    assert took <= LIVE_WITHIN_S, f"the kernel took {took:.1f} s to deny"
    status, job = submit_status(stack, topic)
    print(f"denied {took:.2f} s after publish: {status} {job}")

    status, rolled = stack.http("POST", "/api/v1/policy/rollback",
                                {"snapshot_id": published["snapshot_before"]},
                                headers=as_owner)
    assert status == 200, rolled
    took = wait_for(stack, topic, want_denied=False)
    assert took <= LIVE_WITHIN_S, f"the kernel took {took:.1f} s to allow again"

    status, audit = stack.http("GET", "/api/v1/policy/audit?limit=50", headers=as_owner)
    assert status == 200, audit
    actions = [(e["action"], e.get("actor_id")) for e in audit]
    assert ("publish", "local-policy-owner") in actions, actions
    assert ("rollback", "local-policy-owner") in actions, actions
    # A tenant's own admin may not change what governs every tenant.
    status, body = stack.http("POST", "/api/v1/policy/publish", {"bundle_ids": [bundle_id]})
    assert status == 403, body
    stack.http("DELETE", f"/api/v1/policy/bundles/{bundle_id.replace('/', '~')}",
               headers=as_owner)
