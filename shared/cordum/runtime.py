"""Per-process clients for Lambda handlers and services.

A Python Lambda handler is a plain function, while redis.asyncio and nats-py
are asyncio clients. One event loop lives as long as the container and each
invocation drives it with ``run``, so connections survive warm invocations
(``asyncio.run`` would close the loop and force a reconnect every time).
Lambda freezes the process between invocations: the NATS connection is
checked at the start of each use and rebuilt when it is closed.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from typing import TYPE_CHECKING, Any, TypeVar

from cordum.config import Settings, settings

if TYPE_CHECKING:
    from collections.abc import Coroutine

    import nats.aio.client
    import nats.js
    import redis.asyncio

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_redis: redis.asyncio.Redis | None = None
_nats: nats.aio.client.Client | None = None

invocation_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "invocation_deadline", default=None)
"""When the running invocation ends (``time.monotonic()`` scale); None outside Lambda."""


def time_left(default: float) -> float:
    """Seconds until the invocation ends, or ``default`` when no deadline is set."""
    deadline = invocation_deadline.get()
    return default if deadline is None else deadline - time.monotonic()


def loop() -> asyncio.AbstractEventLoop:
    global _loop
    if _loop is None or _loop.is_closed():
        _loop = asyncio.new_event_loop()
        asyncio.set_event_loop(_loop)
    return _loop


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Drive ``coro`` on the container's loop."""
    return loop().run_until_complete(coro)


def redis_client(cfg: Settings | None = None) -> redis.asyncio.Redis:
    """The process's Redis client (a pool; connections are made lazily)."""
    global _redis
    if _redis is None:
        import redis.asyncio as aioredis

        cfg = cfg or settings()
        _redis = aioredis.Redis.from_url(
            cfg.redis_url,
            socket_timeout=cfg.store_timeout_s,
            socket_connect_timeout=cfg.store_timeout_s,
            # After an ElastiCache failover the old primary answers READONLY:
            # retrying on a fresh connection reaches the new one.
            retry_on_error=[ConnectionError],
        )
    return _redis


async def nats_client(cfg: Settings | None = None) -> nats.aio.client.Client:
    """A connected NATS client, reconnecting when the previous one was closed."""
    global _nats
    if _nats is not None and _nats.is_connected:
        return _nats
    if _nats is not None and not _nats.is_closed:
        try:
            await _nats.close()
        except Exception:
            pass
    import nats

    cfg = cfg or settings()
    _nats = await nats.connect(
        servers=[u.strip() for u in cfg.nats_url.split(",")],
        connect_timeout=cfg.publish_timeout_s,
        max_reconnect_attempts=2,
        reconnect_time_wait=0.2,
        allow_reconnect=True,
        name="cordum",
    )
    return _nats


async def jetstream(cfg: Settings | None = None) -> nats.js.JetStreamContext:
    nc = await nats_client(cfg)
    return nc.jetstream(timeout=(cfg or settings()).publish_timeout_s)


async def aclose() -> None:
    """Close the cached clients (end of a service, or of a test)."""
    global _redis, _nats
    if _nats is not None and not _nats.is_closed:
        try:
            await _nats.close()
        except Exception:
            pass
    if _redis is not None:
        await _redis.aclose()
    _redis = None
    _nats = None


def reset() -> None:
    """Forget the cached clients (tests, and after a fatal connection error)."""
    global _redis, _nats
    _redis = None
    _nats = None
