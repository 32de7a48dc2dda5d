"""safety.yaml on disk: parsed into a :class:`~cordum.safety.policy.SafetyPolicy`
(errors name the file and the field), named by its snapshot, and hot-reloaded.

:class:`Policy` is the file a long-running process answers from. It compares the
file's stat (mtime, size, inode) at most once per ``check_interval_s`` when asked;
a file that no longer parses keeps the last good policy (and its snapshot) in force
and is logged once per change.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from cordum.config import ConfigError
from cordum.safety.policy import SafetyPolicy
from cordum.safety.policy_document import PolicyDocument

if TYPE_CHECKING:
    from pathlib import Path

# The kernel process's log: reloads are part of what it reports.
log = logging.getLogger("cordum.safety.kernel")

POLICY_FILE_NAME = "safety.yaml"
"""The policy's file in the config directory."""
SNAPSHOT_HISTORY = 10
"""How many snapshots a :class:`Policy` remembers (ListSnapshots reports them)."""


def remembered(history: list[str], snapshot: str) -> list[str]:
    """``history`` with ``snapshot`` first (once), at most :data:`SNAPSHOT_HISTORY`."""
    return [snapshot, *(s for s in history if s != snapshot)][:SNAPSHOT_HISTORY]


class PolicyError(ConfigError):
    """safety.yaml cannot be read or does not describe a valid policy."""


def snapshot_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()[:16]


def parse_policy(data: bytes, source: str = POLICY_FILE_NAME) -> SafetyPolicy:
    """A SafetyPolicy from YAML bytes; ``source`` names the file in errors."""
    import yaml  # only the processes that read config files pay for it

    try:
        raw = yaml.safe_load(data) or {}
    except yaml.YAMLError as exc:
        raise PolicyError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise PolicyError(f"{source}: must be a mapping, got {type(raw).__name__}")
    try:
        document = PolicyDocument.model_validate(raw)
    except ValidationError as exc:
        raise PolicyError(f"{source}: {_describe(exc, raw)}") from exc
    return SafetyPolicy(document, snapshot_of(data), source)


def load_policy(path: Path) -> SafetyPolicy:
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise PolicyError(f"config file not found: {path}") from exc
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read: {exc}") from exc
    return parse_policy(data, str(path))


def _describe(exc: ValidationError, raw: dict[str, Any]) -> str:
    """The first error as ``rules[2] (id 'x').match.topics: message``."""
    err = exc.errors()[0]
    parts: list[str] = []
    node: Any = raw
    for loc in err["loc"]:
        if isinstance(loc, int):
            label = f"[{loc}]"
            item = node[loc] if isinstance(node, list) and loc < len(node) else None
            if isinstance(item, dict) and item.get("id"):
                label += f" (id {item['id']!r})"
            parts.append(label)
            node = item
        else:
            parts.append(("." if parts else "") + str(loc))
            node = node.get(loc) if isinstance(node, dict) else None
    where = "".join(parts) or "(top level)"
    return f"{where}: {err['msg']}"


class Policy:
    """The policy file and the last good :class:`SafetyPolicy` loaded from it.

    Built from a path; a missing or broken file at construction raises
    :class:`PolicyError` (a ConfigError naming the file).
    """

    def __init__(self, path: Path, *, check_interval_s: float = 1.0) -> None:
        self.path = path
        self.check_interval_s = check_interval_s
        self._lock = threading.Lock()
        self._stat = self._stat_of()
        self._current = load_policy(path)
        self._history = [self._current.snapshot]
        self._next_check = time.monotonic() + check_interval_s

    @property
    def current(self) -> SafetyPolicy:
        return self._current

    @property
    def snapshot(self) -> str:
        return self._current.snapshot

    @property
    def snapshots(self) -> list[str]:
        """Snapshots loaded by this process, newest first."""
        return list(self._history)

    def refresh(self) -> SafetyPolicy:
        """The policy in force, reloading first if the file changed."""
        now = time.monotonic()
        if now < self._next_check:
            return self._current
        with self._lock:
            if now < self._next_check:
                return self._current
            self._next_check = now + self.check_interval_s
            stat = self._stat_of()
            if stat == self._stat:
                return self._current
            # Remember the stat even when the load fails: a broken file is reported
            # once, and retried only when it changes again.
            self._stat = stat
            try:
                loaded = load_policy(self.path)
            except ConfigError as exc:
                log.error("policy reload failed, keeping %s: %s", self._current.snapshot, exc)
                return self._current
            if loaded.snapshot != self._current.snapshot:
                log.info("policy reloaded: %s -> %s", self._current.snapshot, loaded.snapshot)
                self._history = remembered(self._history, loaded.snapshot)
            self._current = loaded
            return loaded

    def _stat_of(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)
