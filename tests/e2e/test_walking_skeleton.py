"""The thin real path on LocalStack: HTTP -> API Gateway -> gateway Lambda -> NATS ->
bridge -> SQS -> submit Lambda -> echo worker -> NATS -> bridge -> SQS -> result Lambda."""

from __future__ import annotations

import base64
import json
import time
import uuid

import pytest
import redis

from cordum import protocol

pytestmark = pytest.mark.e2e


def test_http_job_reaches_succeeded_through_the_stack(stack):
    status, body = stack.http("POST", "/api/v1/jobs", {"topic": "job.echo", "prompt": "ping",
                                                       "labels": {"suite": "e2e"}})
    assert status == 200, body
    job = stack.wait_terminal(body["job_id"])
    assert job["state"] == "SUCCEEDED", job
    assert job["id"] == body["job_id"] and job["trace_id"] == body["trace_id"]
    assert job["topic"] == "job.echo" and job["tenant"] == stack.tenant
    assert job["result_ptr"] == f"redis://res:{body['job_id']}"
    # The echo worker read ctx:<id> and wrote what it read into res:<id>.
    assert job["result"]["echo"]["prompt"] == "ping"
    assert job["worker_id"].startswith("echo-")


def test_bad_input_over_http(stack):
    status, err = stack.http("POST", "/api/v1/jobs", raw=b"{nope")
    assert status == 400 and set(err) == {"error", "code", "status"}
    status, err = stack.http("POST", "/api/v1/jobs", {"labels": {}})
    assert status == 400 and "prompt" in err["error"]
    status, err = stack.http("POST", "/api/v1/jobs", {"prompt": "x"}, {"X-API-Key": "wrong"})
    assert status == 401 and err["code"] == "unauthorized"
    status, err = stack.http("GET", "/api/v1/jobs/x", headers={"X-API-Key": None})
    assert status == 401


def test_health_over_http(stack):
    status, body = stack.http("GET", "/health", headers={"X-API-Key": None})
    assert (status, body) == (200, {"status": "healthy", "redis": "ok", "nats": "ok"})


def test_unparseable_record_is_isolated_and_reaches_the_dlq(stack):
    sqs = stack.sqs()
    job_id = f"e2e-{uuid.uuid4()}"
    ctx = protocol.context_key(job_id)
    redis.Redis.from_url(stack.redis_url).set(ctx, json.dumps({"prompt": "direct"}), ex=600)
    good = protocol.packet(
        trace_id=job_id, sender_id="e2e",
        job_request=protocol.JobRequest(job_id=job_id, topic="job.echo", tenant_id=stack.tenant,
                                        context_ptr=protocol.pointer(ctx)),
    )
    marker = f"not a packet {uuid.uuid4()}"
    # Given a batch holding one poison record and one good job request
    sent = sqs.send_message_batch(QueueUrl=stack.outputs["SubmitQueueUrl"], Entries=[
        {"Id": "bad", "MessageBody": marker},
        {"Id": "good", "MessageBody": base64.b64encode(good.SerializeToString()).decode()},
    ])
    assert not sent.get("Failed")
    # Then the good job runs to SUCCEEDED (the poison record did not fail the batch)
    job = stack.wait_terminal(job_id, timeout=90)
    assert job["state"] == "SUCCEEDED"
    # And the poison record ends in the submit DLQ after the redrive count
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        got = sqs.receive_message(QueueUrl=stack.outputs["SubmitDlqUrl"],
                                  MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                  AttributeNames=["ApproximateReceiveCount"])
        for msg in got.get("Messages", []):
            if msg["Body"] == marker:
                sqs.delete_message(QueueUrl=stack.outputs["SubmitDlqUrl"],
                                   ReceiptHandle=msg["ReceiptHandle"])
                return
        time.sleep(1)
    pytest.fail("the unparseable record never reached the submit DLQ")
