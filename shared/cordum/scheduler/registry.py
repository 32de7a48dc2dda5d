"""Live workers, read from the registry snapshot ``sys:workers:snapshot``.

The bridge writes the snapshot every 5 s from heartbeats. A function reads it
at most once per ``max_age_s`` per container; a missing or corrupt snapshot
means no known workers (with a warning), never an error.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

SNAPSHOT_KEY = "sys:workers:snapshot"
SNAPSHOT_MAX_AGE_S = 5.0

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    worker_id: str
    pool: str
    active_jobs: int = 0
    max_parallel_jobs: int = 0
    capabilities: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)


def parse_snapshot(raw: bytes | str | None) -> list[WorkerInfo]:
    if not raw:
        return []
    try:
        doc = json.loads(raw)
        entries: list[Any] = doc.get("workers") or []
    except (ValueError, AttributeError):
        log.warning("worker snapshot is not valid JSON: treating it as empty")
        return []
    workers = []
    for entry in entries:
        if not isinstance(entry, dict) or not str(entry.get("worker_id") or "").strip():
            continue
        workers.append(
            WorkerInfo(
                worker_id=str(entry["worker_id"]),
                pool=str(entry.get("pool") or ""),
                active_jobs=int(entry.get("active_jobs") or 0),
                max_parallel_jobs=int(entry.get("max_parallel_jobs") or 0),
                capabilities=tuple(entry.get("capabilities") or ()),
                labels=dict(entry.get("labels") or {}),
            )
        )
    return workers


class SnapshotRegistry:
    """Caches the snapshot per process; refreshed when older than ``max_age_s``."""

    def __init__(self, redis: Any, *, key: str = SNAPSHOT_KEY,
                 max_age_s: float = SNAPSHOT_MAX_AGE_S) -> None:
        self._redis = redis
        self._key = key
        self._max_age = max_age_s
        self._workers: list[WorkerInfo] = []
        self._loaded_at = float("-inf")

    async def workers(self, *, refresh: bool = False) -> list[WorkerInfo]:
        if refresh or time.monotonic() - self._loaded_at > self._max_age:
            self._workers = parse_snapshot(await self._redis.get(self._key))
            self._loaded_at = time.monotonic()
        return self._workers


def pick_worker(workers: list[WorkerInfo], pools: list[str]) -> WorkerInfo | None:
    """Least active jobs among workers of ``pools``; ties broken by worker id.

    A first cut: overload thresholds, labels and requires come with the full
    least-loaded strategy.
    """
    eligible = [w for w in workers if w.pool in pools]
    if not eligible:
        return None
    return min(eligible, key=lambda w: (w.active_jobs, w.worker_id))
