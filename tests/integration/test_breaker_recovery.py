"""The safety circuit breaker notices a recovered kernel: early probes, doubling waits.

An open breaker admits its first probes ``probe_after_s`` (1 s) after opening; each
failed probe re-opens it with twice the wait, up to ``open_duration_s`` (Cordum's 30 s).
The wait lives in the shared hash, so every replica is in step. Real Redis, each test
under its own key prefix.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis

from cordum.safety.breaker import (
    INPUT_BREAKER_KEY,
    AdmissionKind,
    BreakerPolicy,
    CircuitBreaker,
    CircuitState,
    LocalBreaker,
)
from tests.conftest import REDIS_URL

# Clock slack: the Redis clock and this process's monotonic clock both run in real time,
# but each read is a round trip away from the event it measures.
EARLY_S = 0.03
LATE_S = 0.15


@pytest.fixture
def env(aloop, unique):
    redis = aioredis.Redis.from_url(REDIS_URL)
    other = aioredis.Redis.from_url(REDIS_URL)
    prefix = f"test:{unique}:"
    yield aloop, redis, other, prefix
    aloop.run_until_complete(redis.delete(prefix + INPUT_BREAKER_KEY))
    aloop.run_until_complete(redis.aclose())
    aloop.run_until_complete(other.aclose())


async def fail(b: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        await b.record_failure(await b.allow())


async def until_probe(b: CircuitBreaker, bound_s: float = 3.0):
    """Ask every 10 ms until the breaker admits a probe; fail past ``bound_s``."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        admission = await b.allow()
        if admission.kind is AdmissionKind.PROBE:
            return admission
        await asyncio.sleep(0.01)
    raise AssertionError(f"no probe admitted within {bound_s} s")


def test_a_kernel_back_within_a_second_closes_the_breaker_within_three(env):
    loop, redis, other, prefix = env
    # Given the shipped policy on two replicas, opened by three failures
    a = CircuitBreaker(redis, key_prefix=prefix)
    b = CircuitBreaker(other, key_prefix=prefix)

    async def scenario():
        await fail(a, a.policy.fail_threshold)
        opened = await a.state()
        first_rejection = await a.allow()
        # When the kernel is back at once, and calls keep arriving every 100 ms
        back = time.monotonic()
        closed_after = None
        while time.monotonic() - back < 3.0:
            admission = await a.allow()
            if admission.admitted:
                await a.record_success(admission)
            if (await a.state()).state is CircuitState.CLOSED:
                closed_after = time.monotonic() - back
                break
            await asyncio.sleep(0.1)
        return opened, first_rejection, closed_after, await b.state(), await b.allow()

    opened, first_rejection, closed_after, other_state, other_admission = (
        loop.run_until_complete(scenario()))
    # Then the breaker is closed within 3 s, for the other replica too
    assert closed_after is not None, "still not closed 3 s after the kernel came back"
    print(f"time to close after the kernel came back: {closed_after:.3f} s")
    assert closed_after <= 3.0
    assert other_state.state is CircuitState.CLOSED
    assert other_admission.kind is AdmissionKind.CLOSED
    # And while open, clients are told to come back within a second, not in 30 s
    assert opened.state is CircuitState.OPEN
    assert 0 < opened.cooldown_remaining_ms <= 1000
    assert first_rejection.kind is AdmissionKind.REJECTED
    assert first_rejection.cooldown_remaining_ms <= 1000


def test_each_failed_probe_doubles_the_wait_up_to_the_cap(env):
    loop, redis, _, prefix = env
    # Given a first wait of 0.2 s and a cap of 0.8 s: waits 0.2, 0.4, 0.8, 0.8
    policy = BreakerPolicy(probe_after_s=0.2, open_duration_s=0.8, op_timeout_s=1.0)
    b = CircuitBreaker(redis, key_prefix=prefix, policy=policy)
    expected = [0.2, 0.4, 0.8, 0.8]

    async def scenario():
        await fail(b, policy.fail_threshold)
        cooldowns, waits = [], []
        for _ in expected:
            opened = time.monotonic()
            cooldowns.append((await b.state()).cooldown_remaining_ms)
            # When the first probe after each wait fails
            probe = await until_probe(b)
            waits.append(time.monotonic() - opened)
            await b.record_failure(probe)
        failures = (await b.state()).failures
        # Then two probe successes close it, and the next opening starts again at 0.2 s
        for _ in range(policy.close_after):
            await b.record_success(await until_probe(b))
        closed = await b.state()
        await fail(b, policy.fail_threshold)
        return cooldowns, waits, failures, closed, await b.state()

    cooldowns, waits, failures, closed, reopened = loop.run_until_complete(scenario())
    for want, cooldown, waited in zip(expected, cooldowns, waits, strict=True):
        assert want * 1000 - 100 < cooldown <= want * 1000, (cooldowns, waits)
        assert want - EARLY_S <= waited <= want + LATE_S, (cooldowns, waits)
    assert failures == policy.fail_threshold + len(expected)
    assert closed.state is CircuitState.CLOSED
    assert reopened.state is CircuitState.OPEN
    assert reopened.cooldown_remaining_ms <= 200


