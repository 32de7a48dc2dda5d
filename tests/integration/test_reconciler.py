"""The reconciler on the real Redis (Cordum's TestReconcilerTimeouts, case 29, and more).

Stale jobs are made by writing their index scores directly. The scores and the
reconciler's clock sit in 2005, so a tick only ever sees the jobs of its own
test, whatever else the shared Redis holds.
"""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from cordum.config import ConfigError
from cordum.scheduler.reconciler import (
    Reconciler,
    ReconcilerPolicy,
    ReconcilerTimeouts,
    go_duration,
    timeout_reason,
)
from cordum.store.indexes import JobIndexes
from cordum.store.jobs import DEADLINE_KEY, JobState, JobStore, NewJob, index_key, tenant_active_key
from tests.conftest import REDIS_URL
from tests.helpers import forget_jobs, run

CONFIG = Path(__file__).resolve().parents[2] / "config"

BASE_US = 1_104_537_600_000_000
"""2005-01-01T00:00:00Z in µs: "now" for the reconciler in these tests."""
MINUTE_US = 60_000_000

ONE_MINUTE = ReconcilerPolicy(dispatch_timeout_s=60, running_timeout_s=60)


class Env:
    def __init__(self, unique: str) -> None:
        self.unique = unique
        self.loop = asyncio.new_event_loop()
        self.redis = aioredis.Redis.from_url(REDIS_URL)
        self.store = JobStore(self.redis)
        self.indexes = JobIndexes(self.redis)
        self.ids: list[str] = []
        self.run = functools.partial(run, loop=self.loop)

    def job(self, name: str, path: list[JobState], age_min: float | None = None) -> str:
        """A job walked through ``path``; with ``age_min`` its index entry is that old."""
        job_id = f"rec-{name}-{self.unique}"
        self.ids.append(job_id)
        job = NewJob(job_id=job_id, trace_id=f"tr-{job_id}", tenant=f"t-{self.unique}",
                     topic="job.default", context="{}", request="{}", meta={})
        self.run(self.store.create(job))
        if path:
            self.run(self.store.transition(job_id, path))
        if age_min is not None:
            self.age(job_id, path[-1] if path else JobState.PENDING, age_min)
        return job_id

    def age(self, job_id: str, state: JobState, age_min: float) -> None:
        score = BASE_US - int(age_min * MINUTE_US)
        self.run(self.redis.zadd(index_key(state), {job_id: score}, xx=True))
        self.run(self.redis.hset(f"job:meta:{job_id}", "updated_at", score))

    def meta(self, job_id: str) -> dict[str, str]:
        return self.run(self.store.get(job_id))

    def tick(self, policy: ReconcilerPolicy = ONE_MINUTE, indexes: JobIndexes | None = None):
        reconciler = Reconciler(self.store, indexes or self.indexes, policy,
                                clock_us=lambda: BASE_US)
        return self.run(reconciler.tick())

    def cleanup(self) -> None:
        # Nothing here is published: no stack beside the tests can know these jobs.
        self.run(forget_jobs(self.redis, self.ids, tombstone=False))
        self.run(self.redis.delete(tenant_active_key(f"t-{self.unique}")))
        self.run(self.redis.aclose())
        self.loop.close()


@pytest.fixture
def env(unique):
    e = Env(unique)
    yield e
    e.cleanup()


def test_stale_dispatched_and_running_jobs_time_out_with_cordum_reasons(env):
    # Given 1-minute timeouts, a DISPATCHED job 5 minutes old, a RUNNING job 10 minutes
    # old, a SCHEDULED job 2 minutes old, a fresh DISPATCHED job and an old SUCCEEDED one
    dispatched = env.job("d-old", [JobState.SCHEDULED, JobState.DISPATCHED], age_min=5)
    running = env.job("r-old", [JobState.SCHEDULED, JobState.DISPATCHED, JobState.RUNNING],
                      age_min=10)
    scheduled = env.job("s-old", [JobState.SCHEDULED], age_min=2)
    fresh = env.job("d-fresh", [JobState.SCHEDULED, JobState.DISPATCHED])
    done = env.job("ok-old", [JobState.RUNNING, JobState.SUCCEEDED], age_min=30)

    # When the reconciler ticks
    report = env.tick()

    # Then the stale ones are TIMEOUT with Cordum's reason, the others untouched
    assert env.meta(dispatched)["state"] == "TIMEOUT"
    assert env.meta(dispatched)["failure_reason"] == "timeout: DISPATCHED >1m0s"
    assert env.meta(running)["state"] == "TIMEOUT"
    assert env.meta(running)["failure_reason"] == "timeout: RUNNING >1m0s"
    assert env.meta(scheduled)["state"] == "TIMEOUT"
    assert env.meta(scheduled)["failure_reason"] == "timeout: SCHEDULED >1m0s"
    assert env.meta(fresh)["state"] == "DISPATCHED"
    assert "failure_reason" not in env.meta(fresh)
    assert env.meta(done)["state"] == "SUCCEEDED"
    assert report.timed_out == {"SCHEDULED": 1, "DISPATCHED": 1, "RUNNING": 1}
    # And the timed-out jobs left their index for job:index:timeout
    assert env.run(env.redis.zscore(index_key(JobState.RUNNING), running)) is None
    assert env.run(env.redis.zscore(index_key(JobState.TIMEOUT), running)) is not None


