"""Who is gone, as far as the registry snapshot can tell (read by the reconciler).

A worker is lost when a fresh snapshot lists it with a heartbeat older than the
TTL, or does not list it at all. Absence is believed only from a writer the
reader has seen writing for a while: a bridge restarted after an outage longer
than the TTL hydrates no worker and writes its first snapshot before it has
heard the others (they heartbeat every 5 s), and every worker would look lost.
How long a writer has been writing is not in the document; the reader
remembers when it first saw each ``writer_id`` (one small key per writer,
refreshed while it writes), so a writer is trusted from the second look on that
comes at least ``warmup_s`` after the first.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol

from cordum.registry.snapshot import SNAPSHOT_KEY, decode_document, snapshot_workers
from cordum.registry.workers import WorkerInfo

WRITER_SEEN_PREFIX = "cordum:registry:writer_seen:"
"""``<prefix><writer_id>``: epoch seconds of the first snapshot seen from that writer."""
WRITER_SEEN_TTL_S = 86_400
"""A writer silent this long is new again when it comes back."""
_MAX_WRITER_ID = 200


class RedisLivenessClientProtocol(Protocol):
    """The part of ``redis.asyncio.Redis`` the liveness read uses."""

    def get(self, name: str) -> Awaitable[Any]: ...
    def pipeline(self, transaction: bool = ...) -> Any: ...


@dataclass(frozen=True, slots=True)
class Liveness:
    """One read of the snapshot: its workers, and how far its silence can be believed."""

    workers: dict[str, WorkerInfo] = field(default_factory=dict)
    captured_at: float | None = None
    """Epoch seconds the snapshot was written; None when missing or unreadable."""
    writer_id: str = ""
    writer_since: float | None = None
    """When this reader first saw a snapshot of ``writer_id`` (epoch seconds)."""
    problem: str | None = None

    def age_s(self, now: float) -> float:
        """Seconds since the snapshot was written (infinite when unknown)."""
        return float("inf") if self.captured_at is None else max(0.0, now - self.captured_at)

    def absence_trusted(self, warmup_s: float) -> bool:
        """Whether the writer had time to hear every live worker before this snapshot."""
        return (self.captured_at is not None and self.writer_since is not None
                and self.captured_at - self.writer_since >= warmup_s)

    def alive(self, worker_id: str, now: float, ttl_s: float) -> WorkerInfo | None:
        """The worker's entry when its last heartbeat is within ``ttl_s``."""
        worker = self.workers.get(worker_id)
        return worker if worker is not None and worker.last_seen >= now - ttl_s else None


class SnapshotLiveness:
    """Reads the snapshot and remembers its writers: two round trips per read."""

    def __init__(self, redis: RedisLivenessClientProtocol, *, key: str = SNAPSHOT_KEY) -> None:
        self._redis = redis
        self._key = key

    async def read(self) -> Liveness:
        """The snapshot as it stands; a missing or corrupt one has ``problem`` set.
        A Redis failure raises (the caller skips its tick)."""
        doc, problem = decode_document(await self._redis.get(self._key))
        if doc is None:
            return Liveness(problem=problem)
        workers = {w.worker_id: w for w in snapshot_workers(doc)}
        captured = _epoch(doc.get("captured_at"))
        writer = str(doc.get("writer_id") or "")[:_MAX_WRITER_ID]
        since = await self._first_seen(writer, captured) if writer and captured else None
        return Liveness(workers, captured, writer, since,
                        None if captured is not None else "without captured_at")

    async def _first_seen(self, writer_id: str, captured_at: float) -> float | None:
        key = WRITER_SEEN_PREFIX + writer_id
        pipe = self._redis.pipeline(transaction=False)
        pipe.set(key, repr(captured_at), nx=True, ex=WRITER_SEEN_TTL_S)
        pipe.expire(key, WRITER_SEEN_TTL_S)
        pipe.get(key)
        _, _, raw = await pipe.execute()
        try:
            return float(raw.decode() if isinstance(raw, bytes) else raw)
        except (TypeError, ValueError):
            return None


def _epoch(value: Any) -> float | None:
    from datetime import UTC, datetime

    if not isinstance(value, str) or not value:
        return None
    try:
        instant = datetime.fromisoformat(value)
    except ValueError:
        return None
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return instant.timestamp()