def test_replicas_share_the_wait_and_the_probe_quota(env):
    loop, redis, other, prefix = env
    # Given two replicas with a quota of two probes, waits 0.2, 0.4, 0.8, ... up to 1.6 s
    policy = BreakerPolicy(probe_after_s=0.2, open_duration_s=1.6, half_open_max=2,
                           op_timeout_s=1.0)
    a = CircuitBreaker(redis, key_prefix=prefix, policy=policy)
    b = CircuitBreaker(other, key_prefix=prefix, policy=policy)

    async def scenario():
        await fail(a, policy.fail_threshold)
        pa = await until_probe(a)
        pb = await b.allow()
        over_quota = [await a.allow(), await b.allow()]
        # When a's probe fails
        await a.record_failure(pa)
        after_a = [await a.state(), await b.state()]
        b_rejected = await b.allow()
        await b.record_success(pb)  # the failed round's other probe reports late
        still_open = await b.state()
        # And then b's probe of the next round fails too
        reopened = time.monotonic()
        qb = await until_probe(b)
        b_waited = time.monotonic() - reopened
        await b.record_failure(qb)
        after_b = [await a.state(), await b.state()]
        # Then a probe on each replica, both succeeding, closes it for both
        r1 = await until_probe(a)
        r2 = await b.allow()
        await a.record_success(r1)
        await b.record_success(r2)
        return (pb, over_quota, after_a, b_rejected, still_open, b_waited, after_b, r2,
                [await a.state(), await b.state()])

    (pb, over_quota, after_a, b_rejected, still_open, b_waited, after_b, r2,
     closed) = loop.run_until_complete(scenario())
    assert pb.kind is AdmissionKind.PROBE
    assert [adm.kind for adm in over_quota] == [AdmissionKind.REJECTED] * 2
    # a's failed probe re-opened the breaker for both, with the doubled wait (0.4 s)
    for state in after_a:
        assert state.state is CircuitState.OPEN
        assert 300 < state.cooldown_remaining_ms <= 400, after_a
    assert b_rejected.kind is AdmissionKind.REJECTED
    assert still_open.state is CircuitState.OPEN
    assert 0.4 - EARLY_S <= b_waited <= 0.4 + LATE_S
    # b's failure doubled the level a left: 0.8 s, seen by both
    for state in after_b:
        assert state.state is CircuitState.OPEN
        assert 700 < state.cooldown_remaining_ms <= 800, after_b
    assert r2.kind is AdmissionKind.PROBE
    assert [s.state for s in closed] == [CircuitState.CLOSED] * 2


def test_the_local_breaker_doubles_its_wait_the_same_way():
    # Given the shipped policy on the in-process fallback, with a clock the test moves
    now = [100.0]
    b = LocalBreaker(BreakerPolicy(), clock=lambda: now[0])
    for _ in range(3):
        b.record_failure(b.allow())
    waits = []
    for _ in range(7):
        cooldown = b.state().cooldown_remaining_ms
        # Steps that are exact binary fractions keep the float clock exact.
        now[0] += cooldown / 1000 - 2 ** -10
        early = b.allow()
        now[0] += 2 ** -10
        # When the first probe after each wait fails
        probe = b.allow()
        waits.append((cooldown, early.kind, probe.kind))
        b.record_failure(probe)
    # Then the waits are 1, 2, 4, 8, 16 s, then Cordum's 30 s
    assert [w[0] for w in waits] == [1000, 2000, 4000, 8000, 16000, 30000, 30000]
    assert {w[1] for w in waits} == {AdmissionKind.REJECTED}
    assert {w[2] for w in waits} == {AdmissionKind.PROBE}
    # And closing resets the wait to 1 s
    now[0] += 30
    for _ in range(2):
        b.record_success(b.allow())
    assert b.state().state is CircuitState.CLOSED
    for _ in range(3):
        b.record_failure(b.allow())
    assert b.state().cooldown_remaining_ms == 1000
