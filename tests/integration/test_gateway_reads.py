"""The read side of the HTTP API on the real Redis and NATS: job lists, detail,
decisions, workers, status and health (API Gateway proxy events into the gateway).

Every test works in its own tenant and points the shared keys (worker snapshot,
breakers, fail-open counter) at keys of its own, so tests can run beside others.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from cordum import config, runtime
from cordum.gateway.core import deps
from cordum.gateway.jobs import queries, views
from cordum.gateway.system import service as system
from cordum.safety.breaker import INPUT_BREAKER_KEY, OUTPUT_BREAKER_KEY, CircuitBreaker
from cordum.store.jobs import (
    DLQ_INDEX_KEY,
    RECENT_KEY,
    JobState,
    JobStore,
    NewJob,
    dlq_entry_key,
    events_key,
    index_key,
    meta_key,
    request_key,
    tenant_active_key,
    tenant_index_key,
)
from cordum.store.results import served_result_ptr
from tests.conftest import NATS_URL, REDIS_URL
from tests.helpers import call, event

ADMIN_KEY = "reads-admin-key"
USER_KEY = "reads-user-key"
OTHER_KEY = "reads-other-key"

RUNNING_PATH = [JobState.SCHEDULED, JobState.DISPATCHED, JobState.RUNNING]
TIE_US = 1_700_000_000_000_000


def is_rfc3339(value: Any) -> bool:
    return isinstance(value, str) and datetime.fromisoformat(value).tzinfo is not None


class World:
    """One tenant's jobs in the real Redis, removed again at the end."""

    def __init__(self, unique: str) -> None:
        self.unique = unique
        self.tenant = f"reads-{unique}"
        self.other = f"reads-other-{unique}"
        self.keys = system.ReadKeys(snapshot=f"test:{unique}:workers:snapshot",
                                     breaker_prefix=f"test:{unique}:",
                                     input_fail_open=f"test:{unique}:fail_open_total")
        self.job_ids: list[str] = []
        self.traces: set[str] = set()
        self.count = 0

    @property
    def redis(self) -> Any:
        return runtime.redis_client()

    def store(self) -> JobStore:
        return JobStore(self.redis)

    def job(self, *, tenant: str | None = None, topic: str = "job.reads", team: str = "",
            trace_id: str | None = None, path: list[JobState] | None = None,
            meta: dict[str, str] | None = None, dlq: dict[str, Any] | None = None,
            fields: dict[str, str] | None = None, prompt: str = "hello") -> str:
        self.count += 1
        job_id = f"reads-{self.unique}-{self.count:03d}"
        trace = trace_id or f"trace-{job_id}"
        self.traces.add(trace)
        extra = {"labels": json.dumps({"team": "blue"}), "priority": "2", **(meta or {})}
        if team:
            extra["team"] = team
        store = self.store()
        created = runtime.run(store.create(NewJob(
            job_id=job_id, trace_id=trace, tenant=tenant or self.tenant, topic=topic,
            context=json.dumps({"prompt": prompt, "topic": topic}),
            request=json.dumps({"jobId": job_id, "topic": topic, "adapterId": "echo-v1"}),
            meta=extra)))
        assert created
        self.job_ids.append(job_id)
        if path:
            self.move(job_id, path, fields=fields, dlq=dlq)
        return job_id

    def move(self, job_id: str, path: list[JobState], *, fields: dict[str, str] | None = None,
             dlq: dict[str, Any] | None = None) -> None:
        runtime.run(self.store().transition(job_id, path, fields=fields, dlq=dlq))

    def scores(self, job_ids: list[str], score: int, state: JobState) -> None:
        for key in (index_key(state), tenant_index_key(self.tenant, state)):
            runtime.run(self.redis.zadd(key, {j: score for j in job_ids}))

    def cleanup(self) -> None:
        async def drop() -> None:
            r = self.redis
            pipe = r.pipeline(transaction=False)
            for job_id in self.job_ids:
                pipe.delete(meta_key(job_id), request_key(job_id), events_key(job_id),
                            f"ctx:{job_id}", dlq_entry_key(job_id),
                            f"job:{job_id}:output_decision")
                for state in JobState:
                    pipe.zrem(index_key(state), job_id)
                pipe.zrem(RECENT_KEY, job_id)
                pipe.zrem(DLQ_INDEX_KEY, job_id)
                pipe.zrem("job:deadline", job_id)
            for trace in self.traces:
                pipe.delete(f"trace:{trace}")
            for state in JobState:
                pipe.delete(tenant_index_key(self.tenant, state),
                            tenant_index_key(self.other, state))
            pipe.delete(tenant_active_key(self.tenant), tenant_active_key(self.other),
                        self.keys.snapshot, self.keys.input_fail_open,
                        self.keys.breaker_prefix + INPUT_BREAKER_KEY,
                        self.keys.breaker_prefix + OUTPUT_BREAKER_KEY)
            await pipe.execute()

        runtime.run(drop())


