"""Replay and analytics read recorded decisions: a tenant's jobs, their topics and who
approved what. Each test is an attempt by another tenant's key (an admin's included)
to read tenant A's through them: by the body, by a header, by a cursor.

Keys: ``victim-admin`` (admin, tenant A), ``intruder`` (admin, tenant B),
``intruder-writer`` (policy.write, B), ``root`` (admin, ``*``).
"""

from __future__ import annotations

import json
import time

import pytest

from cordum import runtime
from cordum.store.jobs import JobState, JobStore, NewJob
from tests import helpers
from tests.security.conftest import configure

VICTIM = "tenancy-victim-admin-0123456789"
INTRUDER = "tenancy-intruder-0123456789"
INTRUDER_WRITER = "tenancy-intruder-writer-0123456789"
ROOT = "tenancy-root-0123456789"
DENY_ALL = "rules:\n  - id: deny-all\n    match: {topics: ['job.*']}\n    decision: deny\n"
PATHS = ("/api/v1/policy/replay", "/api/v1/policy/analytics")


def span() -> dict[str, str]:
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    now = time.time()
    return {"from": time.strftime(fmt, time.gmtime(now - 3600)),
            "to": time.strftime(fmt, time.gmtime(now + 3600))}


@pytest.fixture
def tenants(monkeypatch, unique):
    a, b = f"victim-{unique}", f"intruder-{unique}"
    configure(monkeypatch, [
        {"key": VICTIM, "tenant": a, "role": "admin", "principal_id": "victim"},
        {"key": INTRUDER, "tenant": b, "role": "admin", "principal_id": "intruder"},
        {"key": INTRUDER_WRITER, "tenant": b, "role": "policy.write", "principal_id": "iw"},
        {"key": ROOT, "tenant": "*", "role": "admin", "principal_id": "root"},
    ], CORDUM_RATE_LIMIT_RPS="0")
    jobs: list[str] = []
    with helpers.gateway_process():
        store = JobStore(runtime.redis_client(), retention_s=3600)
        for tenant, n in ((a, 3), (b, 1)):
            for i in range(n):
                job_id = f"{tenant}-job-{i}"
                assert runtime.run(store.create(NewJob(
                    job_id=job_id, trace_id=job_id, tenant=tenant, topic="job.default",
                    context="{}", request=json.dumps({"jobId": job_id, "topic": "job.default"}),
                    meta={})))
                runtime.run(store.transition(job_id, [JobState.SUCCEEDED], fields={
                    "safety_decision": "ALLOW", "safety_rule_id": f"rule-of-{tenant}"}))
                jobs.append(job_id)
        try:
            yield a, b
        finally:
            runtime.run(helpers.forget_jobs(runtime.redis_client(), jobs, tombstone=False))


def post(path: str, body: dict, key: str, tenant: str | None, headers=None):
    extra = {"candidate_content": DENY_ALL} if path.endswith("replay") else {}
    status, answer, _ = helpers.call(helpers.event(
        "POST", path, {**span(), **extra, **body}, key=key, tenant=tenant, headers=headers))
    return status, answer


def leaked(answer: object, victim: str) -> bool:
    return victim in json.dumps(answer)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("key", [INTRUDER, INTRUDER_WRITER])
def test_naming_the_victim_in_the_body_is_refused(tenants, path, key):
    a, b = tenants
    for body in ({"tenant": a}, {"filters": {"tenant": a}}):
        status, answer = post(path, body, key, b)
        assert not leaked(answer, a)
        if status == 200:
            # analytics has no filters: the field is ignored and B's jobs answered.
            assert "filters" in body and path.endswith("analytics")
            continue
        assert (status, answer["code"]) == (403, "tenant_access_denied"), answer


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("headers", [
    {"X-Tenant-ID": "{a}"},
    {"X-Tenant-ID": None, "X-Cordum-Tenant": "{a}"},
    {"X-Tenant-ID": "*"},
])
def test_naming_the_victim_in_a_header_is_refused(tenants, path, headers):
    a, _ = tenants
    sent = {k: v.format(a=a) if v else v for k, v in headers.items()}
    status, answer = post(path, {}, INTRUDER, None, headers=sent)
    assert status == 403, answer
    assert not leaked(answer, a)


@pytest.mark.parametrize("path", PATHS)
def test_the_intruder_sees_its_own_jobs_only_even_with_the_victims_header_beside(
        tenants, path):
    a, b = tenants
    # X-Tenant-ID wins over X-Cordum-Tenant: the answer is tenant B's.
    status, answer = post(path, {}, INTRUDER, b, headers={"X-Cordum-Tenant": a})
    assert status == 200, answer
    assert not leaked(answer, a)
    if path.endswith("replay"):
        assert [c["job_id"] for c in answer["changes"]] == [f"{b}-job-0"]
    else:
        assert [r["rule_id"] for r in answer["rules"]] == [f"rule-of-{b}"]


def test_a_cursor_at_the_victims_jobs_reads_the_intruders_index(tenants):
    a, b = tenants
    status, own = post(PATHS[0], {"limit": 1}, VICTIM, a)
    assert status == 200 and own["next_cursor"], own
    status, answer = post(PATHS[0], {"cursor": own["next_cursor"]}, INTRUDER, b)
    assert status == 200, answer
    assert not leaked(answer, a)


@pytest.mark.parametrize("path", PATHS)
def test_a_key_for_every_tenant_must_name_one_and_gets_only_it(tenants, path):
    a, b = tenants
    status, answer = post(path, {}, ROOT, None)
    assert (status, answer["code"]) == (403, "tenant_required")
    status, answer = post(path, {}, ROOT, a)
    assert status == 200, answer
    assert not leaked(answer, b)
    status, answer = post(path, {"tenant": b}, ROOT, a)
    assert (status, answer["code"]) == (403, "tenant_access_denied")
