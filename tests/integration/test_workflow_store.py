"""The workflow store on the real Redis: definitions, runs, indexes, timers and locks.

Tenants, workflow ids and run ids carry the test's unique id, so clean-up finds every
key a test wrote (and every member it added to the engine-wide sets).
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from datetime import UTC, datetime

import pytest
import redis.asyncio as aioredis

from cordum.store.errors import LockBusy
from cordum.store.locks import TtlHoldLock
from cordum.store.step_jobs import StepJobRecord
from cordum.workflow import keys
from cordum.workflow.definition import Workflow, parse_workflow
from cordum.workflow.definition_store import DefinitionStore
from cordum.workflow.errors import IdempotencyConflict, InvalidInput, RunNotRunnable
from cordum.workflow.model import (
    RunStatus,
    StepRun,
    StepStatus,
    TimelineEvent,
    WorkflowRun,
    format_time,
)
from cordum.workflow.store import WorkflowStore
from tests.conftest import REDIS_URL
from tests.helpers import run as run_coro

T0 = 1_790_000_000.0
"""A fixed second (2026-09) the tests' run times count from."""
SHARED_SETS = (keys.OPEN_RUNS_KEY, keys.TIMERS_KEY)


def at(offset_s: float) -> str:
    return format_time(datetime.fromtimestamp(T0 + offset_s, UTC))


class Env:
    def __init__(self, unique: str) -> None:
        self.unique = unique
        self.loop = asyncio.new_event_loop()
        self.redis = aioredis.Redis.from_url(REDIS_URL)
        self.definitions = DefinitionStore(self.redis)
        self.store = WorkflowStore(self.redis)
        self.tenant = f"t-{unique}"
        self.other = f"o-{unique}"
        self.run = functools.partial(run_coro, loop=self.loop)
        self._n = 0

    def definition(self, workflow_id: str = "", tenant: str = "") -> Workflow:
        return parse_workflow(
            {"id": workflow_id or f"wf-{self.unique}", "name": "daily",
             "steps": {"a": {"topic": "job.a"}, "b": {"depends_on": ["a"]}}},
            tenant=tenant or self.tenant, principal="alice", now=at(0))

    def new_run(self, wf: Workflow, *, updated_s: float = 0, tenant: str = "") -> WorkflowRun:
        self._n += 1
        return WorkflowRun(id=f"run-{self.unique}-{self._n:03d}", workflow_id=wf.id,
                           org_id=tenant or self.tenant, input={"n": self._n},
                           started_at=at(0), created_at=at(0), updated_at=at(updated_s),
                           steps={s: StepRun(s) for s in wf.steps})

    async def create(self, run: WorkflowRun, wf: Workflow, *, key: str = "",
                     body_hash: str = "h1", max_active: int = 0) -> tuple[str, bool]:
        return await self.store.create_run(run, wf, idempotency_key=key, body_hash=body_hash,
                                           max_active=max_active)

    async def cleanup(self) -> None:
        found = [k async for k in self.redis.scan_iter(match=f"*{self.unique}*", count=1000)]
        if found:
            await self.redis.delete(*found)
        for key in SHARED_SETS:
            members = [m async for m, _ in self.redis.zscan_iter(key, match=f"*{self.unique}*")]
            if members:
                await self.redis.zrem(key, *members)


@pytest.fixture
def env(unique):
    e = Env(unique)
    yield e
    e.run(e.cleanup())
    e.run(e.redis.aclose())
    e.loop.close()


def event(run: WorkflowRun, i: int) -> TimelineEvent:
    return TimelineEvent(time=at(i), type="step_dispatched", run_id=run.id,
                         workflow_id=run.workflow_id, message=f"event {i}")


# --------------------------------------------------------------------------- definitions


