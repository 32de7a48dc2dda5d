"""Jobs of lost workers and lost dispatches, on the real Redis, NATS and safety kernel.

Each test has its own worker snapshot key and its own job ids; the reconciler's job
scan is narrowed to the test's jobs (the shared Redis may hold a stack's jobs, whose
workers this test's snapshot does not list) and its timeout scans look at 2002, so a
tick here never touches anybody else's job. "Later" is the lost-worker clock moved
forward, with the snapshot written as of that instant.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from cordum import protocol
from cordum.bus.publisher import NatsPublisher
from cordum.config import PoolsConfig, load_settings
from cordum.registry.liveness import SnapshotLiveness
from cordum.registry.reader import SnapshotReader
from cordum.registry.snapshot import rfc3339_from_epoch_s
from cordum.safety.client import SafetyClient
from cordum.scheduler.backoff import BackoffPolicy
from cordum.scheduler.engine import Engine
from cordum.scheduler.lost_workers import LostWorkerPolicy, LostWorkers
from cordum.scheduler.reconciler import Reconciler
from cordum.store.indexes import JobIndexes
from cordum.store.jobs import JobState, JobStore
from cordum.store.locks import JobLocks
from tests.conftest import NATS_URL, REDIS_URL
from tests.helpers import forget_jobs
from tests.integration.test_scheduler_engine import collect, delivered, dlq_packets_for, listen

BEFORE_ANY_JOB_US = 1_009_843_200_000_000
"""2002-01-01T00:00:00Z in µs, the timeout scans' "now": no job stored is that old (nor
any deadline), so they time out nothing. (Below 1e15 a cutoff would read as ms.)"""


class OwnJobs(JobIndexes):
    """The job indexes as one test sees them: its own jobs only."""

    def __init__(self, redis: Any, unique: str) -> None:
        super().__init__(redis)
        self.unique = unique

    async def list_jobs_after(self, state, after_us, limit=200):
        rows = await super().list_jobs_after(state, after_us, 100_000)
        return [r for r in rows if self.unique in r[0]][:limit]


class World:
    def __init__(self, unique: str, kernel_addr: str) -> None:
        self.unique = unique
        self.job_id = f"job-{unique}"
        self.lost = f"wl-a-{unique}"
        self.live = f"wl-b-{unique}"
        self.writer = f"writer-{unique}"
        self.snapshot_key = f"test:snapshot:{unique}"
        self.redis = aioredis.Redis.from_url(REDIS_URL)
        self.store = JobStore(self.redis)
        self.later = 0.0
        self.others: list[str] = []
        """Job ids besides ``job_id`` this test dispatched."""
        cfg = load_settings(env={"REDIS_URL": REDIS_URL, "NATS_URL": NATS_URL})
        self.wiring: dict[str, Any] = dict(
            store=self.store,
            strategy=LeastLoadedStrategy(),
            safety=SafetyClient(kernel_addr, 2.0),
            publisher=NatsPublisher(cfg),
            locks=JobLocks(self.redis),
            backoff=BackoffPolicy(),
        )
        # The submit path and the reconciler each read the snapshot themselves.
        self.engine = self.new_engine()

    def new_engine(self) -> Engine:
        return Engine(registry=SnapshotReader(self.redis, key=self.snapshot_key, max_age_s=0),
                      **self.wiring)

    async def snapshot(self, *workers: tuple[str, int],
                       labels: dict[str, dict[str, str]] | None = None) -> None:
        """The registry's snapshot as of "later": these (worker id, active jobs) only,
        with the heartbeat labels ``labels`` gives by worker id."""
        now = rfc3339_from_epoch_s(time.time() + self.later)
        doc = {"captured_at": now, "writer_id": self.writer, "pools": {}, "topics": {},
               "workers": [{"worker_id": w, "pool": "default", "active_jobs": active,
                            "max_parallel_jobs": 4, "last_heartbeat": now,
                            "labels": (labels or {}).get(w, {})}
                           for w, active in workers]}
        await self.redis.set(self.snapshot_key, json.dumps(doc), ex=600)

    def reconciler(self, indexes: JobIndexes | None = None) -> Reconciler:
        lost = LostWorkers(self.new_engine(), indexes or OwnJobs(self.redis, self.unique),
                           SnapshotLiveness(self.redis, key=self.snapshot_key),
                           LostWorkerPolicy(),
                           clock=lambda: time.time() + self.later)
        return Reconciler(self.store, JobIndexes(self.redis), lost=lost,
                          clock_us=lambda: BEFORE_ANY_JOB_US)

    def request(self, job_id: str = "") -> bytes:
        if job_id:
            self.others.append(job_id)
        req = protocol.JobRequest(job_id=job_id or self.job_id, topic="job.default",
                                  tenant_id=f"t-{self.unique}")
        return protocol.packet(trace_id=f"tr-{self.unique}", sender_id="test",
                               job_request=req).SerializeToString()

    def result(self, worker_id: str) -> bytes:
        res = protocol.JobResult(job_id=self.job_id,
                                 status=protocol.JobStatus.JOB_STATUS_SUCCEEDED,
                                 worker_id=worker_id,
                                 result_ptr=f"redis://res:{self.job_id}")
        return protocol.packet(trace_id=f"tr-{self.unique}", sender_id=worker_id,
                               job_result=res).SerializeToString()

    async def meta(self) -> dict[str, str]:
        return await self.store.get(self.job_id)

    async def dispatched_to(self, worker_id: str, coro: Any) -> tuple[Any, int]:
        """Run ``coro``; how many requests for the job reached ``worker_id`` meanwhile."""
        nc, sub = await listen(protocol.direct_subject(worker_id))
        try:
            out = await coro
            got = sum(protocol.decode(m.data).packet.job_request.job_id == self.job_id
                      for m in await delivered(nc, sub))
        finally:
            await nc.close()
        return out, got

    async def lose_the_worker_of_a_running_job(self) -> str:
        """The job runs on ``lost``; a tick sees it alive; 12 s later only ``live`` is in
        the snapshot. Returns the job's attempts before the loss."""
        await self.snapshot((self.lost, 0))
        outcome = await self.engine.handle_request(self.request())
        assert (outcome.action, outcome.detail) == ("dispatched", self.lost)
        first = await self.reconciler().tick()
        assert first.lost is not None and first.lost.total_handled == 0
        self.later = 12.0
        await self.snapshot((self.live, 0))
        return (await self.meta())["attempts"]

    async def cleanup(self) -> None:
        await forget_jobs(self.redis, [self.job_id, *self.others])
        await self.redis.zrem("dlq:index", self.job_id)
        keys = await self.redis.keys(f"*{self.unique}*")
        if keys:
            await self.redis.delete(*keys)
        await self.redis.aclose()


