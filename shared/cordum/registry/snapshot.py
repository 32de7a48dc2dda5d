"""The worker snapshot document ``sys:workers:snapshot``: key, TTLs, encode and decode.

Cordum's format, written by the bridge and read by the scheduler and the gateway::

    {"captured_at": "2025-01-01T00:00:00Z", "writer_id": "<host>-<8 hex>",
     "pools":   {"<pool>": {"workers": 2, "active_jobs": 3, "capacity": 6}},
     "topics":  {"<topic>": {"pool": "<pool>", "workers": 2, "capacity": 6,
                             "available": true}},
     "workers": [{"worker_id": ..., "pool": ..., "active_jobs": ..., "max_parallel_jobs": ...,
                  <non-zero optional fields>, "last_heartbeat": "<RFC 3339>"}]}

Times are RFC 3339 at second precision with ``Z``, as Go's ``time.RFC3339``
prints them; ``last_heartbeat`` is ours (Cordum has none), and a reader that
finds none takes ``captured_at`` instead.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cordum.registry.workers import WorkerInfo
from cordum.text import as_text

SNAPSHOT_KEY = "sys:workers:snapshot"
SNAPSHOT_TTL_S = 86_400
"""The document outlives every writer: a reader after a long bridge outage still finds
the workers, and their ``last_heartbeat`` tells it they are gone."""
SNAPSHOT_LOCK_KEY = "cordum:scheduler:snapshot:writer"
SNAPSHOT_LOCK_TTL_S = 30.0
"""What a writer that died holding the lock blocks the other replicas for."""
SNAPSHOT_INTERVAL_S = 5.0
"""The bridge rewrites the snapshot this often; reading it more often finds nothing new."""
HEARTBEAT_TTL_S = 30.0
"""Cordum's worker heartbeat TTL: silent for this long means gone."""

_OPTIONAL_LOADS = ("cpu_load", "gpu_utilization", "memory_load")


