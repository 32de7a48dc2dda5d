"""Redis guard of the NATS -> SQS forwarding: dedup, in-flight claims, DLQ records.

JetStream delivers at least once and the bridge acks only after SQS accepted a
message, so a lost ack would put the same message on the queue twice. The guard
closes that window, and keeps two replicas from forwarding one message at once::

    A: claim 42        inflight:42 = A (2 min)
    A: SQS accepted 42
    A: settle 42       processed:42 (10 min), inflight:42 deleted
    A: ack 42          -- lost: A crashed, or the connection dropped
       ... ack_wait (60 s) later JetStream delivers 42 again ...
    B: claim 42        processed -> ack, nothing sent

    A: claim 43        inflight:43 = A; the send outlives ack_wait
    B: claim 43        (JetStream redelivered it) busy, 70 s left -> NAK, short delay
    A: settle 43, ack 43
    B: claim 43        (if A's ack came too late) processed -> ack

The one window left open is a crash between SQS accepting and the settle: the
message is sent again. The functions behind the queues are idempotent on the
job id, so that costs a duplicate delivery, never a duplicate job.

A message that must be terminated (poison, delivery limit) first gets a DLQ
record (``dlq:bus:<stream>:<seq>`` and the ``dlq:bus:index`` ZSET); only when
that write succeeded is the message terminated.

Every step is one Lua script over the whole pull (``lua/*.lua``, layout in each
header). When Redis cannot be reached the guard answers "unguarded" instead of
raising, logs one warning per outage and leaves Redis alone for
``redis_retry_s``: forwarding goes on with JetStream's at-least-once alone, and
nothing is terminated, since no DLQ record can be written.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("cordum.bus.guard")

_LUA = Path(__file__).parent / "lua"

PROCESSED_TTL_S = 600
"""Cordum's: as long as its AckWait, the longest a lost ack can take to come back."""
INFLIGHT_TTL_S = 120
DLQ_TTL_S = 30 * 24 * 3600
DLQ_INDEX_MAX = 10_000


@dataclass(frozen=True, slots=True)
class GuardKeys:
    """Redis key names. ``prefix`` puts them all under a namespace (tests, a second stack)."""

    prefix: str = ""

    def processed(self, stream: str, seq: int) -> str:
        return f"{self.prefix}cordum:bus:processed:{stream}:{seq}"

    def inflight(self, stream: str, seq: int) -> str:
        return f"{self.prefix}cordum:bus:inflight:{stream}:{seq}"

    def dead_letter(self, stream: str, seq: int) -> str:
        return f"{self.prefix}dlq:bus:{stream}:{seq}"

    @property
    def dead_letter_index(self) -> str:
        return f"{self.prefix}dlq:bus:index"


@dataclass(frozen=True, slots=True)
class GuardPolicy:
    """Lifetimes of the guard's keys and how it treats a Redis that does not answer."""

    processed_ttl_s: int = PROCESSED_TTL_S
    """Life of a processed key. Must exceed the consumer's ack_wait: a lost ack
    comes back as a redelivery after ack_wait, and must still find the key."""
    inflight_ttl_s: int = INFLIGHT_TTL_S
    """Life of an in-flight claim; what a replica that died mid-send blocks its
    messages for (they are NAKed meanwhile, not lost)."""
    dlq_ttl_s: int = DLQ_TTL_S
    """Life of a DLQ record."""
    dlq_index_max: int = DLQ_INDEX_MAX
    """Newest entries kept in the DLQ index; older ones are trimmed on each write."""
    op_timeout_s: float = 1.0
    """Bound of one script call; past it Redis counts as unreachable."""
    redis_retry_s: float = 2.0
    """After a failed call Redis is not tried again for this long, so a dead host
    does not add a timeout to every pull."""

    def __post_init__(self) -> None:
        if min(self.processed_ttl_s, self.inflight_ttl_s, self.dlq_ttl_s) <= 0:
            raise ValueError("guard TTLs must be > 0")
        if self.dlq_index_max < 1:
            raise ValueError("dlq_index_max must be >= 1")
        if self.op_timeout_s <= 0 or self.redis_retry_s < 0:
            raise ValueError("op_timeout_s must be > 0 and redis_retry_s >= 0")


class ClaimStatus(StrEnum):
    CLAIMED = "claimed"
    """This forwarder holds the message: send it."""
    PROCESSED = "processed"
    """Already on the queue (an earlier ack was lost): ack without sending."""
    BUSY = "busy"
    """Another forwarder is sending it right now: NAK and let it finish."""