def test_definitions_are_stored_listed_and_deleted_per_tenant(env):
    wf = env.definition()
    newer = env.definition(f"wf2-{env.unique}").model_copy(update={"updated_at": at(5)})

    async def scenario():
        await env.definitions.put_definition(wf)
        await env.definitions.put_definition(newer)
        got = await env.definitions.get_definition(env.tenant, wf.id)
        listed = await env.definitions.list_definitions(env.tenant)
        other_get = await env.definitions.get_definition(env.other, wf.id)
        other_list = await env.definitions.list_definitions(env.other)
        other_delete = await env.definitions.delete_definition(env.other, wf.id)
        deleted = await env.definitions.delete_definition(env.tenant, wf.id)
        again = await env.definitions.delete_definition(env.tenant, wf.id)
        left = await env.definitions.list_definitions(env.tenant)
        return got, listed, other_get, other_list, other_delete, deleted, again, left

    got, listed, other_get, other_list, other_delete, deleted, again, left = env.run(scenario())
    assert got == wf
    assert [w.id for w in listed] == [newer.id, wf.id]  # last updated first
    assert (other_get, other_list, other_delete) == (None, [], False)
    assert (deleted, again) == (True, False)
    assert [w.id for w in left] == [newer.id]


# --------------------------------------------------------------------------- create_run


def test_create_run_writes_the_run_its_definition_and_indexes(env):
    wf = env.definition()
    run = env.new_run(wf)

    async def scenario():
        created = await env.create(run, wf)
        r = env.redis
        return (created, await r.get(keys.run_key(run.id)),
                await r.get(keys.run_definition_key(run.id)),
                await r.zscore(keys.workflow_runs_key(env.tenant, wf.id), run.id),
                await r.zscore(keys.tenant_runs_key(env.tenant), run.id),
                await r.zscore(keys.OPEN_RUNS_KEY, run.id),
                await r.smembers(keys.active_runs_key(env.tenant)),
                await r.ttl(keys.run_key(run.id)))

    created, run_raw, def_raw, by_wf, by_tenant, is_open, active, ttl = env.run(scenario())
    assert created == (run.id, True)
    assert WorkflowRun.from_json(json.loads(run_raw)) == run
    assert Workflow.model_validate_json(def_raw) == wf
    assert by_wf == by_tenant == is_open == T0 * 1_000_000
    assert active == {run.id.encode()}
    assert ttl == -1  # an open run does not expire


def test_same_idempotency_key_and_body_answers_the_first_run(env):
    wf = env.definition()

    async def scenario():
        first = await env.create(env.new_run(wf), wf, key="k-1", body_hash="h1")
        # sent twice: the second run is never stored
        second = await env.create(env.new_run(wf), wf, key="k-1", body_hash="h1")
        with pytest.raises(IdempotencyConflict) as conflict:
            await env.create(env.new_run(wf), wf, key="k-1", body_hash="h2")
        # the key is the tenant's: another tenant's same key starts its own run
        theirs = await env.create(env.new_run(wf, tenant=env.other), wf, key="k-1")
        held = await env.redis.get(keys.idempotency_key(env.tenant, "k-1"))
        ttl = await env.redis.ttl(keys.idempotency_key(env.tenant, "k-1"))
        stored = await env.redis.exists(keys.run_key(f"run-{env.unique}-002"))
        return first, second, conflict.value, theirs, held, ttl, stored

    first, second, conflict, theirs, held, ttl, stored = env.run(scenario())
    assert first == (f"run-{env.unique}-001", True)
    assert second == (first[0], False)
    assert conflict.code == "RUN_IDEMPOTENCY_CONFLICT" and conflict.run_id == first[0]
    assert theirs == (f"run-{env.unique}-004", True)
    assert held == f"{first[0]} h1".encode()
    assert keys.IDEMPOTENCY_TTL_S - 5 < ttl <= keys.IDEMPOTENCY_TTL_S
    assert stored == 0


def test_without_an_idempotency_key_every_start_is_a_run(env):
    wf = env.definition()

    async def scenario():
        return [await env.create(env.new_run(wf), wf) for _ in range(2)]

    (a, created_a), (b, created_b) = env.run(scenario())
    assert a != b and created_a and created_b


