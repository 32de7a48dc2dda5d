"""Every governance act is one audit event, written with the act, naming the key that
acted; an allowed submit adds none. On the real Redis, NATS and safety kernel, through
the gateway function as API Gateway calls it.

Acts and how each gets its event (docs/audit.md, "What is recorded"):

- in the act's own script: a gated or denied submit, an approval, a rejection, a job
  cancelled, a DLQ retry, a run started, rerun or cancelled, a definition deleted, a
  policy change (the system chain, tenant ``*``);
- staged in an outbox by the act's transaction, then drained: a definition written,
  a DLQ entry deleted;
- appended alone (nothing else is written): a throttled submit, a key that failed to
  authenticate (the system chain), a caller rate limited (sampled).

The output policy's quarantine and redaction are checked where the result path is
(tests/integration/test_engine_output.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from cordum import runtime
from cordum.gateway.policy.store import AUDIT_KEY, PROPOSALS_KEY, SNAPSHOTS_KEY
from cordum.safety.bundles import POLICY_DOC_KEY
from cordum.store.audit import audit_keys, stream_key
from cordum.store.audit_trail import OUTBOX_TENANTS, SAMPLE_PREFIX, SYSTEM_TENANT, outbox_key
from cordum.store.audit_verify import verify_chain
from tests import helpers
from tests.integration import workflow_api
from tests.integration.test_gateway_approvals import APPROVER, SUBMITTER, Api

DENIED, THROTTLED, GATED, ALLOWED = ("job.echo.denied", "job.echo.throttled",
                                     "job.echo.approval", "job.default")


def events(tenant: str) -> list[dict[str, Any]]:
    """The tenant's chain, oldest first (its events as written)."""
    entries = runtime.run(runtime.redis_client().xrange(stream_key(tenant)))
    return [json.loads(fields[b"event"]) for _, fields in entries]


def forget_chain(tenant: str) -> None:
    redis = runtime.redis_client()
    runtime.run(redis.delete(*audit_keys(tenant), outbox_key(tenant)))
    runtime.run(redis.srem(OUTBOX_TENANTS, tenant))


@pytest.fixture
def api(unique, kernel, monkeypatch):
    a = Api(unique, kernel, monkeypatch)
    with helpers.gateway_process():
        try:
            yield a
        finally:
            forget_chain(a.tenant)
            a.cleanup()


def only(tenant: str) -> dict[str, Any]:
    found = events(tenant)
    assert len(found) == 1, [e["type"] for e in found]
    return found[0]


# -- submits ---------------------------------------------------------------------------

def test_an_allowed_submit_adds_no_event(api):
    api.submit(ALLOWED)
    assert events(api.tenant) == []


def test_a_denied_submit_is_one_event_written_with_the_denial(api):
    status, body, _ = api.call("POST", "/api/v1/jobs", {"topic": DENIED, "prompt": "p"},
                               key=SUBMITTER)
    assert status == 403, body
    api.jobs.append(body["job_id"])
    event = only(api.tenant)
    assert (event["type"], event["severity"], event["actor"], event["job_id"]) == \
        ("job.submit.denied", "HIGH", "alice", body["job_id"])
    assert event["extra"]["rule_id"] == "example-echo-denied" and event["snapshot"]


def test_a_throttled_submit_is_one_event_though_nothing_is_stored(api):
    status, body, _ = api.call("POST", "/api/v1/jobs", {"topic": THROTTLED, "prompt": "p"},
                               key=SUBMITTER)
    assert status == 429, body
    event = only(api.tenant)
    assert (event["type"], event["actor"], event["extra"]["topic"]) == \
        ("job.submit.throttled", "alice", THROTTLED)


def test_a_gated_submit_then_its_approval_are_two_events(api):
    job_id = api.gated()
    gated = only(api.tenant)
    assert (gated["type"], gated["actor"], gated["job_id"]) == \
        ("job.submit.gated", "alice", job_id)
    status, body, _ = api.call("POST", f"/api/v1/approvals/{job_id}/approve",
                               {"reason": "looks fine", "note": "n"}, key=APPROVER)
    assert status == 200, body
    gated_again, approved = events(api.tenant)
    assert gated_again == gated
    assert (approved["type"], approved["actor"], approved["job_id"], approved["reason"]) == \
        ("approval.approve", "bob", job_id, "looks fine")
    meta = api.meta(job_id)
    assert approved["snapshot"] == {"policy_snapshot": meta["approval_policy_snapshot"],
                                    "job_hash": meta["safety_job_hash"]}
    assert approved["extra"]["submitted_by"] == "alice"


