"""Job locks and TTL-hold locks on the real Redis."""

from __future__ import annotations

import asyncio
import functools
import time

import pytest
import redis.asyncio as aioredis

from cordum.errors import RetryAfter
from cordum.store.locks import JobLocks, LockPolicy, TtlHoldLock, job_lock_key
from tests.conftest import REDIS_URL
from tests.helpers import run

FAST_RENEWAL = LockPolicy(ttl_s=0.3, renew_every_s=0.1)
"""A lock that expires after 300 ms unless its renewal (every 100 ms) keeps it."""


class Env:
    def __init__(self, unique: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.redis = aioredis.Redis.from_url(REDIS_URL)
        self.job_id = f"lock-{unique}"
        self.key = job_lock_key(self.job_id)
        self.tick_key = f"test:tick-lock:{unique}"
        self.run = functools.partial(run, loop=self.loop)


@pytest.fixture
def env(unique):
    e = Env(unique)
    yield e
    e.run(e.redis.delete(e.key, e.tick_key))
    e.run(e.redis.aclose())
    e.loop.close()


def test_job_lock_is_held_with_a_token_and_released_on_exit(env):
    locks = JobLocks(env.redis)

    async def scenario():
        async with locks.job_lock(env.job_id) as lease:
            held = await env.redis.get(env.key), await env.redis.pttl(env.key)
            assert not lease.lost
            token = lease.token
        return token, held, await env.redis.exists(env.key)

    token, (value, pttl), exists_after = env.run(scenario())
    assert env.key == f"cordum:scheduler:job:{env.job_id}"
    assert value == token.encode()
    assert 59_000 < pttl <= 60_000
    assert exists_after == 0


def test_release_spares_a_lock_that_another_holder_took_over(env):
    locks = JobLocks(env.redis)

    async def scenario():
        lease = await locks.acquire(env.job_id)
        await env.redis.set(env.key, "someone-else")
        released = await lease.release()
        return released, await env.redis.get(env.key)

    released, value = env.run(scenario())
    assert released is False
    assert value == b"someone-else"


def test_renewal_keeps_the_lock_past_its_ttl(env):
    locks = JobLocks(env.redis, FAST_RENEWAL)

    async def scenario():
        async with locks.job_lock(env.job_id) as lease:
            # Time passing is the point: more than three TTLs, which only renewal outlives.
            await asyncio.sleep(1.0)
            return lease.lost, await env.redis.get(env.key), lease.token

    lost, value, token = env.run(scenario())
    assert lost is False
    assert value == token.encode()


def test_busy_lock_raises_retry_after_half_a_second_at_the_deadline(env):
    env.run(env.redis.set(env.key, "other-holder", px=10_000))
    locks = JobLocks(env.redis)
    started = time.monotonic()
    with pytest.raises(RetryAfter) as err:
        env.run(locks.acquire(env.job_id, deadline=time.monotonic() + 0.2))
    elapsed = time.monotonic() - started
    assert err.value.reason == f"lock {env.key} busy"
    assert err.value.delay_s == 0.5
    # The caller's deadline, not the 2 s acquire timeout, ended the wait.
    assert 0.15 <= elapsed < 1.0
    assert env.run(env.redis.get(env.key)) == b"other-holder"


def test_busy_lock_without_deadline_waits_the_acquire_timeout(env):
    env.run(env.redis.set(env.key, "other-holder", px=10_000))
    locks = JobLocks(env.redis, LockPolicy(acquire_timeout_s=0.3))
    started = time.monotonic()
    with pytest.raises(RetryAfter):
        env.run(locks.acquire(env.job_id))
    assert 0.25 <= time.monotonic() - started < 1.0


def test_acquire_polls_until_the_other_holder_is_gone(env):
    env.run(env.redis.set(env.key, "short-holder", px=150))
    locks = JobLocks(env.redis)

    async def scenario():
        lease = await locks.acquire(env.job_id, deadline=time.monotonic() + 1.5)
        await lease.release()
        return lease.token

    assert env.run(scenario())


def test_redis_failure_on_acquire_raises_retry_after_one_second(env):
    dead = aioredis.Redis.from_url("redis://127.0.0.1:1", socket_connect_timeout=0.5)
    locks = JobLocks(dead)
    with pytest.raises(RetryAfter) as err:
        env.run(locks.acquire(env.job_id))
    assert err.value.delay_s == 1.0
    assert err.value.reason.startswith(f"lock {env.key}: ")
    env.run(dead.aclose())


def test_three_failed_renewals_abandon_the_lease_and_it_is_not_released(env):
    locks = JobLocks(env.redis, FAST_RENEWAL)

    async def scenario():
        async with locks.job_lock(env.job_id) as lease:
            # The key turns into a hash: every renewal now fails with WRONGTYPE.
            await env.redis.delete(env.key)
            await env.redis.hset(env.key, "x", "1")
            await env.redis.pexpire(env.key, 5_000)
            # Two renewal periods pass (100 ms each): two failures, one short of giving up.
            await asyncio.sleep(0.22)
            early = lease.lost
            await asyncio.wait_for(lease.fence.wait(), 1.0)
            reason = lease.lost_reason
        return early, reason, await env.redis.type(env.key)

    early, reason, key_type = env.run(scenario())
    assert early is False
    assert reason.startswith("3 renewals failed")
    assert key_type == b"hash"  # left alone on exit


def test_a_deleted_lock_is_lost_at_the_next_renewal(env):
    locks = JobLocks(env.redis, FAST_RENEWAL)

    async def scenario():
        async with locks.job_lock(env.job_id) as lease:
            await env.redis.delete(env.key)
            await asyncio.wait_for(lease.fence.wait(), 0.5)
            # Someone else takes the free key; our exit must not delete it.
            await env.redis.set(env.key, "next-holder", px=5_000)
            return lease.lost

    assert env.run(scenario()) is True
    assert env.run(env.redis.get(env.key)) == b"next-holder"


def test_ttl_hold_lock_blocks_a_second_holder_and_is_never_released(env):
    lock = TtlHoldLock(env.redis, env.tick_key, ttl_s=0.4)
    other = TtlHoldLock(env.redis, env.tick_key, ttl_s=0.4)

    async def scenario():
        token = await lock.try_acquire()
        second = await other.try_acquire()
        renewed = await lock.renew(token, 0.4)
        foreign_renew = await other.renew("not-the-token")
        pttl = await env.redis.pttl(env.tick_key)
        # The hold's TTL running out is the point: nothing releases it.
        await asyncio.sleep(0.5)
        after_ttl = await other.try_acquire()
        return token, second, renewed, foreign_renew, pttl, after_ttl

    token, second, renewed, foreign_renew, pttl, after_ttl = env.run(scenario())
    assert token
    assert second is None
    assert renewed is True
    assert foreign_renew is False
    assert 0 < pttl <= 400
    assert after_ttl and after_ttl != token  # the window lapsed by TTL alone
