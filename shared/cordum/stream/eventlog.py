"""The tenants' event logs: one Redis stream per tenant, ``cordum:stream:<tenant>``.

What a reconnecting client resumes from. Each append is one script (``lua/append.lua``):
skip a bus message appended already, XADD trimmed to about ``max_events`` entries,
MINID trim to ``max_age_s`` by the server's clock, EXPIRE so an idle tenant's log goes
away. The entry's stream id is the event's id.

A replay reads the newest ``limit`` entries after the client's id and says whether
some it should have had are missing: more than ``limit`` of them, or trimmed away.
Each entry records the id before it (``prev``), so a gap is exact: the oldest entry
after the client's id names a predecessor after that id which the log no longer has.
A log that expired cannot tell: a client's id older than the log's age is told it may
have missed events.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cordum.bus.streams import DUPLICATE_WINDOW_S
from cordum.stream.events import Event, id_after, parse_id
from cordum.text import as_text

if TYPE_CHECKING:
    from collections.abc import Sequence

LOG_KEY_PREFIX = "cordum:stream:"
SEEN_KEY_PREFIX = "cordum:stream-seen:"
"""``cordum:stream-seen:<sha256 of subject and message>``: a bus message appended
already. Outside ``cordum:stream:*`` so no tenant's log can be named like it."""
SEEN_TTL_S = DUPLICATE_WINDOW_S
"""How long a bus message is remembered: the job stream's duplicate window (a
publisher's retry of the same message within it is one event)."""
GAP_READ_MAX = 1000
"""Entries one gap read returns at most (a gap is the few events another replica
wrote while this one's were in flight)."""
TRUNCATED_LIMIT = "replay_limit"
TRUNCATED_TRIMMED = "log_trimmed"

_LUA = Path(__file__).parent / "lua"


def log_key(tenant: str) -> str:
    return LOG_KEY_PREFIX + tenant


def seen_key(subject: str, data: bytes) -> str:
    digest = hashlib.sha256(subject.encode() + b"\n" + data).hexdigest()
    return SEEN_KEY_PREFIX + digest


@dataclass(frozen=True, slots=True)
class Replay:
    events: list[Event] = field(default_factory=list)
    """Oldest first."""
    truncated: str = ""
    """Why some events after the client's id are missing ('' when none are)."""
    skipped_to: str = ""
    """With ``truncated``: the last id that may be missing ('' when unknown): events
    after the client's id up to and including this one are not replayed."""
    resume_after: str = ""
    """What the live events continue after: the last replayed id, else the client's
    id, but never past the log's newest (an id from elsewhere must not hide events)."""


def _entries(raw: Sequence[Any], tenant: str) -> list[Event]:
    """Entries as redis-py parses XRANGE (id, {field: value}), or as a script returns
    them (id, [field, value, ...])."""
    out = []
    for entry_id, stored in raw:
        if isinstance(stored, dict):
            fields = {as_text(k): as_text(v) for k, v in stored.items()}
        else:
            values = [as_text(v) for v in stored]
            fields = dict(zip(values[::2], values[1::2], strict=True))
        out.append(Event.from_log(tenant, as_text(entry_id), fields))
    return out


class EventLog:
    def __init__(self, redis: Any, *, max_events: int, max_age_s: int) -> None:
        self._redis = redis
        self._max_events = max_events
        self._max_age_s = max_age_s
        self._append = redis.register_script((_LUA / "append.lua").read_text())
        self._replay = redis.register_script((_LUA / "replay.lua").read_text())

    async def append(self, event: Event, seen: str) -> Event | None:
        """``event`` with its id and the id before it; None when ``seen`` (a
        :func:`seen_key`) says the same bus message was appended already."""
        assert event.tenant is not None
        args: list[Any] = [self._max_events, self._max_age_s * 1000, self._max_age_s,
                           SEEN_TTL_S]
        for name, value in event.log_fields().items():
            args += [name, value]
        answer = await self._append(keys=[log_key(event.tenant), seen], args=args)
        if not answer:
            return None
        prev, new = (as_text(v) for v in answer)
        return event.with_ids(new, prev)

    async def last_id(self, tenant: str) -> str:
        """The newest entry's id ('0-0' when the log is empty or absent)."""
        newest = await self._redis.xrevrange(log_key(tenant), "+", "-", count=1)
        return as_text(newest[0][0]) if newest else "0-0"

    async def between(self, tenant: str, after: str, before: str) -> list[Event]:
        """The entries strictly between two ids, oldest first (at most GAP_READ_MAX)."""
        raw = await self._redis.xrange(log_key(tenant), f"({after}", f"({before}",
                                       count=GAP_READ_MAX)
        return _entries(raw, tenant)

    async def replay(self, tenant: str, since: str, limit: int) -> Replay:
        ms, seq = parse_id(since)
        since = f"{ms}-{seq}"
        exists, newest, raw = await self._replay(keys=[log_key(tenant)],
                                                 args=[since, limit + 1])
        newest = as_text(newest)
        events = _entries(raw, tenant)[::-1]
        after = events[-1].id if events else (since if not id_after(since, newest) else newest)
        if len(events) > limit:
            return Replay(events[1:], TRUNCATED_LIMIT, events[0].id, after)
        if events and id_after(events[0].prev, since):
            return Replay(events, TRUNCATED_TRIMMED, events[0].prev, after)
        if not exists and ms < time.time() * 1000 - self._max_age_s * 1000:
            # The log expired: no event for a whole max age, but the client's id is
            # older than that, so events after it may have been written and expired.
            return Replay(events, TRUNCATED_TRIMMED, "", after)
        return Replay(events, resume_after=after)
