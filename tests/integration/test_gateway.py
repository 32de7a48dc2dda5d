"""The gateway function's HTTP API on the real Redis and NATS (API Gateway proxy events)."""

from __future__ import annotations

import json

import pytest

from cordum import config, runtime
from cordum.gateway.core import deps
from tests.conftest import NATS_URL, REDIS_URL
from tests.helpers import call, event, gateway_process

API_KEY = "test-key-123"
TENANT = "acme"
ACME = {"key": API_KEY, "tenant": TENANT}
"""Every request is the acme key's unless a test says otherwise."""


def configure(monkeypatch, redis_url=REDIS_URL, nats_url=NATS_URL):
    monkeypatch.setenv("CORDUM_API_KEYS", json.dumps([{"key": API_KEY, "tenant": TENANT}]))
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("NATS_URL", nats_url)
    monkeypatch.setenv("CORDUM_STORE_TIMEOUT_S", "0.5")
    monkeypatch.setenv("CORDUM_PUBLISH_TIMEOUT_S", "0.5")
    # The submit-time policy check has its own tests (test_gateway_submit.py).
    monkeypatch.setenv("CORDUM_SUBMIT_POLICY_CHECK", "off")
    config.settings.cache_clear()
    deps.reset()
    runtime.reset()


@pytest.fixture
def api(monkeypatch):
    configure(monkeypatch)
    with gateway_process():
        yield


def meta_of(job_id: str) -> dict:
    return {k.decode(): v.decode() for k, v in
            runtime.run(runtime.redis_client().hgetall(f"job:meta:{job_id}")).items()}


def test_submit_stores_pending_job_and_answers_ids(api):
    status, body, _ = call(event("POST", "/api/v1/jobs",
                                 {"topic": "job.default", "prompt": "hello",
                                  "labels": {"team": "blue"}}, **ACME))
    assert status == 200, body
    assert set(body) == {"job_id", "trace_id"}
    meta = meta_of(body["job_id"])
    assert meta["state"] in {"PENDING", "SCHEDULED", "DISPATCHED", "RUNNING", "SUCCEEDED"}
    assert meta["tenant"] == TENANT and meta["topic"] == "job.default"
    assert json.loads(meta["labels"]) == {"team": "blue", "_source": "api"}
    ctx = json.loads(runtime.run(runtime.redis_client().get(f"ctx:{body['job_id']}")))
    assert ctx == {"prompt": "hello", "topic": "job.default", "tenant_id": TENANT}


def test_get_job_answers_detail_and_hides_other_tenants(api, monkeypatch):
    _, body, _ = call(event("POST", "/api/v1/jobs", {"prompt": "p"}, **ACME))
    status, detail, _ = call(event("GET", f"/api/v1/jobs/{body['job_id']}", **ACME))
    assert status == 200
    assert detail["id"] == body["job_id"] and detail["topic"] == "job.default"
    assert detail["tenant"] == TENANT and detail["trace_id"] == body["trace_id"]
    assert {"state", "result_ptr", "result", "labels", "priority"} <= set(detail)
    # A key bound to another tenant sees 403, an unknown id 404.
    monkeypatch.setenv("CORDUM_API_KEYS", json.dumps([
        {"key": API_KEY, "tenant": TENANT}, {"key": "other", "tenant": "globex"}]))
    deps.reset()
    status, err, _ = call(event("GET", f"/api/v1/jobs/{body['job_id']}",
                                key="other", tenant="globex"))
    assert status == 403 and err == {"error": "tenant access denied",
                                     "code": "tenant_access_denied", "status": 403}
    status, err, _ = call(event("GET", "/api/v1/jobs/nope-123", **ACME))
    assert status == 404 and err["code"] == "job_not_found"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ("[1,2]", "JSON object"),
        ({"topic": "job.default"}, "prompt is required"),
        ({"prompt": "x", "topic": "sys.job.submit"}, "topic"),
        ({"prompt": "x", "labels": {"_governance.x": "1"}}, "reserved"),
        ({"prompt": "x", "priority": "urgent"}, "priority"),
        ({"prompt": "x" * 50_001}, "prompt"),
    ],
)
def test_bad_body_is_400_with_error_shape(api, body, fragment):
    status, err, _ = call(event("POST", "/api/v1/jobs", body, **ACME))
    assert status == 400, err
    assert set(err) == {"error", "code", "status"} and err["status"] == 400
    assert fragment in err["error"]


