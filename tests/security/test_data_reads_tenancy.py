"""A trace, a worker and a worker's jobs are read only as the caller's tenant's: each test
is an attempt that must fail. Another tenant's trace answers exactly as a missing one
(no existence oracle); another tenant's jobs of a worker are never listed, and a worker
known only by another tenant's jobs is a missing one; a key naming another tenant by a
header is refused whether the trace exists or not. Workers are read by the roles that
read them in Cordum (admin, viewer, operator, workers.read), never by a submitting key.

Keys: tenant A: ``admin``, ``viewer``, ``operator``, ``workers.read``, ``user``,
``jobs.write``; tenant B: ``admin`` and ``viewer``; ``root`` (admin of ``*``).
"""

from __future__ import annotations

import json

import pytest

from cordum.gateway.system import service as system
from cordum.store.jobs import JobState
from tests import helpers
from tests.integration.test_gateway_traces_workers import Jobs
from tests.security.conftest import configure

A_ADMIN, A_VIEWER, A_OPERATOR = "dr-a-admin-0123456789", "dr-a-viewer-0123456789", \
    "dr-a-operator-0123456789"
A_WORKERS, A_USER, A_WRITER = "dr-a-workers-0123456789", "dr-a-user-0123456789", \
    "dr-a-writer-0123456789"
B_ADMIN, B_VIEWER = "dr-b-admin-0123456789", "dr-b-viewer-0123456789"
ROOT = "dr-root-0123456789"
RUNNING = [JobState.SCHEDULED, JobState.DISPATCHED, JobState.RUNNING]


class World(Jobs):
    def call(self, path: str, key: str, *, tenant: str | None = None,
             headers: dict[str, str | None] | None = None) -> tuple[int, object]:
        status, body, _ = helpers.call(helpers.event("GET", path, key=key, tenant=tenant,
                                                     headers=headers))
        return status, body


@pytest.fixture
def w(monkeypatch: pytest.MonkeyPatch, unique: str):  # type: ignore[no-untyped-def]
    world = World(unique)
    a, b = world.tenant, world.other
    configure(monkeypatch, [
        {"key": A_ADMIN, "tenant": a, "role": "admin"},
        {"key": A_VIEWER, "tenant": a, "role": "viewer"},
        {"key": A_OPERATOR, "tenant": a, "role": "operator"},
        {"key": A_WORKERS, "tenant": a, "role": "workers.read"},
        {"key": A_USER, "tenant": a, "role": "user"},
        {"key": A_WRITER, "tenant": a, "role": "jobs.write"},
        {"key": B_ADMIN, "tenant": b, "role": "admin"},
        {"key": B_VIEWER, "tenant": b, "role": "viewer"},
        {"key": ROOT, "tenant": "*", "role": "admin"},
    ], CORDUM_RATE_LIMIT_RPS="0")
    monkeypatch.setattr(system, "KEYS", world.keys)
    with helpers.gateway_process():
        world.trace = f"trace-{unique}"  # type: ignore[attr-defined]
        world.secret = world.succeeded(trace_id=world.trace,  # type: ignore[attr-defined]
                                       result={"plan": "secret of A"}, worker="w-shared")
        world.job(path=RUNNING, fields={"worker_id": "w-gone"})
        world.snapshot("w-shared")
        try:
            yield world
        finally:
            world.cleanup()


def test_another_tenants_trace_is_the_same_404_as_a_missing_one(w):
    for key, tenant in ((B_ADMIN, w.other), (B_VIEWER, w.other), (ROOT, w.other)):
        theirs = w.call(f"/api/v1/traces/{w.trace}", key, tenant=tenant)
        missing = w.call(f"/api/v1/traces/{w.trace}-none", key, tenant=tenant)
        assert theirs == missing, key
        assert theirs[0] == 404 and w.secret not in json.dumps(theirs[1])


def test_a_header_naming_a_is_refused_alike_for_a_trace_that_exists_or_not(w):
    for headers in ({"X-Tenant-ID": w.tenant}, {"X-Cordum-Tenant": w.tenant}):
        real = w.call(f"/api/v1/traces/{w.trace}", B_ADMIN, headers=headers)
        none = w.call(f"/api/v1/traces/{w.trace}-none", B_ADMIN, headers=headers)
        assert real == none and real[0] == 403
        assert "secret" not in json.dumps(real[1])


def test_every_role_of_the_tenant_reads_its_trace_and_root_only_as_the_named_tenant(w):
    for key in (A_ADMIN, A_VIEWER, A_USER, A_WRITER):
        status, body = w.call(f"/api/v1/traces/{w.trace}", key, tenant=w.tenant)
        assert status == 200 and [d["id"] for d in body] == [w.secret], key
    assert w.call(f"/api/v1/traces/{w.trace}", ROOT, tenant=w.tenant)[0] == 200
    assert w.call(f"/api/v1/traces/{w.trace}", ROOT, tenant=w.other)[0] == 404


@pytest.mark.parametrize("path", ["/api/v1/workers", "/api/v1/workers/w-shared",
                                  "/api/v1/workers/w-shared/jobs"])
def test_workers_are_read_by_cordums_reading_roles_only(w, path):
    for key in (A_ADMIN, A_VIEWER, A_OPERATOR, A_WORKERS):
        assert w.call(path, key, tenant=w.tenant)[0] == 200, key
    for key in (A_USER, A_WRITER):
        status, body = w.call(path, key, tenant=w.tenant)
        assert (status, body["code"]) == (403, "forbidden"), key  # type: ignore[index]
    assert w.call(path, None, tenant=w.tenant)[0] == 401


def test_another_tenants_jobs_of_a_shared_worker_are_never_listed(w):
    mine = w.call("/api/v1/workers/w-shared/jobs", A_VIEWER, tenant=w.tenant)
    assert [j["id"] for j in mine[1]["items"]] == [w.secret]  # type: ignore[index]
    for key in (B_ADMIN, B_VIEWER):
        assert w.call("/api/v1/workers/w-shared/jobs", key, tenant=w.other) == \
            (200, {"items": []})


def test_a_worker_known_only_by_another_tenants_jobs_is_a_missing_one(w):
    assert w.call("/api/v1/workers/w-gone/jobs", A_ADMIN, tenant=w.tenant)[0] == 200
    theirs = w.call("/api/v1/workers/w-gone/jobs", B_ADMIN, tenant=w.other)
    missing = w.call("/api/v1/workers/w-never/jobs", B_ADMIN, tenant=w.other)
    assert theirs == missing and theirs[0] == 404
    assert w.call("/api/v1/workers/w-gone", B_ADMIN, tenant=w.other) == \
        w.call("/api/v1/workers/w-never", B_ADMIN, tenant=w.other)


def test_a_query_tenant_does_not_widen_a_workers_jobs(w):
    status, body, _ = helpers.call(helpers.event(
        "GET", "/api/v1/workers/w-shared/jobs", key=B_ADMIN, tenant=w.other,
        query={"tenant": w.tenant, "tenant_id": w.tenant}))
    assert (status, body) == (200, {"items": []})
