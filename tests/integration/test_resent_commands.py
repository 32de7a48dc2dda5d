"""A write the Redis client sends again after a timeout answers as its first send did.

The functions' Redis client sends a command again when its answer does not come in
time (runtime.REDIS_RETRY): a Redis that stalls (a pause, a failover) runs the first
send when it resumes, and then the second. Before, the second found its own first
send's work and took it for another caller's: a state move answered "skip" (the
submit function took its own dispatch for another's and never published the job,
which stayed DISPATCHED until the reconciler timed it out), a lock answered "held"
(the registry snapshot's writer skipped its writes until the lock's TTL ran out, a
job's or a run's lock looked busy to its own holder), and a create answered "exists".
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError, TimeoutError

from cordum.runtime import REDIS_RETRY
from cordum.store.jobs import JobState, JobStore, NewJob
from tests.integration.test_redis_failover import REDIS_SERVER, RedisNode

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="needs the redis-server binary")

SOCKET_TIMEOUT_S = 0.4
STALL_S = 1.0
"""Longer than the first send's wait, shorter than the client's retries together."""


def job(job_id: str) -> NewJob:
    return NewJob(job_id=job_id, trace_id=job_id, tenant="t", topic="job.echo", context="{}",
                  request="{}", meta={})


def client(port: int) -> aioredis.Redis:
    """As runtime.redis_client builds it, with a short socket timeout."""
    return aioredis.Redis(port=port, socket_timeout=SOCKET_TIMEOUT_S, retry=Retry(
        ExponentialWithJitterBackoff(base=REDIS_RETRY.backoff_base_s,
                                     cap=REDIS_RETRY.backoff_cap_s),
        REDIS_RETRY.retries, supported_errors=(ConnectionError, TimeoutError)))


@pytest.fixture
def node(tmp_path: Path):
    n = RedisNode(tmp_path / "redis")
    n.wait_ready()
    yield n
    os.kill(n.process.pid, signal.SIGCONT)
    n.process.kill()
    n.process.wait()


def test_a_move_sent_again_after_a_stall_is_applied_once_and_answered_ok(node) -> None:
    async def go() -> tuple[bool, str, dict[str, str], int]:
        redis = client(node.port)
        store = JobStore(redis)
        job_id = f"job-{uuid.uuid4().hex[:8]}"
        try:
            await store.create(job(job_id))
            await store.transition(job_id, [JobState.SCHEDULED], only_from=("PENDING",))
            os.kill(node.process.pid, signal.SIGSTOP)  # the move waits in Redis' socket
            loop = asyncio.get_running_loop()
            loop.call_later(STALL_S, os.kill, node.process.pid, signal.SIGCONT)
            moved = await store.transition(job_id, [JobState.DISPATCHED],
                                           only_from=("SCHEDULED",), fields={"worker_id": "w1"})
            meta = await store.get(job_id)
            events = await redis.llen(f"job:events:{job_id}")
            return moved.applied, moved.previous, meta, events
        finally:
            await redis.aclose()

    applied, previous, meta, events = asyncio.run(go())
    assert (applied, previous) == (True, "SCHEDULED")
    assert (meta["state"], meta["worker_id"]) == ("DISPATCHED", "w1")
    assert events == 3  # PENDING, SCHEDULED, DISPATCHED: the move made once


def test_a_repeated_call_is_answered_as_its_first_and_another_is_not(node) -> None:
    """The same call twice (the client's resend) is "ok" twice, with the same previous
    state and the move made once; another call for the same move is a "skip"."""

    async def go() -> list[tuple[bool, str]]:
        redis = client(node.port)
        store = JobStore(redis)
        job_id = f"job-{uuid.uuid4().hex[:8]}"
        try:
            await store.create(job(job_id))
            script = store._transition  # the same arguments twice, as a resend sends them
            keys = [f"job:meta:{job_id}", f"job:events:{job_id}", "job:recent", "job:deadline",
                    f"dlq:entry:{job_id}", "dlq:index", f"job:req:{job_id}"]
            now = 1_800_000_000_000_000
            args = [job_id, now, 3600, "SCHEDULED,DISPATCHED", "PENDING", "", 60, "", 0, "", 0,
                    "worker_id", "w1"]
            first = await script(keys=keys, args=args)
            again = await script(keys=keys, args=args)
            other = await script(keys=keys, args=[job_id, now + 1, *args[2:]])
            events = await redis.llen(f"job:events:{job_id}")
            assert events == 3
            return [(s.decode(), p.decode()) for s, p, _ in (first, again, other)]
        finally:
            await redis.aclose()

    assert asyncio.run(go()) == [("ok", "PENDING"), ("ok", "PENDING"), ("skip", "DISPATCHED")]


def stalled(node: RedisNode, call, before=None) -> object:  # type: ignore[no-untyped-def]
    """``call(redis)`` sent to a Redis stalled for STALL_S, on the retrying client
    (``before(redis)`` first, unstalled: a script's first call loads it, and a stalled
    Redis answers a script it does not hold with NOSCRIPT, running nothing)."""
    async def go() -> object:
        redis = client(node.port)
        try:
            await redis.ping()
            if before is not None:
                await before(redis)
            os.kill(node.process.pid, signal.SIGSTOP)
            asyncio.get_running_loop().call_later(STALL_S, os.kill, node.process.pid,
                                                  signal.SIGCONT)
            return await call(redis)
        finally:
            await redis.aclose()

    return asyncio.run(go())


def test_a_lock_taken_by_a_send_run_twice_is_the_caller_s(node) -> None:
    """Before, the second send found the key its first had set and answered "held by
    another": the snapshot writer skipped its writes until the lock's TTL ran out (the
    registry snapshot went stale, and with it the reconciler's lost-dispatch check),
    and a job's lock looked busy to its own holder."""
    from cordum.store.locks import LockScripts

    key = f"lock-{uuid.uuid4().hex[:8]}"
    locks: list[LockScripts] = []

    async def warm(redis: aioredis.Redis) -> None:  # both scripts loaded
        locks[:] = [LockScripts(redis)]
        await locks[0].try_acquire(f"{key}-warm", "tok-0", 30)
        await locks[0].try_acquire_read(f"{key}-warm-job", "tok-0", 30, f"job:meta:{key}")

    assert stalled(node, lambda r: locks[0].try_acquire(key, "tok-1", 30), warm) is True
    got = stalled(node, lambda r: locks[0].try_acquire_read(
        f"{key}-job", "tok-2", 30, f"job:meta:{key}"), warm)
    assert got == {}

    async def others(redis: aioredis.Redis) -> tuple[bool, object]:
        locks = LockScripts(redis)
        return (await locks.try_acquire(key, "tok-3", 30),
                await locks.try_acquire_read(f"{key}-job", "tok-4", 30, f"job:meta:{key}"))

    assert stalled(node, others, warm) == (False, None)  # another token waits its turn


def test_a_run_lock_taken_by_a_send_run_twice_is_the_caller_s(node) -> None:
    script_text = (Path(__file__).resolve().parents[2] / "shared" / "cordum" / "workflow" /
                   "lua" / "read_run.lua").read_text()

    async def go() -> list[str]:
        redis = client(node.port)
        run_id = f"run-{uuid.uuid4().hex[:8]}"
        keys = [f"wf:run:{run_id}", "cordum:wf:delay:timers", f"wf:run:def:{run_id}",
                f"wf:run:outbox:{run_id}", f"cordum:wf:run:lock:{run_id}"]
        try:
            await redis.set(keys[0], '{"workflow_id": "wf"}')
            read = redis.register_script(script_text)
            got = []
            for token in ("tok-1", "tok-1", "tok-2"):  # a resend, then another caller
                reply = await read(keys=keys, args=[run_id, "", token, 30000])
                got.append(reply[0].decode())
            return got
        finally:
            await redis.aclose()

    assert asyncio.run(go()) == ["ok", "ok", "busy"]


def test_a_job_created_by_a_send_run_twice_is_the_caller_s(node) -> None:
    """Before, the resend found the job and answered "exists": the DLQ retry route
    answered 409 for a retry job it had made (left unannounced)."""
    job_id = f"job-{uuid.uuid4().hex[:8]}"
    store: list[JobStore] = []

    async def warm(redis: aioredis.Redis) -> None:
        store.append(JobStore(redis))
        await store[0].create(job(f"{job_id}-warm"))

    assert stalled(node, lambda r: store[0].create(job(job_id)), warm) is True

    async def again(redis: aioredis.Redis) -> tuple[bool, int]:
        created = await JobStore(redis).create(job(job_id))  # another call: a new "now"
        return created, await redis.llen(f"job:events:{job_id}")

    assert stalled(node, again) == (False, 1)
