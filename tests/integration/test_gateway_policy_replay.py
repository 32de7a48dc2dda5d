"""Policy replay and analytics through the gateway, on the real Redis: jobs of two
tenants stored with the job store's own scripts, a candidate policy replayed over
them, changes paged with a cursor, and the approval figures of each rule."""

from __future__ import annotations

import json
import time

import pytest

from cordum import config, runtime
from cordum.gateway.core import deps
from cordum.gateway.policy import schemas
from cordum.gateway.policy.store import AUDIT_KEY, SNAPSHOTS_KEY
from cordum.safety.bundles import POLICY_DOC_KEY
from cordum.store.jobs import JobState, JobStore, NewJob
from tests import helpers
from tests.conftest import NATS_URL, REDIS_URL

WRITER = "replay-writer-key"
"""policy.write in tenant A."""
READER = "replay-reader-key"
"""policy.read in tenant A."""
USER = "replay-user-key"
OTHER_ADMIN = "replay-other-admin-key"
"""admin in tenant B."""

DENY_ECHO = """\
rules:
  - id: replay-deny-echo
    match: {topics: [job.echo]}
    decision: deny
    reason: "echo is off"
"""
ALLOW_LEGACY = """\
rules:
  - id: replay-allow-legacy
    match: {topics: [job.replaylegacy]}
    decision: allow
"""
GATE_DEFAULT = """\
rules:
  - id: replay-gate-default
    match: {topics: [job.default]}
    decision: require_approval
"""


def window(minutes: int = 60) -> dict[str, str]:
    now = time.time()
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    return {"from": time.strftime(fmt, time.gmtime(now - minutes * 60)),
            "to": time.strftime(fmt, time.gmtime(now + minutes * 60))}


