"""Per-API-key rate limiting on Redis: a sliding window, one round trip per request.

A key may send ``burst`` requests at once and ``rate_per_s`` on average: the
window is ``burst / rate_per_s`` seconds long and holds at most ``burst``
requests. The window slides by weighting the previous fixed window's count with
the part of it still inside the sliding window (the usual two-counter estimate)::

    previous window         current window
    |-----------------------|-------x---------------|
                  <------ sliding window ---x
    estimate = previous * (1 - elapsed / window) + current

Each request is one pipeline (INCR and PEXPIRE of the current counter, GET of
the previous one: ``cordum.store.ratelimit``): one round trip, no script.
Refused requests are counted too, so a client that ignores Retry-After stays
refused. A route that must read a few keys before it acts anyway (a submit: its
tenant's config documents, its topic's registration) names them, and the pipeline
reads them too (:func:`check`): no round trip of their own while limiting is on.

Counters are keyed by a SHA-256 of the credential, never the credential itself.
When Redis cannot be reached the request goes through and a warning is logged:
the limiter never takes the API down with it.

CORDUM_RATE_LIMIT_RPS (default 50; 0 switches limiting off) and
CORDUM_RATE_LIMIT_BURST (default 100) configure it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from cordum.config import ConfigError
from cordum.gateway.core.errors import Throttled
from cordum.store.errors import StoreError
from cordum.store.ratelimit import RateCounters

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from cordum.gateway.core.auth import Principal
    from cordum.store.ratelimit import RedisPipelineProtocol

log = logging.getLogger(__name__)

RATE_ENV = "CORDUM_RATE_LIMIT_RPS"
BURST_ENV = "CORDUM_RATE_LIMIT_BURST"
DEFAULT_RATE_PER_S = 50.0
DEFAULT_BURST = 100
WARN_INTERVAL_S = 10.0
"""An unreachable Redis is reported at most this often, not once per request."""


@dataclass(frozen=True, slots=True)
class RateLimitPolicy:
    rate_per_s: float = DEFAULT_RATE_PER_S
    """Requests per second a key may sustain; 0 switches limiting off."""
    burst: int = DEFAULT_BURST
    """Requests a key may send at once; also the most any window holds."""
    op_timeout_s: float = 0.25
    """Bound on the Redis round trip; past it the request goes through."""

    def __post_init__(self) -> None:
        if self.rate_per_s < 0:
            raise ValueError("RateLimitPolicy.rate_per_s must be >= 0")
        if self.burst < 1:
            raise ValueError("RateLimitPolicy.burst must be >= 1")
        if self.op_timeout_s <= 0:
            raise ValueError("RateLimitPolicy.op_timeout_s must be > 0")

    @property
    def enabled(self) -> bool:
        return self.rate_per_s > 0

    @property
    def window_s(self) -> float:
        return self.burst / self.rate_per_s


@dataclass(frozen=True, slots=True)
class RateDecision:
    allowed: bool
    retry_after_s: int = 0
    """Whole seconds until the estimate is back under the limit (refusals only)."""
    read: list[Any] | None = None
    """The values of the keys :meth:`RateLimiter.admit` was asked to read, in order;
    None when they were not read (limiting off, Redis slow or out of reach)."""


class RateLimiter:
    def __init__(self, redis: RedisPipelineProtocol, policy: RateLimitPolicy, *,
                 clock: Callable[[], float] = time.time) -> None:
        self._counters = RateCounters(redis)
        self.policy = policy
        self._clock = clock

    async def admit(self, key_id: str, reads: Sequence[str] = ()) -> RateDecision:
        """Count one request of ``key_id`` and say whether it may go on; read ``reads``
        in the same round trip."""
        p = self.policy
        if not p.enabled:
            return RateDecision(True)
        window = p.window_s
        now = self._clock()
        index = math.floor(now / window)
        elapsed = (now - index * window) / window
        try:
            async with asyncio.timeout(p.op_timeout_s):
                current, previous, read = await self._counters.count(key_id, index, window,
                                                                     reads)
        except (StoreError, TimeoutError) as exc:  # connection, timeout, READONLY: let it in
            _warn_unreachable(exc)
            return RateDecision(True)
        if previous * (1 - elapsed) + current <= p.burst:
            return RateDecision(True, read=read if reads else None)
        return RateDecision(False, _retry_after(previous, current, elapsed, window, p.burst))


def _retry_after(previous: int, current: int, elapsed: float, window: float, burst: int) -> int:
    """Seconds until the estimate falls to ``burst`` if nothing more is sent."""
    if current <= burst and previous > 0:
        # Within this window: the previous window's weight has to shrink enough.
        wait = (1 - (burst - current) / previous - elapsed) * window
    else:
        # Only the next window helps: this window's count becomes "previous" there.
        wait = (1 - elapsed) * window + (1 - burst / current) * window
    return max(1, math.ceil(wait))


_last_warning = float("-inf")


def _warn_unreachable(exc: BaseException) -> None:
    global _last_warning
    now = time.monotonic()
    if now - _last_warning >= WARN_INTERVAL_S:
        _last_warning = now
        log.warning("rate limiter: redis unreachable, requests are not limited: %r", exc)


@lru_cache(maxsize=4)
def _parse_policy(rate_raw: str, burst_raw: str) -> RateLimitPolicy:
    try:
        rate = float(rate_raw) if rate_raw else DEFAULT_RATE_PER_S
    except ValueError:
        raise ConfigError(f"{RATE_ENV}: must be a number, got {rate_raw!r}") from None
    try:
        burst = int(burst_raw) if burst_raw else DEFAULT_BURST
    except ValueError:
        raise ConfigError(f"{BURST_ENV}: must be an integer, got {burst_raw!r}") from None
    if not math.isfinite(rate) or rate < 0:
        raise ConfigError(f"{RATE_ENV}: must be >= 0, got {rate_raw!r}")
    if burst < 1:
        raise ConfigError(f"{BURST_ENV}: must be >= 1, got {burst_raw!r}")
    return RateLimitPolicy(rate_per_s=rate, burst=burst)


def policy_from_env(env: Mapping[str, str] | None = None) -> RateLimitPolicy:
    """The policy from CORDUM_RATE_LIMIT_RPS / CORDUM_RATE_LIMIT_BURST (parsed once per value)."""
    env = os.environ if env is None else env
    return _parse_policy(env.get(RATE_ENV, "").strip(), env.get(BURST_ENV, "").strip())


def key_id(who: Principal, headers: Mapping[str, str]) -> str:
    """The counter name of the caller's credential: the Principal's key id, else a
    digest of the credential the request presents (headers with lower-case names)."""
    known = who.key_id
    if known:
        return known
    presented = headers.get("x-api-key", "")
    if not presented:
        auth = headers.get("authorization", "")
        presented = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
    return hashlib.sha256(presented.encode()).hexdigest()[:32]


def rate_limited(retry_after_s: int) -> Throttled:
    return Throttled("rate limited", "rate_limited", retry_after_s)


def check(principal_key_id: str, reads: Sequence[str] = ()) -> list[Any] | None:
    """Count a request of an authenticated key; 429 with Retry-After over the limit.
    The values of ``reads`` when the count's round trip read them, else None (the
    caller reads them itself)."""
    from cordum import runtime
    from cordum.gateway.core import deps

    limiter = RateLimiter(deps.redis(), policy_from_env())
    decision = runtime.run(limiter.admit(principal_key_id, reads))
    if not decision.allowed:
        raise rate_limited(decision.retry_after_s)
    return decision.read


def admit(who: Principal, headers: Mapping[str, str]) -> Principal:
    """:func:`check` for an authenticated caller; hands ``who`` back, so an
    authentication helper can apply it in its return statement."""
    check(key_id(who, headers))
    return who
