"""The kernel's decision cache: PolicyCheckResponses kept for a few seconds.

``SAFETY_DECISION_CACHE_TTL`` seconds (``0``/unset: off; ``5``, ``5s``, ``500ms``
accepted), at most ``SAFETY_DECISION_CACHE_MAX_SIZE`` entries. Keyed by the policy
snapshot and a hash of every request field that can change a decision except the
job id; emptied when the snapshot changes. The kernel never stores a decision that
involved a velocity window, nor any THROTTLE, since the same request may be answered
differently a moment later.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from cordum import protocol  # noqa: F401  (makes cordum.agent.v1 importable)
from cordum.agent.v1 import safety_pb2
from cordum.config import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

DECISION_CACHE_TTL_ENV = "SAFETY_DECISION_CACHE_TTL"
DECISION_CACHE_MAX_ENV = "SAFETY_DECISION_CACHE_MAX_SIZE"
DEFAULT_DECISION_CACHE_MAX = 10_000


class DecisionCache:
    """TTL cache of responses for one policy snapshot; the oldest entry goes first
    when full, and every entry goes when the snapshot changes."""

    def __init__(self, ttl_s: float, max_size: int = DEFAULT_DECISION_CACHE_MAX, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.max_size = max_size
        self.hits = 0
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot = ""
        self._entries: OrderedDict[str, tuple[float, Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, snapshot: str, key: str) -> Any | None:
        """A copy of the stored response, or None (missing, expired, other snapshot)."""
        with self._lock:
            if snapshot != self._snapshot:
                # A reload: nothing decided under the old policy may answer any more.
                self._entries.clear()
                self._snapshot = snapshot
                return None
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[0] <= self._clock():
                del self._entries[key]
                return None
            self.hits += 1
            response = safety_pb2.PolicyCheckResponse()
            response.CopyFrom(entry[1])
            return response

    def put(self, snapshot: str, key: str, response: Any) -> None:
        stored = safety_pb2.PolicyCheckResponse()
        stored.CopyFrom(response)
        stored.approval_ref = ""
        with self._lock:
            if snapshot != self._snapshot:
                return  # decided under a policy that is no longer the cache's
            self._entries[key] = (self._clock() + self.ttl_s, stored)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_size:
                self._entries.popitem(last=False)


def cache_ttl_from_env(env: Mapping[str, str] | None = None) -> float:
    """``SAFETY_DECISION_CACHE_TTL`` in seconds; a bad value names the variable."""
    raw = (os.environ if env is None else env).get(DECISION_CACHE_TTL_ENV, "").strip().lower()
    if not raw:
        return 0.0
    scale = 1.0
    for suffix, factor in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
        if raw.endswith(suffix):
            raw, scale = raw[: -len(suffix)], factor
            break
    try:
        ttl = float(raw) * scale
    except ValueError:
        raise ConfigError(f"{DECISION_CACHE_TTL_ENV}: not a duration: {raw!r}") from None
    if ttl < 0:
        raise ConfigError(f"{DECISION_CACHE_TTL_ENV}: must be >= 0")
    return ttl


def cache_max_from_env() -> int:
    """``SAFETY_DECISION_CACHE_MAX_SIZE``; a bad value names the variable."""
    raw = os.environ.get(DECISION_CACHE_MAX_ENV, "").strip()
    try:
        size = int(raw) if raw else DEFAULT_DECISION_CACHE_MAX
    except ValueError:
        raise ConfigError(f"{DECISION_CACHE_MAX_ENV}: not an integer: {raw!r}") from None
    if size < 1:
        raise ConfigError(f"{DECISION_CACHE_MAX_ENV}: must be >= 1")
    return size
