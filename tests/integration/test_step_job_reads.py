"""The store's batched read of step jobs (``JobReads.step_job_ends``) on the real Redis:
what the workflow reconciler sees of the jobs of a run's open steps."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from cordum.store.errors import StoreError
from cordum.store.jobs import meta_key
from cordum.store.reads import JobReads
from cordum.store.step_jobs import StepJobRecord, step_job_key
from tests.conftest import REDIS_URL
from tests.helpers import delete_keys
from tests.helpers import run as run_on

NAMES = ("state", "result_ptr", "output_safety")
FINAL = json.dumps({"phase": "async", "quarantined": False, "decision": "ALLOW"})


class CountingRedis:
    """The real client, counting the pipelines sent (one round trip each)."""

    def __init__(self, redis: Any) -> None:
        self._redis = redis
        self.pipelines = 0

    def pipeline(self, transaction: bool = True) -> Any:
        self.pipelines += 1
        return self._redis.pipeline(transaction=transaction)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._redis, name)


@pytest.fixture
def env(unique, aloop):
    """A client on the test's loop, and a run id whose keys are removed at the end."""
    redis = aioredis.Redis.from_url(REDIS_URL)
    run = functools.partial(run_on, loop=aloop)
    yield redis, f"run-{unique}", run
    run(delete_keys(redis, f"*run-{unique}*"))
    run(redis.aclose())


async def succeeded(redis: Any, job_id: str, result: bytes, **meta: str) -> None:
    await redis.hset(meta_key(job_id), mapping={
        "state": "SUCCEEDED", "result_ptr": f"redis://res:{job_id}", **meta})
    await redis.set(f"res:{job_id}", result)


def test_meta_record_and_served_result_of_each_job_in_two_round_trips(env):
    redis, run_id, run = env
    small, big, failed, unknown = (f"{run_id}:{s}@1" for s in ("small", "big", "f", "u"))
    counting = CountingRedis(redis)

    async def scenario():
        await succeeded(redis, small, b'{"ok":1}')
        await succeeded(redis, big, b"x" * 11)
        await redis.hset(meta_key(failed), mapping={"state": "FAILED",
                                                     "result_ptr": f"redis://res:{failed}"})
        await redis.set(f"res:{failed}", b"never shown")
        await redis.set(step_job_key(small), StepJobRecord("t", run_id, "small", "h").to_json())
        return await JobReads(counting).step_job_ends(
            [small, big, failed, unknown], NAMES, output_policy=False, max_result_bytes=10)

    got = run(scenario())
    assert counting.pipelines == 2
    assert list(got) == [small, big, failed, unknown]
    assert got[small].meta == {"state": "SUCCEEDED", "result_ptr": f"redis://res:{small}"}
    assert got[small].result == b'{"ok":1}'
    assert got[small].record == StepJobRecord("t", run_id, "small", "h")
    assert got[big].result is None  # over max_result_bytes: stays behind its pointer
    assert got[failed].result is None and got[failed].meta["state"] == "FAILED"
    assert (got[unknown].meta, got[unknown].result, got[unknown].record) == ({}, None, None)


def test_only_what_the_api_would_serve_is_read(env):
    redis, run_id, run = env
    pending, redacted, final = (f"{run_id}:{s}@1" for s in ("p", "r", "f"))
    counting = CountingRedis(redis)

    async def scenario():
        await succeeded(redis, pending, b"unscanned")
        await succeeded(redis, final, b"scanned", output_safety=FINAL)
        await succeeded(redis, redacted, b"secret", output_safety=json.dumps(
            {"phase": "async", "quarantined": False, "decision": "REDACT"}))
        await redis.hset(meta_key(redacted), "result_ptr", f"redis://res:{redacted}:redacted")
        await redis.set(f"res:{redacted}:redacted", b"[REDACTED]")
        return await JobReads(counting).step_job_ends(
            [pending, redacted, final], NAMES, output_policy=True, max_result_bytes=100)

    got = run(scenario())
    assert got[pending].result is None  # its output decision is not final
    assert got[redacted].result == b"[REDACTED]"
    assert got[final].result == b"scanned"


def test_nothing_to_show_costs_one_round_trip_and_no_job_none(env):
    redis, run_id, run = env
    counting = CountingRedis(redis)
    assert run(JobReads(counting).step_job_ends([], NAMES, output_policy=False,
                                                max_result_bytes=1)) == {}
    assert counting.pipelines == 0
    run(JobReads(counting).step_job_ends([f"{run_id}:a@1"], NAMES, output_policy=False,
                                         max_result_bytes=1))
    assert counting.pipelines == 1


def test_a_redis_failure_is_a_store_error(unique):
    async def scenario():
        down = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
        try:
            await JobReads(down).step_job_ends([f"run-{unique}:a@1"], NAMES,
                                               output_policy=False, max_result_bytes=1)
        finally:
            await down.aclose()

    with pytest.raises(StoreError):
        run_on(scenario())