def test_open_run_limit_refuses_until_a_run_ends(env):
    wf = env.definition()

    async def scenario():
        runs = [env.new_run(wf) for _ in range(3)]
        for r in runs[:2]:
            await env.create(r, wf, max_active=2)
        with pytest.raises(RunNotRunnable) as refused:
            await env.create(runs[2], wf, max_active=2)
        other = await env.create(env.new_run(wf, tenant=env.other), wf, max_active=2)
        runs[0].status = RunStatus.SUCCEEDED
        await env.store.save(runs[0], timeline=[], outbox=None)
        after_end = await env.create(runs[2], wf, max_active=2)
        unlimited = await env.create(env.new_run(wf), wf, max_active=0)
        return refused.value, other, after_end, unlimited, await env.redis.exists(
            keys.run_key(runs[2].id))

    refused, other, after_end, unlimited, _ = env.run(scenario())
    assert refused.status == 429 and refused.code == "RUN_NOT_RUNNABLE"
    assert other[1] and after_end[1] and unlimited[1]


# --------------------------------------------------------------------------- tenancy


def test_another_tenants_run_reads_as_missing_and_is_not_deleted(env):
    wf = env.definition()
    run = env.new_run(wf)

    async def scenario():
        await env.create(run, wf)
        await env.store.save(run, timeline=[event(run, 1)], outbox=None)
        seen = (await env.store.get_run(env.other, run.id),
                await env.store.timeline(env.other, run.id),
                await env.store.delete_run(env.other, run.id),
                await env.store.list_runs(env.other))
        return seen, await env.store.get_run(env.tenant, run.id)

    (get, timeline, deleted, listed), still = env.run(scenario())
    assert (get, timeline, deleted, listed) == (None, None, False, ([], ""))
    assert still == run


# --------------------------------------------------------------------------- save / load


def test_save_and_load_round_trip_with_outbox_jobs_and_contexts(env):
    wf = env.definition()
    run = env.new_run(wf)
    job_id = f"{run.id}:a@1"
    outbox = [{"job": {"job_id": job_id, "topic": "job.a"}}, {"cancel": "x"}]

    async def scenario():
        await env.create(run, wf)
        run.status = RunStatus.RUNNING
        run.steps["a"].status = StepStatus.RUNNING
        run.steps["a"].job_id = job_id
        run.updated_at = at(1)
        await env.store.save(run, timeline=[event(run, 1)], outbox=outbox,
                             jobs={job_id: "a"}, contexts={job_id: '{"n":1}'})
        loaded = await env.store.load(run.id)
        async with env.store.locked_run(run.id, job_id=job_id) as locked:
            mapped = locked.job.record if locked.job else None
        ctx = await env.redis.get(f"ctx:{job_id}")
        ctx_ttl = await env.redis.ttl(f"ctx:{job_id}")
        await env.store.save(run, timeline=[], outbox=None)  # a save without one clears it
        cleared = await env.store.load(run.id)
        unknown = await env.store.load(f"run-{env.unique}-none")
        return loaded, mapped, ctx, ctx_ttl, cleared, unknown

    loaded, mapped, ctx, ctx_ttl, cleared, unknown = env.run(scenario())
    assert loaded is not None
    got_run, got_wf, got_outbox = loaded
    assert got_run == run and got_wf == wf and got_outbox == outbox
    assert mapped is not None
    assert (mapped.tenant, mapped.run_id, mapped.step_path) == (env.tenant, run.id, "a")
    assert ctx == b'{"n":1}' and 24 * 3600 - 5 < ctx_ttl <= 24 * 3600
    assert cleared is not None and cleared[2] is None
    assert unknown is None


def test_job_mapping_takes_a_pair_of_the_step_path_and_the_request_hash(env):
    wf = env.definition()
    run = env.new_run(wf)

    async def record(job_id: str) -> StepJobRecord | None:
        async with env.store.locked_run(run.id, job_id=job_id) as locked:
            return locked.job.record if locked.job else None

    async def scenario():
        await env.create(run, wf)
        await env.store.save(run, timeline=[], outbox=None,
                             jobs={f"{run.id}:fan[2]@1": ("fan[2]", "hash")})
        return await record(f"{run.id}:fan[2]@1"), await record(f"{run.id}:nothing@1")

    assert env.run(scenario()) == (StepJobRecord(env.tenant, run.id, "fan[2]", "hash"), None)


