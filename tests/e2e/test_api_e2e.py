"""The gateway API and the output policy through the REST API URL of the local stack:
throttle, approve and reject, DLQ retry, quarantined output, the OpenAPI document."""

from __future__ import annotations

import json
import time

import redis

from tests.e2e.conftest import TERMINAL


def wait_state(stack, job_id: str, state: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    job: dict = {}
    while time.monotonic() < deadline:
        _, job = stack.http("GET", f"/api/v1/jobs/{job_id}")
        if job.get("state") == state:
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} not {state} after {timeout}s: {job}")


def dlq_entry(stack, job_id: str) -> dict:
    raw = redis.Redis.from_url(stack.redis_url).get(f"dlq:entry:{job_id}")
    assert raw is not None, f"no DLQ entry for {job_id}"
    return json.loads(raw)


def test_throttled_submit_gets_429_with_retry_after_and_stores_nothing(stack):
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        stack.api + "/api/v1/jobs", method="POST",
        data=json.dumps({"topic": "job.echo.throttled", "prompt": "x"}).encode(),
        headers={"X-API-Key": stack.key, "X-Tenant-ID": stack.tenant,
                 "Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=30)
        raise AssertionError("expected 429")
    except urllib.error.HTTPError as exc:
        status, headers, body = exc.code, exc.headers, json.loads(exc.read())
    assert status == 429 and headers["Retry-After"] == "30"
    assert body["status"] == 429 and "job_id" not in body


def test_approval_required_then_approved_runs(stack):
    status, body = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo.approval",
                                                       "prompt": "needs a human"})
    assert status == 200, body
    assert body["status"] == "approval_required"
    job_id = body["job_id"]
    assert stack.http("GET", f"/api/v1/jobs/{job_id}")[1]["state"] == "APPROVAL_REQUIRED"
    status, listed = stack.http("GET", "/api/v1/approvals?limit=200")
    assert status == 200 and job_id in {i["job"]["id"] for i in listed["items"]}
    status, out = stack.http("POST", f"/api/v1/approvals/{job_id}/approve",
                             {"reason": "looked at it", "note": "e2e"},
                             headers={"X-API-Key": stack.approver_key})
    assert status == 200, out
    assert out["job_id"] == job_id
    job = stack.wait_terminal(job_id, 90)
    assert job["state"] == "SUCCEEDED", job
    # Approving again is a no-op that says so.
    status, again = stack.http("POST", f"/api/v1/approvals/{job_id}/approve",
                               {"reason": "twice"}, headers={"X-API-Key": stack.approver_key})
    assert status == 200 and again["status"] == "already_approved"


def test_approval_required_then_rejected_is_denied(stack):
    status, body = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo.approval",
                                                       "prompt": "will be rejected"})
    assert status == 200 and body["status"] == "approval_required", body
    job_id = body["job_id"]
    status, out = stack.http("POST", f"/api/v1/approvals/{job_id}/reject",
                             {"reason": "not today"}, headers={"X-API-Key": stack.approver_key})
    assert (status, out) == (200, {"job_id": job_id})
    job = stack.wait_terminal(job_id)
    assert job["state"] == "DENIED"
    assert dlq_entry(stack, job_id)["reason_code"] == "approval_rejected"
    # Nothing runs it later.
    time.sleep(3)
    assert stack.http("GET", f"/api/v1/jobs/{job_id}")[1]["state"] == "DENIED"


def test_dlq_retry_resubmits_a_failed_job(stack):
    status, body = stack.http("POST", "/api/v1/jobs", {
        "topic": "job.echo", "prompt": "fail once", "labels": {"echo.fail": "true"}})
    assert status == 200, body
    job_id = body["job_id"]
    assert stack.wait_terminal(job_id)["state"] == "FAILED"
    status, entries = stack.http("GET", "/api/v1/dlq?limit=500")
    assert status == 200 and job_id in {e["job_id"] for e in entries}
    status, out = stack.http("POST", f"/api/v1/dlq/{job_id}/retry")
    assert status == 200, out
    new_id = out["job_id"]
    assert new_id.startswith(f"{job_id}-retry-")
    # The retry runs like any job (the worker is told to fail again, so it does).
    retried = stack.wait_terminal(new_id, 90)
    assert retried["state"] in TERMINAL and retried["labels"]["retry"] == "true"
    assert stack.http("POST", f"/api/v1/dlq/{job_id}/retry")[0] == 404


def test_output_quarantined_by_the_metadata_check(stack):
    status, body = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo.quarantine",
                                                       "prompt": "harmless"})
    assert status == 200, body
    job = stack.wait_terminal(body["job_id"], 90)
    assert job["state"] == "OUTPUT_QUARANTINED", job
    assert job.get("output_decision") == "QUARANTINE"
    entry = dlq_entry(stack, body["job_id"])
    assert (entry["reason_code"], entry["status"]) == ("output_quarantined", "DENIED")


def test_output_quarantined_by_the_content_scan(stack):
    status, body = stack.http("POST", "/api/v1/jobs", {
        "topic": "job.echo", "prompt": "-----BEGIN PRIVATE KEY----- MIIE..."})
    assert status == 200, body
    job = wait_state(stack, body["job_id"], "OUTPUT_QUARANTINED", 90)
    assert job["output_safety"]["phase"] == "async"
    assert dlq_entry(stack, body["job_id"])["reason_code"] == "output_quarantined_async"


def test_clean_output_is_checked_and_stays_succeeded(stack):
    status, body = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo", "prompt": "hi"})
    assert status == 200, body
    job = stack.wait_terminal(body["job_id"], 90)
    assert job["state"] == "SUCCEEDED" and job.get("output_decision") == "ALLOW"


def test_lists_workers_status_and_openapi_over_the_rest_api(stack):
    status, body = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo", "prompt": "list"})
    assert status == 200
    stack.wait_terminal(body["job_id"], 90)
    status, page = stack.http("GET", "/api/v1/jobs?state=SUCCEEDED&limit=200")
    assert status == 200 and body["job_id"] in {j["id"] for j in page["items"]}
    status, workers = stack.http("GET", "/api/v1/workers")
    assert status == 200 and any(w["online"] for w in workers["items"])
    status, info = stack.http("GET", "/api/v1/status")
    assert status == 200 and info["redis"]["connected"] and info["nats"]["connected"]
    status, doc = stack.http("GET", "/api/v1/openapi.json", headers={"X-API-Key": None})
    assert status == 200 and doc["openapi"].startswith("3.0")
    assert "/api/v1/approvals/{job_id}/approve" in doc["paths"]