def LeastLoadedStrategy():  # noqa: N802 (the real strategy over one test pool)
    from cordum.scheduler.strategy import LeastLoadedStrategy as Strategy

    return Strategy(PoolsConfig(topics={"job.default": ["default"]}, pools={}))


@pytest.fixture
def world(unique, kernel):
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    w = World(unique, kernel)
    yield loop, w
    loop.run_until_complete(w.cleanup())
    from cordum import runtime

    loop.run_until_complete(runtime.aclose())
    loop.close()


def test_a_running_job_of_a_lost_worker_is_sent_to_a_live_worker_and_succeeds(world):
    loop, w = world

    async def scenario():
        before = await w.lose_the_worker_of_a_running_job()
        report, got = await w.dispatched_to(w.live, w.reconciler().tick())
        after = await w.meta()
        outcome = await w.engine.handle_result(w.result(w.live))
        return before, report, got, after, outcome

    before, report, got, after, outcome = loop.run_until_complete(scenario())
    assert got == 1
    assert report.lost is not None and report.lost.retried == {"worker_lost": 1}
    assert after["state"] == "RUNNING" and after["worker_id"] == w.live
    assert int(after["attempts"]) == int(before) + 1  # attempt 2, counted once
    assert after["failure_reason"].startswith("worker_lost")
    assert (outcome.action, outcome.state) == ("recorded", "SUCCEEDED")


def test_a_lost_workers_job_with_no_attempts_left_fails_worker_lost_with_a_dlq_entry(world):
    loop, w = world

    async def scenario():
        await w.lose_the_worker_of_a_running_job()
        # Its 50th dispatch was the last: the cap is 50
        await w.redis.hset(f"job:meta:{w.job_id}", "attempts", 50)
        (report, got), seen = await collect(
            protocol.SUBJECT_DLQ, w.dispatched_to(w.live, w.reconciler().tick()))
        entry = await w.redis.get(f"dlq:entry:{w.job_id}")
        return report, got, seen, await w.meta(), entry

    report, got, seen, meta, entry = loop.run_until_complete(scenario())
    assert got == 0
    assert report.lost is not None and report.lost.failed == {"worker_lost": 1}
    assert meta["state"] == "FAILED" and meta["failure_reason"].startswith("worker_lost")
    assert entry is not None and json.loads(entry)["reason_code"] == "worker_lost"
    packets = dlq_packets_for(seen, w.job_id)
    assert len(packets) == 1 and packets[0].job_result.error_code == "worker_lost"