def test_timeline_keeps_the_newest_1000_events_oldest_first(env):
    wf = env.definition()
    run = env.new_run(wf)

    async def scenario():
        await env.create(run, wf)
        await env.store.save(run, timeline=[event(run, i) for i in range(600)], outbox=None)
        await env.store.save(run, timeline=[event(run, i) for i in range(600, 1005)],
                             outbox=None)
        return await env.store.timeline(env.tenant, run.id)

    events = env.run(scenario())
    assert events is not None and len(events) == keys.TIMELINE_MAX
    assert [e["message"] for e in (events[0], events[-1])] == ["event 5", "event 1004"]
    assert events[0]["timestamp"] == events[0]["time"] == at(5)


def test_a_terminal_run_expires_and_leaves_the_open_sets(env):
    wf = env.definition()
    run = env.new_run(wf)

    async def scenario():
        await env.create(run, wf)
        await env.store.save(run, timeline=[event(run, 1)], outbox=[{"cancel": "j"}])
        run.status = RunStatus.CANCELLED
        run.updated_at = at(9)
        await env.store.save(run, timeline=[event(run, 2)], outbox=[{"cancel": "j"}])
        r = env.redis
        return (await r.ttl(keys.run_key(run.id)), await r.ttl(keys.timeline_key(run.id)),
                await r.ttl(keys.run_definition_key(run.id)),
                await r.ttl(keys.outbox_key(run.id)),
                await r.zscore(keys.OPEN_RUNS_KEY, run.id),
                await r.sismember(keys.active_runs_key(env.tenant), run.id),
                await r.zscore(keys.tenant_runs_key(env.tenant), run.id))

    *ttls, open_score, active, score = env.run(scenario())
    assert all(keys.RUN_TTL_S - 5 < t <= keys.RUN_TTL_S for t in ttls)
    assert (open_score, active) == (None, 0)
    assert score == (T0 + 9) * 1_000_000


# --------------------------------------------------------------------------- list_runs


def test_list_runs_pages_newest_first_with_a_string_cursor(env):
    wf = env.definition()
    other_wf = env.definition(f"wf2-{env.unique}")

    async def scenario():
        runs = [env.new_run(wf if i % 2 == 0 else other_wf, updated_s=i) for i in range(5)]
        for r in runs:
            await env.create(r, wf if r.workflow_id == wf.id else other_wf)
        pages, cursor = [], ""
        while True:
            page, cursor = await env.store.list_runs(env.tenant, limit=2, cursor=cursor)
            pages.append([r.id for r in page])
            if not cursor:
                return runs, pages

    runs, pages = env.run(scenario())
    ids = [r.id for r in reversed(runs)]
    assert pages == [ids[0:2], ids[2:4], ids[4:]]


def test_list_runs_filters_by_workflow_status_and_update_time(env):
    wf = env.definition()
    other_wf = env.definition(f"wf2-{env.unique}")

    async def scenario():
        runs = [env.new_run(wf if i < 3 else other_wf, updated_s=i) for i in range(5)]
        for r in runs:
            await env.create(r, wf if r.workflow_id == wf.id else other_wf)
        runs[1].status = RunStatus.FAILED
        await env.store.save(runs[1], timeline=[], outbox=None)
        ls = env.store.list_runs
        return runs, (
            await ls(env.tenant, workflow_id=wf.id),
            await ls(env.tenant, status="failed"),
            await ls(env.tenant, workflow_id=other_wf.id, status="pending"),
            await ls(env.tenant, updated_after=T0 + 1, updated_before=(T0 + 4) * 1000),
            await ls(env.tenant, status="failed", limit=1),
        )

    runs, (by_wf, failed, pending_other, window, one_failed) = env.run(scenario())
    ids = [r.id for r in runs]
    assert [r.id for r in by_wf[0]] == [ids[2], ids[1], ids[0]] and by_wf[1] == ""
    assert [r.id for r in failed[0]] == [ids[1]]
    assert [r.id for r in pending_other[0]] == [ids[4], ids[3]]
    assert [r.id for r in window[0]] == [ids[3], ids[2]]  # both bounds exclusive
    assert [r.id for r in one_failed[0]] == [ids[1]] and one_failed[1] == ""


