"""GET /api/v1/traces/{id}, GET /api/v1/workers/{id} and GET /api/v1/workers/{id}/jobs
through the gateway on the real Redis: jobs created with the job store, moved through
their states, their trace read back as job details, the bounds, the tenant's jobs only,
and a worker with its jobs."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from cordum import config, runtime
from cordum.gateway.core import deps
from cordum.gateway.jobs import traces
from cordum.gateway.system import service as system
from cordum.gateway.system import worker_jobs
from cordum.registry.snapshot import rfc3339_from_epoch_s
from cordum.store.jobs import JobState
from tests.conftest import REDIS_URL
from tests.helpers import call, event, use_gateway
from tests.integration.test_gateway_reads import RUNNING_PATH, World

ADMIN = "tw-admin-key"
USER = "tw-user-key"
VIEWER = "tw-viewer-key"
OTHER = "tw-other-key"


def configure(monkeypatch: pytest.MonkeyPatch, world: World, redis_url: str = REDIS_URL) -> None:
    monkeypatch.setattr(system, "KEYS", world.keys)
    use_gateway(monkeypatch, [
        {"key": ADMIN, "tenant": world.tenant, "role": "admin"},
        {"key": USER, "tenant": world.tenant, "role": "user"},
        {"key": VIEWER, "tenant": world.tenant, "role": "viewer"},
        {"key": OTHER, "tenant": world.other, "role": "admin"},
    ], redis_url=redis_url, CORDUM_STORE_TIMEOUT_S="0.5")


class Jobs(World):
    """World's jobs, plus results stored at ``res:<id>`` (removed at the end)."""

    def __init__(self, unique: str) -> None:
        super().__init__(unique)
        self.results: list[str] = []

    def succeeded(self, *, trace_id: str, result: Any, worker: str = "w-1",
                  output_safety: dict[str, Any] | None = None, prompt: str = "hello") -> str:
        job_id = self.job(trace_id=trace_id, path=RUNNING_PATH, fields={"worker_id": worker},
                          prompt=prompt)
        key = f"res:{job_id}"
        runtime.run(self.redis.set(key, json.dumps(result), ex=300))
        self.results.append(key)
        fields = {"result_ptr": f"redis://{key}"}
        if output_safety is not None:
            fields["output_safety"] = json.dumps(output_safety)
        self.move(job_id, [JobState.SUCCEEDED], fields=fields)
        return job_id

    def snapshot(self, *workers: str) -> None:
        now = time.time()
        doc = {"captured_at": rfc3339_from_epoch_s(now), "writer_id": "test", "pools": {},
               "topics": {}, "workers": [
                   {"worker_id": w, "pool": "echo", "active_jobs": 1, "max_parallel_jobs": 4,
                    "capabilities": ["echo"], "labels": {"zone": "a"},
                    "last_heartbeat": rfc3339_from_epoch_s(now - 1)} for w in workers]}
        runtime.run(self.redis.set(self.keys.snapshot, json.dumps(doc), ex=120))

    def cleanup(self) -> None:
        if self.results:
            runtime.run(self.redis.delete(*self.results))
        super().cleanup()


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch, unique: str):  # type: ignore[no-untyped-def]
    w = Jobs(unique)
    configure(monkeypatch, w)
    yield w
    configure(monkeypatch, w)
    w.cleanup()
    config.settings.cache_clear()
    deps.reset()
    runtime.reset()


def get(path: str, key: str, tenant: str, query: dict[str, str] | None = None
        ) -> tuple[int, Any, dict[str, Any]]:
    return call(event("GET", path, key=key, tenant=tenant, query=query))


# --------------------------------------------------------------------------- traces


def test_a_trace_is_its_jobs_as_their_details_newest_first(world):
    trace = f"trace-{world.unique}"
    first = world.job(trace_id=trace, prompt="one")
    second = world.job(trace_id=trace, path=RUNNING_PATH, fields={"worker_id": "w-1"})
    third = world.succeeded(trace_id=trace, result={"answer": 42})
    world.job(tenant=world.other, trace_id=trace)  # another tenant's job of the same trace
    status, body, resp = get(f"/api/v1/traces/{trace}", ADMIN, world.tenant)
    assert status == 200, body
    assert [d["id"] for d in body] == [third, second, first]
    for detail in body:  # exactly what the job's own detail answers
        one = get(f"/api/v1/jobs/{detail['id']}", ADMIN, world.tenant)[1]
        assert detail == one
    assert body[0]["result"] == {"answer": 42} and body[0]["started_at"] is not None
    assert body[2]["prompt"] == "one" and body[2]["state"] == "PENDING"
    assert {d["trace_id"] for d in body} == {trace}
    headers = {k.lower(): v for k, v in resp.items()}
    assert headers["x-total-count"] == "3" and headers["x-has-more"] == "false"


