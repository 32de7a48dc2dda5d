"""Redis locks with Cordum's semantics: per-job leases and TTL-hold tick locks.

Acquire is ``SET key token NX PX ttl``; release and renew are compare-and-act
scripts (``lua/lock_release.lua``, ``lua/lock_renew.lua``), so a holder whose
lease ran out can neither delete nor extend the next holder's lock.

Two kinds of lock use them:

- A :class:`Lease` is held while one invocation decides about a thing: a job
  (:class:`JobLocks`, ``cordum:scheduler:job:<id>``) or a workflow run (the workflow
  store's run lock). :meth:`LockScripts.acquire` is the one way to take one: it polls
  a busy key until its wait ends, and hands over a lease that renews itself in the
  background and is released on exit. A lock may be taken by a script that also
  reads what the holder needs, in the same round trip (an :data:`Attempt`).
- :class:`TtlHoldLock` is taken by a periodic tick and never released: its
  TTL is the window in which no other replica runs the same tick.

Deadlines are ``time.monotonic()`` instants.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from cordum.store.errors import LockBusy, LockUnavailable, StoreError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

log = logging.getLogger(__name__)

_LUA = Path(__file__).parent / "lua"

JOB_LOCK_PREFIX = "cordum:scheduler:job:"

T = TypeVar("T")


def job_lock_key(job_id: str) -> str:
    return JOB_LOCK_PREFIX + job_id


@dataclass(frozen=True, slots=True)
class LockPolicy:
    """How a lock is taken, kept and given up. Defaults are Cordum's for a job's lock."""

    ttl_s: float = 60.0
    """Time to live of the lock key; what a crashed holder blocks the job for."""
    renew_every_s: float = 20.0
    """Interval of the background renewal (a third of the TTL, so two renewals may fail
    before the key can expire)."""
    max_renewal_failures: int = 3
    """Consecutive failed renewals after which the lease is abandoned: by then the last
    successful renewal has run out and another holder may own the key."""
    acquire_poll_s: float = 0.025
    """Pause between two SET NX attempts while the lock is held elsewhere."""
    acquire_timeout_s: float = 2.0
    """Longest wait for a busy lock (Cordum's store op timeout); a caller's deadline
    shortens it."""
    busy_retry_s: float = 0.5
    """``RetryAfter`` delay when the lock stayed busy."""
    error_retry_s: float = 1.0
    """``RetryAfter`` delay when Redis failed during acquire."""
    op_timeout_s: float = 2.0
    """Bound of one Redis call made for the lock (acquire attempt, renewal)."""

    def __post_init__(self) -> None:
        if self.ttl_s <= 0 or self.renew_every_s <= 0 or self.acquire_poll_s <= 0:
            raise ValueError("lock ttl, renewal interval and poll interval must be > 0")
        if self.renew_every_s >= self.ttl_s:
            raise ValueError("renew_every_s must be shorter than ttl_s")
        if self.max_renewal_failures < 1:
            raise ValueError("max_renewal_failures must be >= 1")


class RedisLockClientProtocol(Protocol):
    """The part of ``redis.asyncio.Redis`` the locks use."""

    def register_script(self, script: str) -> Any: ...


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _new_token() -> str:
    return str(uuid.uuid4())


Attempt = Callable[[str], Awaitable[tuple[bool, Any]]]
"""One try at a lock under a token: ``(True, what it read with the key)`` when the key
is now the token's, ``(False, None)`` while another holder has it. It bounds its own
Redis call and raises :class:`StoreError` when Redis fails; anything else it raises
ends the acquire as it is (the workflow store's "no such run", for one)."""


class LockScripts:
    """Acquire, renew and release on one Redis client; the scripts are registered once."""

    def __init__(self, redis: RedisLockClientProtocol) -> None:
        self._release = redis.register_script((_LUA / "lock_release.lua").read_text())
        self._renew = redis.register_script((_LUA / "lock_renew.lua").read_text())
        self._acquire = redis.register_script((_LUA / "lock_acquire.lua").read_text())
        self._acquire_read = redis.register_script(
            (_LUA / "lock_acquire_read.lua").read_text())

    async def try_acquire(self, key: str, token: str, ttl_s: float) -> bool:
        """``SET key token NX PX ttl``, as a script that also takes the key its own
        earlier send set (a resend after a late answer: ``lua/lock_acquire.lua``)."""
        return bool(await self._acquire(keys=[key], args=[token, _ms(ttl_s)]))

    async def try_acquire_read(self, key: str, token: str, ttl_s: float,
                               read: str) -> dict[str, str] | None:
        """Acquire and HGETALL ``read`` in one round trip; None when the lock is busy.
        The hash comes back as one JSON text: a reply of two elements per field costs
        the client more to parse than ``json.loads`` does."""
        reply = await self._acquire_read(keys=[key, read], args=[token, _ms(ttl_s)])
        if not reply:
            return None
        return {str(k): str(v) for k, v in json.loads(reply).items()}

    async def renew(self, key: str, token: str, ttl_s: float) -> bool:
        return bool(await self._renew(keys=[key], args=[token, _ms(ttl_s)]))

    async def release(self, key: str, token: str, also_delete: Sequence[str] = ()) -> bool:
        return bool(await self._release(keys=[key, *also_delete], args=[token]))

    def set_nx(self, key: str, policy: LockPolicy) -> Attempt:
        """The plain attempt: ``SET key token NX PX ttl``; it reads nothing."""
        async def attempt(token: str) -> tuple[bool, Any]:
            return await _bounded(self.try_acquire(key, token, policy.ttl_s), policy), None
        return attempt

    def set_nx_read(self, key: str, policy: LockPolicy, read: str) -> Attempt:
        """The attempt that also reads the hash ``read`` (a job's meta) when it takes
        the key (``lua/lock_acquire_read.lua``)."""
        async def attempt(token: str) -> tuple[bool, Any]:
            data = await _bounded(self.try_acquire_read(key, token, policy.ttl_s, read),
                                  policy)
            return data is not None, data
        return attempt

    async def acquire(self, key: str, policy: LockPolicy, *, wait_s: float,
                      deadline: float | None = None, attempt: Attempt | None = None) -> Lease:
        """Take ``key`` and hold it as a renewing :class:`Lease`, waiting while it is busy.

        The wait ends after ``wait_s`` or at ``deadline``, whichever comes first (at
        least one attempt is made: 0 is one attempt), with :class:`LockBusy` (a
        ``RetryAfter`` of ``busy_retry_s``). A Redis failure raises
        :class:`LockUnavailable` (``error_retry_s``); both name the key. ``attempt``
        is the try to take the key with (:meth:`set_nx` by default); what it read is
        the lease's ``data``.
        """
        attempt = attempt or self.set_nx(key, policy)
        token = _new_token()
        give_up = time.monotonic() + wait_s
        if deadline is not None:
            give_up = min(give_up, deadline)
        while True:
            try:
                taken, data = await attempt(token)
            except StoreError as exc:
                # A SET that timed out may still have landed: the key then blocks
                # until its TTL runs out, and the retry finds it busy until then.
                raise LockUnavailable(key, exc, policy.error_retry_s) from exc
            if taken:
                lease = Lease(self, key, token, policy)
                lease.data = data
                lease._start_renewing()
                return lease
            if time.monotonic() + policy.acquire_poll_s > give_up:
                raise LockBusy(key, policy.busy_retry_s)
            await asyncio.sleep(policy.acquire_poll_s)


async def _bounded(call: Awaitable[T], policy: LockPolicy) -> T:
    """One Redis call of an attempt, bounded by ``op_timeout_s``; any failure (a
    connection, the timeout, a script error) is a :class:`StoreError`."""
    try:
        return await asyncio.wait_for(call, policy.op_timeout_s)
    except Exception as exc:
        raise StoreError(str(exc) or type(exc).__name__) from exc


class Lease:
    """A held lock (a job's, a run's). Check :attr:`lost` before writing as its owner.

    The renewal runs on its own task while the lease is held::

        t=0    SET NX PX 60s               key lives until 60
        t=20   renew: PEXPIRE 60s          key lives until 80
        t=40   renew fails (Redis error)   key still lives until 80
        t=60   renew fails                 key still lives until 80
        t=80   renew fails: 3rd in a row -> abandoned; the key runs out now,
               so from here another holder may take it

    An answer "not owned" (the key is gone or holds another token) means another
    holder may be in already: the lease is lost at once, without waiting for
    more failures. A lost lease is not released; its key is left to its TTL.
    """

    def __init__(self, scripts: LockScripts, key: str, token: str, policy: LockPolicy) -> None:
        self.key = key
        self.token = token
        self.fence = asyncio.Event()
        """Set when the lease is lost; a holder may await it to stop early."""
        self.data: Any = None
        """What the acquire read together with the key (a job's meta with
        ``JobLocks.acquire(read=...)``, a run with the workflow store's), else None."""
        self.lost_reason = ""
        self._scripts = scripts
        self._policy = policy
        self._renewer: asyncio.Task[None] | None = None
        self._released = False
        self.release_also: list[str] = []
        """Keys the holder is done with, deleted by the release in the same round trip,
        and only while the lock is still this lease's."""

    @property
    def lost(self) -> bool:
        return self.fence.is_set()

    def _start_renewing(self) -> None:
        self._renewer = asyncio.get_running_loop().create_task(
            self._renew_loop(), name=f"renew {self.key}")

    def _lose(self, reason: str) -> None:
        self.lost_reason = reason
        self.fence.set()
        log.error("lock %s abandoned: %s", self.key, reason)

    async def _renew_loop(self) -> None:
        policy = self._policy
        failures = 0
        while True:
            await asyncio.sleep(policy.renew_every_s)
            try:
                owned = await asyncio.wait_for(
                    self._scripts.renew(self.key, self.token, policy.ttl_s), policy.op_timeout_s)
            except Exception as exc:  # connection, timeout, script error: maybe still ours
                failures += 1
                log.warning("renewing lock %s failed (%d/%d): %s", self.key, failures,
                            policy.max_renewal_failures, exc)
                if failures >= policy.max_renewal_failures:
                    self._lose(f"{failures} renewals failed in a row, last: {exc}")
                    return
                continue
            if not owned:
                self._lose("lock no longer held (expired or taken over)")
                return
            failures = 0

    async def _stop_renewing(self) -> None:
        task, self._renewer = self._renewer, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def release_with(self, write: Callable[[str, str], Awaitable[tuple[T, bool]]]) -> T:
        """The holder's last write and the release in one round trip.

        ``write(key, token)`` makes the write and deletes ``key`` only while it holds
        ``token`` (a script ending with ``lock_release.lua``'s compare-and-delete), and
        answers (its result, whether it deleted the key). Renewal stops first: one
        landing after the delete would find the key gone and call the lease lost. When
        ``write`` raises, the lease stays unreleased and :meth:`release` (the exit of
        ``job_lock``) tries again. The caller checks :attr:`lost` first: a lost lease
        is left to its TTL, as :meth:`release` leaves it."""
        await self._stop_renewing()
        result, deleted = await write(self.key, self.token)
        self._released = True
        if not deleted:
            log.warning("lock %s was no longer held at release", self.key)
        return result

    async def release(self) -> bool:
        """Stop renewing and delete the key if it is still ours; True when deleted.

        A lost lease is left alone. A failed release is logged, not raised: the
        holder's work is done either way and the TTL frees the key.
        """
        await self._stop_renewing()
        if self._released or self.lost:
            return False
        self._released = True
        try:
            deleted = await asyncio.wait_for(
                self._scripts.release(self.key, self.token, self.release_also),
                self._policy.op_timeout_s)
        except Exception as exc:
            log.warning("releasing lock %s failed (it expires by itself): %s", self.key, exc)
            return False
        if not deleted:
            log.warning("lock %s was no longer held at release", self.key)
        return deleted


class JobLocks:
    """Per-job locks ``cordum:scheduler:job:<id>`` (Cordum's withJobLock)."""

    def __init__(self, redis: RedisLockClientProtocol, policy: LockPolicy | None = None) -> None:
        self._scripts = LockScripts(redis)
        self.policy = policy or LockPolicy()

    async def acquire(self, job_id: str, *, deadline: float | None = None,
                      read: str | None = None) -> Lease:
        """Take the job's lock (:meth:`LockScripts.acquire`), waiting while it is busy.

        The wait ends after ``acquire_timeout_s`` or at ``deadline``, whichever comes
        first. With ``read``, that hash (the job's meta) is read by the same script as
        the acquire and handed over as ``lease.data``.
        """
        key, policy = job_lock_key(job_id), self.policy
        attempt = None if read is None else self._scripts.set_nx_read(key, policy, read)
        return await self._scripts.acquire(key, policy, wait_s=policy.acquire_timeout_s,
                                           deadline=deadline, attempt=attempt)

    @contextlib.asynccontextmanager
    async def job_lock(self, job_id: str, *, deadline: float | None = None,
                       read: str | None = None) -> AsyncIterator[Lease]:
        """``async with locks.job_lock(job_id, deadline=d) as lease:`` holds the job's lock
        for the block, renewing it, and releases it on exit unless it was lost."""
        lease = await self.acquire(job_id, deadline=deadline, read=read)
        try:
            yield lease
        finally:
            await lease.release()


class TtlHoldLock:
    """A lock taken per tick window and never released.

    Whoever sets the key first runs the periodic work; everybody else skips
    until the TTL lapses, so one replica ticks per window even when a schedule
    delivers twice. Renewal is compare-and-PEXPIRE, so a holder can both extend
    its window and learn whether it still has it.
    """

    def __init__(self, redis: RedisLockClientProtocol, key: str, ttl_s: float) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be > 0")
        self._scripts = LockScripts(redis)
        self.key = key
        self.ttl_s = ttl_s

    async def try_acquire(self, ttl_s: float | None = None) -> str | None:
        """The token when the key was free, None when another holder has it."""
        token = _new_token()
        try:
            got = await self._scripts.try_acquire(self.key, token, ttl_s or self.ttl_s)
        except Exception as exc:
            raise StoreError(f"lock {self.key}: {exc}") from exc
        return token if got else None

    async def renew(self, token: str, ttl_s: float | None = None) -> bool:
        """Set the key to live ``ttl_s`` from now if it is still ours; False when it is not."""
        try:
            return await self._scripts.renew(self.key, token, ttl_s or self.ttl_s)
        except Exception as exc:
            raise StoreError(f"lock {self.key}: {exc}") from exc
