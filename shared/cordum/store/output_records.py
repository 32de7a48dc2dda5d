"""The output checks' reads and writes of a job's result, one script call each.

``read`` (``lua/output_prefetch.lua``): the stored request, the result's size and
head. ``record`` (``lua/output_record.lua``): a content check's decision, as meta
fields and side records. Each replaces a pipeline of two or three commands: the same
one round trip, with less client work per result (one command to pack, one reply
to parse). Neither moves a state, so neither needs a fence: a quarantine, which
does, goes through the transition script.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from cordum.store.errors import StoreError
from cordum.store.jobs import meta_key, request_key

if TYPE_CHECKING:
    from collections.abc import Mapping

_LUA = Path(__file__).parent / "lua"
_READ = (_LUA / "output_prefetch.lua").read_text()
_RECORD = (_LUA / "output_record.lua").read_text()


class OutputRecords:
    """Reads what the output checks of a job's result need; records what they decide."""

    def __init__(self, redis: Any) -> None:
        self._read = redis.register_script(_READ)
        self._record = redis.register_script(_RECORD)

    async def read(self, job_id: str, result_key: str, head_bytes: int
                   ) -> tuple[Any, int, Any]:
        """(the stored request or None, the result's size, its first ``head_bytes``
        bytes); without ``result_key``: (request, 0, None). Redis errors propagate."""
        keys = [request_key(job_id)]
        if result_key:
            keys.append(result_key)
        reply = await self._read(keys=keys, args=[head_bytes - 1])
        if not result_key:
            return reply[0], 0, None
        return reply[0], int(reply[1] or 0), reply[2]

    async def record(self, job_id: str, fields: Mapping[str, str],
                     records: Mapping[str, tuple[str, int]]) -> None:
        """Meta fields of an existing job and side records (key -> (value, TTL s)), at
        once; the state does not move. ``StoreError`` when Redis fails."""
        args: list[Any] = [len(records)]
        for value, ttl in records.values():
            args += [value, ttl]
        for name, value in fields.items():
            args += [name, value]
        try:
            await self._record(keys=[meta_key(job_id), *records], args=args)
        except Exception as exc:
            raise StoreError(f"redis: {exc}") from exc
