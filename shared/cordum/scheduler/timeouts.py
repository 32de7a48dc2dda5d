"""The ``reconciler`` section of timeouts.yaml, read by both scheduled functions.

A module of its own: the replayer's function needs these timeouts, not the
reconciler that is wired beside them (:mod:`cordum.scheduler.reconciler`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cordum.config import ConfigError, load_yaml

if TYPE_CHECKING:
    from pathlib import Path


@dataclass(frozen=True, slots=True)
class ReconcilerTimeouts:
    """The ``reconciler`` section of timeouts.yaml; 0 or absent means Cordum's default."""

    dispatch_timeout_s: float = 120.0
    """Longest stay in DISPATCHED; also the age after which the replayer re-drives a
    PENDING job (Cordum passes the dispatch timeout as the pending age)."""
    running_timeout_s: float = 300.0
    """Longest stay in RUNNING, counted from dispatch."""
    scan_interval_s: float = 30.0
    """Time between two ticks; tick locks hold for twice this."""

    @classmethod
    def from_mapping(cls, data: Any) -> ReconcilerTimeouts:
        if not isinstance(data, dict):
            raise ConfigError("timeouts.yaml: expected a mapping at the top")
        section = data.get("reconciler") or {}
        if not isinstance(section, dict):
            raise ConfigError("timeouts.yaml: reconciler must be a mapping")
        values: dict[str, float] = {}
        for name, key in (("dispatch_timeout_s", "dispatch_timeout_seconds"),
                          ("running_timeout_s", "running_timeout_seconds"),
                          ("scan_interval_s", "scan_interval_seconds")):
            raw = section.get(key) or 0
            if isinstance(raw, bool) or not isinstance(raw, int | float) or raw < 0:
                raise ConfigError(f"timeouts.yaml: reconciler.{key} must be a number >= 0")
            if raw > 0:
                values[name] = float(raw)
        return cls(**values)

    @classmethod
    def load(cls, config_dir: Path) -> ReconcilerTimeouts:
        return cls.from_mapping(load_yaml(config_dir / "timeouts.yaml"))