def test_a_late_result_from_the_lost_worker_changes_nothing(world):
    loop, w = world

    async def scenario():
        await w.lose_the_worker_of_a_running_job()
        await w.reconciler().tick()
        late = await w.engine.handle_result(w.result(w.lost))
        between = await w.meta()
        done = await w.engine.handle_result(w.result(w.live))
        later = await w.engine.handle_result(w.result(w.lost))
        events = await w.redis.lrange(f"job:events:{w.job_id}", 0, -1)
        return late, between, done, later, [json.loads(e)["state"] for e in events]

    late, between, done, later, states = loop.run_until_complete(scenario())
    assert late.action == "dropped" and between["state"] == "RUNNING"
    assert between["worker_id"] == w.live
    assert (done.action, done.state) == ("recorded", "SUCCEEDED")
    assert later.action == "dropped"
    assert states.count("SUCCEEDED") == 1 and states[-1] == "SUCCEEDED"


def test_a_restarted_workers_jobs_are_sent_again_at_once_and_not_its_new_ones(world):
    """A worker killed and restarted under the same id heartbeats on as if nothing
    happened; its process start (the ``cordum.started_at`` label) says that every job
    dispatched before it is gone. They are sent again at the next tick, to whichever
    worker the engine picks (the restarted one among them), without waiting for a TTL."""
    from cordum.registry.workers import STARTED_AT_LABEL

    loop, w = world
    worker = w.lost

    async def scenario():
        await w.snapshot((worker, 0))
        outcome = await w.engine.handle_request(w.request())
        assert (outcome.action, outcome.detail) == ("dispatched", worker)
        before = (await w.meta())["attempts"]
        # It was dispatched 3 s ago; the same worker id heartbeats, started 1 s ago
        await w.redis.hset(f"job:meta:{w.job_id}", "updated_at", int((time.time() - 3) * 1e6))
        restarted = {worker: {STARTED_AT_LABEL: f"{time.time() - 1.0:.3f}"}}
        await w.snapshot((worker, 0), labels=restarted)
        report, got = await w.dispatched_to(worker, w.reconciler().tick())
        after = await w.meta()
        # The job's new dispatch postdates the restart: the next tick leaves it alone
        await w.snapshot((worker, 1), labels=restarted)
        again = await w.reconciler().tick()
        return before, report, got, after, again, await w.meta()

    before, report, got, after, again, last = loop.run_until_complete(scenario())
    assert report.lost is not None and report.lost.retried == {"worker_lost": 1}
    assert got == 1 and after["worker_id"] == worker and after["state"] == "RUNNING"
    assert int(after["attempts"]) == int(before) + 1
    assert "restarted" in after["failure_reason"]
    assert again.lost is not None and again.lost.total_handled == 0
    assert last["attempts"] == after["attempts"]


def test_a_dispatch_no_worker_heard_is_sent_again(world):
    # Given a worker in the snapshot that nobody serves: the dispatch to it is lost
    loop, w = world
    ghost = w.lost

    async def scenario():
        await w.snapshot((ghost, 0))
        outcome = await w.engine.handle_request(w.request())
        assert (outcome.action, outcome.detail) == ("dispatched", ghost)
        # When, 11 s on, its heartbeats still say it runs nothing, and a live worker is up
        w.later = 11.0
        await w.snapshot((ghost, 0), (w.live, 0))
        report, got = await w.dispatched_to(w.live, w.reconciler().tick())
        return report, got, await w.meta()

    report, got, meta = loop.run_until_complete(scenario())
    # Then the job went to the live worker as another attempt
    assert got == 1
    assert report.lost is not None and report.lost.retried == {"dispatch_lost": 1}
    assert meta["state"] == "RUNNING" and meta["worker_id"] == w.live


