"""The rest of Cordum's core API on the local stack, over HTTP through API Gateway: an
artifact read by a worker through its pointer, a topic's input schema refusing a submit
with the path, a team's config document in a job's effective config and applied by the
kernel, a lock contended by two clients with one holder at a time, and a remediation
the policy offered applied as a new job."""

from __future__ import annotations

import base64
import threading
import time
import uuid

import pytest

LIVE_WITHIN_S = 10.0


def mark() -> str:
    return uuid.uuid4().hex[:10]


def test_a_worker_reads_an_artifact_through_its_pointer(stack):
    content = f"artifact for the worker {mark()}".encode()
    status, made = stack.http("POST", "/api/v1/artifacts", {
        "content_base64": base64.b64encode(content).decode(), "content_type": "text/plain",
        "retention": "short", "labels": {"e2e": "artifact"}})
    assert status == 200, made
    ptr = made["artifact_ptr"]
    assert ptr.startswith("redis://art:") and made["size_bytes"] == len(content), made

    status, read = stack.http("GET", "/api/v1/memory?ptr=" + ptr)
    assert status == 200, read
    status, job = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo",
                                                      "prompt": "read the artifact",
                                                      "context": {"artifact_ptr": ptr}})
    assert status == 200, job
    done = stack.wait_terminal(job["job_id"])
    assert done["state"] == "SUCCEEDED", done
    echoed = done["result"]["artifact"]
    assert echoed["artifact_ptr"] == ptr, echoed
    assert base64.b64decode(echoed["content_base64"]) == content

    # Another tenant's key cannot read it, and learns nothing from the answer.
    if stack.other_key:
        other = {"X-API-Key": stack.other_key, "X-Tenant-ID": stack.other_tenant}
        status, hidden = stack.http("GET", "/api/v1/memory?ptr=" + ptr, headers=other)
        missing_ptr = "redis://art:" + str(uuid.uuid4())
        status2, missing = stack.http("GET", "/api/v1/memory?ptr=" + missing_ptr,
                                      headers=other)
        assert (status, hidden) == (status2, missing) and status == 404, (hidden, missing)


def test_a_registered_input_schema_refuses_a_submit_with_the_path(stack):
    schema_id, topic = f"e2e-{mark()}", f"job.e2e.schema{mark()}"
    schema = {"type": "object", "required": ["amount"],
              "properties": {"amount": {"type": "integer", "maximum": 100}}}
    status, out = stack.http("POST", "/api/v1/schemas", {"id": schema_id, "schema": schema})
    assert status == 204, out
    status, out = stack.http("POST", "/api/v1/topics", {"name": topic, "pool": "default",
                                                        "input_schema_id": schema_id})
    assert status in (200, 201), out
    try:
        status, out = stack.http("POST", "/api/v1/jobs", {"topic": topic, "prompt": "pay",
                                                          "context": {"amount": 1000}})
        assert (status, out.get("code")) == (400, "schema_validation_failed"), out
        assert out["violations"][0]["path"] == "$.context.amount", out
        assert "$.context.amount" in out["error"]
        status, got = stack.http("GET", f"/api/v1/schemas/{schema_id}")
        assert status == 200 and got["schema"] == schema, got
    finally:
        stack.http("DELETE", f"/api/v1/topics/{topic}")
        stack.http("DELETE", f"/api/v1/schemas/{schema_id}")


def test_a_team_config_value_is_in_the_job_and_the_kernel_applies_it(stack):
    team, value = f"e2e-team-{mark()}", mark()
    status, out = stack.http("PUT", "/api/v1/config", {
        "scope": "team", "scope_id": team,
        "data": {"e2e": {"mark": value}, "safety": {"denied_topics": ["job.echo"]}}})
    assert status == 204, out
    status, effective = stack.http("GET", f"/api/v1/config/effective?team_id={team}")
    assert status == 200 and effective["data"]["e2e"] == {"mark": value}, effective

    # Without the team the topic runs; with it the kernel denies it, by the config's rule.
    status, plain = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo",
                                                        "prompt": "no team"})
    assert status == 200, plain
    status, denied = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo",
                                                         "prompt": "team job",
                                                         "team_id": team})
    assert (status, denied.get("code")) == (403, "safety_denied"), denied
    assert "effective config" in denied["error"], denied
    status, job = stack.http("GET", f"/api/v1/jobs/{denied['job_id']}")
    assert status == 200, job
    assert job["effective_config"]["data"]["e2e"] == {"mark": value}, job
    assert job["safety_rule_id"] == "effective-config", job
    # The team's document is the caller's tenant's alone.
    if stack.other_key:
        other = {"X-API-Key": stack.other_key, "X-Tenant-ID": stack.other_tenant}
        status, out = stack.http("GET", f"/api/v1/config/effective?team_id={team}",
                                 headers=other)
        assert status in (200, 403), out
        if status == 200:
            assert "e2e" not in out.get("data", {}), out