def test_a_rejection_is_one_event_and_a_refused_one_none(api):
    job_id = api.gated()
    # The submitter may not decide: refused, so nothing is recorded.
    status, _, _ = api.call("POST", f"/api/v1/approvals/{job_id}/reject", {"reason": "x"},
                            key=SUBMITTER)
    assert status == 403
    status, body, _ = api.call("POST", f"/api/v1/approvals/{job_id}/reject",
                               {"reason": "too risky"}, key=APPROVER)
    assert status == 200, body
    found = [(e["type"], e["actor"]) for e in events(api.tenant)]
    assert found == [("job.submit.gated", "alice"), ("approval.reject", "bob")]
    assert events(api.tenant)[1]["reason"] == "too risky"


def test_a_cancelled_job_is_one_event_and_a_second_cancel_adds_none(api):
    job_id = api.submit(ALLOWED)
    status, body, _ = api.call("POST", f"/api/v1/jobs/{job_id}/cancel", key=APPROVER)
    assert status == 200, body
    status, _, _ = api.call("POST", f"/api/v1/jobs/{job_id}/cancel", key=APPROVER)
    assert status == 200
    event = only(api.tenant)
    assert (event["type"], event["actor"], event["job_id"]) == ("job.cancel", "bob", job_id)


# -- the DLQ -----------------------------------------------------------------------------

def denied_entry(api: Api) -> str:
    status, body, _ = api.call("POST", "/api/v1/jobs", {"topic": DENIED, "prompt": "p"},
                               key=SUBMITTER)
    assert status == 403, body
    api.jobs.append(body["job_id"])
    return str(body["job_id"])


def test_a_dlq_retry_is_one_event_naming_the_new_job(api):
    job_id = denied_entry(api)
    status, body, _ = api.call("POST", f"/api/v1/dlq/{job_id}/retry", key=APPROVER)
    assert status == 200, body
    new_id = body["job_id"]
    api.jobs.append(new_id)
    _, retried = events(api.tenant)
    assert (retried["type"], retried["actor"], retried["job_id"]) == \
        ("dlq.retry", "bob", job_id)
    assert retried["extra"]["new_job_id"] == new_id


def test_a_dlq_delete_is_one_event_through_the_outbox(api):
    job_id = denied_entry(api)
    status, _, _ = api.call("DELETE", f"/api/v1/dlq/{job_id}", key=APPROVER)
    assert status in (200, 204)
    _, deleted = events(api.tenant)
    assert (deleted["type"], deleted["actor"], deleted["job_id"]) == \
        ("dlq.delete", "bob", job_id)
    redis = runtime.redis_client()
    assert runtime.run(redis.llen(outbox_key(api.tenant))) == 0  # drained with the act


# -- keys ----------------------------------------------------------------------------------

def forget_samples() -> None:
    """The sampling counters of this minute (other tests' refusals count in them)."""
    redis = runtime.redis_client()
    found = runtime.run(redis.keys(f"{SAMPLE_PREFIX}*"))
    if found:
        runtime.run(redis.delete(*found))


def test_a_key_that_fails_is_one_event_in_the_system_chain_never_the_key(api):
    redis = runtime.redis_client()
    forget_samples()
    before = runtime.run(redis.xlen(stream_key(SYSTEM_TENANT)))
    wrong = f"no-such-key-{api.unique}"
    status, _, _ = helpers.call(helpers.event("GET", "/api/v1/jobs", key=wrong,
                                              tenant=api.tenant))
    assert status == 401
    # The same credential again within the minute: sampled out.
    assert helpers.call(helpers.event("GET", "/api/v1/jobs", key=wrong,
                                      tenant=api.tenant))[0] == 401
    added = events(SYSTEM_TENANT)[before:]
    mine = [e for e in added if e["extra"].get("claimed_tenant") == api.tenant]
    assert len(mine) == 1, added
    event = mine[0]
    assert (event["type"], event["actor"], event["extra"]["status"]) == ("auth.failed", "", 401)
    assert wrong not in json.dumps(event) and len(event["actor_key"]) == 32
    forget_samples()


def test_a_caller_over_its_rate_limit_is_one_event(api, monkeypatch):
    from cordum import config
    from cordum.gateway.core import deps

    monkeypatch.setenv("CORDUM_RATE_LIMIT_RPS", "0.01")
    monkeypatch.setenv("CORDUM_RATE_LIMIT_BURST", "1")
    config.settings.cache_clear()
    deps.reset()
    forget_samples()
    statuses = [api.call("GET", "/api/v1/jobs", key=APPROVER)[0] for _ in range(4)]
    assert statuses[0] == 200 and statuses[1:] == [429, 429, 429]
    event = only(api.tenant)
    assert (event["type"], event["actor"]) == ("auth.rate_limited", "bob")
    forget_samples()


