"""Circuit breaker in front of the safety kernel, shared by every replica through Redis.

One breaker is one Redis hash under Cordum's key (``cordum:cb:safety:failures`` for
input checks, ``cordum:cb:safety:output:failures`` for output checks); every state
change is one Lua script (``lua/*.lua``, layout documented in ``admit.lua``), timed by
the Redis clock so replicas with skewed clocks agree::

    closed --(fail_threshold failures within failure_window)--> open, wait = probe_after
    open   --(the wait passes)----------------------------------> half-open
    half-open: at most half_open_max probes in flight, across all replicas
      --(close_after probe successes)--> closed (key deleted: the next wait is probe_after)
      --(a probe fails)----------------> open again, wait doubled, at most open_duration

With the defaults the waits run 1, 2, 4, 8, 16, 30, 30 s: a kernel back within a second
costs clients about a second of rejections; one that stays down is soon probed only every
30 s. The wait is a field of the hash, so every replica is in step. Cordum holds every
opening for 30 s, and its Redis mode has no half-open state: once its counter expires,
every replica sends full traffic to a kernel that may still be down.

The common case costs no write, and mostly no read: a clean closed admission is reused
for ``clean_reuse_s`` (1 s) without asking Redis. Otherwise ``allow`` reads the hash
(one script call that returns before writing anything while closed) and hands back an
:class:`Admission` recording the failure count it saw. ``record_success`` of a closed
admission that saw zero failures returns without contacting Redis at all; only when
failures had been counted does it run ``success.lua``, which deletes the counter (and
itself writes nothing when another replica already reset it). Cordum deletes the key on
every successful check.

When Redis cannot be reached, an in-process :class:`LocalBreaker` with the same policy
decides (Cordum's fallback) and Redis is left alone for ``redis_retry_interval_s``; no
Redis error ever reaches the caller. Every outcome of a Redis-admitted call is also fed
to the local breaker, so it is warm when Redis goes away.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("cordum.safety.breaker")

INPUT_BREAKER_KEY = "cordum:cb:safety:failures"
"""Cordum's key for the breaker in front of input (dispatch-time) policy checks."""
OUTPUT_BREAKER_KEY = "cordum:cb:safety:output:failures"
"""Cordum's key for the breaker in front of output policy checks."""