def rfc3339_from_epoch_s(ts: float) -> str:
    """Epoch seconds as Go's time.RFC3339 in UTC: second precision, ``Z``."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _float32(value: float) -> float:
    """The shortest decimal that reads back as the same float32, as Go prints one."""
    target = struct.pack("<f", value)
    for digits in range(1, 10):
        candidate = round(value, digits)
        if struct.pack("<f", candidate) == target:
            return candidate
    return value


# --------------------------------------------------------------------------- encode


def worker_entry(worker: WorkerInfo) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "worker_id": worker.worker_id,
        "pool": worker.pool,
        "active_jobs": worker.active_jobs,
        "max_parallel_jobs": worker.max_parallel_jobs,
    }
    # Zero and empty values are left out, as Go's omitempty does; a missing
    # gpu_utilization (the SDK never sends one) therefore reads as 0.
    if worker.capabilities:
        entry["capabilities"] = list(worker.capabilities)
    for name in _OPTIONAL_LOADS:
        value = getattr(worker, name)
        if value:
            entry[name] = _float32(value)
    if worker.region:
        entry["region"] = worker.region
    if worker.type:
        entry["type"] = worker.type
    if worker.labels:
        entry["labels"] = dict(sorted(worker.labels.items()))
    entry["last_heartbeat"] = rfc3339_from_epoch_s(worker.last_seen)
    return entry


def snapshot_document(
    workers: Iterable[WorkerInfo], topics: Mapping[str, str], *, writer_id: str, now: float
) -> dict[str, Any]:
    """Cordum's snapshot document over ``workers`` (sorted by id by the caller) and
    ``topics`` (topic -> the pool serving it)."""
    pools: dict[str, dict[str, int]] = {}
    entries: list[dict[str, Any]] = []
    for worker in workers:
        entries.append(worker_entry(worker))
        if not worker.pool:
            continue
        pool = pools.setdefault(worker.pool, {"workers": 0, "active_jobs": 0, "capacity": 0})
        pool["workers"] += 1
        pool["active_jobs"] += worker.active_jobs
        if worker.max_parallel_jobs > 0:
            pool["capacity"] += worker.max_parallel_jobs
    topic_view = {}
    for topic, pool_name in sorted(topics.items()):
        pool = pools.get(pool_name, {"workers": 0, "capacity": 0})
        topic_view[topic] = {
            "pool": pool_name,
            "workers": pool["workers"],
            "capacity": pool["capacity"],
            "available": pool["workers"] > 0,
        }
    return {
        "captured_at": rfc3339_from_epoch_s(now),
        "writer_id": writer_id,
        "pools": pools,
        "topics": topic_view,
        "workers": entries,
    }


def encode_snapshot(document: Mapping[str, Any]) -> str:
    return json.dumps(document, separators=(",", ":"))


# --------------------------------------------------------------------------- decode


class _Timestamps:
    """RFC 3339 instants to epoch seconds. The bridge writes them at second
    precision, so thousands of workers share a handful of distinct strings."""

    def __init__(self) -> None:
        self._seen: dict[str, float | None] = {}

    def parse(self, value: Any) -> float | None:
        if not isinstance(value, str) or not value:
            return None
        if value not in self._seen:
            try:
                instant = datetime.fromisoformat(value)
            except ValueError:
                self._seen[value] = None
            else:
                if instant.tzinfo is None:
                    instant = instant.replace(tzinfo=UTC)
                self._seen[value] = instant.timestamp()
        return self._seen[value]


def _worker(entry: Any, default_seen: float | None, timestamps: _Timestamps) -> WorkerInfo | None:
    # Runs once per worker on every read (10,000 workers every 5 s at the
    # budget's scale): positional arguments and no needless conversions.
    if entry.__class__ is not dict:
        return None
    get = entry.get
    worker_id = as_text(get("worker_id")).strip()
    if not worker_id:
        return None
    last_seen = timestamps.parse(get("last_heartbeat"))
    if last_seen is None:
        last_seen = default_seen
    labels = get("labels")
    capabilities = get("capabilities")
    try:
        return WorkerInfo(
            worker_id,
            as_text(get("pool")),
            int(get("active_jobs") or 0),
            int(get("max_parallel_jobs") or 0),
            tuple(map(as_text, capabilities)) if capabilities else (),
            {as_text(k): as_text(v) for k, v in labels.items()} if labels else {},
            # The SDK's heartbeat helper sends no gpu_utilization and the
            # snapshot omits zero values: a missing load reads as idle.
            float(get("cpu_load") or 0),
            float(get("gpu_utilization") or 0),
            float(get("memory_load") or 0),
            as_text(get("region")),
            as_text(get("type")),
            last_seen or 0.0,
        )
    except (TypeError, ValueError, AttributeError):
        return None


def snapshot_workers(document: Mapping[str, Any]) -> list[WorkerInfo]:
    """Every well-formed worker entry of a parsed document, fresh or not; malformed
    entries are skipped. An entry without ``last_heartbeat`` was last seen at
    ``captured_at``; one without either has ``last_seen`` 0."""
    entries = document.get("workers") or []
    if not isinstance(entries, list):
        return []
    timestamps = _Timestamps()
    default_seen = timestamps.parse(document.get("captured_at"))
    return [w for e in entries if (w := _worker(e, default_seen, timestamps)) is not None]


@dataclass(frozen=True, slots=True)
class StoredSnapshot:
    """A snapshot as read: its workers, who wrote it and when, and what was wrong."""

    workers: list[WorkerInfo] = field(default_factory=list)
    writer_id: str = ""
    captured_at: str = ""
    problem: str | None = None
    """Why nothing could be taken from it (missing, not JSON, ...); None when readable."""


def decode_document(raw: bytes | str | None) -> tuple[dict[str, Any] | None, str | None]:
    """The stored JSON document, or None and what is wrong with it."""
    if not raw:
        return None, "missing"
    try:
        doc = json.loads(raw)
    except ValueError:
        return None, "not valid JSON"
    if not isinstance(doc, dict):
        return None, "not a JSON object"
    if not isinstance(doc.get("workers") or [], list):
        return None, "its workers field is not a list"
    return doc, None


def decode_snapshot(raw: bytes | str | None) -> StoredSnapshot:
    """The stored document with its workers; a missing or corrupt one has none."""
    doc, problem = decode_document(raw)
    if doc is None:
        return StoredSnapshot(problem=problem)
    return StoredSnapshot(snapshot_workers(doc), as_text(doc.get("writer_id")),
                          as_text(doc.get("captured_at")))


def parse_snapshot(raw: bytes | str | None) -> list[WorkerInfo]:
    """Every well-formed worker entry of a snapshot, fresh or not; [] when the
    snapshot is missing or corrupt. Malformed entries are skipped."""
    return decode_snapshot(raw).workers
