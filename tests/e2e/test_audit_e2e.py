"""The audit trail on the local stack: a gated job approved, a run cancelled and a DLQ
entry retried are each one event in ``/api/v1/audit/events`` naming the key that acted;
verify is ok; and the export tick puts the chain in the bucket, in order."""

from __future__ import annotations

import time
import uuid

import pytest

EXPORT_WITHIN_S = 150.0
"""The local export tick runs every minute; a tick may be running as the test starts."""


def audit_events(stack, **query: str) -> list[dict]:
    qs = "&".join(f"{k}={v}" for k, v in {"limit": "200", **query}.items())
    status, page = stack.http("GET", f"/api/v1/audit/events?{qs}")
    assert status == 200, page
    return list(page["items"])


def the_event(stack, type_: str, **match: str) -> dict:
    found = [e for e in audit_events(stack, type=type_)
             if all(e.get(k) == v for k, v in match.items())]
    assert len(found) == 1, (type_, match, found)
    return found[0]


def test_approve_cancel_retry_are_audited_verified_and_exported(stack):
    approver = {"X-API-Key": stack.approver_key}

    # A gated job, approved by the second key.
    status, body = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo.approval",
                                                       "prompt": "audit e2e"})
    assert status == 200 and body.get("status") == "approval_required", body
    gated = body["job_id"]
    status, body = stack.http("POST", f"/api/v1/approvals/{gated}/approve",
                              {"reason": "audited"}, headers=approver)
    assert status == 200, body

    # A run that waits a long time, cancelled.
    workflow_id = f"audit-e2e-{uuid.uuid4().hex[:8]}"
    status, body = stack.http("POST", "/api/v1/workflows", {
        "id": workflow_id, "name": "audit e2e",
        "steps": {"wait": {"type": "delay", "delay_sec": 600}}})
    assert status == 201, body
    try:
        status, body = stack.http("POST", f"/api/v1/workflows/{workflow_id}/runs", {})
        assert status == 200, body
        run_id = body["run_id"]
        deadline = time.monotonic() + 30
        while True:
            status, body = stack.http(
                "POST", f"/api/v1/workflows/{workflow_id}/runs/{run_id}/cancel",
                headers=approver)
            if status != 409 or time.monotonic() > deadline:  # 409: being advanced
                break
            time.sleep(0.5)
        assert status in (200, 202, 204), body
    finally:
        stack.http("DELETE", f"/api/v1/workflows/{workflow_id}")

    # A denied job's DLQ entry, retried.
    status, body = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo.denied",
                                                       "prompt": "audit e2e"})
    assert status == 403, body
    denied = body["job_id"]
    status, body = stack.http("POST", f"/api/v1/dlq/{denied}/retry", headers=approver)
    assert status == 200, body

    approved = the_event(stack, "approval.approve", job_id=gated)
    cancelled = the_event(stack, "run.cancel", run_id=run_id)
    retried = the_event(stack, "dlq.retry", job_id=denied)
    for event in (approved, cancelled, retried):
        assert event["actor"] == "local-approver", event
    assert approved["reason"] == "audited" and approved["snapshot"]["job_hash"]

    status, verified = stack.http("GET", "/api/v1/audit/verify")
    assert status == 200, verified
    assert verified["status"] == "ok" and verified["gaps"] == [], verified
    last = verified["last_seq"]
    assert last >= retried["seq"]

    # The export tick writes the chain to the bucket, in order, up to these events.
    import boto3

    s3 = boto3.client("s3", endpoint_url=stack.localstack, region_name="us-east-1",
                      aws_access_key_id="test", aws_secret_access_key="test")
    bucket = stack.env.get("CORDUM_AUDIT_BUCKET") or stack.outputs.get("AuditBucketName")
    assert bucket, "the audit bucket is named in .cordum/local.env or the stack's outputs"
    deadline = time.monotonic() + EXPORT_WITHIN_S
    exported_to = 0
    while time.monotonic() < deadline:
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"audit/{stack.tenant}/")
        names = sorted(o["Key"] for o in listed.get("Contents", []))
        exported_to = max((int(n.rsplit("-", 1)[1].split(".")[0]) for n in names), default=0)
        if exported_to >= retried["seq"]:
            break
        time.sleep(2)
    else:
        pytest.fail(f"the chain of {stack.tenant} exported to seq {exported_to}, "
                    f"not {retried['seq']}, after {EXPORT_WITHIN_S:.0f} s")
    firsts = [int(n.rsplit("/", 1)[1].split("-")[0]) for n in names]
    assert firsts == sorted(firsts) and firsts[0] == 1, names