@dataclass(frozen=True, slots=True)
class Claim:
    status: ClaimStatus
    held_for_s: float = 0.0
    """For ``BUSY``: how long the other forwarder's claim still lives."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message about to be terminated, as its DLQ record keeps it."""

    stream: str
    seq: int
    subject: str
    payload: bytes
    reason: str
    deliveries: int
    consumer: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def member(self) -> str:
        """Its DLQ index member, the same ``<stream>:<seq>`` as the bus_msg_id attribute."""
        return f"{self.stream}:{self.seq}"

    def record(self, now_us: int) -> str:
        doc: dict[str, Any] = {
            "stream": self.stream,
            "seq": self.seq,
            "consumer": self.consumer,
            "subject": self.subject,
            "payload_b64": base64.b64encode(self.payload).decode("ascii"),
            "reason": self.reason,
            "deliveries": self.deliveries,
            "dead_lettered_at_us": now_us,
        }
        if self.headers:
            doc["headers"] = dict(self.headers)
        return json.dumps(doc, separators=(",", ":"))


class RedisScriptingProtocol(Protocol):
    """The part of ``redis.asyncio.Redis`` the guard uses."""

    def register_script(self, script: str) -> Any: ...


class _Unavailable(Exception):
    """Redis was not reached (or is being left alone after a failure)."""


class BusGuard:
    """Processed keys, in-flight claims and DLQ records of one forwarder.

    Never raises on a Redis failure: ``claim`` then returns None, ``settle`` and
    ``dead_letter`` return False. ``owner`` identifies this forwarder's claims; two
    forwarders that must exclude each other need different owners (the default is
    unique per instance).
    """

    def __init__(
        self,
        redis: RedisScriptingProtocol,
        *,
        keys: GuardKeys | None = None,
        policy: GuardPolicy | None = None,
        owner: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.keys = keys or GuardKeys()
        self.policy = policy or GuardPolicy()
        self.owner = owner or uuid.uuid4().hex
        self._clock = clock
        self._scripts = {
            name: redis.register_script((_LUA / f"{name}.lua").read_text())
            for name in ("claim", "settle", "dead_letter")
        }
        self._skip_until = 0.0
        self._down = False

    @property
    def degraded(self) -> bool:
        """True from a failed Redis call until the next one that succeeds."""
        return self._down

    async def claim(self, stream: str, seqs: Sequence[int]) -> list[Claim] | None:
        """One claim per sequence, in order; None when Redis could not be asked."""
        if not seqs:
            return []
        keys = self._pairs(stream, seqs)
        try:
            raw = await self._run("claim", keys, [self.owner, self.policy.inflight_ttl_s * 1000])
        except _Unavailable:
            return None
        claims = []
        for status, ms in raw:
            kind = ClaimStatus(status.decode() if isinstance(status, bytes) else str(status))
            claims.append(Claim(kind, max(int(ms), 0) / 1000.0))
        return claims

    async def settle(self, stream: str, accepted: Sequence[int], returned: Sequence[int]) -> bool:
        """Mark ``accepted`` processed and release every claim; False when Redis failed."""
        seqs = [*accepted, *returned]
        if not seqs:
            return True
        flags = ["1"] * len(accepted) + ["0"] * len(returned)
        args: list[Any] = [self.owner, self.policy.processed_ttl_s, *flags]
        try:
            await self._run("settle", self._pairs(stream, seqs), args)
        except _Unavailable:
            return False
        return True

    async def dead_letter(self, letters: Sequence[DeadLetter]) -> bool:
        """Write the DLQ records of ``letters``, all or none; True once they are stored."""
        if not letters:
            return True
        now_us = time.time_ns() // 1000
        keys = [self.keys.dead_letter_index]
        args: list[Any] = [now_us, self.policy.dlq_ttl_s, self.policy.dlq_index_max]
        for letter in letters:
            keys.append(self.keys.dead_letter(letter.stream, letter.seq))
            args += [letter.member, letter.record(now_us)]
        try:
            await self._run("dead_letter", keys, args)
        except _Unavailable:
            return False
        return True

    def _pairs(self, stream: str, seqs: Sequence[int]) -> list[str]:
        keys: list[str] = []
        for seq in seqs:
            keys += [self.keys.processed(stream, seq), self.keys.inflight(stream, seq)]
        return keys

    async def _run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        if self._clock() < self._skip_until:
            raise _Unavailable
        try:
            async with asyncio.timeout(self.policy.op_timeout_s):
                result = await self._scripts[name](keys=keys, args=args)
        except Exception as exc:  # connection, timeout, READONLY, OOM alike
            self._skip_until = self._clock() + self.policy.redis_retry_s
            if not self._down:
                self._down = True
                log.warning(
                    "bus guard: redis unavailable, forwarding without dedup or DLQ "
                    "until it answers again: %s: %s",
                    type(exc).__name__,
                    exc,
                )
            raise _Unavailable from exc
        if self._down:
            self._down = False
            log.info("bus guard: redis answers again, dedup resumed")
        return result
