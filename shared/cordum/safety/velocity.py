"""Velocity windows for the safety policy's rate-limit rules.

A rule with ``velocity`` fires once its sliding window holds more than
``max_requests`` matching requests with the same key (see
:mod:`cordum.safety.policy`). The windows live in one of two places:

- :class:`VelocityCounter`: this process's memory. Each kernel replica counts on its
  own, so N replicas let up to N times ``max_requests`` through per window.
- :class:`RedisVelocityCounter`: one sorted set per (rule, key value) in Redis under
  ``cordum:safety:velocity:``, updated by one script call per counted request
  (``lua/velocity.lua``) and timed by the Redis clock, so every replica sees the
  same window. The kernel uses it when ``REDIS_URL`` is set.

When Redis cannot be reached the in-process counter takes over, with a warning, and
Redis is left alone for ``retry_interval_s``; a check never fails because of Redis.
While it stands in, a limit is again per replica, and the requests it counted are
not in the shared window once Redis is back.

A request is remembered by its job id, so a job checked twice (a redelivery, a
retry) counts once; a request without a job id counts every time. A request that
lacks a part of a rule's key (no ``actor_id``, no such label) is counted under
:data:`MISSING_KEY_PART` for that part: leaving a field out shares one window with
every other request that left it out, and never steps around the limit.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from cordum.config import ConfigError

log = logging.getLogger("cordum.safety.velocity")

VELOCITY_KEY_PREFIX = "cordum:safety:velocity:"
REDIS_URL_ENV = "REDIS_URL"
DEFAULT_OP_TIMEOUT_S = 0.5
"""Bound on one Redis round trip of a check; past it the in-process counter decides."""
DEFAULT_RETRY_INTERVAL_S = 1.0
MISSING_KEY_PART = "_missing"
"""The value of a velocity key part the request does not carry."""
_MAX_KEY_VALUE = 128
"""Longer key values (a label can be anything) are hashed to keep keys bounded."""

_LUA = Path(__file__).parent / "lua" / "velocity.lua"


class VelocityWindows(Protocol):
    """Where a policy counts the requests of its velocity rules."""

    def record(self, rule_id: str, key: str, member: str, window_s: float) -> int:
        """Add ``member`` now; return how many requests the window holds with it."""
        ...

    def peek(self, rule_id: str, key: str, window_s: float) -> int:
        """How many requests the window holds, without recording one."""
        ...


class VelocityCounter:
    """In-process sliding windows, one per (rule id, key value)."""

    _SWEEP_AT = 10_000
    """Number of windows above which idle ones are dropped on the next record."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, str], dict[str, float]] = {}

    def record(self, rule_id: str, key: str, member: str, window_s: float) -> int:
        now = self._clock()
        with self._lock:
            window = self._windows.setdefault((rule_id, key), {})
            self._expire(window, now - window_s)
            window[member or _anonymous()] = now
            if len(self._windows) > self._SWEEP_AT:
                self._sweep(now - window_s)
            return len(window)

    def peek(self, rule_id: str, key: str, window_s: float) -> int:
        now = self._clock()
        with self._lock:
            window = self._windows.get((rule_id, key), {})
            return sum(1 for t in window.values() if t > now - window_s)

    @staticmethod
    def _expire(window: dict[str, float], cutoff: float) -> None:
        for member in [m for m, t in window.items() if t <= cutoff]:
            del window[member]

    def _sweep(self, cutoff: float) -> None:
        # Windows differ in length; the current rule's cutoff is only used to drop
        # windows that are entirely older than it, which is safe for a sweep.
        for key in [k for k, w in self._windows.items() if all(t <= cutoff for t in w.values())]:
            del self._windows[key]


class RedisScriptingProtocol(Protocol):
    """The part of ``redis.Redis`` (the synchronous client) the counter uses."""

    def register_script(self, script: str) -> Any: ...