def test_list_runs_refuses_an_unknown_status_or_a_bad_cursor(env):
    with pytest.raises(InvalidInput):
        env.run(env.store.list_runs(env.tenant, status="done"))
    with pytest.raises(InvalidInput):
        env.run(env.store.list_runs(env.tenant, cursor="soon"))


# --------------------------------------------------------------------------- timers, open runs


def test_timers_are_set_read_due_and_dropped(env):
    wf = env.definition()
    due_run, later_run = env.new_run(wf), env.new_run(wf)
    now = time.time()

    async def scenario():
        for r in (due_run, later_run):
            await env.create(r, wf)
        await env.store.save(due_run, timeline=[], outbox=None, timer_at=now - 1)
        await env.store.save(later_run, timeline=[], outbox=None, timer_at=now + 3600)
        due = await env.store.due_timers(now, 1000)
        fresh = WorkflowStore(env.redis)  # nothing remembered: reads it with the run
        await fresh.load(later_run.id)
        read = fresh.timer_of(later_run), fresh.timer_of(due_run)
        await env.store.save(later_run, timeline=[], outbox=None)  # ... leaves it
        kept = await env.redis.zscore(keys.TIMERS_KEY, f"{wf.id}:{later_run.id}")
        await env.store.save(due_run, timeline=[], outbox=None, timer_at=None)
        due_after = await env.store.due_timers(now, 1000)
        await env.store.get_run(env.tenant, due_run.id)
        return due, read, kept, due_after, env.store.timer_of(due_run)

    due, (later_read, unread), kept, due_after, dropped = env.run(scenario())
    mine = [d for d in due if env.unique in d[1]]
    assert mine == [(wf.id, due_run.id, pytest.approx(now - 1))]
    assert later_read == pytest.approx(now + 3600) and unread is None
    assert kept == pytest.approx(now + 3600)
    assert not [d for d in due_after if env.unique in d[1]]
    assert dropped is None


def test_open_runs_come_least_recently_updated_first(env):
    wf = env.definition()

    async def scenario():
        # scores far in the past put these runs ahead of any others in the set
        runs = [env.new_run(wf, updated_s=-T0 + 10 - i) for i in range(3)]
        for r in runs:
            await env.create(r, wf)
        runs[0].status = RunStatus.SUCCEEDED
        await env.store.save(runs[0], timeline=[], outbox=None)
        return runs, await env.store.open_runs(2)

    runs, open_ids = env.run(scenario())
    assert open_ids == [runs[2].id, runs[1].id]


# --------------------------------------------------------------------------- delete_run


def test_delete_run_removes_everything_kept_for_it(env):
    wf = env.definition()
    run = env.new_run(wf)
    run.idempotency_key = "k-del"
    job_id = f"{run.id}:a@1"

    async def scenario():
        await env.create(run, wf, key="k-del")
        run.steps["a"].job_id = job_id
        await env.store.save(run, timeline=[event(run, 1)], outbox=[{"x": 1}],
                             jobs={job_id: "a"}, timer_at=time.time() + 60)
        deleted = await env.store.delete_run(env.tenant, run.id)
        found = [k async for k in env.redis.scan_iter(match=f"wf:*{run.id}*")]
        members = [await env.redis.zscore(k, m) for k, m in (
            (keys.OPEN_RUNS_KEY, run.id), (keys.TIMERS_KEY, f"{wf.id}:{run.id}"),
            (keys.tenant_runs_key(env.tenant), run.id),
            (keys.workflow_runs_key(env.tenant, wf.id), run.id))]
        again = await env.create(env.new_run(wf), wf, key="k-del")
        return deleted, found, members, await env.redis.exists(keys.job_run_key(job_id)), again

    deleted, found, members, mapped, again = env.run(scenario())
    assert deleted is True and found == [] and members == [None] * 4 and mapped == 0
    assert again[1] is True  # the key no longer answers the deleted run


# --------------------------------------------------------------------------- locks


