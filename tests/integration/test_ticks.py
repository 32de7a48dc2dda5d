"""run_ticks against a fake invocation clock; the TTL-hold lock is on the real Redis."""

from __future__ import annotations

import asyncio
import functools
import time

import pytest
import redis.asyncio as aioredis

from cordum.lambdas.ticks import run_ticks
from cordum.store.locks import TtlHoldLock
from tests.conftest import REDIS_URL
from tests.helpers import run


class Invocation:
    """A Lambda context's clock: sleeping and ticking spend its remaining time."""

    def __init__(self, remaining_ms: int, tick_cost_s: float = 2.0) -> None:
        self.left_ms = remaining_ms
        self.tick_cost_s = tick_cost_s
        self.sleeps: list[float] = []
        self.ticks: list[tuple[int, float]] = []
        """(remaining ms at the tick's start, its deadline in seconds from then)."""

    def remaining_ms(self) -> int:
        return self.left_ms

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.left_ms -= int(seconds * 1000)

    async def tick(self, deadline: float) -> int:
        self.ticks.append((self.left_ms, deadline - time.monotonic()))
        self.left_ms -= int(self.tick_cost_s * 1000)
        return len(self.ticks)


class Env:
    def __init__(self, unique: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.redis = aioredis.Redis.from_url(REDIS_URL)
        self.key = f"test:ticks:{unique}"
        self.lock = TtlHoldLock(self.redis, self.key, ttl_s=60)
        self.run = functools.partial(run, loop=self.loop)


@pytest.fixture
def env(unique):
    e = Env(unique)
    yield e
    e.run(e.redis.delete(e.key))
    e.run(e.redis.aclose())
    e.loop.close()


def test_two_ticks_30_seconds_apart_when_the_invocation_has_time(env):
    # Given a 55 s invocation and ticks that take 2 s
    inv = Invocation(55_000)
    # When ticks run
    run = env.run(run_ticks(inv.tick, env.lock, inv.remaining_ms, 30, sleep=inv.sleep))
    # Then it ticked twice, the second 30 s after the first started
    assert run.ticks == 2 and run.results == [1, 2] and run.stopped == ""
    assert inv.sleeps == [pytest.approx(28.0)]
    assert [left for left, _ in inv.ticks] == [55_000, 25_000]
    # And each tick's deadline ends 3 s before the invocation does
    assert inv.ticks[0][1] == pytest.approx(52.0, abs=0.5)
    assert inv.ticks[1][1] == pytest.approx(22.0, abs=0.5)
    # And the hold ends with the invocation (renewed for the 25 s left), never released
    assert 20_000 < env.run(env.redis.pttl(env.key)) <= 25_000


def test_a_shorter_interval_fills_the_minute_with_more_ticks(env):
    # Given a 10 s interval (a faster reconciler) in a 55 s invocation of a 1-minute
    # schedule: ticking only twice would leave 50 s of every minute unwatched
    inv = Invocation(55_000)
    run = env.run(run_ticks(inv.tick, env.lock, inv.remaining_ms, 10, sleep=inv.sleep))
    # Then it ticks every 10 s while the invocation has time
    assert run.ticks == 5 and run.stopped == "no time"
    assert [left for left, _ in inv.ticks] == [55_000, 45_000, 35_000, 25_000, 15_000]


def test_one_tick_when_a_second_would_not_fit(env):
    inv = Invocation(35_000)
    run = env.run(run_ticks(inv.tick, env.lock, inv.remaining_ms, 30, sleep=inv.sleep))
    assert run.ticks == 1
    assert run.stopped == "no time"
    assert inv.sleeps == []  # no sleep that would run past the deadline
    assert 30_000 < env.run(env.redis.pttl(env.key)) <= 35_000


def test_no_tick_when_the_lock_is_held_elsewhere(env):
    env.run(env.redis.set(env.key, "other-replica", px=60_000))
    inv = Invocation(55_000)
    run = env.run(run_ticks(inv.tick, env.lock, inv.remaining_ms, 30, sleep=inv.sleep))
    assert run.ticks == 0 and run.stopped == "lock held"
    assert inv.ticks == []
    assert env.run(env.redis.get(env.key)) == b"other-replica"


def test_no_tick_and_no_lock_when_the_invocation_is_almost_over(env):
    inv = Invocation(4_000)
    run = env.run(run_ticks(inv.tick, env.lock, inv.remaining_ms, 30, sleep=inv.sleep))
    assert run.ticks == 0 and run.stopped == "no time"
    assert env.run(env.redis.exists(env.key)) == 0


def test_the_lock_hold_is_capped_at_twice_the_interval(env):
    inv = Invocation(900_000)  # a long invocation, as outside Lambda
    run = env.run(run_ticks(inv.tick, env.lock, inv.remaining_ms, 30, sleep=inv.sleep))
    assert run.ticks == 2
    assert inv.ticks[0][1] == pytest.approx(57.0, abs=0.5)  # 60 s hold - 3 s margin
    assert 55_000 < env.run(env.redis.pttl(env.key)) <= 60_000


def test_a_lost_lock_stops_the_second_tick(env):
    inv = Invocation(55_000)

    async def tick_then_lose(deadline: float) -> int:
        await env.redis.set(env.key, "thief", px=60_000)
        return await inv.tick(deadline)

    run = env.run(run_ticks(tick_then_lose, env.lock, inv.remaining_ms, 30, sleep=inv.sleep))
    assert run.ticks == 1 and run.stopped == "lock lost"


def test_a_failing_tick_is_logged_and_the_next_still_runs(env):
    inv = Invocation(55_000)
    calls = []

    async def flaky(deadline: float) -> int:
        calls.append(deadline)
        inv.left_ms -= 1_000
        if len(calls) == 1:
            raise RuntimeError("redis went away")
        return 7

    run = env.run(run_ticks(flaky, env.lock, inv.remaining_ms, 30, sleep=inv.sleep))
    assert run.ticks == 2 and run.failed == 1 and run.results == [7]