def test_a_trace_hides_results_the_job_detail_hides(world, monkeypatch):
    monkeypatch.setenv("OUTPUT_POLICY_ENABLED", "true")
    config.settings.cache_clear()
    trace = f"trace-{world.unique}"
    quarantined = world.succeeded(trace_id=trace, result={"secret": "x"}, output_safety={
        "decision": "QUARANTINE", "phase": "async", "quarantined": True})
    unscanned = world.succeeded(trace_id=trace, result={"secret": "y"})
    redacted = world.succeeded(trace_id=trace, result={"secret": "z"}, output_safety={
        "decision": "REDACT", "phase": "async", "quarantined": False})
    allowed = world.succeeded(trace_id=trace, result={"ok": True}, output_safety={
        "decision": "ALLOW", "phase": "async", "quarantined": False})
    status, body, _ = get(f"/api/v1/traces/{trace}", ADMIN, world.tenant)
    assert status == 200, body
    by_id = {d["id"]: d for d in body}
    for job_id in (quarantined, unscanned, redacted):
        assert by_id[job_id]["result"] is None and by_id[job_id]["result_ptr"] is None
        assert by_id[job_id] == get(f"/api/v1/jobs/{job_id}", ADMIN, world.tenant)[1]
    assert by_id[allowed]["result"] == {"ok": True}
    assert "secret" not in json.dumps(body)


def test_a_trace_shows_its_newest_jobs_up_to_the_bound_and_says_how_many(world, monkeypatch):
    monkeypatch.setattr(traces, "MAX_TRACE_JOBS", 3)
    trace = f"trace-{world.unique}"
    ids = [world.job(trace_id=trace) for _ in range(5)]
    status, body, resp = get(f"/api/v1/traces/{trace}", VIEWER, world.tenant)
    assert status == 200, body
    assert [d["id"] for d in body] == ids[:-4:-1]  # the three newest
    headers = {k.lower(): v for k, v in resp.items()}
    assert headers["x-total-count"] == "5" and headers["x-has-more"] == "true"


def test_payloads_past_the_budget_are_left_out_and_said_so(world, monkeypatch):
    trace = f"trace-{world.unique}"
    old = world.succeeded(trace_id=trace, result={"blob": "a" * 400}, prompt="p" * 300)
    new = world.succeeded(trace_id=trace, result={"small": 1})
    monkeypatch.setattr(traces, "PAYLOAD_BUDGET", 200)
    status, body, _ = get(f"/api/v1/traces/{trace}", ADMIN, world.tenant)
    assert status == 200, body
    by_id = {d["id"]: d for d in body}
    assert by_id[new]["result"] == {"small": 1}
    assert by_id[old]["result"] is None and by_id[old]["result_too_large"] is True
    assert by_id[old]["result_size_bytes"] > 400
    assert by_id[old]["result_ptr"] == f"redis://res:{old}"
    assert by_id[old]["prompt_omitted"] is True and by_id[old]["prompt"] == ""
    assert get(f"/api/v1/jobs/{old}", ADMIN, world.tenant)[1]["result"] == {"blob": "a" * 400}


def test_an_unknown_trace_and_another_tenants_are_the_same_404(world):
    trace = f"trace-{world.unique}"
    world.job(tenant=world.other, trace_id=trace)
    theirs = get(f"/api/v1/traces/{trace}", ADMIN, world.tenant)
    missing = get(f"/api/v1/traces/{trace}-nope", ADMIN, world.tenant)
    assert theirs[0] == missing[0] == 404
    assert theirs[1] == missing[1] == {"error": "trace not found", "code": "trace_not_found",
                                       "status": 404}
    assert get(f"/api/v1/traces/{trace}", OTHER, world.other)[0] == 200


def test_a_trace_id_too_long_is_400_and_redis_down_503(world, monkeypatch):
    status, body, _ = get("/api/v1/traces/" + "t" * 300, ADMIN, world.tenant)
    assert status == 400 and "id" in body["error"]
    configure(monkeypatch, world, redis_url="redis://127.0.0.1:1/0")
    status, body, _ = get(f"/api/v1/traces/trace-{world.unique}", ADMIN, world.tenant)
    assert status == 503 and body["code"] == "store_unavailable"


# --------------------------------------------------------------------------- workers


