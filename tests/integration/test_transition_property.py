"""Property: the Lua transition script is Cordum's transition table, and every
index, set and log moves with the state (real Redis)."""

from __future__ import annotations

import asyncio
import json
import uuid

import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cordum.store.errors import InvalidTransition
from cordum.store.jobs import TERMINAL_STATES, JobState, JobStore, NewJob
from tests.conftest import REDIS_URL

S = JobState
ALLOWED: dict[str, set[JobState]] = {
    "": {S.PENDING, S.APPROVAL_REQUIRED, S.SCHEDULED, S.DISPATCHED, S.RUNNING, S.FAILED,
         S.CANCELLED},
    S.PENDING: {S.APPROVAL_REQUIRED, S.SCHEDULED, S.DISPATCHED, S.RUNNING, S.DENIED, S.FAILED,
                S.TIMEOUT, S.SUCCEEDED, S.CANCELLED, S.RETRYING},
    S.APPROVAL_REQUIRED: {S.PENDING, S.SCHEDULED, S.DISPATCHED, S.RUNNING, S.DENIED, S.FAILED,
                          S.TIMEOUT, S.SUCCEEDED, S.CANCELLED},
    S.SCHEDULED: {S.SCHEDULED, S.DISPATCHED, S.RUNNING, S.DENIED, S.FAILED, S.TIMEOUT,
                  S.SUCCEEDED, S.CANCELLED, S.OUTPUT_QUARANTINED, S.RETRYING},
    S.DISPATCHED: {S.SCHEDULED, S.RUNNING, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.TIMEOUT,
                   S.OUTPUT_QUARANTINED, S.RETRYING},
    S.RUNNING: {S.RUNNING, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.TIMEOUT, S.OUTPUT_QUARANTINED,
                S.RETRYING},
    S.RETRYING: {S.SCHEDULED, S.DISPATCHED, S.RUNNING, S.RETRYING, S.SUCCEEDED, S.FAILED,
                 S.CANCELLED, S.TIMEOUT},
    S.SUCCEEDED: {S.OUTPUT_QUARANTINED},
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans(), st.lists(st.sampled_from(list(JobState)), min_size=1, max_size=8))
def test_transition_table_and_invariants(created, steps):
    asyncio.new_event_loop().run_until_complete(_check(created, steps))


async def _check(created: bool, steps: list[JobState]) -> None:
    client = aioredis.Redis.from_url(REDIS_URL)
    store = JobStore(client)
    job_id, tenant = f"prop-{uuid.uuid4().hex[:10]}", f"tp-{uuid.uuid4().hex[:6]}"
    try:
        state, applied_steps, attempts = "", 0, 0
        if created:
            await store.create(NewJob(job_id=job_id, trace_id=job_id, tenant=tenant,
                                      topic="job.default", context="{}", request="{}", meta={}))
            state, applied_steps = S.PENDING.value, 1
        for target in steps:
            allowed = target in ALLOWED.get(state, set())
            try:
                await store.transition(job_id, [target])
                assert allowed, f"{state or '<none>'} -> {target} was accepted"
                if target is S.SCHEDULED and state != S.SCHEDULED:
                    attempts += 1
                state, applied_steps = target.value, applied_steps + 1
            except InvalidTransition:
                assert not allowed, f"{state or '<none>'} -> {target} was refused"
        meta = {k.decode(): v.decode() for k, v in (await client.hgetall(f"job:meta:{job_id}"))
                .items()}
        assert meta.get("state", "") == state
        if state:
            assert int(meta.get("attempts", "0")) == attempts
        # Exactly one per-state index holds the job: its state's.
        for s in JobState:
            score = await client.zscore(f"job:index:{s.lower()}", job_id)
            assert (score is not None) == (s.value == state)
        events = await client.lrange(f"job:events:{job_id}", 0, -1)
        assert len(events) == applied_steps
        if events:
            assert json.loads(events[-1])["state"] == state
        if created:
            active = await client.sismember(f"job:tenant:active:{tenant}", job_id)
            assert bool(active) == (S(state) not in TERMINAL_STATES)
    finally:
        for s in JobState:
            await client.zrem(f"job:index:{s.lower()}", job_id)
        await client.zrem("job:recent", job_id)
        await client.delete(f"job:meta:{job_id}", f"job:events:{job_id}", f"job:req:{job_id}",
                            f"ctx:{job_id}", f"trace:{job_id}", f"job:tenant:active:{tenant}")
        await client.aclose()