def test_default_timeouts_leave_younger_jobs_alone(env):
    # Given Cordum's defaults (dispatch 2m, running 5m) and jobs younger than those
    dispatched = env.job("d-90s", [JobState.SCHEDULED, JobState.DISPATCHED], age_min=1.5)
    running = env.job("r-4m", [JobState.RUNNING], age_min=4)
    old_running = env.job("r-6m", [JobState.RUNNING], age_min=6)
    env.tick(ReconcilerPolicy())
    assert env.meta(dispatched)["state"] == "DISPATCHED"
    assert env.meta(running)["state"] == "RUNNING"
    assert env.meta(old_running)["failure_reason"] == "timeout: RUNNING >5m0s"


def test_expired_deadline_times_out_whatever_the_state(env):
    # Given a fresh RUNNING job whose deadline passed, and one whose deadline is ahead
    late = env.job("deadline", [JobState.RUNNING])
    ahead = env.job("ahead", [JobState.RUNNING])
    env.run(env.redis.zadd(DEADLINE_KEY, {late: BASE_US - 1_000, ahead: BASE_US + MINUTE_US}))
    report = env.tick()
    assert env.meta(late)["state"] == "TIMEOUT"
    assert env.meta(late)["failure_reason"] == "timeout: deadline expired"
    assert env.meta(ahead)["state"] == "RUNNING"
    assert report.timed_out == {"deadline": 1}
    # The terminal transition took the job out of job:deadline
    assert env.run(env.redis.zscore(DEADLINE_KEY, late)) is None


class RacingIndexes(JobIndexes):
    """Lists like the real one, then lets the job move on (``path``) before the
    reconciler writes."""

    def __init__(self, redis, store: JobStore, job_id: str,
                 path: tuple[JobState, ...] = (JobState.SUCCEEDED,)) -> None:
        super().__init__(redis)
        self._store = store
        self._job_id = job_id
        self._path = path

    async def list_jobs_by_state(self, state, cutoff_us, limit=200, *, offset=0):
        ids = await super().list_jobs_by_state(state, cutoff_us, limit, offset=offset)
        if self._job_id in ids:
            await self._store.transition(self._job_id, list(self._path),
                                         fields={"result_ptr": "redis://res:x"})
        return ids


def test_job_that_finishes_between_scan_and_write_is_not_touched(env):
    # Given a RUNNING job 10 minutes old whose result arrives right after the scan
    job_id = env.job("race", [JobState.RUNNING], age_min=10)
    racing = RacingIndexes(env.redis, env.store, job_id)
    # When the reconciler ticks
    report = env.tick(indexes=racing)
    # Then the job stays SUCCEEDED without a timeout reason
    meta = env.meta(job_id)
    assert meta["state"] == "SUCCEEDED"
    assert "failure_reason" not in meta
    assert report.moved == 1
    assert report.timed_out == {}


def test_job_that_left_and_came_back_between_scan_and_write_is_not_touched(env):
    # Given a RUNNING job 10 minutes old that, right after the scan, fails retryably
    # and is dispatched again (RUNNING -> RETRYING -> SCHEDULED -> DISPATCHED -> RUNNING)
    job_id = env.job("back", [JobState.RUNNING], age_min=10)
    racing = RacingIndexes(env.redis, env.store, job_id,
                           (JobState.RETRYING, JobState.SCHEDULED, JobState.DISPATCHED,
                            JobState.RUNNING))
    # When the reconciler ticks
    report = env.tick(indexes=racing)
    # Then its new run is left alone: the fence holds the scan's cutoff, not only the state
    meta = env.meta(job_id)
    assert meta["state"] == "RUNNING" and "failure_reason" not in meta
    assert report.timed_out == {} and report.moved == 1