@pytest.mark.parametrize("headers", [{"X-API-Key": None}, {"X-API-Key": "wrong"},
                                     {"X-API-Key": None, "Authorization": "Bearer wrong"}])
def test_missing_or_wrong_key_is_401(api, headers):
    status, err, _ = call(event("POST", "/api/v1/jobs", {"prompt": "x"}, **ACME, headers=headers))
    assert status == 401
    assert err == {"error": "unauthorized", "code": "unauthorized", "status": 401}


def test_bearer_key_is_accepted(api):
    status, _, _ = call(event("POST", "/api/v1/jobs", {"prompt": "x"}, tenant=TENANT,
                              headers={"Authorization": f"Bearer {API_KEY}"}))
    assert status == 200


def test_health_checks_redis_and_nats(api):
    status, body, _ = call(event("GET", "/health", tenant=TENANT))
    assert (status, body) == (200, {"status": "healthy", "redis": "ok", "nats": "ok"})


def recent_ids() -> set[str]:
    return {m.decode() for m in runtime.run(runtime.redis_client().zrange("job:recent", 0, -1))}


def test_redis_down_gives_503_and_writes_nothing(monkeypatch):
    configure(monkeypatch, redis_url="redis://127.0.0.1:1")
    status, err, headers = call(event("POST", "/api/v1/jobs", {"prompt": "x"}, **ACME))
    assert status == 503 and err["code"] == "store_unavailable"
    # The client is told which part is down and when to try again.
    assert err["unavailable"] == "redis" and int(headers["Retry-After"]) >= 1
    status, body, headers = call(event("GET", "/health", tenant=TENANT))
    assert (status, body["redis"], headers["Retry-After"]) == (503, "unavailable", "2")
    runtime.reset()


def test_nats_down_gives_503_and_leaves_no_half_written_job(monkeypatch):
    configure(monkeypatch, nats_url="nats://127.0.0.1:1")
    before = recent_ids()
    status, err, headers = call(event("POST", "/api/v1/jobs", {"prompt": "x"}, **ACME))
    assert status == 503 and err["code"] == "bus_unavailable"
    assert err["unavailable"] == "nats" and int(headers["Retry-After"]) >= 1
    # The job was written, the publish failed, and the job was removed again.
    leftovers = recent_ids() - before
    assert not [j for j in leftovers if meta_of(j).get("tenant") == TENANT]
    runtime.reset()


def test_cancel_an_open_job_then_cancel_again(api):
    _, body = call(event("POST", "/api/v1/jobs", {"prompt": "to cancel"}, **ACME))[:2]
    status, out, _ = call(event("POST", f"/api/v1/jobs/{body['job_id']}/cancel", **ACME))
    assert (status, out) == (200, {"id": body["job_id"], "state": "CANCELLED"})
    assert meta_of(body["job_id"])["state"] == "CANCELLED"
    status, again, _ = call(event("POST", f"/api/v1/jobs/{body['job_id']}/cancel", **ACME))
    assert status == 200 and again["reason"] == "job already terminal"
    assert again["state"] == "CANCELLED"


def test_cancel_unknown_or_foreign_job(api, monkeypatch):
    status, err, _ = call(event("POST", "/api/v1/jobs/nope-xyz/cancel", **ACME))
    assert status == 404 and err["code"] == "job_not_found"
    _, body = call(event("POST", "/api/v1/jobs", {"prompt": "mine"}, **ACME))[:2]
    monkeypatch.setenv("CORDUM_API_KEYS", json.dumps([
        {"key": API_KEY, "tenant": TENANT}, {"key": "other", "tenant": "globex"}]))
    deps.reset()
    status, _, _ = call(event("POST", f"/api/v1/jobs/{body['job_id']}/cancel",
                              key="other", tenant="globex"))
    assert status == 403
    assert meta_of(body["job_id"])["state"] != "CANCELLED"