def test_run_lock_is_exclusive_waited_for_and_released_on_exit(env):
    wf = env.definition()
    run = env.new_run(wf)
    key = keys.run_lock_key(run.id)

    async def scenario():
        await env.create(run, wf)
        async with env.store.locked_run(run.id) as locked:
            assert locked.lease is not None
            held = await env.redis.get(key), await env.redis.pttl(key)
            with pytest.raises(LockBusy, match=f"lock {key} busy"):
                async with env.store.locked_run(run.id):
                    pass
            waiter = asyncio.ensure_future(_take(env.store, run.id))
            await asyncio.sleep(0.1)
            token = locked.lease.token
        took = await waiter
        return token, held, took, await env.redis.exists(key)

    token, (value, pttl), took, exists_after = env.run(scenario())
    assert key == f"cordum:wf:run:lock:{run.id}"
    assert value == token.encode() and 29_000 < pttl <= 30_000
    assert took is True and exists_after == 0


async def _take(store: WorkflowStore, run_id: str) -> bool:
    async with store.locked_run(run_id, wait_s=2.0) as locked:
        return locked.lease is not None


def test_reconciler_lock_is_a_ttl_hold_on_its_key(env):
    lock = env.store.reconciler_lock(interval_s=10)
    assert isinstance(lock, TtlHoldLock)
    assert (lock.key, lock.ttl_s) == ("cordum:workflow-engine:reconciler:default", 20)




def test_locked_run_takes_the_lock_and_reads_the_run_and_its_jobs_end_in_one_call(env):
    wf = env.definition()
    run = env.new_run(wf)
    job_id = f"{run.id}:a@1"
    key = keys.run_lock_key(run.id)

    async def scenario():
        await env.create(run, wf)
        await env.redis.hset(f"job:meta:{job_id}", mapping={
            "state": "FAILED", "result_status": "FAILED_FATAL", "failure_reason": "boom"})
        await env.redis.set(f"res:{job_id}", b"x" * 10)
        async with env.store.locked_run(run.id, job_id=job_id, max_result_bytes=5) as locked:
            held = await env.redis.get(key)
            with pytest.raises(LockBusy):
                async with env.store.locked_run(run.id):
                    pass
            small = locked
        async with env.store.locked_run(run.id, job_id=job_id, max_result_bytes=100) as big:
            pass
        async with env.store.locked_run(f"run-{env.unique}-none") as missing:
            missing_held = await env.redis.exists(keys.run_lock_key(f"run-{env.unique}-none"))
        await env.redis.delete(f"job:meta:{job_id}", f"res:{job_id}")
        return held, small, big, missing, missing_held, await env.redis.exists(key)

    held, small, big, missing, missing_held, after = env.run(scenario())
    assert small.lease is not None and held == small.lease.token.encode()
    assert small.loaded is not None and small.loaded[0].id == run.id
    assert small.job is not None and small.job.meta == {
        "state": "FAILED", "result_status": "FAILED_FATAL", "failure_reason": "boom"}
    assert small.job.result is None  # over 5 bytes
    assert big.job is not None and big.job.result == b"x" * 10
    assert big.job.record is None  # the engine never sent it
    assert (missing.lease, missing.loaded) == (None, None) and missing_held == 0
    assert after == 0  # released on exit


def test_locked_run_reads_the_redacted_copy_a_redacted_jobs_pointer_names(env):
    wf = env.definition()
    run = env.new_run(wf)
    job_id = f"{run.id}:a@1"

    async def scenario():
        await env.create(run, wf)
        await env.store.save(run, timeline=[], outbox=None, jobs={job_id: ("a", "h1")})
        await env.redis.hset(f"job:meta:{job_id}", mapping={
            "state": "SUCCEEDED", "result_ptr": f"redis://res:{job_id}:redacted"})
        await env.redis.set(f"res:{job_id}", b"secret")
        await env.redis.set(f"res:{job_id}:redacted", b"[REDACTED]")
        async with env.store.locked_run(run.id, job_id=job_id, max_result_bytes=100) as got:
            pass
        await env.redis.delete(f"job:meta:{job_id}", f"res:{job_id}", f"res:{job_id}:redacted")
        return got

    got = env.run(scenario())
    assert got.job is not None and got.job.result == b"[REDACTED]"
    assert got.job.record is not None and got.job.record.request_hash == "h1"
