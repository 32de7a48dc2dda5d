"""The kernel's policy in force: safety.yaml merged with the policy bundles in Redis.

:class:`LivePolicy` answers ``refresh()`` like :class:`~cordum.safety.policy_file.Policy`
(which it wraps, and which keeps hot-reloading the file) with
:func:`cordum.safety.bundles.with_bundles` of the file's policy and the bundles last
read from :data:`~cordum.safety.bundles.POLICY_DOC_KEY`. The bundles are read again:

- when :meth:`LivePolicy.notify` is called (the NATS listener does, on
  ``sys.config.changed``: :mod:`cordum.safety.config_changes`);
- every :attr:`BundleReload.interval_s` in any case, so a lost message, or a kernel
  that cannot reach NATS, delays a change by one interval at most.

A read is one GET of the document; the bundles are parsed again only when its bytes
changed. Timeline of a change (interval 2 s)::

    writer: SET doc ─ PUBLISH ─────────────────────────────────────────
    kernel:            └ notify ─ GET ─ merge ─ swap (ms later)
    kernel (no NATS):  … GET ─────────── GET ─ merge ─ swap (≤ 2 s later)

Degradation: while Redis cannot be read the last good policy stays in force (base
file changes still apply, over the last bundles read), logged once per outage. A
kernel that starts with Redis out of reach answers from the base file alone until
the first successful read: the base file is the floor every kernel enforces.
A document that is not JSON keeps the last good bundles, logged once per content.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cordum.config import ConfigError
from cordum.safety.bundles import (
    POLICY_DOC_KEY,
    Bundle,
    base_snapshot_of,
    parse_bundles,
    with_bundles,
)
from cordum.safety.policy_file import remembered

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from cordum.safety.policy import SafetyPolicy
    from cordum.safety.policy_file import Policy

log = logging.getLogger("cordum.safety.kernel")

RELOAD_INTERVAL_ENV = "SAFETY_POLICY_RELOAD_INTERVAL_S"


@dataclass(frozen=True)
class BundleReload:
    """How often the kernel looks at the bundles without being told to."""

    interval_s: float = 2.0
    """Seconds between two reads of the bundles' document: the longest a change waits
    when its ``sys.config.changed`` message is lost. 2 s keeps every kernel within 5 s
    of a change with room for a slow read; each read is one GET."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> BundleReload:
        """``SAFETY_POLICY_RELOAD_INTERVAL_S`` (seconds, > 0); a bad value names it."""
        raw = (os.environ if env is None else env).get(RELOAD_INTERVAL_ENV, "").strip()
        if not raw:
            return cls()
        try:
            interval = float(raw)
        except ValueError:
            raise ConfigError(f"{RELOAD_INTERVAL_ENV}: not a number: {raw!r}") from None
        if not interval > 0:
            raise ConfigError(f"{RELOAD_INTERVAL_ENV}: must be > 0")
        return cls(interval_s=interval)


class PolicyDocs(Protocol):
    """Where the bundles' document is kept."""

    def read(self) -> bytes | None:
        """The document's bytes, None when there is none; raises when unreachable."""
        ...


class RedisGet(Protocol):
    def get(self, name: str) -> Any: ...


class RedisPolicyDocs:
    """:data:`~cordum.safety.bundles.POLICY_DOC_KEY` in Redis (the kernel's ACL user
    may GET that key and no other outside its velocity windows)."""

    def __init__(self, redis: RedisGet, key: str = POLICY_DOC_KEY) -> None:
        self._redis = redis
        self._key = key

    def read(self) -> bytes | None:
        value = self._redis.get(self._key)
        if value is None:
            return None
        return value if isinstance(value, bytes) else str(value).encode()


class LivePolicy:
    """The base file's :class:`Policy` and the bundles, merged; thread-safe."""

    def __init__(self, base: Policy, docs: PolicyDocs | None, *,
                 reload: BundleReload | None = None) -> None:
        self.base = base
        self.reload = reload or BundleReload()
        self._docs = docs
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bundles: dict[str, Bundle] = {}
        self._doc: bytes | None = None
        self._unreachable = False
        self._current = with_bundles(base.current, {})
        self._history = [self._current.snapshot]
        # The first read before the first answer: a kernel that can reach Redis never
        # answers from the base file alone.
        self.check()

    @property
    def path(self) -> Path:
        return self.base.path

    @property
    def current(self) -> SafetyPolicy:
        return self._current

    @property
    def snapshot(self) -> str:
        return self._current.snapshot

    @property
    def snapshots(self) -> list[str]:
        """Combined snapshots in force in this process, newest first."""
        return list(self._history)

    @property
    def bundles(self) -> dict[str, Bundle]:
        """The bundles last read (the ones in force)."""
        return dict(self._bundles)

    def refresh(self) -> SafetyPolicy:
        """The policy in force; rebuilt first when the base file was reloaded."""
        base = self.base.refresh()
        current = self._current
        if base_snapshot_of(current.snapshot) == base.snapshot:
            return current
        with self._lock:
            return self._swap(base, self._bundles)

    def check(self) -> bool:
        """Read the bundles now; True when the policy in force changed."""
        if self._docs is None:
            return False
        try:
            data = self._docs.read()
        except Exception as exc:  # any store error: the last good policy stays
            if not self._unreachable:
                self._unreachable = True
                log.warning("policy bundles unreadable, keeping %s until they are: %s",
                            self._current.snapshot, exc)
            return False
        if self._unreachable:
            self._unreachable = False
            log.info("policy bundles readable again")
        if data == self._doc:
            return False
        with self._lock:
            if data == self._doc:
                return False
            self._doc = data
            try:
                doc = json.loads(data) if data is not None else None
            except ValueError as exc:
                log.error("policy bundles: %s is not JSON, keeping %s: %s",
                          POLICY_DOC_KEY, self._current.snapshot, exc)
                return False
            before = self._current.snapshot
            self._swap(self.base.refresh(), parse_bundles(doc))
            return self._current.snapshot != before

    def notify(self) -> None:
        """Ask for a read now (a ``sys.config.changed`` message arrived)."""
        self._wake.set()

    def start(self) -> None:
        """Start the periodic read (a daemon thread); idempotent."""
        if self._docs is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="policy-bundles",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.reload.interval_s)
            # Cleared before the read: a message arriving during it wakes the next one.
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.check()
            except Exception:  # the thread must outlive any surprise
                log.exception("policy bundles check failed")

    def _swap(self, base: SafetyPolicy, bundles: dict[str, Bundle]) -> SafetyPolicy:
        """Merge and put in force (under the lock)."""
        merged = with_bundles(base, bundles)
        self._bundles = bundles
        if merged.snapshot != self._current.snapshot:
            log.info("policy in force: %s -> %s", self._current.snapshot, merged.snapshot)
            self._history = remembered(self._history, merged.snapshot)
        self._current = merged
        return merged
