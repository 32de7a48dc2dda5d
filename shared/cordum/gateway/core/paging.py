"""Newest-first pages over sorted sets of job ids, and their cursors.

A cursor is ``"<score>:<member>"``: the position of the last entry a page looked
at. The next page starts strictly after it, so entries sharing one score are
neither lost nor repeated (equal scores come in descending member order, as
Redis orders ties). A bare number (Cordum's integer cursor) means "that score
and below".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from cordum.gateway.core.errors import InvalidRequest
from cordum.store.reads import JobReads, Row

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from cordum.store.reads import RedisReadProtocol

T = TypeVar("T")

MAX_SCAN = 2000
"""Index entries one list request looks at, at most; past that the page ends early
with a cursor, so entries of other tenants cannot make a request unbounded."""


@dataclass(frozen=True, slots=True)
class Position:
    """A place in the newest-first order: a score, and the member for equal scores."""

    score: int
    member: str | None = None
    """None: every entry at ``score`` is still ahead (a bare-number cursor)."""

    def ahead(self, score: int, member: str) -> bool:
        """Whether (``score``, ``member``) comes after this position."""
        if score != self.score:
            return score < self.score
        return self.member is None or member < self.member

    def encode(self) -> str:
        return f"{self.score}:{self.member or ''}"


def parse_cursor(raw: str) -> Position | None:
    """The one reader of a page cursor: ``"<score>:<member>"`` or a bare ``"<score>"``
    (surrounding blanks ignored); None for "" (the first page). Anything else, a
    ``"<score>:"`` without its member included, is 400: no list hands such a cursor
    out, and reading it as a position would skip or repeat entries."""
    if not raw:
        return None
    score, sep, member = raw.strip().partition(":")
    try:
        value = int(score)
    except ValueError:
        raise InvalidRequest("cursor is invalid") from None
    if sep and not member:
        raise InvalidRequest("cursor is invalid")
    return Position(value, member if sep else None)


async def page_newest_first(
    redis: RedisReadProtocol,
    key: str,
    cursor: Position | None,
    limit: int,
    views: Callable[[Sequence[Row]], Awaitable[Sequence[T | None]]],
) -> tuple[list[T], str | None]:
    """One page of ``key``, newest first, of the entries ``views`` turns into items.

    ``views`` answers one item or None (not shown: another tenant's, gone, ...)
    per row. The cursor is the position of the last entry looked at; it is None
    when the index has nothing further.
    """
    reads = JobReads(redis)
    top: int | str = cursor.score if cursor else "+inf"
    batch = limit + 10  # a few more: some entries are usually filtered out
    items: list[T] = []
    offset = scanned = 0
    last: Position | None = None
    while True:
        fetched = await reads.newest_first(key, top, offset, batch)
        offset += len(fetched)
        rows = [r for r in fetched if cursor is None or cursor.ahead(r[1], r[0])]
        found = await views(rows)
        for i, ((member, score), item) in enumerate(zip(rows, found, strict=True)):
            last = Position(score, member)
            scanned += 1
            if item is not None:
                items.append(item)
            if len(items) == limit:
                more = i < len(rows) - 1 or len(fetched) == batch
                return items, last.encode() if more else None
        if len(fetched) < batch:
            return items, None
        if scanned >= MAX_SCAN and last is not None:
            return items, last.encode()
