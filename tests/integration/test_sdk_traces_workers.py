"""cordum-sdk 0.1.0's ``jobs.get_trace``, ``workers.get_worker`` and
``workers.get_worker_jobs`` against the gateway (over HTTP to a loopback server that
hands each request to the gateway function as API Gateway would), on the real Redis:
each answer is parsed by the client's own generated models, and the values it reads
are checked. A trace is a bare array of JobDetail; a worker a WorkerRuntime; a
worker's jobs ``{"items": [JobRecord]}`` with ``updated_at`` an integer (µs)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest
from cordum_sdk import CordumClient
from cordum_sdk._generated.models import (
    GetWorkerJobsResponse200,
    JobDetail,
    JobRecord,
    WorkerRuntime,
)
from cordum_sdk._generated.types import UNSET
from cordum_sdk._retry import RetryPolicy
from cordum_sdk.errors import NotFoundError

from cordum import config, runtime
from cordum.gateway.core import deps
from cordum.store.jobs import JobState
from tests import helpers
from tests.integration.test_gateway_traces_workers import ADMIN, OTHER, VIEWER, Jobs, configure
from tests.sdk_loopback import loopback_gateway

RUNNING = [JobState.SCHEDULED, JobState.DISPATCHED, JobState.RUNNING]


class Sdk:
    def __init__(self, world: Jobs, url: str) -> None:
        self.world = world
        self.admin = CordumClient(url, ADMIN, tenant_id=world.tenant,
                                  retry_policy=RetryPolicy(max_retries=0))
        self.viewer = CordumClient(url, VIEWER, tenant_id=world.tenant,
                                   retry_policy=RetryPolicy(max_retries=0))
        self.other = CordumClient(url, OTHER, tenant_id=world.other,
                                  retry_policy=RetryPolicy(max_retries=0))

    def close(self) -> None:
        for client in (self.admin, self.viewer, self.other):
            client.close()


@pytest.fixture
def sdk(monkeypatch: pytest.MonkeyPatch, unique: str) -> Iterator[Sdk]:
    world = Jobs(unique)
    configure(monkeypatch, world)
    with helpers.gateway_process(), loopback_gateway() as url:
        clients = Sdk(world, url)
        try:
            yield clients
        finally:
            clients.close()
            world.cleanup()
    config.settings.cache_clear()
    deps.reset()
    runtime.reset()


def test_get_trace_parses_the_jobs_as_job_details(sdk: Sdk) -> None:
    w = sdk.world
    trace = f"trace-{w.unique}"
    pending = w.job(trace_id=trace, prompt="first step")
    failed = w.job(trace_id=trace, path=[*RUNNING, JobState.FAILED],
                   fields={"worker_id": "w-1", "failure_reason": "worker crashed"})
    done = w.succeeded(trace_id=trace, result={"answer": 42})
    got = sdk.viewer.jobs.get_trace(trace)
    assert isinstance(got, list) and all(isinstance(d, JobDetail) for d in got)
    assert [d.id for d in got] == [done, failed, pending]
    newest, middle, oldest = got
    assert newest.state == "SUCCEEDED" and newest.trace_id == trace
    assert newest.result is not None and newest.result["answer"] == 42
    assert isinstance(newest.started_at, datetime) and isinstance(newest.completed_at, datetime)
    assert middle.state == "FAILED" and middle.error == "worker crashed"
    assert middle.result is None
    assert oldest.prompt == "first step" and oldest.started_at is None
    assert oldest.priority == 2 and oldest.labels is not UNSET
    assert oldest.labels["team"] == "blue"  # type: ignore[index]
    with pytest.raises(NotFoundError, match="trace not found"):
        sdk.other.jobs.get_trace(trace)
    with pytest.raises(NotFoundError, match="trace not found"):
        sdk.viewer.jobs.get_trace(f"{trace}-none")


def test_get_worker_parses_a_worker_runtime(sdk: Sdk) -> None:
    sdk.world.snapshot("w-1")
    got = sdk.viewer.workers.get_worker("w-1")
    assert isinstance(got, WorkerRuntime)
    assert got.worker_id == "w-1" and got.pool == "echo" and got.max_parallel_jobs == 4
    assert got.capabilities == ["echo"] and isinstance(got.last_heartbeat, datetime)
    assert got.labels is not UNSET and got.labels["zone"] == "a"  # type: ignore[index]
    with pytest.raises(NotFoundError, match="worker not found"):
        sdk.viewer.workers.get_worker("w-none")


def test_get_worker_jobs_parses_job_records_with_integer_times(sdk: Sdk) -> None:
    w = sdk.world
    w.snapshot("w-1")
    trace = f"trace-{w.unique}"
    done = w.succeeded(trace_id=trace, result={"ok": True}, worker="w-1")
    running = w.job(path=RUNNING, fields={"worker_id": "w-1"}, topic="job.sdk")
    w.job(path=RUNNING, fields={"worker_id": "w-2"})
    got = sdk.viewer.workers.get_worker_jobs("w-1")
    assert isinstance(got, GetWorkerJobsResponse200)
    assert all(isinstance(r, JobRecord) for r in got.items)
    assert [r.id for r in got.items] == [running, done]
    first, second = got.items
    assert first.state == "RUNNING" and first.topic == "job.sdk" and first.worker_id == "w-1"
    assert second.state == "SUCCEEDED" and second.trace_id == trace
    assert second.tenant == w.tenant and isinstance(second.updated_at, int)
    assert first.updated_at > second.updated_at > 1_600_000_000_000_000
    assert second.attempts == 1
    limited = sdk.admin.workers.get_worker_jobs("w-1", limit=1)
    assert [r.id for r in limited.items] == [running]
    assert sdk.other.workers.get_worker_jobs("w-1").items == []
    with pytest.raises(NotFoundError, match="worker not found"):
        sdk.viewer.workers.get_worker_jobs("w-none")
