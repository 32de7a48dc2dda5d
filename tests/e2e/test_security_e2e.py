"""Findings 1 to 4 of the trust-boundary review, driven through the REST API URL of the
local stack: a forged approval, self-approval, quarantined output and hostile bodies."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
import redis

from tests.e2e.test_api_e2e import wait_state


def raw_call(stack, method: str, path: str, data: bytes, key: str | None = None
             ) -> tuple[int, dict, dict]:
    """Status, JSON body and headers of one request whose body is sent as it is."""
    req = urllib.request.Request(stack.api + path, data=data, method=method, headers={
        "X-API-Key": key or stack.key, "X-Tenant-ID": stack.tenant,
        "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            status, headers, text = resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as exc:
        status, headers, text = exc.code, dict(exc.headers), exc.read().decode()
    return status, json.loads(text), {k.lower(): v for k, v in headers.items()}


def gated(stack) -> tuple[str, dict]:
    status, body = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo.approval",
                                                       "prompt": "needs a human"})
    assert status == 200 and body["status"] == "approval_required", body
    status, job = stack.http("GET", f"/api/v1/jobs/{body['job_id']}")
    assert status == 200 and job["state"] == "APPROVAL_REQUIRED", job
    return body["job_id"], job


def test_1_approval_labels_from_a_client_are_refused(stack):
    # Given a gated job whose policy snapshot the submitter can read
    _, job = gated(stack)
    snapshot = job["safety_snapshot"]
    assert snapshot
    # When the same topic is submitted again carrying the approval the platform would write
    status, body = stack.http("POST", "/api/v1/jobs", {
        "topic": "job.echo.approval", "prompt": "needs a human",
        "labels": {"approval_granted": "true", "approval_snapshot": snapshot}})
    # Then it is refused before anything is stored
    assert (status, body["code"]) == (400, "reserved_label"), body


def test_2_the_submitter_cannot_approve_and_no_body_names_another_submitter(stack):
    status, body = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo", "prompt": "x",
                                                       "principal_id": "somebody-else"})
    assert status == 403, body
    job_id, _ = gated(stack)
    status, body = stack.http("POST", f"/api/v1/approvals/{job_id}/approve",
                              {"reason": "my own job"})
    assert (status, body["code"]) == (403, "self_approval_denied"), body
    status, body = stack.http("POST", f"/api/v1/approvals/{job_id}/approve",
                              {"reason": "reviewed"}, headers={"X-API-Key": stack.approver_key})
    assert status == 200, body
    job = stack.wait_terminal(job_id, 90)
    assert job["state"] == "SUCCEEDED", job
    meta = redis.Redis.from_url(stack.redis_url, decode_responses=True).hgetall(
        f"job:meta:{job_id}")
    assert meta["approved_by"] and meta["approved_by"] != meta["principal"], meta


def test_3_quarantined_output_is_never_served(stack):
    status, body = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo.quarantine",
                                                       "prompt": "harmless"})
    assert status == 200, body
    job = stack.wait_terminal(body["job_id"], 90)
    assert job["state"] == "OUTPUT_QUARANTINED", job
    assert job.get("result") is None and not job.get("result_ptr"), job
    status, body = stack.http("POST", "/api/v1/jobs", {
        "topic": "job.echo", "prompt": "-----BEGIN PRIVATE KEY----- MIIE..."})
    assert status == 200, body
    job = wait_state(stack, body["job_id"], "OUTPUT_QUARANTINED", 90)
    assert job.get("result") is None and not job.get("result_ptr"), job


@pytest.mark.parametrize("data", [b"[" * 100_000, b"\xff\xfe not utf-8", b"[1, 2]"],
                         ids=["deep", "not-utf8", "not-an-object"])
def test_4_hostile_bodies_get_a_json_400_with_a_request_id(stack, data):
    status, body, headers = raw_call(stack, "POST", "/api/v1/jobs", data)
    assert status == 400, body
    assert body["status"] == 400 and body["error"]
    assert headers.get("x-request-id")


def test_4_a_label_key_with_a_newline_is_refused(stack):
    status, body = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo", "prompt": "x",
                                                       "labels": {"a\nb": "c"}})
    assert status == 400, body
