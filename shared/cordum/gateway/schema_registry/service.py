"""The tenant's schema registry: register (create or replace), list, read, delete.

Keys and records are :mod:`cordum.store.schema_registry`'s. Every write is one
optimistic transaction: WATCH the keys it depends on, read them, then MULTI/EXEC the
change with its audit event staged in the tenant's outbox (the event exists exactly
when the change does), then drain the outbox. A transaction that meets a concurrent
change runs again, :data:`WRITE_TRIES` times at most, then answers 409
``registry_busy`` (retryable). So a tenant never holds more than ``MAX_SCHEMAS``
schemas, and a schema a topic names is never deleted under it.

Round trips: a register 5 (WATCH, EXISTS, ZCARD, EXEC, drain), a delete 5 (WATCH,
EXISTS, SCARD, EXEC, drain), a read 1; a list 1 + one MGET per :data:`BATCH` ids.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from cordum.gateway.core.errors import (
    Conflict,
    Forbidden,
    GatewayError,
    NotFound,
    RetryableConflict,
)
from cordum.gateway.core.times import rfc3339_s
from cordum.store.audit import Severity
from cordum.store.audit_trail import AuditTrail, act
from cordum.store.errors import StoreError
from cordum.store.schema_registry import (
    MAX_SCHEMAS,
    StoredSchema,
    decode_schema,
    read_schema,
    schema_index_key,
    schema_key,
    schema_users_key,
)
from cordum.text import as_text

if TYPE_CHECKING:
    from cordum.gateway.core.auth import Principal
    from cordum.gateway.schema_registry.models import NewSchema

T = TypeVar("T")

WRITE_TRIES = 3
BATCH = 16
"""Records one MGET of a list reads."""
PAGE_BYTES = 4 * 1024 * 1024
"""A list page stops once its items take this many bytes of JSON (at least one item
is always given): the answer stays well under the 6 MB a Lambda may return."""
IN_USE_NAMED = 5
"""Topics a 409 ``SCHEMA_IN_USE`` names at most."""


class TierLimit(Forbidden):
    """Cordum's answer to a count limit: 403 ``tier_limit_exceeded`` with the limit."""

    def __init__(self, what: str, limit: int, current: int) -> None:
        super().__init__(f"a tenant may hold at most {limit} {what}", "tier_limit_exceeded")
        self.limit = limit
        self.current = current

    def body(self) -> dict[str, object]:
        return {**super().body(), "limit": self.limit, "current": self.current}


def now_text() -> str:
    import time

    return rfc3339_s(int(time.time()))


async def transact(redis: Any, watched: list[str], body: Callable[[Any], Awaitable[T]]) -> T:
    """``body(pipe)`` in a WATCH on ``watched``; it reads, then calls ``pipe.multi()`` and
    queues its writes. Run again when a watched key changed (409 after
    :data:`WRITE_TRIES`); a Redis failure is a StoreError."""
    from redis.exceptions import WatchError

    for _ in range(WRITE_TRIES):
        try:
            async with redis.pipeline(transaction=True) as pipe:
                await pipe.watch(*watched)
                result = await body(pipe)
                await pipe.execute()
                return result
        except WatchError:
            continue
        except (GatewayError, StoreError):
            raise  # a refusal of the body's own, or a failure already named
        except Exception as exc:
            raise StoreError(f"schema registry write: {exc}") from exc
    raise RetryableConflict("the registry changed during the write; send it again",
                            "registry_busy", 1)


def audit_event(who: Principal, kind: str, severity: Severity, **extra: Any) -> Any:
    return act(kind, severity, who.tenant, who.principal_id, who.key_id, extra=extra)