def test_a_lock_contended_by_two_clients_has_one_holder_at_a_time(stack):
    resource = f"e2e/lock/{mark()}"
    keys = {"a": stack.key, "b": stack.approver_key}
    rounds = 8
    outcomes: list[dict[str, int]] = [{} for _ in range(rounds)]
    barrier = threading.Barrier(2)
    tokens: list[int] = []

    def contend(name: str) -> None:
        for i in range(rounds):
            barrier.wait(timeout=30)
            status, lock = stack.http("POST", "/api/v1/locks/acquire",
                                      {"resource": resource, "owner": f"client-{name}",
                                       "mode": "EXCLUSIVE", "ttl_ms": 10_000},
                                      headers={"X-API-Key": keys[name]})
            outcomes[i][name] = status
            barrier.wait(timeout=30)  # both answers are in before the winner lets go
            if status == 200:
                tokens.append(int(lock["fencing_token"]))
                status, released = stack.http("POST", "/api/v1/locks/release",
                                              {"resource": resource,
                                               "owner": f"client-{name}"},
                                              headers={"X-API-Key": keys[name]})
                assert status == 200 and released["released"] is True, released

    threads = [threading.Thread(target=contend, args=(n,)) for n in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for i, outcome in enumerate(outcomes):
        assert sorted(outcome.values()) == [200, 409], (i, outcomes)
    assert tokens == sorted(tokens) and len(set(tokens)) == rounds, tokens
    status, out = stack.http("GET", "/api/v1/locks?resource=" + resource)
    assert status == 404, out


def test_a_remediation_the_policy_offered_is_applied_as_a_new_job(stack):
    platform = stack.env.get("CORDUM_PLATFORM_KEY", "")
    if not platform:
        pytest.fail("CORDUM_PLATFORM_KEY unknown: `make up` writes it")
    as_owner = {"X-API-Key": platform}
    label = mark()
    bundle_id = f"e2e/remedy-{label}"
    path = f"/api/v1/policy/bundles/{bundle_id.replace('/', '~')}"
    content = (f"rules:\n  - id: remedy-{label}\n"
               f"    match: {{topics: [job.echo], labels: {{e2e-remedy: '{label}'}}}}\n"
               f"    decision: deny\n    reason: marked jobs must drop the mark\n"
               f"    remediations:\n      - id: drop-mark\n"
               f"        title: Run it without the mark\n"
               f"        remove_labels: [e2e-remedy]\n")
    status, body = stack.http("PUT", path, {"content": content, "message": "e2e"},
                              headers=as_owner)
    assert status == 200, body
    status, published = stack.http("POST", "/api/v1/policy/publish",
                                   {"bundle_ids": [bundle_id], "message": "remedy e2e"},
                                   headers=as_owner)
    assert status == 200, published
    try:
        deadline = time.monotonic() + LIVE_WITHIN_S
        while True:
            status, denied = stack.http("POST", "/api/v1/jobs", {
                "topic": "job.echo", "prompt": "remediate me",
                "labels": {"e2e-remedy": label}})
            if status == 403 or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        assert status == 403, denied
        status, job = stack.http("GET", f"/api/v1/jobs/{denied['job_id']}")
        offered = [r["id"] for r in job["safety_remediations"]]
        assert offered == ["drop-mark"], job

        status, applied = stack.http("POST", f"/api/v1/jobs/{denied['job_id']}/remediate",
                                     {"remediation_id": "drop-mark"})
        assert status == 200, applied
        assert applied["trace_id"] == denied["trace_id"], applied
        done = stack.wait_terminal(applied["job_id"])
        assert done["state"] == "SUCCEEDED", done
        assert done["labels"].get("remediation_of") == denied["job_id"], done
        assert "e2e-remedy" not in done["labels"], done
        status, trace = stack.http("GET", f"/api/v1/traces/{denied['trace_id']}")
        assert status == 200, trace
        assert {j["id"] for j in trace} == {denied["job_id"], applied["job_id"]}, trace
    finally:
        stack.http("POST", "/api/v1/policy/rollback",
                   {"snapshot_id": published["snapshot_before"]}, headers=as_owner)
        stack.http("DELETE", path, headers=as_owner)
