"""The safety circuit breaker on the real Redis (Cordum case 28, plus a real half-open).

Every test uses its own key prefix, so a live stack on the same Redis is not disturbed.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from cordum.safety.breaker import (
    INPUT_BREAKER_KEY,
    OUTPUT_BREAKER_KEY,
    AdmissionKind,
    BreakerPolicy,
    BreakerSource,
    CircuitBreaker,
    CircuitState,
)
from tests.conftest import REDIS_URL

OPEN_S = 0.3
# First wait = longest wait: every opening lasts OPEN_S, as Cordum's fixed open duration
# (the doubling waits are tested in test_breaker_recovery.py).
POLICY = BreakerPolicy(open_duration_s=OPEN_S, probe_after_s=OPEN_S, op_timeout_s=1.0)

READ_COMMANDS = {"EVALSHA", "EVAL", "HMGET", "HGETALL", "HEXISTS", "TIME", "GET", "PTTL"}


@pytest.fixture
def env(aloop, unique):
    redis = aioredis.Redis.from_url(REDIS_URL)
    prefix = f"test:{unique}:"
    yield aloop, redis, prefix
    aloop.run_until_complete(redis.delete(prefix + INPUT_BREAKER_KEY,
                                          prefix + OUTPUT_BREAKER_KEY))
    aloop.run_until_complete(redis.aclose())


def breaker(redis, prefix, policy=POLICY, **kw) -> CircuitBreaker:
    return CircuitBreaker(redis, key_prefix=prefix, policy=policy, **kw)


async def fail(b: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        await b.record_failure(await b.allow())


async def open_and_wait(b: CircuitBreaker) -> None:
    await fail(b, POLICY.fail_threshold)
    # The open window runs on the Redis clock (replicas agree on it): only waiting
    # moves it on.
    await asyncio.sleep(OPEN_S + 0.05)


def test_third_failure_opens_and_replicas_share_it(env):
    loop, redis, prefix = env
    a, b = breaker(redis, prefix), breaker(redis, prefix)

    async def scenario():
        # Given two failures: still closed, the count is 2
        await fail(a, 2)
        closed = await b.state()
        admitted = await b.allow()
        # When a third failure is recorded by the other replica
        await b.record_failure(admitted)
        # Then both replicas see it open with count 3 and reject calls
        return closed, admitted, await a.state(), await a.allow(), await b.allow()

    closed, admitted, opened, rej_a, rej_b = loop.run_until_complete(scenario())
    assert (closed.state, closed.failures) == (CircuitState.CLOSED, 2)
    assert admitted.kind is AdmissionKind.CLOSED and admitted.failures == 2
    assert (opened.state, opened.failures) == (CircuitState.OPEN, 3)
    assert 0 < opened.cooldown_remaining_ms <= OPEN_S * 1000
    assert rej_a.kind is rej_b.kind is AdmissionKind.REJECTED
    assert rej_a.source is BreakerSource.REDIS and rej_a.cooldown_remaining_ms > 0


def test_success_resets_the_counter(env):
    loop, redis, prefix = env
    b = breaker(redis, prefix)

    async def scenario():
        await fail(b, 2)
        await b.record_success(await b.allow())
        return await b.state(), await redis.exists(b.key)

    state, exists = loop.run_until_complete(scenario())
    assert (state.state, state.failures) == (CircuitState.CLOSED, 0)
    assert exists == 0


def test_half_open_admits_at_most_the_quota_across_replicas_and_two_successes_close(env):
    loop, redis, prefix = env
    other = aioredis.Redis.from_url(REDIS_URL)
    a, b = breaker(redis, prefix), breaker(other, prefix)

    async def scenario():
        await open_and_wait(a)
        # When six calls arrive at once on two replicas after the open window
        first = await asyncio.gather(*(x.allow() for x in (a, b, a, b, a, b)))
        half_open = await a.state()
        probes = [adm for adm in first if adm.kind is AdmissionKind.PROBE]
        # One probe succeeds: its slot is free again, one more call becomes a probe
        await b.record_success(probes[0])
        after_one = await a.state()
        refill = await a.allow()
        # A second probe succeeds: closed
        await a.record_success(probes[1])
        return first, half_open, after_one, refill, await b.state(), await b.allow()

    try:
        first, half_open, after_one, refill, closed, admitted = loop.run_until_complete(scenario())
    finally:
        loop.run_until_complete(other.aclose())
    kinds = [adm.kind for adm in first]
    assert kinds.count(AdmissionKind.PROBE) == POLICY.half_open_max == 3
    assert kinds.count(AdmissionKind.REJECTED) == 3
    assert (half_open.state, half_open.probes_in_flight) == (CircuitState.HALF_OPEN, 3)
    assert (after_one.state, after_one.probes_in_flight) == (CircuitState.HALF_OPEN, 2)
    assert refill.kind is AdmissionKind.PROBE
    assert (closed.state, closed.failures) == (CircuitState.CLOSED, 0)
    assert admitted.kind is AdmissionKind.CLOSED


def test_a_failed_probe_reopens_for_a_full_window(env):
    loop, redis, prefix = env
    b = breaker(redis, prefix)

    async def scenario():
        await open_and_wait(b)
        p1, p2 = await b.allow(), await b.allow()
        await b.record_failure(p1)
        reopened = await b.state()
        rejected = await b.allow()
        # The other probe of the failed round reports late: it no longer counts
        await b.record_success(p2)
        still_open = await b.state()
        await asyncio.sleep(OPEN_S + 0.05)  # a full open window, on the Redis clock
        return p1, reopened, rejected, still_open, await b.allow()

    p1, reopened, rejected, still_open, next_probe = loop.run_until_complete(scenario())
    assert p1.kind is AdmissionKind.PROBE
    assert (reopened.state, reopened.failures) == (CircuitState.OPEN, 4)
    assert reopened.cooldown_remaining_ms > OPEN_S * 1000 - 100
    assert rejected.kind is AdmissionKind.REJECTED
    assert still_open.state is CircuitState.OPEN
    assert next_probe.kind is AdmissionKind.PROBE


def test_a_probe_that_never_reports_frees_its_slot_after_its_lease(env):
    loop, redis, prefix = env
    policy = BreakerPolicy(open_duration_s=OPEN_S, probe_lease_s=0.2, op_timeout_s=1.0)
    b = breaker(redis, prefix, policy)

    async def scenario():
        await open_and_wait(b)
        taken = [await b.allow() for _ in range(4)]
        await asyncio.sleep(0.25)  # the 0.2 s probe lease runs out, on the Redis clock
        return taken, await b.allow()

    taken, after_lease = loop.run_until_complete(scenario())
    assert [t.kind for t in taken].count(AdmissionKind.PROBE) == 3
    assert taken[3].kind is AdmissionKind.REJECTED
    assert after_lease.kind is AdmissionKind.PROBE


def test_input_and_output_breakers_are_separate_keys(env):
    loop, redis, prefix = env
    inp = breaker(redis, prefix)
    out = breaker(redis, prefix, key=OUTPUT_BREAKER_KEY)

    async def scenario():
        await fail(out, 3)
        return await inp.state(), await out.state()

    inp_state, out_state = loop.run_until_complete(scenario())
    assert out.key == prefix + "cordum:cb:safety:output:failures"
    assert inp_state.state is CircuitState.CLOSED and out_state.state is CircuitState.OPEN


def test_cordum_string_counter_is_honoured(env):
    loop, redis, prefix = env
    b = breaker(redis, prefix)

    async def scenario():
        # Given the counter Cordum's Go scheduler leaves behind: 3 failures, 5 s to go
        await redis.set(b.key, 3, px=5000)
        rejected = await b.allow()
        await redis.set(b.key, 1, px=5000)
        admitted = await b.allow()
        await b.record_success(admitted)
        return rejected, admitted, await redis.exists(b.key)

    rejected, admitted, exists = loop.run_until_complete(scenario())
    assert rejected.kind is AdmissionKind.REJECTED and rejected.cooldown_remaining_ms > 4000
    assert admitted.kind is AdmissionKind.CLOSED and admitted.failures == 1
    assert exists == 0


def test_redis_down_falls_back_to_a_local_breaker(aloop):
    # Given a breaker whose Redis refuses connections
    dead = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2,
                          retry=Retry(NoBackoff(), 0))
    b = CircuitBreaker(dead, policy=BreakerPolicy(open_duration_s=OPEN_S, op_timeout_s=0.5))

    async def scenario():
        admissions = []
        for _ in range(3):
            adm = await b.allow()
            admissions.append(adm)
            await b.record_failure(adm)
        return admissions, await b.allow(), await b.state()

    started = time.monotonic()
    try:
        admissions, fourth, shared = aloop.run_until_complete(scenario())
    finally:
        aloop.run_until_complete(dead.aclose())
    # Then no exception: the local breaker admitted three, opened, rejects the fourth
    assert all(a.kind is AdmissionKind.CLOSED and a.source is BreakerSource.LOCAL
               for a in admissions)
    assert fourth.kind is AdmissionKind.REJECTED and fourth.source is BreakerSource.LOCAL
    assert shared.state is CircuitState.UNKNOWN
    assert time.monotonic() - started < 1.5


def test_local_breaker_recovers_through_half_open():
    b = CircuitBreaker(None, policy=POLICY)

    async def scenario():
        await open_and_wait(b)
        probes = [await b.allow() for _ in range(4)]
        await b.record_success(probes[0])
        await b.record_success(probes[1])
        return probes, await b.state()

    loop = asyncio.new_event_loop()
    try:
        probes, state = loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert [p.kind for p in probes].count(AdmissionKind.PROBE) == 3
    assert probes[3].kind is AdmissionKind.REJECTED
    assert state.state is CircuitState.CLOSED


async def _commands_on(redis, key: str, marker: str, action) -> list[str]:
    """Every command that touched ``key`` while ``action`` ran, scripts' inner calls included."""
    async with redis.monitor() as monitor:
        await action()
        await redis.get(marker)  # fences the capture: everything before it was seen
        seen: list[str] = []
        while True:
            info = await asyncio.wait_for(monitor.next_command(), 2)
            if marker in info["command"]:
                return seen
            if key in info["command"]:
                seen.append(f'{info["client_type"]} {info["command"]}')