async def page(redis: Any, index: str, key_of: Callable[[str], str],
               view: Callable[[str, Any], dict[str, Any] | None], cursor: str,
               limit: int) -> tuple[list[dict[str, Any]], str | None]:
    """Items of the lexicographic index ``index`` after ``cursor``: ``view(member, raw)``
    of each record (None: left out), at most ``limit`` and :data:`PAGE_BYTES`; the
    cursor of the next page (the last member given), None at the end."""
    low = f"({cursor}" if cursor else "-"
    try:
        members = [as_text(m) for m in await redis.zrangebylex(index, low, "+", start=0,
                                                                num=limit + 1)]
    except Exception as exc:
        raise StoreError(f"registry list: {exc}") from exc
    more = len(members) > limit
    members = members[:limit]
    items: list[dict[str, Any]] = []
    used = 0
    for at in range(0, len(members), BATCH):
        batch = members[at:at + BATCH]
        try:
            raws = await redis.mget([key_of(m) for m in batch])
        except Exception as exc:
            raise StoreError(f"registry list: {exc}") from exc
        for i, (member, raw) in enumerate(zip(batch, raws, strict=True)):
            item = view(member, raw)
            if item is None:
                continue
            size = len(json.dumps(item, separators=(",", ":")))
            if items and used + size > PAGE_BYTES:
                return items, members[at + i - 1] if at + i else None
            items.append(item)
            used += size
    return items, members[-1] if more and members else None


class SchemaRegistry:
    """The schemas of the caller's tenant (``who.tenant``)."""

    def __init__(self, redis: Any, trail: AuditTrail) -> None:
        self._redis = redis
        self._trail = trail

    async def register(self, who: Principal, new: NewSchema) -> bool:
        """Store ``new`` (create or replace); whether it replaced one."""
        tenant = who.tenant
        key, index = schema_key(tenant, new.id), schema_index_key(tenant)
        stored = StoredSchema(id=new.id, schema=new.schema, sha256=new.sha256,
                              updated_at=now_text(), updated_by=who.principal_id)

        async def write(pipe: Any) -> bool:
            replaced = bool(await pipe.exists(key))
            if not replaced:
                count = int(await pipe.zcard(index))
                if count >= MAX_SCHEMAS:
                    raise TierLimit("schemas", MAX_SCHEMAS, count)
            pipe.multi()
            pipe.set(key, stored.encode())
            pipe.zadd(index, {new.id: 0})
            AuditTrail.stage(pipe, audit_event(
                who, "schema.register", Severity.MEDIUM, schema_id=new.id, sha256=new.sha256,
                replaced=replaced))
            return replaced

        replaced = await transact(self._redis, [key, index], write)
        await self._trail.drain_quietly(tenant)
        return replaced

    async def get(self, who: Principal, schema_id: str) -> dict[str, Any]:
        stored = await read_schema(self._redis, who.tenant, schema_id)
        if stored is None:
            raise NotFound("schema not found", "CONFIG_SCHEMA_NOT_FOUND")
        return stored.record()

    async def list(self, who: Principal, cursor: str, limit: int
                   ) -> tuple[list[dict[str, Any]], str | None]:
        tenant = who.tenant

        def view(member: str, raw: Any) -> dict[str, Any] | None:
            stored = decode_schema(raw)
            return stored.record() if stored is not None else None

        return await page(self._redis, schema_index_key(tenant),
                          lambda sid: schema_key(tenant, sid), view, cursor, limit)

    async def delete(self, who: Principal, schema_id: str) -> None:
        """Remove a schema: 404 when the tenant has none by that id, 409
        ``SCHEMA_IN_USE`` (naming a few of the topics) while a topic names it."""
        tenant = who.tenant
        key, users = schema_key(tenant, schema_id), schema_users_key(tenant, schema_id)

        async def write(pipe: Any) -> None:
            if not await pipe.exists(key):
                raise NotFound("schema not found", "CONFIG_SCHEMA_NOT_FOUND")
            if int(await pipe.scard(users)):
                named = sorted(as_text(m) for m in await pipe.srandmember(users, IN_USE_NAMED))
                raise Conflict(f"schema {schema_id} is in use by topic(s) "
                                    f"{', '.join(named)}: delete or change them first",
                                    "SCHEMA_IN_USE")
            pipe.multi()
            pipe.delete(key, users)
            pipe.zrem(schema_index_key(tenant), schema_id)
            AuditTrail.stage(pipe, audit_event(who, "schema.delete", Severity.MEDIUM,
                                               schema_id=schema_id))

        await transact(self._redis, [key, users], write)
        await self._trail.drain_quietly(tenant)