def test_a_dispatch_lost_while_the_worker_runs_younger_jobs_is_sent_again(world):
    """Under load a worker always runs a few jobs dispatched since: its count covers
    them, and the old job it never had is the one missing."""
    loop, w = world
    young = [f"job-young-{i}-{w.unique}" for i in (1, 2)]

    async def scenario():
        await w.snapshot((w.lost, 0))
        for job_id in (w.job_id, *young):
            outcome = await w.engine.handle_request(
                w.request(job_id if job_id != w.job_id else ""))
            assert outcome.detail == w.lost
        # The first dispatch 11 s before now, the two young ones now; the heartbeat 2 s
        # on counts the two young ones
        old = int((time.time() - 11) * 1e6)
        await w.redis.hset(f"job:meta:{w.job_id}", "updated_at", old)
        w.later = 2.0
        await w.snapshot((w.lost, 2), (w.live, 0))
        report = await w.reconciler().tick()
        return report, await w.meta(), [await w.store.get(j) for j in young]

    report, meta, young_metas = loop.run_until_complete(scenario())
    assert report.lost is not None and report.lost.retried == {"dispatch_lost": 1}
    assert meta["failure_reason"].startswith("dispatch_lost")
    assert meta["state"] == "RUNNING" and meta["worker_id"] == w.live
    assert int(meta["attempts"]) == 2
    assert all(m["state"] == "RUNNING" and m["worker_id"] == w.lost and m["attempts"] == "1"
               for m in young_metas)


def test_a_lost_dispatch_goes_back_to_its_worker_when_no_other_can_take_it(world):
    """Another worker is preferred for a dispatch its worker never reported; with none,
    the job goes back to the same one at once instead of waiting for the replayer."""
    loop, w = world
    only = w.lost

    async def scenario():
        await w.snapshot((only, 0))
        await w.engine.handle_request(w.request())
        w.later = 11.0
        await w.snapshot((only, 0))
        report, got = await w.dispatched_to(only, w.reconciler().tick())
        return report, got, await w.meta()

    report, got, meta = loop.run_until_complete(scenario())
    assert report.lost is not None and report.lost.retried == {"dispatch_lost": 1}
    assert got == 1 and meta["state"] == "RUNNING" and meta["worker_id"] == only
    assert meta["attempts"] == "2"


def test_a_busy_worker_or_a_young_dispatch_is_left_alone(world):
    loop, w = world

    async def scenario():
        await w.snapshot((w.lost, 0))
        await w.engine.handle_request(w.request())
        await w.snapshot((w.lost, 0), (w.live, 0))
        young = await w.reconciler().tick()  # the heartbeat predates the dispatch
        w.later = 11.0
        await w.snapshot((w.lost, 1), (w.live, 0))
        busy = await w.reconciler().tick()  # it says it runs one job: this one
        return young, busy, await w.meta()

    young, busy, meta = loop.run_until_complete(scenario())
    assert young.lost is not None and young.lost.total_handled == 0
    assert busy.lost is not None and busy.lost.total_handled == 0
    assert meta["state"] == "RUNNING" and meta["worker_id"] == w.lost


def test_absence_from_a_new_writers_or_a_stale_snapshot_is_not_a_loss(world):
    # A writer restarted after a long outage writes before it has heard every worker;
    # a snapshot nobody rewrites says nothing about who is still there.
    loop, w = world

    async def scenario():
        await w.snapshot((w.lost, 0))
        await w.engine.handle_request(w.request())
        w.writer = f"writer-new-{w.unique}"
        await w.snapshot((w.live, 0))
        new_writer = await w.reconciler().tick()
        w.later = 60.0
        stale = await w.reconciler().tick()  # nothing written for 60 s
        return new_writer, stale, await w.meta()

    new_writer, stale, meta = loop.run_until_complete(scenario())
    assert new_writer.lost is not None and new_writer.lost.total_handled == 0
    assert new_writer.lost.skipped == ""  # looked, but trusted no absence
    assert stale.lost is not None and stale.lost.skipped.startswith("snapshot")
    assert meta["state"] == "RUNNING" and meta["worker_id"] == w.lost


def test_a_job_dispatched_again_between_the_scan_and_the_move_is_left_alone(world):
    loop, w = world

    class MovesOnAfterTheScan(OwnJobs):
        async def get_meta_fields(self, job_ids, names):
            metas = await super().get_meta_fields(job_ids, names)
            if w.job_id in job_ids:  # another path sends it to the live worker meanwhile
                await w.store.transition(w.job_id, [JobState.RETRYING, JobState.RUNNING],
                                         fields={"worker_id": w.live})
            return metas

    async def scenario():
        await w.lose_the_worker_of_a_running_job()
        reconciler = w.reconciler(MovesOnAfterTheScan(w.redis, w.unique))
        report, got = await w.dispatched_to(w.live, reconciler.tick())
        return report, got, await w.meta()

    report, got, meta = loop.run_until_complete(scenario())
    assert report.lost is not None and report.lost.moved == 1
    assert report.lost.total_handled == 0 and got == 0
    assert meta["state"] == "RUNNING" and meta["worker_id"] == w.live