def test_one_worker_from_the_snapshot_and_an_unknown_one_404(world):
    world.snapshot("w-1", "w-2")
    status, body, _ = get("/api/v1/workers/w-1", VIEWER, world.tenant)
    assert status == 200, body
    assert body["worker_id"] == "w-1" and body["pool"] == "echo" and body["online"] is True
    assert body["labels"] == {"zone": "a"} and body["max_parallel_jobs"] == 4
    listed = get("/api/v1/workers", VIEWER, world.tenant)[1]["items"]
    assert body == {**next(w for w in listed if w["worker_id"] == "w-1"),
                    "heartbeat_age_seconds": body["heartbeat_age_seconds"]}
    status, err, _ = get("/api/v1/workers/w-9", VIEWER, world.tenant)
    assert (status, err) == (404, {"error": "worker not found", "code": "WORKER_NOT_FOUND",
                                   "status": 404})


def test_a_workers_jobs_are_the_tenants_newest_that_name_it(world):
    world.snapshot("w-1", "w-2")
    trace = f"trace-{world.unique}"
    done = world.succeeded(trace_id=trace, result={"ok": 1}, worker="w-1")
    running = world.job(path=RUNNING_PATH, fields={"worker_id": "w-1"}, topic="job.other")
    world.job(path=RUNNING_PATH, fields={"worker_id": "w-2"})
    world.job()  # never dispatched
    world.job(tenant=world.other, path=RUNNING_PATH, fields={"worker_id": "w-1"})
    status, body, _ = get("/api/v1/workers/w-1/jobs", VIEWER, world.tenant)
    assert status == 200, body
    assert [j["id"] for j in body["items"]] == [running, done]
    record = body["items"][1]
    assert record["state"] == "SUCCEEDED" and record["worker_id"] == "w-1"
    assert record["trace_id"] == trace and record["tenant"] == world.tenant
    assert isinstance(record["updated_at"], int) and record["updated_at"] > 1_600_000_000_000_000
    assert body["items"][0]["topic"] == "job.other" and body["items"][0]["state"] == "RUNNING"
    one = get("/api/v1/workers/w-1/jobs", VIEWER, world.tenant, {"limit": "1"})[1]
    assert [j["id"] for j in one["items"]] == [running]
    assert get("/api/v1/workers/w-2/jobs", OTHER, world.other)[1] == {"items": []}


def test_worker_jobs_limit_is_checked_and_capped(world, monkeypatch):
    world.snapshot("w-1")
    ids = [world.job(path=RUNNING_PATH, fields={"worker_id": "w-1"}) for _ in range(3)]
    for bad in ("abc", "0", "-1"):
        status, err, _ = get("/api/v1/workers/w-1/jobs", ADMIN, world.tenant, {"limit": bad})
        assert status == 400 and "limit" in err["error"]
    monkeypatch.setattr(worker_jobs, "MAX_LIMIT", 2)
    body = get("/api/v1/workers/w-1/jobs", ADMIN, world.tenant, {"limit": "500"})[1]
    assert [j["id"] for j in body["items"]] == ids[:0:-1]


def test_worker_jobs_read_only_the_newest_history(world, monkeypatch):
    monkeypatch.setattr(worker_jobs, "HISTORY_READ", 2)
    trace = f"trace-{world.unique}"
    oldest = world.succeeded(trace_id=trace, result={}, worker="w-1")
    world.job(path=RUNNING_PATH + [JobState.FAILED], fields={"worker_id": "w-2"})
    newer = world.succeeded(trace_id=trace, result={}, worker="w-1")
    active = world.job(path=RUNNING_PATH, fields={"worker_id": "w-1"})
    body = get("/api/v1/workers/w-1/jobs", ADMIN, world.tenant)[1]
    # The running job always; of the terminal ones only the two newest are read.
    assert [j["id"] for j in body["items"]] == [active, newer]
    assert oldest not in [j["id"] for j in body["items"]]


def test_a_gone_worker_is_known_by_its_jobs_to_their_tenant_only(world):
    world.job(path=RUNNING_PATH, fields={"worker_id": "w-gone"})
    status, body, _ = get("/api/v1/workers/w-gone/jobs", ADMIN, world.tenant)
    assert status == 200 and len(body["items"]) == 1
    theirs = get("/api/v1/workers/w-gone/jobs", OTHER, world.other)
    missing = get("/api/v1/workers/w-never/jobs", OTHER, world.other)
    assert theirs[0] == missing[0] == 404 and theirs[1] == missing[1]
    assert theirs[1]["code"] == "WORKER_NOT_FOUND"
    assert get("/api/v1/workers/w-gone", ADMIN, world.tenant)[0] == 404
