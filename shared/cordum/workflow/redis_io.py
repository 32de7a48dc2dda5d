"""Redis plumbing the workflow stores share: the client they need, JSON in and out,
failures as :class:`~cordum.store.errors.StoreError`, and times as index scores."""

from __future__ import annotations

import contextlib
import json
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from cordum.store.errors import StoreError
from cordum.text import as_text
from cordum.workflow.model import parse_time

if TYPE_CHECKING:
    from collections.abc import Awaitable, Iterator


class RedisWorkflowProtocol(Protocol):
    """The part of ``redis.asyncio.Redis`` the workflow stores use."""

    def register_script(self, script: str) -> Any: ...
    def pipeline(self, transaction: bool = ...) -> Any: ...
    def set(self, name: str, value: str, *, nx: bool = ..., px: int | None = ...
            ) -> Awaitable[Any]: ...


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


text = as_text
""":func:`cordum.text.as_text`, under the name workflow/store.py imports it by."""


def time_us(text: str) -> int:
    """µs since the epoch of an RFC 3339 time; now when it is empty or no time."""
    try:
        instant = parse_time(text)
    except (ValueError, TypeError):
        return time.time_ns() // 1000
    return (instant - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


@contextlib.contextmanager
def redis_errors(what: str) -> Iterator[None]:
    try:
        yield
    except Exception as exc:  # connection, timeout, script error: the caller may retry
        raise StoreError(f"{what}: {exc}") from exc


async def execute(what: str, pipe: Any) -> list[Any]:
    with redis_errors(what):
        return list(await pipe.execute())


def read_pipe(redis: RedisWorkflowProtocol) -> Any:
    """A pipeline without MULTI, for reads (its commands chain)."""
    return redis.pipeline(transaction=False)