def test_a_closed_and_clean_success_writes_nothing(env):
    loop, redis, prefix = env
    b = breaker(redis, prefix)
    marker = prefix + "marker"

    async def check_once():
        await b.record_success(await b.allow())

    async def after_failure():
        await b.record_failure(await b.allow())
        await b.record_success(await b.allow())

    async def scenario():
        await b.state()  # loads the script, so the capture shows steady-state traffic
        clean = await _commands_on(redis, b.key, marker, check_once)
        dirty = await _commands_on(redis, b.key, marker, after_failure)
        return clean, dirty

    clean, dirty = loop.run_until_complete(scenario())

    def names(lines: list[str]) -> list[str]:
        return [line.split(" ")[1].upper() for line in lines]

    # Then a clean success writes nothing, and costs one round trip (the admit script)
    assert set(names(clean)) <= READ_COMMANDS, clean
    assert [n for line, n in zip(clean, names(clean), strict=True)
            if line.startswith("tcp")] == ["EVALSHA"]
    # And the same capture does see writes when there is something to reset
    assert {"HSET", "DEL"} <= set(names(dirty)), dirty


def test_a_clean_admission_is_reused_briefly_and_a_failure_ends_the_reuse(env):
    loop, redis, prefix = env
    now = [1000.0]
    policy = BreakerPolicy(open_duration_s=30, op_timeout_s=1.0, clean_reuse_s=1.0)
    a = breaker(redis, prefix, policy, clock=lambda: now[0])
    other = breaker(redis, prefix, policy)
    calls = []
    admit = a._scripts["admit"]

    async def counting(**kw):
        calls.append(kw["args"][0])
        return await admit(**kw)

    a._scripts["admit"] = counting

    async def scenario():
        first = await a.allow()
        second = await a.allow()  # within the window: no Redis
        reused = len(calls)
        await fail(other, policy.fail_threshold)  # another replica opens the breaker
        stale = await a.allow()  # still reused: seen at most clean_reuse_s late
        now[0] += 1.01
        fresh = await a.allow()
        return first, second, reused, stale, fresh

    first, second, reused, stale, fresh = loop.run_until_complete(scenario())
    assert first.kind is second.kind is AdmissionKind.CLOSED and reused == 1
    assert stale.kind is AdmissionKind.CLOSED
    assert fresh.kind is AdmissionKind.REJECTED and calls == ["admit", "admit"]

    # A failure seen by this replica ends the reuse at once.
    b = breaker(redis, prefix + "b:", policy, clock=lambda: now[0])

    async def failing():
        await b.record_success(await b.allow())
        await b.record_failure(await b.allow())
        return await b.state()

    assert loop.run_until_complete(failing()).failures == 1
    before = loop.run_until_complete(redis.hgetall(b.key))
    loop.run_until_complete(b.allow())  # goes to Redis again (reads the counted failure)
    assert before and b._clean_until == 0.0
    loop.run_until_complete(redis.delete(b.key))