class World:
    """Two tenants' jobs and a gateway whose keys belong to tenant A or B."""

    def __init__(self, unique: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.a, self.b = f"ra-{unique}", f"rb-{unique}"
        monkeypatch.setenv("CORDUM_API_KEYS", json.dumps([
            {"key": WRITER, "tenant": self.a, "role": "policy.write", "principal_id": "w"},
            {"key": READER, "tenant": self.a, "role": "policy.read", "principal_id": "r"},
            {"key": USER, "tenant": self.a, "role": "user", "principal_id": "u"},
            {"key": OTHER_ADMIN, "tenant": self.b, "role": "admin", "principal_id": "o"},
        ]))
        monkeypatch.delenv("CORDUM_API_KEY", raising=False)
        monkeypatch.setenv("REDIS_URL", REDIS_URL)
        monkeypatch.setenv("NATS_URL", NATS_URL)
        monkeypatch.setenv("CORDUM_RATE_LIMIT_RPS", "0")
        config.settings.cache_clear()
        deps.reset()
        runtime.reset()
        self.jobs: list[str] = []
        self.unique = unique

    def seed(self, tenant: str, topic: str, decision: str = "ALLOW", *,
             state: JobState = JobState.SUCCEEDED, **fields: str) -> str:
        store = JobStore(runtime.redis_client(), retention_s=3600)
        job_id = f"{tenant}-{len(self.jobs)}"
        request = json.dumps({"jobId": job_id, "topic": topic, "tenantId": tenant})
        assert runtime.run(store.create(NewJob(
            job_id=job_id, trace_id=f"tr-{job_id}", tenant=tenant, topic=topic,
            context="{}", request=request, meta={"principal": "someone"})))
        meta = {"safety_decision": decision, "safety_rule_id": fields.pop("rule", "r0"),
                **fields}
        runtime.run(store.transition(job_id, [state], fields=meta))
        self.jobs.append(job_id)
        return job_id

    def call(self, path: str, body: dict, key: str = WRITER, tenant: str | None = None,
             headers: dict | None = None):
        status, answer, _ = helpers.call(helpers.event(
            "POST", path, body, key=key, tenant=tenant if tenant is not None else self.a,
            headers=headers))
        return status, answer

    def replay(self, body: dict, **kw):
        return self.call("/api/v1/policy/replay", {**window(), **body}, **kw)

    def analytics(self, body: dict | None = None, **kw):
        return self.call("/api/v1/policy/analytics", {**window(), **(body or {})},
                         **{"key": READER, **kw})


def forget_policy() -> None:
    runtime.run(runtime.redis_client().delete(POLICY_DOC_KEY, SNAPSHOTS_KEY, AUDIT_KEY))


@pytest.fixture
def world(unique, monkeypatch):
    w = World(unique, monkeypatch)
    with helpers.gateway_process():
        forget_policy()
        try:
            yield w
        finally:
            runtime.run(helpers.forget_jobs(runtime.redis_client(), w.jobs,
                                            tombstone=False))
            forget_policy()


def test_a_candidate_denying_a_topic_lists_exactly_the_tenants_jobs_of_it(world):
    echo_a = {world.seed(world.a, "job.echo", rule="default-topic-allow") for _ in range(3)}
    world.seed(world.a, "job.default", rule="default-topic-allow")
    for _ in range(2):
        world.seed(world.b, "job.echo", rule="default-topic-allow")

    span = window()
    status, body = world.replay({**span, "candidate_content": DENY_ECHO})

    assert status == 200, body
    assert {c["job_id"] for c in body["changes"]} == echo_a
    for change in body["changes"]:
        assert change["tenant"] == world.a and change["topic"] == "job.echo"
        assert (change["original_decision"], change["new_decision"]) == ("ALLOW", "DENY")
        assert (change["direction"], change["kind"]) == ("escalated", "allow_to_deny")
        assert change["new_rule_id"] == "replay-deny-echo"
        assert change["new_reason"] == "echo is off"
    assert body["summary"] == {"total_jobs": 4, "evaluated": 4, "escalated": 3,
                               "relaxed": 0, "unchanged": 1, "errored": 0, "scanned": 4}
    assert {"rule_id": "replay-deny-echo", "decision": "DENY", "count": 3} in body["rule_hits"]
    assert body["next_cursor"] is None and body["truncated"] is False
    assert "|cfg:" in body["policy_snapshot"]
    assert any("velocity" in w for w in body["warnings"])
    assert body["time_range"] == span
    schemas.PolicyReplayResult.model_validate_json(json.dumps(body), strict=True)


def test_relaxed_and_newly_gated_jobs_are_told_apart(world):
    denied = world.seed(world.a, "job.replaylegacy", "DENY", state=JobState.DENIED,
                        rule="default")
    allowed = world.seed(world.a, "job.default", rule="default-topic-allow")

    status, relaxed = world.replay({"candidate_content": ALLOW_LEGACY})
    assert status == 200, relaxed
    [change] = relaxed["changes"]
    assert change["job_id"] == denied
    assert (change["direction"], change["kind"]) == ("relaxed", "deny_to_allow")

    status, gated = world.replay({"candidate_bundle_id": "secops/gate",
                                  "candidate_content": GATE_DEFAULT})
    assert status == 200, gated
    [change] = gated["changes"]
    assert change["job_id"] == allowed
    assert change["new_decision"] == "REQUIRE_APPROVAL"
    assert (change["direction"], change["kind"]) == ("escalated", "newly_gated")


def test_the_current_policy_and_filters(world):
    world.seed(world.a, "job.default", rule="default-topic-allow")
    # Recorded as allowed, though the policy in force denies the topic.
    drifted = world.seed(world.a, "job.replaydrift", rule="old")
    status, body = world.replay({"use_current_policy": True})
    assert status == 200, body
    assert [c["job_id"] for c in body["changes"]] == [drifted]

    status, body = world.replay({"use_current_policy": True,
                                 "filters": {"topic_pattern": "job.default*"}})
    assert (status, body["changes"], body["summary"]["total_jobs"]) == (200, [], 1)
    status, body = world.replay({"use_current_policy": True,
                                 "filters": {"original_decision": "deny"}})
    assert (status, body["summary"]["total_jobs"]) == (200, 0)


def test_an_approved_job_is_compared_as_gated(world):
    # The dispatch re-check of an approved job writes ALLOW; its policy decision was a gate.
    world.seed(world.a, "job.default", "ALLOW", rule="default-topic-allow",
               safety_approval_required="true", approval_status="APPROVED")
    status, body = world.replay({"candidate_content": GATE_DEFAULT})
    assert (status, body["changes"]) == (200, [])
    assert body["summary"]["unchanged"] == 1


def test_changes_are_paged_with_a_cursor(world):
    seeded = {world.seed(world.a, "job.echo", rule="default-topic-allow") for _ in range(7)}
    seen: list[str] = []
    cursor = ""
    pages = 0
    while True:
        status, body = world.replay({"candidate_content": DENY_ECHO, "limit": 3,
                                     "cursor": cursor})
        assert status == 200, body
        pages += 1
        seen += [c["job_id"] for c in body["changes"]]
        if body["next_cursor"] is None:
            break
        assert body["truncated"] is True and body["stopped_by"] == "limit"
        assert len(body["changes"]) == 3
        cursor = body["next_cursor"]
    assert pages == 3
    assert sorted(seen) == sorted(seeded) and len(seen) == len(set(seen))


def test_max_jobs_stops_the_scan_with_a_cursor(world):
    for _ in range(5):
        world.seed(world.a, "job.default", rule="default-topic-allow")
    status, body = world.replay({"use_current_policy": True, "max_jobs": 2})
    assert status == 200, body
    assert (body["summary"]["scanned"], body["stopped_by"]) == (2, "max_jobs")
    status, rest = world.replay({"use_current_policy": True, "cursor": body["next_cursor"]})
    assert (rest["summary"]["scanned"], rest["next_cursor"]) == (3, None)


@pytest.mark.parametrize("body", [
    {"from": "2026-01-01T00:00:00Z", "to": "2026-01-09T00:00:00Z", "use_current_policy": True},
    {"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z", "use_current_policy": True},
    {"from": "yesterday", "to": "2026-01-01T00:00:00Z", "use_current_policy": True},
    {**window(), "candidate_content": DENY_ECHO, "use_current_policy": True},
    {**window()},
])
def test_a_bad_window_or_policy_source_is_refused(world, body):
    status, answer = world.call("/api/v1/policy/replay", body)
    assert (status, answer["code"]) == (400, "POLICY_VALIDATION_FAILED")


def test_an_invalid_candidate_names_its_line_and_rule(world):
    bad = "rules:\n  - id: broken\n    match: {topics: [job.x]}\n    decision: maybe\n"
    status, body = world.replay({"candidate_content": bad})
    assert (status, body["code"]) == (400, "POLICY_VALIDATION_FAILED")
    assert "line 4" in body["error"] and "broken" in body["error"]


def test_analytics_and_spans(world):
    status, body = world.analytics({"from": "2026-01-01T00:00:00Z",
                                    "to": "2026-01-09T00:00:00Z"})
    assert (status, body["code"]) == (400, "invalid_analytics_window")


def test_analytics_counts_approvals_and_their_latency(world):
    asked = str(int(time.time() * 1e6))

    def answered(seconds: float) -> str:
        return str(int(asked) + int(seconds * 1e6))

    gate = {"rule": "gate-rule", "safety_approval_required": "true",
            "safety_checked_at": asked}
    # Approved after 5 s (ALLOW since the re-check) and after 2 min; rejected after 30 min.
    world.seed(world.a, "job.default", "ALLOW", **gate, approval_status="APPROVED",
               approval_decided_at=answered(5))
    world.seed(world.a, "job.default", "ALLOW", **gate, approval_status="APPROVED",
               approval_decided_at=answered(120))
    world.seed(world.a, "job.default", "REQUIRE_APPROVAL", state=JobState.DENIED, **gate,
               approval_status="REJECTED", approval_decided_at=answered(1800))
    world.seed(world.a, "job.default", "REQUIRE_APPROVAL",
               state=JobState.APPROVAL_REQUIRED, **gate)
    for _ in range(3):
        world.seed(world.a, "job.echo", rule="allow-rule")
    world.seed(world.b, "job.default", "ALLOW", **gate, approval_status="APPROVED",
               approval_decided_at=answered(1))

    status, body = world.analytics()
    assert status == 200, body
    by_id = {r["rule_id"]: r for r in body["rules"]}
    assert list(by_id) == ["gate-rule", "allow-rule"]
    gated = by_id["gate-rule"]
    assert (gated["hit_count"], gated["approval_count"], gated["approved_count"],
            gated["rejected_count"], gated["override_count"]) == (4, 4, 2, 1, 2)
    assert gated["override_rate"] == 0.5
    assert gated["avg_approval_latency_ms"] == pytest.approx((5 + 120 + 1800) * 1000 / 3)
    assert gated["approval_latency_histogram"] == [
        {"le_ms": 1000, "count": 0}, {"le_ms": 10000, "count": 1},
        {"le_ms": 60000, "count": 1}, {"le_ms": 600000, "count": 2},
        {"le_ms": 3600000, "count": 3}, {"le_ms": 86400000, "count": 3},
        {"le_ms": None, "count": 3}]
    assert (by_id["allow-rule"]["hit_count"], by_id["allow-rule"]["approval_count"]) == (3, 0)
    assert by_id["allow-rule"]["avg_approval_latency_ms"] is None
    summary = body["summary"]
    assert (summary["total_rules"], summary["total_hits"], summary["approvals_asked"],
            summary["approved"], summary["rejected"]) == (2, 7, 4, 2, 1)
    assert summary["override_rate"] == 0.5
    assert summary["highest_override_rule_id"] == "gate-rule"
    assert summary["approval_latency_histogram"][-1] == {"le_ms": None, "count": 3}
    assert body["truncated"] is False and body["scanned"] == 7

    schemas.PolicyAnalyticsResult.model_validate_json(json.dumps(body), strict=True)

    status, only = world.analytics({"rule_filter": "allow-rule"})
    assert [r["rule_id"] for r in only["rules"]] == ["allow-rule"]


def test_roles(world):
    status, body = world.replay({"use_current_policy": True}, key=READER)
    assert (status, body["code"]) == (403, "forbidden")
    status, body = world.analytics(key=USER)
    assert (status, body["code"]) == (403, "forbidden")
    status, body = world.analytics(key=WRITER)
    assert status == 200, body


def test_the_time_bound_stops_the_scan_with_a_cursor(world):
    from cordum.gateway.policy.models import ReplayRequest
    from cordum.gateway.policy.replay import PolicyReplay, ReplayBounds
    from cordum.safety.bundles import effective_policy
    from tests.helpers import SHIPPED_POLICY

    policy = effective_policy(SHIPPED_POLICY.read_bytes(), str(SHIPPED_POLICY), {})

    for _ in range(3):
        world.seed(world.a, "job.default", rule="default-topic-allow")
    ticks = iter(range(100))
    replay = PolicyReplay(runtime.redis_client(), policy, world.a,
                          bounds=ReplayBounds(time_budget_s=1.5),
                          clock=lambda: float(next(ticks)))  # 0 at the start, +1 a job
    body = ReplayRequest.model_validate({**window(), "use_current_policy": True})
    answer = runtime.run(replay.run(body))
    assert (answer["stopped_by"], answer["summary"]["scanned"]) == ("deadline", 2)
    assert answer["truncated"] is True and answer["next_cursor"]
    assert any("deadline" in w for w in answer["warnings"])


def test_the_window_walk_pages_through_ties_and_states_once_each(world):
    from cordum.gateway.core.paging import Position
    from cordum.gateway.policy.history import TenantWindow
    from cordum.store.jobs import tenant_index_key

    redis = runtime.redis_client()
    now = int(time.time() * 1e6)
    rows = {f"tie-{world.unique}-{i}": now for i in range(5)}
    rows |= {f"older-{world.unique}-{i}": now - 1000 - i for i in range(4)}
    running = {f"run-{world.unique}-{i}": now - 500 - i for i in range(3)}
    succeeded, active = tenant_index_key(world.a, "succeeded"), tenant_index_key(world.a, "running")

    async def walk(batch: int) -> list[str]:
        await redis.zadd(succeeded, rows)
        await redis.zadd(active, running)
        window = TenantWindow(redis, world.a, now - 10**6, now + 10**6)
        seen: list[str] = []
        after = None
        pending = None
        while True:
            entries, exhausted = pending or await window.entries(after, batch)
            then = (Position(*entries[-1]), batch) if entries and not exhausted else None
            _, pending = await window.read(entries, ("tenant",), with_request=False, then=then)
            seen += [job_id for _, job_id in entries]
            if exhausted:
                return seen
            after = Position(*entries[-1])

    try:
        for batch in (1, 2, 3, 200):
            seen = runtime.run(walk(batch))
            assert len(seen) == len(set(seen)) == 12, (batch, seen)
            assert seen[:5] == sorted(rows, reverse=True)[:5]  # the ties, by id, descending
    finally:
        runtime.run(redis.delete(succeeded, active))


@pytest.mark.parametrize("body", [{"to": "2026-01-01T00:00:00Z", "use_current_policy": True},
                                  {"max_jobs": 0, "use_current_policy": True}])
def test_a_malformed_body_is_400(world, body):
    status, answer = world.call("/api/v1/policy/replay",
                                {**window(), **body} if "max_jobs" in body else body)
    assert status == 400, answer
