"""The submit function's last write and its unlock in one script
(``JobStore.transition_release``, ``Lease.release_with``) on the real Redis: the move
keeps transition.lua's state fence, the release keeps lock_release.lua's
compare-and-delete, and the engine leaves a dispatched job RUNNING with its lock gone."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from cordum.store.jobs import JobState, JobStore, NewJob
from cordum.store.locks import JobLocks, job_lock_key
from tests.conftest import REDIS_URL


@pytest.fixture
def env(unique):
    loop = asyncio.new_event_loop()
    client = aioredis.Redis.from_url(REDIS_URL)
    store = JobStore(client)
    job = NewJob(job_id=f"job-{unique}", trace_id=f"tr-{unique}", tenant=f"t-{unique}",
                 topic="job.default", context="{}", request="{}", meta={})
    yield loop, client, store, job
    keys = loop.run_until_complete(client.keys(f"*{unique}*"))
    if keys:
        loop.run_until_complete(client.delete(*keys))
    for state in JobState:
        loop.run_until_complete(client.zrem(f"job:index:{state.lower()}", job.job_id))
    loop.run_until_complete(client.zrem("job:recent", job.job_id))
    loop.run_until_complete(client.aclose())


async def dispatched(store: JobStore, job: NewJob) -> None:
    await store.create(job)
    await store.transition(job.job_id, [JobState.SCHEDULED, JobState.DISPATCHED],
                           only_from=(JobState.PENDING,), fields={"worker_id": "w1"})


def test_the_move_and_the_release_are_made_together_by_the_holder(env):
    loop, client, store, job = env
    key = job_lock_key(job.job_id)

    async def scenario():
        await dispatched(store, job)
        await client.set(key, "mine")
        return await store.transition_release(job.job_id, [JobState.RUNNING],
                                              only_from=(JobState.DISPATCHED,),
                                              lock_key=key, token="mine")

    result, released = loop.run_until_complete(scenario())
    assert result.applied and result.previous == JobState.DISPATCHED and released
    meta = loop.run_until_complete(store.get(job.job_id))
    assert meta["state"] == JobState.RUNNING and meta["worker_id"] == "w1"
    assert loop.run_until_complete(client.exists(key)) == 0
    events = loop.run_until_complete(client.lrange(f"job:events:{job.job_id}", 0, -1))
    assert [e.decode().split('"state":')[1] for e in events][-1] == '"RUNNING"}'
    # The job sits in its new state's index (global and the tenant's), not the old one.
    assert loop.run_until_complete(client.zscore("job:index:running", job.job_id))
    assert loop.run_until_complete(client.zscore("job:index:dispatched", job.job_id)) is None
    assert loop.run_until_complete(
        client.zscore(f"job:tenant:index:{job.tenant}:running", job.job_id))


def test_a_lock_taken_over_by_another_holder_is_not_released(env):
    """The compare-and-delete of lock_release.lua: a holder whose lease ran out never
    deletes the next holder's lock (its move is fenced by the state, as before)."""
    loop, client, store, job = env
    key = job_lock_key(job.job_id)

    async def scenario():
        await dispatched(store, job)
        await client.set(key, "next holder")
        return await store.transition_release(job.job_id, [JobState.RUNNING],
                                              only_from=(JobState.DISPATCHED,),
                                              lock_key=key, token="expired holder")

    result, released = loop.run_until_complete(scenario())
    assert result.applied and not released
    assert loop.run_until_complete(client.get(key)) == b"next holder"


def test_a_job_that_moved_on_is_not_moved_but_the_holder_still_unlocks(env):
    """transition.lua's state fence: a job that left DISPATCHED (its result came first)
    stays where it is; the holder is done either way, so its lock goes."""
    loop, client, store, job = env
    key = job_lock_key(job.job_id)

    async def scenario():
        await dispatched(store, job)
        await store.transition(job.job_id, [JobState.SUCCEEDED],
                               only_from=(JobState.DISPATCHED,))
        await client.set(key, "mine")
        return await store.transition_release(job.job_id, [JobState.RUNNING],
                                              only_from=(JobState.DISPATCHED,),
                                              lock_key=key, token="mine")

    result, released = loop.run_until_complete(scenario())
    assert not result.applied and result.previous == JobState.SUCCEEDED and released
    assert loop.run_until_complete(store.get(job.job_id))["state"] == JobState.SUCCEEDED
    assert loop.run_until_complete(client.exists(key)) == 0


def test_a_failed_write_leaves_the_release_to_the_locks_exit(env):
    loop, client, _store, job = env
    locks = JobLocks(client)
    key = job_lock_key(job.job_id)

    async def failing(_key, _token):
        raise ConnectionError("gone")

    async def scenario():
        async with locks.job_lock(job.job_id) as lease:
            with pytest.raises(ConnectionError):
                await lease.release_with(failing)
            assert await client.get(key) == lease.token.encode()
        return await client.exists(key)

    assert loop.run_until_complete(scenario()) == 0


def test_a_write_that_released_is_not_released_again(env):
    loop, client, store, job = env
    locks = JobLocks(client)
    key = job_lock_key(job.job_id)

    async def scenario():
        await dispatched(store, job)
        async with locks.job_lock(job.job_id) as lease:
            result = await lease.release_with(lambda k, t: store.transition_release(
                job.job_id, [JobState.RUNNING], only_from=(JobState.DISPATCHED,),
                lock_key=k, token=t))
            # Another holder now: the exit must leave its lock alone.
            await client.set(key, "next holder")
        return result

    assert loop.run_until_complete(scenario()).applied
    assert loop.run_until_complete(client.get(key)) == b"next holder"


def test_the_lock_reads_the_meta_it_guards_field_for_field(env):
    """The acquire's read comes back as one JSON text: every field and value as stored,
    quotes, escapes, non-ASCII, numbers and empty values alike; a busy lock reads
    nothing."""
    loop, client, _store, job = env
    locks = JobLocks(client)
    meta = {"labels": '{"a":"b\\"c","d":"\\u00e9"}', "name": "na\u00efve \u2603\nline",
            "attempts": "3", "empty": "", "slash": "a/b\\c", "12": "numeric key"}

    async def scenario():
        await client.hset(f"job:meta:{job.job_id}", mapping=meta)
        lease = await locks.acquire(job.job_id, read=f"job:meta:{job.job_id}")
        try:
            busy = await locks._scripts.try_acquire_read(
                job_lock_key(job.job_id), "other", 1.0, f"job:meta:{job.job_id}")
        finally:
            await lease.release()
        none = await locks.acquire(job.job_id, read=f"job:meta:none-{job.job_id}")
        await none.release()
        return lease.data, busy, none.data

    data, busy, absent = loop.run_until_complete(scenario())
    assert data == meta and busy is None and absent == {}
