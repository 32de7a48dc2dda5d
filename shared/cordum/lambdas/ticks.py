"""Periodic ticks inside one scheduled invocation, and the invocation around them.

EventBridge fires at most once a minute; Cordum's reconciler and replayer tick every
30 s and its workflow reconciler every 5 s. One invocation therefore ticks several
times, ``interval_s`` apart, while its remaining time allows, under a TTL-hold lock (a
schedule may deliver the same event twice; only the holder ticks). For a 55 s function
ticking every 30 s::

    t=0     SET lock NX PX min(2 x interval, time left) -> held until t=55, the
            hard end of this invocation; never released
    t=0     tick 1, deadline = lock end - margin (t=52)
    t=30    renew the lock (compare-and-PEXPIRE, again up to t=55): still ours?
            tick 2, deadline t=52
    t=55    the invocation is over and the lock lapses with it
    t=60    next invocation: the lock is free again

The hold never outlives the invocation's hard end, so the next minute's
invocation is not shut out by a lock nobody uses, and a tick never runs past
its lock. Before the next tick nothing sleeps past the deadline minus the margin: if
less than ``min_tick_s`` would be left, the invocation ends after the tick before.

Each tick function wires its ticker once per container and hands its invocation to
:func:`scheduled` (the scheduler's reconciler and replayer in
:mod:`cordum.scheduler.reconciler_tick` and :mod:`cordum.scheduler.replayer_tick`, the
workflow reconciler in
:mod:`cordum.workflow.service`); the Lambda modules only call that entry point.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from cordum import runtime
from cordum.metrics import METRICS
from cordum.store.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

    from cordum.store.locks import TtlHoldLock

log = logging.getLogger(__name__)

T = TypeVar("T")


SCHEDULE_PERIOD_S = 60.0
"""How often EventBridge invokes a tick function (``rate(1 minute)``)."""


@dataclass(frozen=True, slots=True)
class TickPolicy:
    """How ticks fit in an invocation."""

    margin_s: float = 3.0
    """Kept free before the invocation's end (and the lock's): one Redis call at its 2 s
    timeout, plus returning the answer."""
    min_tick_s: float = 5.0
    """A tick starts only if at least this long is left before the margin."""
    max_ticks: int = 2
    """Ticks per invocation: two at a 30 s interval fill a 1-minute schedule."""

    @classmethod
    def for_interval(cls, interval_s: float) -> TickPolicy:
        """As many ticks as ``interval_s`` fits in the schedule's minute (two at 30 s,
        five at 10 s once the margins are kept), so no interval leaves most of the
        minute unwatched."""
        return cls(max_ticks=max(1, int(SCHEDULE_PERIOD_S // max(interval_s, 1.0))))


@dataclass(slots=True)
class TickRun(Generic[T]):
    """What an invocation's ticks did."""

    ticks: int = 0
    """Ticks run (including ones that raised)."""
    failed: int = 0
    """Ticks that raised; each was logged."""
    results: list[T] = field(default_factory=list)
    stopped: str = ""
    """Why no (further) tick ran: "lock held", "lock error", "lock lost", "no time",
    or "" after ``max_ticks``."""


async def run_ticks(
    tick_fn: Callable[[float], Awaitable[T]],
    lock: TtlHoldLock,
    remaining_ms: Callable[[], int],
    interval_s: float = 30.0,
    *,
    policy: TickPolicy | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> TickRun[T]:
    """Tick under ``lock`` every ``interval_s`` while the invocation's time allows.

    ``tick_fn`` receives its deadline as a ``time.monotonic()`` instant.
    ``remaining_ms`` is the invocation's clock
    (``context.get_remaining_time_in_millis``); all waiting is measured on it.
    """
    policy = policy or TickPolicy.for_interval(interval_s)
    run: TickRun[T] = TickRun()

    def left_s() -> float:
        return remaining_ms() / 1000.0

    started = left_s()
    if started - policy.margin_s < policy.min_tick_s:
        run.stopped = "no time"
        return run
    hold_s = min(lock.ttl_s, started)
    try:
        token = await lock.try_acquire(hold_s)
    except StoreError as exc:
        log.error("tick lock %s: %s", lock.key, exc)
        run.stopped = "lock error"
        return run
    if token is None:
        log.info("tick lock %s is held elsewhere; not ticking", lock.key)
        run.stopped = "lock held"
        return run
    # Measured on the invocation's clock: the time left when the hold lapses.
    lapses_at = started - hold_s

    while True:
        tick_started = left_s()
        budget_s = tick_started - lapses_at - policy.margin_s
        try:
            run.results.append(await tick_fn(time.monotonic() + budget_s))
        except Exception:
            log.exception("tick under %s failed", lock.key)
            run.failed += 1
        run.ticks += 1
        if run.ticks >= policy.max_ticks:
            return run
        wait_s = max(0.0, interval_s - (tick_started - left_s()))
        if left_s() - wait_s - policy.margin_s < policy.min_tick_s:
            run.stopped = "no time"
            return run
        await sleep(wait_s)
        now_left = left_s()
        hold_s = min(lock.ttl_s, now_left)
        try:
            still_ours = await lock.renew(token, hold_s)
        except StoreError as exc:
            log.error("tick lock %s: %s", lock.key, exc)
            run.stopped = "lock error"
            return run
        if not still_ours:
            log.warning("tick lock %s was lost between ticks", lock.key)
            run.stopped = "lock lost"
            return run
        lapses_at = now_left - hold_s


def past(deadline: float | None) -> bool:
    """Whether a tick's ``time.monotonic()`` deadline (None: none) has come."""
    return deadline is not None and time.monotonic() >= deadline


def scheduled(context: Any,
              invocation: Callable[[Callable[[], int]], Coroutine[Any, Any, T]]) -> T:
    """Runs one scheduled invocation on the container's loop, on the Lambda's clock
    (``context.get_remaining_time_in_millis``), then flushes the metrics it counted."""
    try:
        return runtime.run(invocation(context.get_remaining_time_in_millis))
    finally:
        METRICS.flush()