_LUA = Path(__file__).parent / "lua"


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    """How the breaker counts, opens and recovers. Defaults are Cordum's."""

    fail_threshold: int = 3
    """Failures (within ``failure_window_s``) that open the breaker."""
    open_duration_s: float = 30.0
    """The longest an open breaker rejects every call before it admits probes (Cordum's
    fixed open duration): the cap of the doubling wait."""
    probe_after_s: float = 1.0
    """The wait before the first probes once the breaker opens (at most
    ``open_duration_s``); each failed probe doubles it, up to ``open_duration_s``."""
    half_open_max: int = 3
    """Probe calls admitted at the same time, across all replicas, once the wait has
    passed."""
    close_after: int = 2
    """Probe successes that close a half-open breaker."""
    op_timeout_s: float = 2.0
    """Bound on each Redis round trip; past it the local breaker decides."""
    failure_window_s: float = 30.0
    """Closed-state failures are forgotten this long after the first of them (Cordum
    expires its counter after the open duration, counted from the first failure)."""
    probe_lease_s: float = 10.0
    """A probe that reports nothing for this long frees its slot (its caller died or was
    frozen mid-call). Must exceed the deadline of the call the breaker guards."""
    half_open_idle_s: float = 300.0
    """A breaker whose wait passed and that sees no probe for this long is
    forgotten (back to closed). Every key the breaker writes expires."""
    redis_retry_interval_s: float = 1.0
    """After a Redis error the local breaker alone decides for this long, so an
    unreachable Redis costs one ``op_timeout_s``, not one per call."""
    clean_reuse_s: float = 1.0
    """A clean closed admission (no failures counted) is reused for this long without
    asking Redis again; 0 asks every time. Any failure seen here ends the reuse at
    once; a breaker opened by another replica is seen at most this late."""

    def __post_init__(self) -> None:
        for name in ("fail_threshold", "half_open_max", "close_after"):
            if getattr(self, name) < 1:
                raise ValueError(f"BreakerPolicy.{name} must be >= 1")
        for name in ("open_duration_s", "probe_after_s", "op_timeout_s", "failure_window_s",
                     "probe_lease_s", "half_open_idle_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"BreakerPolicy.{name} must be > 0")
        for name in ("redis_retry_interval_s", "clean_reuse_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"BreakerPolicy.{name} must be >= 0")


class AdmissionKind(StrEnum):
    CLOSED = "closed"
    """Admitted: the breaker is closed."""
    PROBE = "probe"
    """Admitted as one of the half-open probes; its outcome decides the breaker."""
    REJECTED = "rejected"
    """Not admitted: open, or half-open with the probe quota taken."""


class BreakerSource(StrEnum):
    REDIS = "redis"
    LOCAL = "local"


@dataclass(frozen=True, slots=True)
class Admission:
    """The breaker's answer to one call; hand it back to ``record_success``/``record_failure``."""

    kind: AdmissionKind
    """Admitted as CLOSED or PROBE, or REJECTED (recording a rejection does nothing)."""
    source: BreakerSource
    """Which breaker decided: the shared one, or the in-process fallback."""
    failures: int = 0
    """Failures counted when the call was admitted; 0 on a closed admission means its
    success needs no write."""
    cooldown_remaining_ms: int = 0
    """For a rejection by an open breaker: time until it admits probes."""
    token: str = ""
    """Identifies a probe's slot ("" unless ``kind`` is PROBE)."""

    @property
    def admitted(self) -> bool:
        return self.kind is not AdmissionKind.REJECTED


class CircuitState(StrEnum):
    CLOSED = "CLOSED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"
    UNKNOWN = "UNKNOWN"
    """Redis could not be read (the status endpoint's value; admissions are then the
    in-process fallback's)."""


@dataclass(frozen=True, slots=True)
class BreakerState:
    """What the status endpoint reports for one breaker."""

    state: CircuitState
    failures: int = 0
    """Failures counted: within the failure window while closed, then those that opened
    (and reopened) the breaker."""
    cooldown_remaining_ms: int = 0
    """Time until the open breaker admits probes (0 unless OPEN)."""
    fail_threshold: int = 3
    """The policy's threshold, for the reader of the status."""
    probes_in_flight: int = 0
    """Probe leases currently held (HALF_OPEN only)."""


class Breaker(Protocol):
    """What a guarded client needs from a breaker."""

    async def allow(self) -> Admission: ...
    async def record_success(self, admission: Admission) -> None: ...
    async def record_failure(self, admission: Admission) -> None: ...


class RedisScriptingProtocol(Protocol):
    """The part of ``redis.asyncio.Redis`` the breaker uses."""

    def register_script(self, script: str) -> Any: ...


class LocalBreaker:
    """The same state machine in process memory, on a monotonic clock.

    Used alone when no Redis is configured, and as the fallback while Redis is
    unreachable. Synchronous: the event loop runs one method at a time.
    """

    def __init__(self, policy: BreakerPolicy,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._policy = policy
        self._clock = clock
        self._failures = 0
        self._window_ends = 0.0
        self._open_until: float | None = None
        self._wait = 0.0
        self._successes = 0
        self._probes: dict[str, float] = {}

    def allow(self) -> Admission:
        now = self._clock()
        self._forget_stale_failures(now)
        if self._open_until is None:
            return Admission(AdmissionKind.CLOSED, BreakerSource.LOCAL, self._failures)
        if now < self._open_until:
            return Admission(AdmissionKind.REJECTED, BreakerSource.LOCAL, self._failures,
                             _ms(self._open_until - now))
        self._probes = {t: exp for t, exp in self._probes.items() if exp > now}
        if len(self._probes) >= self._policy.half_open_max:
            return Admission(AdmissionKind.REJECTED, BreakerSource.LOCAL, self._failures)
        token = uuid.uuid4().hex
        self._probes[token] = now + self._policy.probe_lease_s
        return Admission(AdmissionKind.PROBE, BreakerSource.LOCAL, self._failures, token=token)

    def record_success(self, admission: Admission) -> None:
        now = self._clock()
        if self._open_until is None:
            self._failures = 0
        elif now >= self._open_until and self._probes.pop(admission.token, None) is not None:
            self._successes += 1
            if self._successes >= self._policy.close_after:
                self._close()

    def record_failure(self, admission: Admission) -> None:
        now = self._clock()
        self._forget_stale_failures(now)
        if self._open_until is None:
            self._failures += 1
            if self._failures == 1:
                self._window_ends = now + self._policy.failure_window_s
            if self._failures >= self._policy.fail_threshold:
                self._open(now)
        elif now >= self._open_until and admission.token in self._probes:
            self._failures += 1
            self._open(now)

    def state(self) -> BreakerState:
        now = self._clock()
        self._forget_stale_failures(now)
        threshold = self._policy.fail_threshold
        if self._open_until is None:
            return BreakerState(CircuitState.CLOSED, self._failures, 0, threshold)
        if now < self._open_until:
            return BreakerState(CircuitState.OPEN, self._failures,
                                _ms(self._open_until - now), threshold)
        live = sum(1 for exp in self._probes.values() if exp > now)
        return BreakerState(CircuitState.HALF_OPEN, self._failures, 0, threshold, live)

    def _forget_stale_failures(self, now: float) -> None:
        if self._open_until is None and self._failures and now >= self._window_ends:
            self._failures = 0

    def _open(self, now: float) -> None:
        p = self._policy
        self._wait = min(self._wait * 2 if self._wait else p.probe_after_s, p.open_duration_s)
        self._open_until = now + self._wait
        self._successes = 0
        self._probes.clear()

    def _close(self) -> None:
        self._failures = 0
        self._open_until = None
        self._wait = 0.0
        self._successes = 0
        self._probes.clear()


class _RedisUnavailable(Exception):
    pass


@cache
def _script_text(name: str) -> str:
    return (_LUA / name).read_text()


class CircuitBreaker:
    """The breaker shared through Redis, with :class:`LocalBreaker` as its fallback.

    ``redis=None`` runs the local breaker alone. ``key_prefix`` goes in front of the
    key (tests and side-by-side stacks use it to stay apart from a live deployment).
    """

    def __init__(
        self,
        redis: RedisScriptingProtocol | None,
        *,
        key: str = INPUT_BREAKER_KEY,
        key_prefix: str = "",
        policy: BreakerPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.key = key_prefix + key
        self.policy = policy or BreakerPolicy()
        self._clock = clock
        self._local = LocalBreaker(self.policy, clock)
        self._redis_skip_until = 0.0
        self._clean_until = 0.0
        self._scripts: dict[str, Any] = {}
        if redis is not None:
            for name in ("admit", "success", "failure"):
                self._scripts[name] = redis.register_script(_script_text(f"{name}.lua"))

    async def allow(self) -> Admission:
        """Admit a call as CLOSED or PROBE, or reject it. Never raises for Redis trouble."""
        if not self._redis_usable():
            return self._local.allow()
        if self._clock() < self._clean_until:
            return Admission(AdmissionKind.CLOSED, BreakerSource.REDIS, 0)
        token = uuid.uuid4().hex
        try:
            kind, failures, cooldown, _ = await self._run("admit", self._admit_args("admit", token))
        except _RedisUnavailable:
            return self._local.allow()
        if kind == "closed":
            if failures == 0 and self.policy.clean_reuse_s:
                self._clean_until = self._clock() + self.policy.clean_reuse_s
            return Admission(AdmissionKind.CLOSED, BreakerSource.REDIS, failures)
        if kind == "probe":
            return Admission(AdmissionKind.PROBE, BreakerSource.REDIS, failures, token=token)
        return Admission(AdmissionKind.REJECTED, BreakerSource.REDIS, failures, cooldown)

    async def record_success(self, admission: Admission) -> None:
        if not admission.admitted:
            return
        self._local.record_success(admission)
        if admission.source is not BreakerSource.REDIS:
            return
        if admission.kind is AdmissionKind.CLOSED and admission.failures == 0:
            # The hot path: closed and clean when admitted, so nothing to reset.
            return
        if self._redis_usable():
            token = admission.token if admission.kind is AdmissionKind.PROBE else ""
            try:
                await self._run("success", [token, self.policy.close_after])
            except _RedisUnavailable:
                pass

    async def record_failure(self, admission: Admission) -> None:
        if not admission.admitted:
            return
        self._clean_until = 0.0
        self._local.record_failure(admission)
        if admission.source is not BreakerSource.REDIS or not self._redis_usable():
            return
        p = self.policy
        token = admission.token if admission.kind is AdmissionKind.PROBE else ""
        try:
            await self._run("failure", [token, p.fail_threshold, _ms(p.probe_after_s),
                                        _ms(p.open_duration_s), _ms(p.failure_window_s),
                                        _ms(p.half_open_idle_s)])
        except _RedisUnavailable:
            pass

    async def state(self) -> BreakerState:
        """The shared state (read only); UNKNOWN when Redis cannot be read."""
        if not self._scripts:
            return self._local.state()
        threshold = self.policy.fail_threshold
        try:
            kind, failures, cooldown, probes = await self._run("admit",
                                                               self._admit_args("peek", ""))
        except _RedisUnavailable:
            return BreakerState(CircuitState.UNKNOWN, fail_threshold=threshold)
        if kind == "closed":
            return BreakerState(CircuitState.CLOSED, failures, 0, threshold)
        if kind == "open":
            return BreakerState(CircuitState.OPEN, failures, cooldown, threshold)
        return BreakerState(CircuitState.HALF_OPEN, failures, 0, threshold, probes)

    def _admit_args(self, mode: str, token: str) -> list[Any]:
        p = self.policy
        return [mode, p.fail_threshold, p.half_open_max, token, _ms(p.probe_lease_s),
                _ms(p.half_open_idle_s)]

    def _redis_usable(self) -> bool:
        return bool(self._scripts) and self._clock() >= self._redis_skip_until

    async def _run(self, name: str, args: list[Any]) -> list[Any]:
        try:
            async with asyncio.timeout(self.policy.op_timeout_s):
                raw = await self._scripts[name](keys=[self.key], args=args)
        except Exception as exc:  # connection, timeout, READONLY, script error alike
            self._redis_skip_until = self._clock() + self.policy.redis_retry_interval_s
            log.warning("circuit breaker %s: redis unavailable, local breaker decides: %r",
                        self.key, exc)
            raise _RedisUnavailable from exc
        return [raw[0].decode() if isinstance(raw[0], bytes) else str(raw[0]),
                *(int(v) for v in raw[1:])]


def _ms(seconds: float) -> int:
    return max(int(seconds * 1000), 0)