def test_the_acts_chain_verifies(api):
    job_id = api.gated()
    api.call("POST", f"/api/v1/approvals/{job_id}/approve", {"reason": "ok"}, key=APPROVER)
    result = runtime.run(verify_chain(runtime.redis_client(), api.tenant))
    assert (result.status, result.total_events, result.gaps) == ("ok", 2, ())


# -- workflows -------------------------------------------------------------------------------

@pytest.fixture
def wf(unique, monkeypatch):
    for world in workflow_api.world(unique, monkeypatch):
        try:
            yield world
        finally:
            forget_chain(world.tenant)


def test_definitions_written_and_deleted_are_one_event_each(wf):
    wf_id = wf.saved()
    wf.saved()  # written again: an update
    status, _, _ = wf.call("DELETE", f"/api/v1/workflows/{wf_id}")
    assert status in (200, 204)
    assert wf.call("DELETE", f"/api/v1/workflows/{wf_id}")[0] == 404  # nothing deleted
    found = [(e["type"], e["actor"], e["workflow_id"]) for e in events(wf.tenant)]
    assert found == [("workflow.create", "ada", wf_id), ("workflow.update", "ada", wf_id),
                     ("workflow.delete", "ada", wf_id)]


def test_runs_started_rerun_and_cancelled_are_one_event_each(wf):
    wf_id = wf.saved()
    run_id = wf.start(wf_id, key=workflow_api.WRITER)
    status, body, _ = wf.call("POST", f"/api/v1/workflow-runs/{run_id}/rerun", {})
    assert status == 200, body
    rerun_id = body["run_id"]
    status, body, _ = wf.call("POST", f"/api/v1/workflows/{wf_id}/runs/{run_id}/cancel")
    assert status in (200, 202, 204), body
    found = [(e["type"], e["actor"], e.get("run_id")) for e in events(wf.tenant)][1:]
    assert found == [("run.start", "wes", run_id), ("run.rerun", "ada", rerun_id),
                     ("run.cancel", "ada", run_id)]
    # Cancelled again: the run is over, nothing is written, nothing recorded.
    wf.call("POST", f"/api/v1/workflows/{wf_id}/runs/{run_id}/cancel")
    assert len(events(wf.tenant)) == 4


# -- the policy --------------------------------------------------------------------------------

def test_a_policy_change_is_one_event_in_the_system_chain(unique, monkeypatch):
    from tests.integration.test_gateway_policy import DENY_BUNDLE, ROOT
    from tests.integration.test_gateway_policy import Api as PolicyApi

    papi = PolicyApi(unique, monkeypatch)
    redis = runtime.redis_client()
    with helpers.gateway_process():
        runtime.run(redis.delete(POLICY_DOC_KEY, SNAPSHOTS_KEY, AUDIT_KEY, PROPOSALS_KEY))
        try:
            before = runtime.run(redis.xlen(stream_key(SYSTEM_TENANT)))
            status, body = papi.put(f"secops~audit-{unique}", DENY_BUNDLE.format(n=unique),
                                    message="why not", key=ROOT)
            assert status == 200, body
            status, body = papi.call("PUT", "/api/v1/policy/bundles/secops~x",
                                     {"content": "rules: 7"}, key=ROOT)
            assert status == 400  # refused: nothing recorded
            added = events(SYSTEM_TENANT)[before:]
            assert [(e["type"], e["actor"], e["reason"]) for e in added] == \
                [("policy.edit", "root-ops", "why not")]
            assert added[0]["extra"]["resource_id"] == f"secops/audit-{unique}"

            status, published = papi.call("POST", "/api/v1/policy/publish",
                                          {"message": "go"}, key=ROOT)
            assert status == 200, published
            status, rolled = papi.call("POST", "/api/v1/policy/rollback",
                                       {"snapshot_id": published["snapshot_before"],
                                        "message": "undo"}, key=ROOT)
            assert status == 200, rolled
            added = events(SYSTEM_TENANT)[before + 1:]
            assert [(e["type"], e["actor"], e["reason"]) for e in added] == \
                [("policy.publish", "root-ops", "go"), ("policy.rollback", "root-ops", "undo")]
            assert added[0]["snapshot"] == {"before": published["snapshot_before"],
                                            "after": published["snapshot_after"]}
            assert added[1]["snapshot"]["after"] == published["snapshot_before"]
        finally:
            runtime.run(redis.delete(POLICY_DOC_KEY, SNAPSHOTS_KEY, AUDIT_KEY, PROPOSALS_KEY))
