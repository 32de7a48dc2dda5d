"""The tenant's topic registry: each topic's pool, input and output schemas, pack,
requirements, risk tags and status (Cordum's ``Registration``), one key per topic.

A registration's ``input_schema_id`` and ``output_schema_id`` must name schemas of
the tenant (400 ``TOPIC_SCHEMA_VIOLATION`` otherwise); the write adds the topic to
each such schema's users, so a schema in use cannot be deleted (409). Writes are the
transactions of :func:`~cordum.gateway.schema_registry.service.transact`, audited
(``topic.create``, ``topic.update``, ``topic.delete``).

Round trips: a set 5 (WATCH, GET, ZCARD or not, EXISTS per schema named, EXEC, drain),
a delete 4, a list 1 + one MGET per batch + one GET of the worker snapshot.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from cordum.gateway.core.errors import InvalidRequest, NotFound
from cordum.gateway.schema_registry.models import TOPIC_CODE, schema_ids
from cordum.gateway.schema_registry.service import (
    TierLimit,
    audit_event,
    now_text,
    page,
    transact,
)
from cordum.registry.snapshot import HEARTBEAT_TTL_S, SNAPSHOT_KEY, parse_snapshot
from cordum.store.audit import Severity
from cordum.store.audit_trail import AuditTrail
from cordum.store.schema_registry import (
    MAX_TOPICS,
    decode_topic,
    schema_key,
    schema_users_key,
    topic_index_key,
    topic_key,
)

if TYPE_CHECKING:
    from cordum.gateway.core.auth import Principal

VIEW_FIELDS = ("name", "pool", "input_schema_id", "output_schema_id", "pack_id",
               "requires", "risk_tags", "status")
"""What a list item shows of a stored registration (Cordum's ``topicResponse``)."""


def _json(record: dict[str, Any]) -> str:
    import json

    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


class TopicRegistry:
    """The topics of the caller's tenant (``who.tenant``)."""

    def __init__(self, redis: Any, trail: AuditTrail) -> None:
        self._redis = redis
        self._trail = trail

    async def set(self, who: Principal, record: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Store a registration (create or replace); (what was stored, whether it
        replaced one)."""
        tenant, name = who.tenant, record["name"]
        key, index = topic_key(tenant, name), topic_index_key(tenant)
        named = sorted(schema_ids(record))

        async def write(pipe: Any) -> tuple[dict[str, Any], bool]:
            before = decode_topic(await pipe.get(key))
            if before is None:
                count = int(await pipe.zcard(index))
                if count >= MAX_TOPICS:
                    raise TierLimit("topics", MAX_TOPICS, count)
            for field in ("input_schema_id", "output_schema_id"):
                sid = record.get(field)
                if sid and not await pipe.exists(schema_key(tenant, sid)):
                    raise InvalidRequest(f"{field} {sid} names no schema of this tenant",
                                         TOPIC_CODE)
            stored = {**record, "updated_at": now_text(), "updated_by": who.principal_id}
            pipe.multi()
            pipe.set(key, _json(stored))
            pipe.zadd(index, {name: 0})
            for sid in schema_ids(before or {}) - set(named):
                pipe.srem(schema_users_key(tenant, sid), name)
            for sid in named:
                pipe.sadd(schema_users_key(tenant, sid), name)
            kind = "topic.update" if before is not None else "topic.create"
            AuditTrail.stage(pipe, audit_event(who, kind, Severity.MEDIUM, topic=name,
                                               input_schema_id=record.get("input_schema_id"),
                                               status=record["status"]))
            return record, before is not None

        # The schemas named are watched too: one deleted meanwhile fails the EXEC.
        result = await transact(self._redis,
                                [key, index, *(schema_key(tenant, s) for s in named)], write)
        await self._trail.drain_quietly(tenant)
        return result

    async def delete(self, who: Principal, name: str) -> None:
        """Remove a registration: 404 ``TOPIC_NOT_FOUND`` when the tenant has none."""
        tenant = who.tenant
        key = topic_key(tenant, name)

        async def write(pipe: Any) -> None:
            before = decode_topic(await pipe.get(key))
            if before is None:
                raise NotFound("topic not found", "TOPIC_NOT_FOUND")
            pipe.multi()
            pipe.delete(key)
            pipe.zrem(topic_index_key(tenant), name)
            for sid in schema_ids(before):
                pipe.srem(schema_users_key(tenant, sid), name)
            AuditTrail.stage(pipe, audit_event(who, "topic.delete", Severity.MEDIUM,
                                               topic=name))

        await transact(self._redis, [key], write)
        await self._trail.drain_quietly(tenant)

    async def list(self, who: Principal, cursor: str, limit: int
                   ) -> tuple[list[dict[str, Any]], str | None]:
        tenant = who.tenant
        workers = await self._workers_by_pool()

        def view(member: str, raw: Any) -> dict[str, Any] | None:
            stored = decode_topic(raw)
            if stored is None:
                return None
            item = {k: stored[k] for k in VIEW_FIELDS if stored.get(k) not in (None, "", [])}
            item.setdefault("name", member)
            item.setdefault("status", "active")
            item.setdefault("pool", "")
            item["active_worker_count"] = workers.get(str(item["pool"]), 0)
            return item

        return await page(self._redis, topic_index_key(tenant),
                          lambda topic: topic_key(tenant, topic), view, cursor, limit)

    async def _workers_by_pool(self) -> dict[str, int]:
        """Workers heard from within the heartbeat TTL, per pool; {} when the snapshot
        cannot be read (the list is served without counts, as Cordum serves it)."""
        try:
            raw = await self._redis.get(SNAPSHOT_KEY)
        except Exception:
            return {}
        now = time.time()
        counts: dict[str, int] = {}
        for worker in parse_snapshot(raw):
            if worker.pool and worker.last_seen > 0 and now - worker.last_seen <= \
                    HEARTBEAT_TTL_S:
                counts[worker.pool] = counts.get(worker.pool, 0) + 1
        return counts
