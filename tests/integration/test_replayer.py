"""The pending replayer on the real Redis, driving a recording stand-in for the engine.

Old entries are made by writing index scores in 2005, with the replayer's
clock there too, so a tick only sees the jobs of its own test.
"""

from __future__ import annotations

import asyncio
import functools

import pytest
import redis.asyncio as aioredis
from google.protobuf import json_format

from cordum import protocol
from cordum.errors import RetryAfter
from cordum.scheduler.reconciler import ReconcilerTimeouts
from cordum.scheduler.replayer import PendingReplayer, ReplayerPolicy
from cordum.store.indexes import JobIndexes
from cordum.store.jobs import JobState, JobStore, NewJob, index_key, tenant_active_key
from tests.conftest import REDIS_URL
from tests.helpers import forget_jobs, run

BASE_US = 1_104_537_600_000_000
"""2005-01-01T00:00:00Z in µs: "now" for the replayer in these tests."""
MINUTE_US = 60_000_000


class RecordingEngine:
    """Records what the replayer hands over; answers RetryAfter for chosen jobs."""

    def __init__(self, busy: set[str] | None = None) -> None:
        self.calls: list[tuple[str, str, dict[str, str]]] = []
        self.busy = busy or set()

    async def handle_job_request(self, req: protocol.JobRequest, trace_id: str) -> None:
        self.calls.append((req.job_id, trace_id, dict(req.labels)))
        if req.job_id in self.busy:
            raise RetryAfter("job lock busy", 0.5)


class Env:
    def __init__(self, unique: str) -> None:
        self.unique = unique
        self.loop = asyncio.new_event_loop()
        self.redis = aioredis.Redis.from_url(REDIS_URL)
        self.store = JobStore(self.redis)
        self.ids: list[str] = []
        self.run = functools.partial(run, loop=self.loop)

    def job(self, name: str, state: JobState = JobState.PENDING, *, age_min: float | None = 5,
            labels: dict[str, str] | None = None) -> str:
        job_id = f"rep-{name}-{self.unique}"
        self.ids.append(job_id)
        req = protocol.JobRequest(job_id=job_id, topic="job.default", tenant_id="default")
        req.labels.update(labels or {})
        first = JobState.APPROVAL_REQUIRED if state is JobState.APPROVAL_REQUIRED else \
            JobState.PENDING
        self.run(self.store.create(NewJob(
            job_id=job_id, trace_id=f"tr-{job_id}", tenant=f"t-{self.unique}",
            topic="job.default", context="{}",
            request=json_format.MessageToJson(req, indent=None), meta={}, state=first)))
        if state is not first:
            self.run(self.store.transition(job_id, [state]))
        if age_min is not None:
            score = BASE_US - int(age_min * MINUTE_US)
            self.run(self.redis.zadd(index_key(state), {job_id: score}, xx=True))
        return job_id

    def tick(self, engine: RecordingEngine):
        replayer = PendingReplayer(engine, JobIndexes(self.redis), ReplayerPolicy(),
                                   clock_us=lambda: BASE_US)
        return self.run(replayer.tick())

    def cleanup(self) -> None:
        # The engine is a recording stand-in: nothing is published, no tombstone needed.
        self.run(forget_jobs(self.redis, self.ids, tombstone=False))
        self.run(self.redis.delete(tenant_active_key(f"t-{self.unique}")))
        self.run(self.redis.aclose())
        self.loop.close()


@pytest.fixture
def env(unique):
    e = Env(unique)
    yield e
    e.cleanup()


def test_old_pending_job_is_handed_to_the_engine_with_its_request_and_trace(env):
    # Given a PENDING job older than the pending age (2 min) and a fresh one
    old = env.job("old", age_min=5)
    fresh = env.job("fresh", age_min=None)
    engine = RecordingEngine()
    # When the replayer ticks
    report = env.tick(engine)
    # Then only the old one went to the engine, with its stored request and trace id
    assert [(job_id, trace) for job_id, trace, _ in engine.calls] == [(old, f"tr-{old}")]
    assert fresh not in [c[0] for c in engine.calls]
    assert report.replayed == {"PENDING": 1}


def test_approved_and_scheduled_jobs_are_replayed_waiting_approvals_are_not(env):
    approved = env.job("approved", JobState.APPROVAL_REQUIRED)
    # Approved is what the approve endpoint records in the meta; a label is not.
    env.run(env.redis.hset(f"job:meta:{approved}", "approval_status", "APPROVED"))
    waiting = env.job("waiting", JobState.APPROVAL_REQUIRED,
                      labels={"approval_granted": "true"})
    scheduled = env.job("scheduled", JobState.SCHEDULED)
    engine = RecordingEngine()
    report = env.tick(engine)
    called = [c[0] for c in engine.calls]
    assert called == [approved, scheduled]
    assert waiting not in called
    assert report.replayed == {"APPROVAL_REQUIRED": 1, "SCHEDULED": 1}
    assert report.not_approved == 1


def test_a_job_its_worker_asked_to_retry_is_driven_again_not_left_retrying(env):
    # A worker's FAILED_RETRYABLE leaves the job RETRYING; nothing else would ever move it.
    retrying = env.job("retrying", JobState.RETRYING)
    fresh = env.job("fresh-retry", JobState.RETRYING, age_min=None)
    engine = RecordingEngine()
    report = env.tick(engine)
    assert [c[0] for c in engine.calls] == [retrying]
    assert fresh not in [c[0] for c in engine.calls]
    assert report.replayed == {"RETRYING": 1}


def test_retry_after_from_one_job_does_not_stop_the_scan(env):
    # Given two old PENDING jobs, the older of which the engine cannot take now
    first = env.job("first", age_min=9)
    second = env.job("second", age_min=8)
    engine = RecordingEngine(busy={first})
    report = env.tick(engine)
    assert [c[0] for c in engine.calls] == [first, second]
    assert report.retry_later == 1
    assert report.replayed == {"PENDING": 1}


def test_a_job_without_stored_request_is_skipped(env):
    lost = env.job("no-request", age_min=6)
    kept = env.job("with-request", age_min=5)
    env.run(env.redis.delete(f"job:req:{lost}"))
    engine = RecordingEngine()
    report = env.tick(engine)
    assert [c[0] for c in engine.calls] == [kept]
    assert report.missing_request == 1


def test_pending_age_is_the_dispatch_timeout():
    timeouts = ReconcilerTimeouts(dispatch_timeout_s=300)
    assert ReplayerPolicy.from_timeouts(timeouts).pending_age_s == 300
    assert ReplayerPolicy().pending_age_s == 120
