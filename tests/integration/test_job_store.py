"""JobStore on the real Redis: Cordum's keys, the transition table, one script per write."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis.asyncio as aioredis

from cordum.store.errors import InvalidTransition, StoreError
from cordum.store.jobs import (
    DATA_TTL_S,
    META_TTL_S,
    NO_STATE,
    JobState,
    JobStore,
    NewJob,
)
from tests.conftest import REDIS_URL
from tests.helpers import run


@pytest.fixture
def env(unique):
    loop = asyncio.new_event_loop()
    client = aioredis.Redis.from_url(REDIS_URL)
    store = JobStore(client)
    tenant = f"t-{unique}"
    job = NewJob(job_id=f"job-{unique}", trace_id=f"tr-{unique}", tenant=tenant,
                 topic="job.default", context='{"prompt":"hi"}', request="{}",
                 meta={"labels": '{"a":"b"}'})
    yield loop, client, store, job
    keys = loop.run_until_complete(client.keys(f"*{unique}*"))
    if keys:
        loop.run_until_complete(client.delete(*keys))
    for state in JobState:
        loop.run_until_complete(client.zrem(f"job:index:{state.lower()}", job.job_id))
    loop.run_until_complete(client.zrem("job:recent", job.job_id))
    loop.run_until_complete(client.aclose())
    loop.close()


def test_create_writes_cordum_keys_with_ttls(env):
    loop, client, store, job = env
    # Given a new job / When it is created
    assert loop.run_until_complete(store.create(job)) is True
    # Then meta, request, payload, index, recent, events, tenant set and trace set exist
    meta = loop.run_until_complete(client.hgetall(f"job:meta:{job.job_id}"))
    assert meta[b"state"] == b"PENDING"
    assert meta[b"tenant"] == job.tenant.encode()
    assert meta[b"labels"] == b'{"a":"b"}'
    assert meta[b"attempts"] == b"0"
    assert loop.run_until_complete(client.get(f"ctx:{job.job_id}")) == b'{"prompt":"hi"}'
    assert 0 < loop.run_until_complete(client.ttl(f"ctx:{job.job_id}")) <= DATA_TTL_S
    assert DATA_TTL_S < loop.run_until_complete(client.ttl(f"job:meta:{job.job_id}")) <= META_TTL_S
    assert loop.run_until_complete(client.zscore("job:index:pending", job.job_id)) is not None
    assert loop.run_until_complete(client.zscore("job:recent", job.job_id)) is not None
    assert loop.run_until_complete(client.sismember(f"job:tenant:active:{job.tenant}", job.job_id))
    assert loop.run_until_complete(client.sismember(f"trace:{job.trace_id}", job.job_id))
    events = loop.run_until_complete(client.lrange(f"job:events:{job.job_id}", 0, -1))
    assert [json.loads(e)["state"] for e in events] == ["PENDING"]
    # And a second create of the same id writes nothing
    assert loop.run_until_complete(store.create(job)) is False


def test_transition_walks_states_moves_indexes_and_counts_attempts(env):
    loop, client, store, job = env
    loop.run_until_complete(store.create(job))
    result = loop.run_until_complete(
        store.transition(job.job_id, [JobState.SCHEDULED, JobState.DISPATCHED],
                         only_from=[JobState.PENDING], fields={"worker_id": "w1"})
    )
    assert result.applied and result.previous == "PENDING"
    meta = loop.run_until_complete(client.hgetall(f"job:meta:{job.job_id}"))
    assert meta[b"state"] == b"DISPATCHED"
    assert meta[b"attempts"] == b"1"
    assert meta[b"worker_id"] == b"w1"
    assert loop.run_until_complete(client.zscore("job:index:pending", job.job_id)) is None
    assert loop.run_until_complete(client.zscore("job:index:dispatched", job.job_id)) is not None
    events = loop.run_until_complete(client.lrange(f"job:events:{job.job_id}", 0, -1))
    assert [json.loads(e)["state"] for e in events] == ["PENDING", "SCHEDULED", "DISPATCHED"]
    # Event times are exact microseconds (cjson would have rounded them).
    updated = int(meta[b"updated_at"])
    assert json.loads(events[-1])["ts"] == updated and updated > 10**15


def test_terminal_state_leaves_tenant_active_set_and_deadline(env):
    loop, client, store, job = env
    loop.run_until_complete(store.create(job))
    loop.run_until_complete(client.zadd("job:deadline", {job.job_id: 1}))
    loop.run_until_complete(store.transition(job.job_id, [JobState.RUNNING]))
    loop.run_until_complete(
        store.transition(job.job_id, [JobState.SUCCEEDED], fields={"result_ptr": "redis://res:x"})
    )
    meta = loop.run_until_complete(client.hgetall(f"job:meta:{job.job_id}"))
    assert meta[b"state"] == b"SUCCEEDED" and meta[b"result_ptr"] == b"redis://res:x"
    assert not loop.run_until_complete(
        client.sismember(f"job:tenant:active:{job.tenant}", job.job_id))
    assert loop.run_until_complete(client.zscore("job:deadline", job.job_id)) is None


def test_forbidden_transition_raises_and_writes_nothing(env):
    loop, client, store, job = env
    loop.run_until_complete(store.create(job))
    loop.run_until_complete(store.transition(job.job_id, [JobState.RUNNING]))
    loop.run_until_complete(store.transition(job.job_id, [JobState.SUCCEEDED]))
    with pytest.raises(InvalidTransition, match="SUCCEEDED -> RUNNING"):
        loop.run_until_complete(store.transition(job.job_id, [JobState.RUNNING]))
    meta = loop.run_until_complete(client.hgetall(f"job:meta:{job.job_id}"))
    assert meta[b"state"] == b"SUCCEEDED"


def test_only_from_skips_without_writing(env):
    loop, client, store, job = env
    loop.run_until_complete(store.create(job))
    loop.run_until_complete(store.transition(job.job_id, [JobState.SCHEDULED, JobState.RUNNING]))
    # A redelivered request for a running job must not dispatch it again.
    result = loop.run_until_complete(
        store.transition(job.job_id, [JobState.SCHEDULED, JobState.DISPATCHED],
                         only_from=[NO_STATE, JobState.PENDING, JobState.SCHEDULED])
    )
    assert not result.applied and result.previous == "RUNNING"
    events = loop.run_until_complete(client.llen(f"job:events:{job.job_id}"))
    assert events == 3


def test_discard_removes_a_job_that_never_left_its_first_state(env):
    loop, client, store, job = env
    loop.run_until_complete(store.create(job))
    assert loop.run_until_complete(store.discard(job)) is True
    assert loop.run_until_complete(client.exists(f"job:meta:{job.job_id}", f"ctx:{job.job_id}",
                                                 f"job:req:{job.job_id}")) == 0
    assert loop.run_until_complete(client.zscore("job:index:pending", job.job_id)) is None
    assert not loop.run_until_complete(
        client.sismember(f"job:tenant:active:{job.tenant}", job.job_id))


def test_store_down_raises_store_error():
    async def attempt():
        client = aioredis.Redis.from_url("redis://127.0.0.1:1", socket_connect_timeout=0.2)
        store = JobStore(client)
        job = NewJob(job_id="x", trace_id="t", tenant="t", topic="job.default", context="{}",
                     request="{}", meta={})
        try:
            await store.create(job)
        finally:
            await client.aclose()

    with pytest.raises(StoreError):
        run(attempt())


def test_terminal_transition_writes_the_dlq_entry_in_the_same_step(env):
    loop, client, store, job = env
    loop.run_until_complete(store.create(job))
    loop.run_until_complete(store.transition(job.job_id, [JobState.SCHEDULED, JobState.RUNNING]))
    loop.run_until_complete(store.transition(
        job.job_id, [JobState.FAILED], fields={"failure_reason": "boom"},
        dlq={"topic": "job.default", "status": "FAILED", "reason": "boom",
             "reason_code": "worker_failed"}))
    try:
        entry = json.loads(loop.run_until_complete(client.get(f"dlq:entry:{job.job_id}")))
        assert entry["job_id"] == job.job_id and entry["reason_code"] == "worker_failed"
        assert entry["last_state"] == "RUNNING" and entry["attempts"] == 1
        score = loop.run_until_complete(client.zscore("dlq:index", job.job_id))
        assert int(score) == entry["created_at"] and entry["created_at"] > 10**15
        assert 0 < loop.run_until_complete(client.ttl(f"dlq:entry:{job.job_id}")) <= 30 * 86400
    finally:
        loop.run_until_complete(client.zrem("dlq:index", job.job_id))


def test_worker_fence_skips_a_job_of_another_worker(env):
    loop, client, store, job = env
    loop.run_until_complete(store.create(job))
    # A job never dispatched names no worker: no result may finish it.
    undispatched = loop.run_until_complete(store.transition(
        job.job_id, [JobState.SUCCEEDED], worker_of_record="w9"))
    assert undispatched.foreign and not undispatched.applied
    dispatched = loop.run_until_complete(store.transition(
        job.job_id, [JobState.SCHEDULED, JobState.RUNNING], fields={"worker_id": "w1"}))
    assert dispatched.applied and not dispatched.foreign
    # Given a job running on w1 / When w2's result arrives, with its side record
    side = f"side:{job.job_id}"
    result = loop.run_until_complete(store.transition(
        job.job_id, [JobState.SUCCEEDED], only_from=[JobState.RUNNING],
        fields={"worker_id": "w2", "result_ptr": "redis://res:x"},
        records={side: ("v", 60)}, worker_of_record="w2"))
    # Then it is "foreign" and nothing is written
    assert result.foreign and not result.applied and result.previous == "RUNNING"
    meta = loop.run_until_complete(client.hgetall(f"job:meta:{job.job_id}"))
    assert meta[b"state"] == b"RUNNING" and meta[b"worker_id"] == b"w1"
    assert b"result_ptr" not in meta and loop.run_until_complete(client.exists(side)) == 0
    # And w1's own result, side record and fields land where they belong
    result = loop.run_until_complete(store.transition(
        job.job_id, [JobState.SUCCEEDED], only_from=[JobState.RUNNING],
        fields={"worker_id": "w1", "result_ptr": "redis://res:x"},
        records={side: ("v", 60)}, worker_of_record="w1"))
    assert result.applied and not result.foreign
    meta = loop.run_until_complete(client.hgetall(f"job:meta:{job.job_id}"))
    assert meta[b"state"] == b"SUCCEEDED" and meta[b"result_ptr"] == b"redis://res:x"
    assert loop.run_until_complete(client.get(side)) == b"v"
    assert 0 < loop.run_until_complete(client.ttl(side)) <= 60