class RedisVelocityCounter:
    """Velocity windows shared by every kernel replica through Redis.

    ``key_prefix`` replaces :data:`VELOCITY_KEY_PREFIX` (tests and side-by-side stacks
    use it to stay apart). ``fallback`` counts while Redis is unreachable.
    """

    def __init__(self, redis: RedisScriptingProtocol, *,
                 key_prefix: str = VELOCITY_KEY_PREFIX,
                 fallback: VelocityCounter | None = None,
                 retry_interval_s: float = DEFAULT_RETRY_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.key_prefix = key_prefix
        self.fallback = fallback or VelocityCounter(clock)
        self._script = redis.register_script(_script_text())
        self._retry_interval_s = retry_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._skip_until = 0.0
        self._degraded = False

    @property
    def degraded(self) -> bool:
        """True while the in-process fallback is counting instead of Redis."""
        return self._degraded

    def key(self, rule_id: str, key: str) -> str:
        if len(key) > _MAX_KEY_VALUE:
            key = "sha256:" + hashlib.sha256(key.encode()).hexdigest()
        return f"{self.key_prefix}{rule_id}:{key}"

    def record(self, rule_id: str, key: str, member: str, window_s: float) -> int:
        member = member or _anonymous()
        count = self._run(rule_id, key, ["record", _window_ms(window_s), member])
        if count is None:
            return self.fallback.record(rule_id, key, member, window_s)
        return count

    def peek(self, rule_id: str, key: str, window_s: float) -> int:
        count = self._run(rule_id, key, ["peek", _window_ms(window_s)])
        if count is None:
            return self.fallback.peek(rule_id, key, window_s)
        return count

    def _run(self, rule_id: str, key: str, args: list[Any]) -> int | None:
        """The script's count, or None when Redis is (or was just) unreachable."""
        if self._clock() < self._skip_until:
            return None
        try:
            count = int(self._script(keys=[self.key(rule_id, key)], args=args))
        except Exception as exc:  # connection, timeout, READONLY replica alike
            with self._lock:
                self._skip_until = self._clock() + self._retry_interval_s
                first = not self._degraded
                self._degraded = True
            if first:
                log.warning("velocity windows: redis unavailable, counting in this process "
                            "(limits are per replica until it is back): %r", exc)
            return None
        if self._degraded:
            with self._lock:
                self._degraded = False
            log.info("velocity windows: shared through redis again")
        return count


def velocity_from_env(env: Mapping[str, str], *,
                      op_timeout_s: float = DEFAULT_OP_TIMEOUT_S) -> VelocityWindows:
    """Redis-shared windows when ``REDIS_URL`` is set, else in-process ones."""
    client = kernel_redis_from_env(env, op_timeout_s=op_timeout_s)
    return VelocityCounter() if client is None else RedisVelocityCounter(client)


def kernel_redis_from_env(env: Mapping[str, str], *,
                          op_timeout_s: float = DEFAULT_OP_TIMEOUT_S) -> Any | None:
    """The kernel's (synchronous) Redis client for ``REDIS_URL``; None when unset.

    Shared by the velocity windows and the policy bundles' reader (one pool).
    """
    url = env.get(REDIS_URL_ENV, "").strip()
    if not url:
        return None
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(f"{REDIS_URL_ENV}: must start with redis://, rediss:// or unix://")
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    # No client-side retries: the fallback answers at once and Redis is tried again
    # after the retry interval, instead of every check waiting out a retry loop.
    # ElastiCache's login comes apart from the URL: the kernel's user in
    # REDIS_USERNAME, its password in REDIS_AUTH_TOKEN (an ECS secret, never in a task
    # definition); a login in the URL itself still wins.
    return redis.Redis.from_url(url, socket_timeout=op_timeout_s,
                                socket_connect_timeout=op_timeout_s,
                                retry=Retry(NoBackoff(), 0),
                                username=env.get("REDIS_USERNAME") or None,
                                password=env.get("REDIS_AUTH_TOKEN") or None)


@cache
def _script_text() -> str:
    return _LUA.read_text()


def _window_ms(window_s: float) -> int:
    return max(int(window_s * 1000), 1)


def _anonymous() -> str:
    return f"anon-{uuid.uuid4().hex}"