def test_pages_go_past_entries_that_stay_in_the_index(env):
    # Given an index entry of a job that no longer exists ahead of five stale jobs,
    # and pages of two
    orphan = f"rec-orphan-{env.unique}"
    env.ids.append(orphan)
    env.run(env.redis.zadd(index_key(JobState.RUNNING), {orphan: BASE_US - 60 * MINUTE_US}))
    stale = [env.job(f"r{i}", [JobState.RUNNING], age_min=10 + i) for i in range(5)]
    # When the reconciler ticks
    report = env.tick(ReconcilerPolicy(running_timeout_s=60, batch_size=2))
    # Then every stale job timed out and the orphan was stepped over, once
    assert all(env.meta(j)["state"] == "TIMEOUT" for j in stale)
    assert report.timed_out == {"RUNNING": 5}
    assert report.orphaned == 1
    assert report.listed == 6


def test_a_past_deadline_stops_the_tick_before_any_write(env):
    job_id = env.job("late-tick", [JobState.RUNNING], age_min=10)
    reconciler = Reconciler(env.store, env.indexes, ONE_MINUTE, clock_us=lambda: BASE_US)
    report = env.run(reconciler.tick(deadline=0.0))
    assert report.stopped_early is True
    assert env.meta(job_id)["state"] == "RUNNING"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (300, "5m0s"),
        (30, "30s"),
        (120, "2m0s"),
        (60, "1m0s"),
        (90, "1m30s"),
        (3600, "1h0m0s"),
        (5400, "1h30m0s"),
        (9000, "2h30m0s"),
        (1.5, "1.5s"),
        (0.25, "250ms"),
        (0.0000015, "1.5µs"),
        (0, "0s"),
        (-30, "-30s"),
    ],
)
def test_go_duration_prints_like_go(seconds, text):
    assert go_duration(seconds) == text


def test_timeout_reasons_keep_cordums_strings():
    assert timeout_reason("DISPATCHED") == "timeout: DISPATCHED exceeded"
    assert timeout_reason("DISPATCHED", 300) == "timeout: DISPATCHED >5m0s"
    assert timeout_reason("RUNNING", 30) == "timeout: RUNNING >30s"
    assert timeout_reason("SCHEDULED", 120) == "timeout: SCHEDULED >2m0s"


def test_timeouts_come_from_timeouts_yaml_with_cordum_defaults_for_zero():
    shipped = ReconcilerTimeouts.load(CONFIG)
    assert (shipped.dispatch_timeout_s, shipped.running_timeout_s,
            shipped.scan_interval_s) == (300, 900, 30)
    zero = ReconcilerTimeouts.from_mapping(
        {"reconciler": {"dispatch_timeout_seconds": 0, "running_timeout_seconds": 0}})
    assert (zero.dispatch_timeout_s, zero.running_timeout_s, zero.scan_interval_s) == \
        (120, 300, 30)
    assert ReconcilerTimeouts.from_mapping({}) == ReconcilerTimeouts()
    policy = ReconcilerPolicy.from_timeouts(shipped)
    assert (policy.dispatch_timeout_s, policy.running_timeout_s,
            policy.scheduled_timeout_s) == (300, 900, 60)
    with pytest.raises(ConfigError, match="reconciler.running_timeout_seconds"):
        ReconcilerTimeouts.from_mapping({"reconciler": {"running_timeout_seconds": "soon"}})


def test_the_same_tick_twice_times_a_job_out_once(env):
    """Deliver it twice: a schedule may fire twice (or two replicas may tick); the
    second pass finds nothing to do and writes no second TIMEOUT event."""
    running = env.job("r-twice", [JobState.SCHEDULED, JobState.DISPATCHED, JobState.RUNNING],
                      age_min=10)
    first = env.tick()
    env.tick()
    assert first.timed_out.get("RUNNING", 0) >= 1
    assert env.meta(running)["state"] == "TIMEOUT"
    events = env.run(env.redis.lrange(f"job:events:{running}", 0, -1))
    assert [json.loads(e)["state"] for e in events].count("TIMEOUT") == 1
