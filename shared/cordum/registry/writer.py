"""The snapshot writer: one replica at a time writes ``sys:workers:snapshot``."""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cordum.registry.snapshot import (
    SNAPSHOT_KEY,
    SNAPSHOT_LOCK_KEY,
    SNAPSHOT_LOCK_TTL_S,
    SNAPSHOT_TTL_S,
    decode_document,
    encode_snapshot,
)

# The store's acquire and compare-and-delete release (``store/lua/lock_release.lua``);
# the snapshot lock is neither a job lease nor a tick hold, so it uses the scripts bare.
from cordum.store.locks import LockScripts

if TYPE_CHECKING:
    import redis.asyncio

log = logging.getLogger(__name__)


def new_writer_id() -> str:
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


class SnapshotWriter:
    """Writes the snapshot only while holding the writer lock.

    Timeline of one write, replica A and B both ticking:

        A: SET lock tokA NX PX 30000  -> OK
        B: SET lock tokB NX PX 30000  -> nil, B skips this tick
        A: SET sys:workers:snapshot ... EX 86400
        A: release(lock, tokA)        -> DEL
    If A stalls past 30 s between its SET and its release, the lock expires and B
    may take it: the compare-and-delete keeps A from deleting B's lock.
    """

    def __init__(
        self,
        redis: redis.asyncio.Redis,
        *,
        key: str = SNAPSHOT_KEY,
        lock_key: str = SNAPSHOT_LOCK_KEY,
        lock_ttl_s: float = SNAPSHOT_LOCK_TTL_S,
        data_ttl_s: int = SNAPSHOT_TTL_S,
    ) -> None:
        self._redis = redis
        self.key = key
        self.lock_key = lock_key
        self._lock_ttl_s = lock_ttl_s
        self._data_ttl_s = data_ttl_s
        self._locks = LockScripts(redis)

    async def read(self) -> dict[str, Any] | None:
        """The stored document, None when there is none or it is corrupt."""
        document, problem = decode_document(await self._redis.get(self.key))
        if problem is not None and problem != "missing":
            log.warning("worker snapshot %s is %s: not taken", self.key, problem)
        return document

    async def write(self, document: Mapping[str, Any]) -> bool:
        """True when written; False when another writer holds the lock."""
        token = uuid.uuid4().hex
        if not await self._locks.try_acquire(self.lock_key, token, self._lock_ttl_s):
            return False
        try:
            await self._redis.set(self.key, encode_snapshot(document), ex=self._data_ttl_s)
        finally:
            await self._locks.release(self.lock_key, token)
        return True
