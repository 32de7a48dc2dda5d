"""A job's result past the inline limit is served by pointer, never inline (real Redis,
API Gateway proxy events into the gateway): Lambda answers at most 6 MB, so an inline
result of a few MB made GET /api/v1/jobs/{id} answer 502 every time."""

from __future__ import annotations

import json

import pytest

from cordum import protocol, runtime
from cordum.gateway.jobs import views
from cordum.store.jobs import JobState, meta_key
from tests.helpers import call, event, gateway_process
from tests.integration.test_gateway_reads import World, configure

KEY = "large-result-key"
LAMBDA_RESPONSE_LIMIT = 6 * 1024 * 1024
"""Lambda's synchronous response payload limit (6 MB)."""


@pytest.fixture
def world(monkeypatch, unique):
    w = World(unique)
    configure(monkeypatch, w)
    monkeypatch.setenv("CORDUM_API_KEYS", json.dumps(
        [{"key": KEY, "tenant": w.tenant, "role": "admin"}]))
    monkeypatch.setenv("OUTPUT_POLICY_ENABLED", "false")
    with gateway_process():
        yield w
        if w.job_ids:
            runtime.run(w.redis.delete(*[protocol.result_key(j) for j in w.job_ids]))
    w.cleanup()


def succeeded_with(world: World, result: str) -> str:
    """A SUCCEEDED job of the world's tenant whose stored result is `result`."""
    job_id = world.job()
    runtime.run(world.redis.set(protocol.result_key(job_id), result))
    world.move(job_id, [JobState.SCHEDULED, JobState.DISPATCHED, JobState.RUNNING,
                        JobState.SUCCEEDED],
               fields={"result_ptr": protocol.pointer(protocol.result_key(job_id))})
    return job_id


def get(world: World, job_id: str) -> tuple[int, dict, int]:
    """Status, body and the size of the whole proxy response as Lambda would send it."""
    from cordum.gateway import app as gateway

    ev = event("GET", f"/api/v1/jobs/{job_id}", key=KEY, tenant=world.tenant)
    response_bytes = len(json.dumps(gateway.handle(ev, None)).encode())
    status, body, _ = call(ev)
    return status, body, response_bytes


def test_a_result_within_the_limit_is_inline(world):
    # Given a SUCCEEDED job whose result is just under the limit
    value = "x" * (views.MAX_INLINE_RESULT_BYTES - 64)
    job_id = succeeded_with(world, json.dumps({"answer": value}))
    status, body, _ = get(world, job_id)
    # Then the detail carries it, with no mark of a large result
    assert status == 200
    assert body["result"] == {"answer": value}
    assert body["result_ptr"] == f"redis://res:{job_id}"
    assert "result_too_large" not in body and "result_size_bytes" not in body


def test_a_result_past_the_limit_is_served_by_pointer(world):
    # Given a SUCCEEDED job whose stored result is 7 MB, past Lambda's 6 MB response
    stored = json.dumps({"answer": "y" * (7 * 1024 * 1024)})
    job_id = succeeded_with(world, stored)
    status, body, response_bytes = get(world, job_id)
    # Then the detail answers 200, well within Lambda's limit, without the result
    assert status == 200
    assert response_bytes < views.MAX_INLINE_RESULT_BYTES < LAMBDA_RESPONSE_LIMIT
    assert body["result"] is None
    # And says where the result is and how large it is
    assert body["result_ptr"] == f"redis://res:{job_id}"
    assert body["result_too_large"] is True
    assert body["result_size_bytes"] == len(stored.encode())
    # And the job itself is as it was: SUCCEEDED, its result kept
    assert body["state"] == "SUCCEEDED"
    assert runtime.run(world.redis.strlen(protocol.result_key(job_id))) == len(stored)


def test_the_worst_inline_result_still_fits_a_lambda_response(world):
    # Given a text result of control characters at the limit: each byte is escaped
    # twice on the way out (7 bytes in the proxy response)
    job_id = succeeded_with(world, "\x01" * views.MAX_INLINE_RESULT_BYTES)
    status, body, response_bytes = get(world, job_id)
    # Then it is inline and the whole response still fits under 6 MB
    assert status == 200 and body["result"] == {"text": "\x01" * views.MAX_INLINE_RESULT_BYTES}
    assert response_bytes < LAMBDA_RESPONSE_LIMIT
    # While one byte more is served by pointer
    job_id = succeeded_with(world, "\x01" * (views.MAX_INLINE_RESULT_BYTES + 1))
    _, body, _ = get(world, job_id)
    assert body["result"] is None and body["result_too_large"] is True


def test_a_job_not_succeeded_shows_no_size(world):
    # Given a large stored result on a job that then failed: nothing of it is served
    job_id = succeeded_with(world, "z" * (views.MAX_INLINE_RESULT_BYTES + 1))
    runtime.run(world.redis.hset(meta_key(job_id), "state", JobState.FAILED.value))
    _, body, _ = get(world, job_id)
    assert body["result"] is None and body["result_ptr"] is None
    assert "result_too_large" not in body