def configure(monkeypatch, world: World, redis_url: str = REDIS_URL,
              nats_url: str = NATS_URL) -> None:
    monkeypatch.setenv("CORDUM_API_KEYS", json.dumps([
        {"key": ADMIN_KEY, "tenant": world.tenant, "role": "admin"},
        {"key": USER_KEY, "tenant": world.tenant, "role": "user"},
        {"key": OTHER_KEY, "tenant": world.other, "role": "admin"},
    ]))
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("NATS_URL", nats_url)
    monkeypatch.setenv("CORDUM_STORE_TIMEOUT_S", "0.5")
    monkeypatch.setenv("CORDUM_PUBLISH_TIMEOUT_S", "0.5")
    monkeypatch.setattr(system, "KEYS", world.keys)
    config.settings.cache_clear()
    deps.reset()
    runtime.reset()


@pytest.fixture
def world(monkeypatch, unique):
    w = World(unique)
    configure(monkeypatch, w)
    yield w
    configure(monkeypatch, w)  # a test may have pointed the clients at a closed port
    w.cleanup()
    config.settings.cache_clear()
    deps.reset()
    runtime.reset()


def list_all(world: World, params: dict[str, str], limit: int) -> tuple[list[str], int]:
    """Every page of GET /api/v1/jobs; the ids in order and the number of pages."""
    ids: list[str] = []
    cursor = None
    pages = 0
    while True:
        query = {**params, "limit": str(limit)}
        if cursor:
            query["cursor"] = cursor
        status, body, _ = call(event("GET", "/api/v1/jobs",
                                     key=ADMIN_KEY, tenant=world.tenant, query=query))
        assert status == 200, body
        assert len(body["items"]) <= limit
        ids += [item["id"] for item in body["items"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            return ids, pages
        assert isinstance(cursor, str) and cursor
        assert pages < 200, "paging does not end"


# --------------------------------------------------------------------------- GET /api/v1/jobs


def test_list_requires_a_key(world):
    status, err, _ = call(event("GET", "/api/v1/jobs", key=None, tenant=world.tenant))
    assert status == 401 and err == {"error": "unauthorized", "code": "unauthorized",
                                     "status": 401}


@pytest.mark.parametrize("min_batch", [queries.MIN_BATCH, 1])
def test_list_pages_every_job_of_the_tenant_once_newest_first(world, monkeypatch, min_batch):
    # Given 23 jobs of the tenant in two states, interleaved with another tenant's jobs,
    # read in batches smaller than the indexes (min_batch 1), or not
    monkeypatch.setattr(queries, "MIN_BATCH", min_batch)
    mine = []
    for i in range(23):
        mine.append(world.job(path=RUNNING_PATH if i % 3 == 0 else None))
        if i % 4 == 0:
            world.job(tenant=world.other)
    # When every page of 5 is read
    ids, pages = list_all(world, {}, limit=5)
    # Then each job shows up exactly once, newest first, and nothing of the other tenant
    assert len(ids) == len(set(ids)) == 23
    assert set(ids) == set(mine)
    assert pages >= 5
    status, body, _ = call(event("GET", "/api/v1/jobs", key=ADMIN_KEY, tenant=world.tenant,
                                 query={"limit": "50"}))
    items = body["items"]
    assert [i["id"] for i in items] == ids
    stamps = [datetime.fromisoformat(i["updated_at"]) for i in items]
    assert stamps == sorted(stamps, reverse=True)
    assert body["next_cursor"] is None
    first = items[0]
    assert set(first) >= {"id", "state", "topic", "tenant", "updated_at"}
    assert first["tenant"] == world.tenant and is_rfc3339(first["updated_at"])


def test_default_limit_is_50(world):
    for _ in range(52):
        world.job()
    status, body, _ = call(event("GET", "/api/v1/jobs", key=ADMIN_KEY, tenant=world.tenant))
    assert status == 200 and len(body["items"]) == 50 and isinstance(body["next_cursor"], str)


@pytest.mark.parametrize("params", [{}, {"state": "PENDING"}, {"state": "RUNNING"},
                                    {"state": "succeeded"}])
def test_jobs_sharing_one_microsecond_are_neither_lost_nor_repeated(world, monkeypatch,
                                                                    params):
    # Given 15 jobs of one state whose index scores are all the same microsecond,
    # more than one read of the index returns
    monkeypatch.setattr(queries, "MIN_BATCH", 1)
    state = JobState(params.get("state", "PENDING").upper())
    path = {JobState.PENDING: None, JobState.RUNNING: RUNNING_PATH,
            JobState.SUCCEEDED: [*RUNNING_PATH, JobState.SUCCEEDED]}[state]
    tied = [world.job(path=path) for _ in range(15)]
    world.scores(tied, TIE_US, state)
    older: list[str] = []
    if not params:
        # and, in another index, jobs just older than the tie
        older = [world.job(path=RUNNING_PATH) for _ in range(3)]
        world.scores(older, TIE_US - 10, JobState.RUNNING)
    # When they are paged two at a time
    ids, _ = list_all(world, params, limit=2)
    # Then every one is listed once, in the index's order (id descending on a tie)
    assert ids == sorted(tied, reverse=True) + sorted(older, reverse=True)


def test_open_state_lists_the_tenants_jobs_of_that_state(world):
    pending = [world.job() for _ in range(6)]
    running = [world.job(path=RUNNING_PATH) for _ in range(3)]
    world.job(tenant=world.other)
    listed, _ = list_all(world, {"state": "PENDING"}, limit=4)
    assert listed == list(reversed(pending))
    assert set(list_all(world, {"state": "RUNNING"}, limit=2)[0]) == set(running)


def test_filters(world):
    t0 = world.job(topic="job.alpha", team="red")
    shared_trace = f"trace-shared-{world.unique}"
    t1 = world.job(topic="job.beta", trace_id=shared_trace)
    t2 = world.job(topic="job.alpha", trace_id=shared_trace,
                   path=[*RUNNING_PATH, JobState.SUCCEEDED])
    world.job(tenant=world.other, topic="job.alpha", trace_id=shared_trace)

    def ids(**params: str) -> set[str]:
        return set(list_all(world, params, limit=10)[0])

    assert ids(topic="job.alpha") == {t0, t2}
    assert ids(team="red") == {t0}
    assert ids(trace_id=shared_trace) == {t1, t2}
    assert ids(trace_id=shared_trace, state="SUCCEEDED") == {t2}
    assert ids(state="SUCCEEDED") == {t2}
    assert ids(state="PENDING", topic="job.alpha") == {t0}
    assert ids(tenant=world.tenant) == {t0, t1, t2}
    updated = {j: int(runtime.run(world.redis.hget(meta_key(j), "updated_at")))
               for j in (t0, t1, t2)}
    assert ids(updated_after=str(updated[t0])) == {t1, t2}
    assert ids(updated_before=str(updated[t2])) == {t0, t1}
    after = datetime.fromtimestamp(updated[t1] / 1e6, UTC).isoformat()
    assert ids(updated_after=after) == {t2}


@pytest.mark.parametrize(("params", "status", "code"), [
    ({"state": "NAPPING"}, 400, "invalid_request"),
    ({"cursor": "not-a-cursor"}, 400, "invalid_request"),
    ({"limit": "0"}, 400, "invalid_request"),
    ({"updated_after": "yesterday"}, 400, "invalid_request"),
    ({"tenant": "someone-else"}, 403, "tenant_access_denied"),
])
def test_bad_list_queries(world, params, status, code):
    got, err, _ = call(event("GET", "/api/v1/jobs",
                             key=ADMIN_KEY, tenant=world.tenant, query=params))
    assert (got, err["code"], err["status"]) == (status, code, status)


def test_a_small_scan_budget_gives_short_pages_that_still_reach_every_job(world, monkeypatch):
    # Given the tenant's jobs of one topic spread between many of its jobs of another
    start = datetime.now(UTC).isoformat()
    mine = []
    for _ in range(4):
        mine.append(world.job())
        for _ in range(5):
            world.job(topic="job.elsewhere")
    # When a request may examine only 3 candidates
    monkeypatch.setattr(queries, "SCAN_BUDGET", 3)
    ids, pages = list_all(world, {"updated_after": start, "topic": "job.reads"}, limit=10)
    # Then pages come back short, and following next_cursor still lists each job once
    assert sorted(ids) == sorted(mine)
    assert pages >= 8


# --------------------------------------------------------------------------- GET /api/v1/jobs/{id}


def failed_job(world: World) -> str:
    fields = {"safety_decision": "ALLOW_WITH_CONSTRAINTS", "safety_reason": "budget capped",
              "safety_rule_id": "rule-7", "safety_checked_at": "1747000000123456",
              "safety_constraints": json.dumps({"budgets": {"maxRetries": 2}}),
              "failure_reason": "worker crashed",
              "output_safety": json.dumps({"decision": "QUARANTINE", "phase": "sync"})}
    job_id = world.job(path=RUNNING_PATH, prompt="summarise this")
    world.move(job_id, [JobState.FAILED], fields=fields,
               dlq={"topic": "job.reads", "status": "FAILED", "reason": "worker crashed",
                    "reason_code": "worker_error"})
    return job_id


def test_detail_has_the_schema_types_and_cordum_fields(world):
    job_id = failed_job(world)
    status, detail, _ = call(event("GET", f"/api/v1/jobs/{job_id}",
                                   key=ADMIN_KEY, tenant=world.tenant))
    assert status == 200, detail
    assert detail["id"] == job_id and detail["state"] == "FAILED"
    assert is_rfc3339(detail["created_at"]) and is_rfc3339(detail["updated_at"])
    assert detail["labels"] == {"team": "blue"} and detail["delegation"] == {}
    assert detail["priority"] == 2 and isinstance(detail["retry_count"], int)
    assert detail["error"] == "worker crashed"
    assert detail["completed_at"] == detail["updated_at"]
    assert detail["decisions"] == [{
        "rule_id": "rule-7", "action": "ALLOW_WITH_CONSTRAINTS", "reason": "budget capped",
        "constraints": {"budgets": {"maxRetries": 2}},
        "evaluated_at": "2025-05-11T21:46:40.123456Z"}]
    assert detail["safety_decision"] == "ALLOW_WITH_CONSTRAINTS"
    assert detail["safety_rule_id"] == "rule-7"
    assert detail["output_decision"] == "QUARANTINE"
    assert detail["output_safety"]["phase"] == "sync"


def test_detail_extras_come_from_the_event_log_dlq_entry_and_payloads(world):
    job_id = failed_job(world)
    extras = runtime.run(queries.detail_extras(world.redis, job_id))
    meta = runtime.run(world.store().get(job_id))
    detail = views.job_detail(job_id, meta, None, None, extras)
    events = {state: ts for ts, state in extras.events}
    assert detail["started_at"] == views.rfc3339_us(events["RUNNING"])
    assert detail["completed_at"] == views.rfc3339_us(events["FAILED"])
    assert detail["error_message"] == "worker crashed"
    assert detail["error_code"] == "worker_error"
    assert detail["last_state"] == "RUNNING"
    assert detail["prompt"] == "summarise this" and detail["adapter_id"] == "echo-v1"


def test_detail_of_a_pending_job_has_null_start_and_completion(world):
    job_id = world.job()
    extras = runtime.run(queries.detail_extras(world.redis, job_id))
    detail = views.job_detail(job_id, runtime.run(world.store().get(job_id)), None, None,
                              extras)
    assert detail["started_at"] is None and detail["completed_at"] is None
    assert detail["decisions"] == [] and "error_code" not in detail
    assert "output_safety" not in detail


def test_detail_of_another_tenants_job_is_403_and_unknown_404(world):
    job_id = world.job()
    status, err, _ = call(event("GET", f"/api/v1/jobs/{job_id}", key=OTHER_KEY,
                             tenant=world.other))
    assert status == 403 and err["code"] == "tenant_access_denied"
    status, err, _ = call(event("GET", f"/api/v1/jobs/{job_id}-nope",
                                key=ADMIN_KEY, tenant=world.tenant))
    assert status == 404 and err["code"] == "job_not_found"


# --------------------------------------------------------------------------- decisions


@pytest.mark.parametrize(("stored", "action"), [
    ("DENY", "DENY"), ("deny", "DENY"), ("REQUIRE_APPROVAL", "REQUIRE_APPROVAL"),
    ("UNAVAILABLE", "UNAVAILABLE"), ("QUARANTINE", None), ("", None)])
def test_decisions_are_a_bare_array_of_the_six_actions(world, stored, action):
    job_id = world.job(path=[JobState.APPROVAL_REQUIRED], fields={
        "safety_decision": stored, "safety_reason": "why", "safety_rule_id": "r1",
        "safety_checked_at": "1747000000000000"})
    status, body, _ = call(event("GET", f"/api/v1/jobs/{job_id}/decisions",
                                 key=ADMIN_KEY, tenant=world.tenant))
    assert status == 200
    if action is None:
        assert body == []
    else:
        assert body == [{"rule_id": "r1", "action": action, "reason": "why",
                         "constraints": None, "evaluated_at": "2025-05-11T21:46:40Z"}]


def test_decisions_of_unknown_or_foreign_jobs(world):
    job_id = world.job()
    status, body, _ = call(event("GET", f"/api/v1/jobs/{job_id}/decisions",
                                 key=ADMIN_KEY, tenant=world.tenant))
    assert (status, body) == (200, [])
    status, err, _ = call(event("GET", f"/api/v1/jobs/{job_id}/decisions", key=OTHER_KEY,
                             tenant=world.other))
    assert status == 403 and err["code"] == "tenant_access_denied"
    status, err, _ = call(event("GET", f"/api/v1/jobs/{job_id}-x/decisions",
                                key=ADMIN_KEY, tenant=world.tenant))
    assert status == 404 and err["code"] == "job_not_found"
    status, _, _ = call(event("GET", f"/api/v1/jobs/{job_id}/decisions", key=None,
                           tenant=world.tenant))
    assert status == 401


# --------------------------------------------------------------------------- workers


def rfc3339_s(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_snapshot(world: World, now: float) -> None:
    doc = {
        "captured_at": rfc3339_s(now - 1), "writer_id": "bridge-abc123",
        "pools": {}, "topics": {},
        "workers": [
            {"worker_id": "w-fresh", "pool": "gpu", "active_jobs": 2, "max_parallel_jobs": 8,
             "capabilities": ["echo"], "cpu_load": 12.5, "gpu_utilization": 40.0,
             "memory_load": 30.0, "region": "eu", "type": "gpu",
             "labels": {"zone": "a"}, "last_heartbeat": rfc3339_s(now - 2)},
            {"worker_id": "w-stale", "pool": "cpu", "active_jobs": 0, "max_parallel_jobs": 4,
             "last_heartbeat": rfc3339_s(now - 45)},
            {"worker_id": "w-bare", "pool": "cpu", "active_jobs": 1, "max_parallel_jobs": 4},
        ],
    }
    runtime.run(world.redis.set(world.keys.snapshot, json.dumps(doc), ex=120))


def test_workers_from_the_snapshot_online_by_heartbeat_age(world):
    now = time.time()
    write_snapshot(world, now)
    status, body, _ = call(event("GET", "/api/v1/workers", key=ADMIN_KEY, tenant=world.tenant))
    assert status == 200, body
    by_id = {w["worker_id"]: w for w in body["items"]}
    assert list(by_id) == ["w-bare", "w-fresh", "w-stale"]
    fresh, stale, bare = by_id["w-fresh"], by_id["w-stale"], by_id["w-bare"]
    assert fresh["online"] is True and stale["online"] is False and bare["online"] is True
    assert 1 <= fresh["heartbeat_age_seconds"] < 30 <= stale["heartbeat_age_seconds"]
    assert fresh["last_heartbeat"] == rfc3339_s(now - 2)
    assert is_rfc3339(bare["last_heartbeat"])  # the snapshot's captured_at stands in
    assert fresh["labels"] == {"zone": "a"} and stale["labels"] == {}
    assert fresh["capabilities"] == ["echo"] and stale["capabilities"] == []
    assert (fresh["pool"], fresh["active_jobs"], fresh["max_parallel_jobs"]) == ("gpu", 2, 8)
    assert (fresh["cpu_load"], fresh["gpu_utilization"], fresh["memory_load"]) == (12.5, 40, 30)
    assert (fresh["region"], fresh["type"], stale["region"]) == ("eu", "gpu", "")


def test_workers_items_is_an_empty_list_without_a_snapshot(world):
    status, body, _ = call(event("GET", "/api/v1/workers", key=ADMIN_KEY, tenant=world.tenant))
    assert (status, body) == (200, {"items": []})


def test_workers_needs_admin(world):
    status, err, _ = call(event("GET", "/api/v1/workers", key=USER_KEY, tenant=world.tenant))
    assert status == 403 and err["code"] == "forbidden"
    status, _, _ = call(event("GET", "/api/v1/workers", key=None, tenant=world.tenant))
    assert status == 401


# --------------------------------------------------------------------------- status


def test_status_reports_connections_workers_and_an_open_breaker(world, monkeypatch):
    monkeypatch.setenv("CORDUM_BUILD_COMMIT", "abc1234")
    write_snapshot(world, time.time())
    runtime.run(world.redis.set(world.keys.input_fail_open, "7", ex=120))
    breaker = CircuitBreaker(world.redis, key_prefix=world.keys.breaker_prefix)

    async def open_it() -> None:
        for _ in range(breaker.policy.fail_threshold):
            await breaker.record_failure(await breaker.allow())

    runtime.run(open_it())
    status, body, _ = call(event("GET", "/api/v1/status", key=ADMIN_KEY, tenant=world.tenant))
    assert status == 200, body
    assert is_rfc3339(body["time"]) and body["uptime_seconds"] >= 0
    assert body["build"] == {"version": "dev", "commit": "abc1234", "date": ""}
    assert body["redis"] == {"connected": True, "url": REDIS_URL}
    assert body["nats"] == {"connected": True, "url": NATS_URL}
    assert body["workers"] == 2
    breakers = body["circuit_breakers"]
    assert breakers["input"]["state"] == "OPEN" and breakers["input"]["failures"] == 3
    assert breakers["input"]["fail_threshold"] == 3
    # The time until the breaker admits its first probes (1 s after opening), not 30 s
    assert 0 < breakers["input"]["cooldown_remaining_ms"] <= 1_000
    assert breakers["output"] == {"state": "CLOSED", "failures": 0, "fail_threshold": 3,
                                  "cooldown_remaining_ms": 0}
    assert body["input_fail_open_total"] == 7
    assert body["snapshot_meta"]["writer_id"] == "bridge-abc123"
    assert is_rfc3339(body["snapshot_meta"]["captured_at"])


def test_status_without_admin_has_no_extras(world):
    status, body, _ = call(event("GET", "/api/v1/status", key=USER_KEY, tenant=world.tenant))
    assert status == 200
    assert not {"circuit_breakers", "input_fail_open_total", "snapshot_meta"} & set(body)
    assert body["redis"] == {"connected": True} and body["nats"] == {"connected": True}
    assert body["workers"] == 0
    status, _, _ = call(event("GET", "/api/v1/status", key=None, tenant=world.tenant))
    assert status == 401


def test_status_with_redis_down_still_answers(world, monkeypatch):
    configure(monkeypatch, world, redis_url="redis://127.0.0.1:1")
    status, body, _ = call(event("GET", "/api/v1/status", key=ADMIN_KEY, tenant=world.tenant))
    assert status == 200
    assert body["redis"]["connected"] is False and body["nats"]["connected"] is True
    assert body["workers"] == 0
    assert body["circuit_breakers"]["input"]["state"] == "UNKNOWN"
    assert body["input_fail_open_total"] == 0


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://:s3cret@cache.local:6379/0", "redis://cache.local:6379/0"),
    ("rediss://app:s3cret@cache.local:6380", "rediss://app@cache.local:6380"),
    ("redis://cache.local:6379?password=s3cret", "redis://cache.local:6379"),
    ("nats://user:pw@a:4222, nats://token@b:4222", "nats://a:4222,nats://b:4222"),
])
def test_urls_in_status_carry_no_secret(url, shown):
    assert system.redact_url(url) == shown


# --------------------------------------------------------------------------- health


def test_health_is_json_and_needs_no_key(world):
    status, body, _ = call(event("GET", "/health", key=None))
    assert (status, body) == (200, {"status": "healthy", "redis": "ok", "nats": "ok"})


def test_health_v1_needs_a_key(world):
    status, _, _ = call(event("GET", "/api/v1/health", key=None, tenant=world.tenant))
    assert status == 401
    status, _, _ = call(event("GET", "/api/v1/health", key=OTHER_KEY, tenant=world.tenant))
    assert status == 403
    status, body, _ = call(event("GET", "/api/v1/health", key=ADMIN_KEY, tenant=world.tenant))
    assert (status, body) == (200, {"status": "healthy", "redis": "ok", "nats": "ok"})


@pytest.mark.parametrize("down", ["redis", "nats"])
def test_health_is_503_when_a_dependency_is_down(world, monkeypatch, down):
    if down == "redis":
        configure(monkeypatch, world, redis_url="redis://127.0.0.1:1")
    else:
        configure(monkeypatch, world, nats_url="nats://127.0.0.1:1")
    for path, key in (("/health", None), ("/api/v1/health", ADMIN_KEY)):
        status, body, _ = call(event("GET", path, key=key, tenant=world.tenant))
        assert status == 503, body
        assert body["status"] == "unhealthy" and body["code"] == "unhealthy"
        assert body[down] != "ok" and down in body["error"]
        up = "nats" if down == "redis" else "redis"
        assert body[up] == "ok"


def _record(phase: str, decision: str = "ALLOW", quarantined: bool = False) -> str:
    return json.dumps({"decision": decision, "phase": phase, "quarantined": quarantined})


@pytest.mark.parametrize(("meta", "policy", "served"), [
    ({"state": "SUCCEEDED", "result_ptr": "redis://res:j"}, False, "redis://res:j"),
    # The policy is on and nothing was recorded: unchecked.
    ({"state": "SUCCEEDED", "result_ptr": "redis://res:j"}, True, None),
    # The content scan has not decided yet.
    ({"state": "SUCCEEDED", "result_ptr": "redis://res:j", "output_safety": _record("sync")},
     False, None),
    ({"state": "SUCCEEDED", "result_ptr": "redis://res:j", "output_safety": _record("async")},
     True, "redis://res:j"),
    ({"state": "SUCCEEDED", "result_ptr": "redis://res:j:redacted",
      "output_safety": _record("async")}, True, "redis://res:j:redacted"),
    # After a REDACT only the redacted copy is served.
    ({"state": "SUCCEEDED", "result_ptr": "redis://res:j",
      "output_safety": _record("async", "REDACT")}, True, None),
    ({"state": "SUCCEEDED", "result_ptr": "redis://res:j",
      "output_safety": _record("async", "QUARANTINE", True)}, True, None),
    ({"state": "OUTPUT_QUARANTINED", "result_ptr": "redis://res:j",
      "output_safety": _record("async", "QUARANTINE", True)}, True, None),
    ({"state": "FAILED", "result_ptr": "redis://res:j"}, False, None),
    # Only the job's own result key is ever a result.
    ({"state": "SUCCEEDED", "result_ptr": "redis://ctx:other"}, False, None),
    ({"state": "SUCCEEDED", "result_ptr": "redis://res:other"}, False, None),
    ({"state": "SUCCEEDED", "result_ptr": "res:j"}, False, None),
])
def test_only_a_succeeded_jobs_finally_checked_own_result_is_served(meta, policy, served):
    assert served_result_ptr("j", meta, output_policy=policy) == served
    detail = views.job_detail("j", meta, "redis://res:j", {"a": 1})
    if meta["state"] != "SUCCEEDED":
        assert detail["result"] is None and detail["result_ptr"] is None
