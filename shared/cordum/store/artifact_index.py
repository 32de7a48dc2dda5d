"""Each tenant's artifacts, newest first: the index ``GET /api/v1/artifacts`` pages.

``artidx:<tenant>`` is a sorted set: member an artifact's id, score its creation time
(epoch ms). The tenant is escaped as the registries' keys escape it (``%`` and ``:``
written ``%25`` and ``%3A``), so a key splits one way only: tenant ``a:b`` never
reaches ``a``'s index.

Why the creation time, not the expiry: the list is newest first, and the retention
classes differ (1, 7 and 30 days), so expiry order is not creation order (a 30-day
artifact made yesterday expires after a 1-day one made now). Pruning stays cheap all
the same: a member made longer ago than the longest retention has expired whatever
its class, and one ZREMRANGEBYSCORE drops them all; a shorter-lived member whose
metadata is gone is skipped by the list and removed there (:func:`forget`).

Why outside ``art:``: the workers' Redis user may read ``art:*`` (``%R~art:*``, to
read an artifact a job names). Its only read is GET, which cannot read a sorted set,
but an index under ``art:`` would be one ACL word away from letting any worker list
the artifact ids of every tenant of the deployment. No worker rule matches
``artidx:``, and neither the memory read nor the artifact read serves it (a key that
is not ``art:<id>`` names no artifact).

Costs:

- :func:`add` queues its commands on the caller's transaction, the artifact's own
  MULTI (no round trip of its own): ZADD, ZREMRANGEBYSCORE of the members older than
  the longest retention, ZREMRANGEBYRANK keeping the newest :data:`MAX_INDEXED`, and
  EXPIRE of the key by the longest retention (an idle tenant's index goes with its
  last artifact). O(log N + M) for M members removed; N is at most
  :data:`MAX_INDEXED`, so the set stays bounded however many artifacts are made.
- :func:`newest`: one ZREVRANGEBYSCORE with LIMIT, O(log N + count) ids.
- :func:`forget`: one ZREM of the ids given.

A cursor is opaque (URL-safe base64, no padding) and encodes a :class:`Position`:
the score and member of the last entry a page looked at, and how many entries share
that score down to it. The next page reads from that score (inclusive) and drops the
entries at or before the position, so artifacts made in the same millisecond are
neither lost nor repeated.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any

from cordum.store.errors import StoreError
from cordum.text import as_text

INDEX_PREFIX = "artidx:"
MAX_INDEXED = 10_000
"""The newest artifacts a tenant's index keeps (older ones stay readable by pointer
until they expire, but are not listed)."""
MAX_SCORE = 2**53 - 1

_MEMBER = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _tenant(tenant: str) -> str:
    if not tenant:
        raise ValueError("an artifact index key needs a tenant")
    return tenant.replace("%", "%25").replace(":", "%3A")


def index_key(tenant: str) -> str:
    """``artidx:<tenant>`` (escaped): the tenant's artifacts by creation time."""
    return INDEX_PREFIX + _tenant(tenant)


@dataclass(frozen=True, slots=True)
class Position:
    """An entry's place in the newest-first order: where a page ends."""

    score: int
    """The entry's creation time, epoch ms."""
    member: str
    """Its artifact id (equal scores come in descending member order, as Redis
    orders ties of a reverse range)."""
    ties: int = 1
    """Entries at ``score`` from the first of them down to this one (this one too)."""

    def after(self, score: int, member: str) -> bool:
        """Whether (``score``, ``member``) comes after this position."""
        return score < self.score or (score == self.score and member < self.member)

    def encode(self) -> str:
        raw = f"{self.score}:{self.ties}:{self.member}".encode("ascii")
        return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    @classmethod
    def decode(cls, cursor: str) -> Position:
        """The position ``cursor`` encodes; ValueError when it encodes none."""
        text = cursor.strip()
        if not text or len(text) > 128:
            raise ValueError("not a cursor")
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("ascii")
        except (binascii.Error, ValueError):
            raise ValueError("not a cursor") from None
        score, ties, member = (raw.split(":") + ["", ""])[:3]
        if not (score.isdigit() and ties.isdigit() and _MEMBER.match(member)
                and int(score) <= MAX_SCORE and 1 <= int(ties) <= MAX_INDEXED):
            raise ValueError("not a cursor")
        return cls(int(score), member, int(ties))


def add(pipe: Any, tenant: str, art_id: str, created_ms: int, keep_ms: int) -> None:
    """Queue the index's writes for a new artifact on ``pipe`` (a transaction the caller
    sends): the entry, the members made more than ``keep_ms`` ago dropped (expired,
    whatever their class), the set cut to its newest :data:`MAX_INDEXED` and its TTL
    set to ``keep_ms``."""
    key = index_key(tenant)
    pipe.zadd(key, {art_id: created_ms})
    pipe.zremrangebyscore(key, "-inf", f"({created_ms - keep_ms}")
    pipe.zremrangebyrank(key, 0, -(MAX_INDEXED + 1))
    pipe.pexpire(key, keep_ms)


async def newest(redis: Any, tenant: str, after: Position | None,
                 count: int) -> tuple[list[Position], bool]:
    """Up to ``count`` entries of the tenant's index after ``after`` (from the newest
    when None), newest first, and whether more may follow. One round trip: the entries
    at ``after``'s score down to it (``after.ties``), ``count`` more, and one to tell
    whether the index goes on."""
    fetch = (after.ties if after else 0) + count + 1
    top: int | str = after.score if after else "+inf"
    try:
        raw = await redis.zrevrangebyscore(index_key(tenant), top, "-inf", start=0,
                                           num=fetch, withscores=True)
    except Exception as exc:
        raise StoreError(f"read artifact index: {exc}") from exc
    found: list[Position] = []
    previous, ties = None, 0
    for member, value in raw:
        art_id, score = as_text(member), int(value)
        ties = ties + 1 if score == previous else 1
        previous = score
        if after is None or after.after(score, art_id):
            found.append(Position(score, art_id, ties))
    return found[:count], len(found) > count or len(raw) == fetch


async def forget(redis: Any, tenant: str, art_ids: list[str]) -> None:
    """Drop ``art_ids`` from the tenant's index (artifacts whose metadata is gone)."""
    if not art_ids:
        return
    try:
        await redis.zrem(index_key(tenant), *art_ids)
    except Exception as exc:
        raise StoreError(f"write artifact index: {exc}") from exc
