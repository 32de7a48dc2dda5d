"""The saga keys of a workflow on Redis: its compensation stack, the set of steps
recorded on it, and the lock of its rollback.

Keys (Cordum's names with the tenant added: a workflow id is chosen by whoever
submits the step, so two tenants may use the same one and must not share a saga):

- ``saga:<tenant>:<workflowID>:stack`` LIST of proto-binary ``JobRequest``
  templates. A record LPUSHes, a rollback LPOPs, so compensation runs in reverse
  order of the steps. The key expires a TTL after the last push (Cordum's
  never does).
- ``saga:<tenant>:<workflowID>:lock`` ``SET NX "1"`` with a TTL while one
  rollback drains the stack; deleted when it ends.
- ``saga:<tenant>:<workflowID>:recorded`` SET of the job ids already recorded,
  same TTL as the stack, so a redelivered result does not stack the same undo
  step twice.

Each call is one round trip, bounded by ``timeout_s``; any failure is a
:class:`StoreError`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cordum.store.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Awaitable

_LUA = Path(__file__).parent / "lua"

STORE_TIMEOUT_S = 2.0
"""Bound of one Redis call (Cordum's storeOpTimeout)."""


def saga_key(tenant: str, workflow_id: str, part: str) -> str:
    """``saga:<tenant>:<workflowID>:<part>``, the one place the key is spelled."""
    # The tenant cannot hold a ':' (nor a bare '%'), so the key splits one way
    # only: tenant "a:b" with workflow "c" must not land on tenant "a"'s "b:c".
    escaped = tenant.replace("%", "%25").replace(":", "%3A")
    return f"saga:{escaped}:{workflow_id}:{part}"


def stack_key(tenant: str, workflow_id: str) -> str:
    return saga_key(tenant, workflow_id, "stack")


def lock_key(tenant: str, workflow_id: str) -> str:
    return saga_key(tenant, workflow_id, "lock")


def recorded_key(tenant: str, workflow_id: str) -> str:
    return saga_key(tenant, workflow_id, "recorded")


class RedisSagaClientProtocol(Protocol):
    """The part of ``redis.asyncio.Redis`` the saga stack uses."""

    def register_script(self, script: str) -> Any: ...
    def set(self, name: str, value: str, *, nx: bool = ..., ex: int | None = ...
            ) -> Awaitable[Any]: ...
    def lpop(self, name: str) -> Awaitable[Any]: ...
    def llen(self, name: str) -> Awaitable[Any]: ...
    def delete(self, *names: str) -> Awaitable[Any]: ...


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


class SagaStack:
    """One Redis's saga stacks, recorded-sets and rollback locks."""

    def __init__(self, redis: RedisSagaClientProtocol, *,
                 timeout_s: float = STORE_TIMEOUT_S) -> None:
        self._redis = redis
        self._timeout_s = timeout_s
        self._push = redis.register_script((_LUA / "saga_push.lua").read_text())

    async def push(self, tenant: str, workflow_id: str, entry: bytes, *, ttl_s: int,
                   step_id: str = "") -> bool:
        """Push ``entry`` on the stack; both keys then expire ``ttl_s`` later.

        With ``step_id`` the push is the step's record, made once: False when the
        step was recorded already. Without, it is a push-back of a popped entry
        and always lands, at the head it was popped from.
        """
        stack = stack_key(tenant, workflow_id)
        pushed = await self._call(
            f"push onto {stack}",
            self._push(keys=[stack, recorded_key(tenant, workflow_id)],
                       args=[entry, ttl_s, step_id]))
        return bool(pushed)

    async def pop(self, tenant: str, workflow_id: str) -> bytes | None:
        """The newest entry, taken off the stack; None when it is empty."""
        key = stack_key(tenant, workflow_id)
        raw = await self._call(f"pop {key}", self._redis.lpop(key))
        return None if raw is None else _bytes(raw)

    async def length(self, tenant: str, workflow_id: str) -> int:
        key = stack_key(tenant, workflow_id)
        return int(await self._call(f"length of {key}", self._redis.llen(key)))

    async def try_lock(self, tenant: str, workflow_id: str, *, ttl_s: int) -> bool:
        """Take the rollback lock for ``ttl_s``; False when another rollback holds it."""
        lock = lock_key(tenant, workflow_id)
        return bool(await self._call(f"saga lock {lock}",
                                     self._redis.set(lock, "1", nx=True, ex=ttl_s)))

    async def unlock(self, tenant: str, workflow_id: str) -> None:
        """Delete the lock unconditionally (its value is "1", not a token): the
        holder must end before the lock can lapse, so it can only be its own."""
        lock = lock_key(tenant, workflow_id)
        await self._call(f"saga unlock {lock}", self._redis.delete(lock))

    async def _call(self, what: str, call: Awaitable[Any]) -> Any:
        try:
            return await asyncio.wait_for(call, self._timeout_s)
        except Exception as exc:
            raise StoreError(f"{what}: {exc}") from exc
