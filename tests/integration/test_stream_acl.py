"""cordum-stream logged in to Redis as its ACL user (cordum.redis_acl.STREAM), as on
ElastiCache: every command the service sends (its two scripts, its reads of job keys,
the job detail's reads) must be allowed, and nothing else.

``NEEDED_RULES`` are the rules the service works with. The shipped user lacks
``+evalsha +script|load`` (the log's append and replay are scripts, one round trip and
atomic: the id before each event is read with the append), ``+set`` / ``+time`` inside
them (the once-per-bus-message mark, MINID by the server's clock) and the key pattern
of those marks: ``test_the_shipped_stream_user_runs_the_service`` fails until
cordum.redis_acl.STREAM carries them (an expected failure, reported as XPASS then).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio as aioredis

from cordum import redis_acl
from cordum.redis_acl import AclUser, setuser_args
from cordum.store.jobs import meta_key
from cordum.stream import events as ev
from cordum.stream.eventlog import EventLog, log_key, seen_key
from cordum.stream.events import Event
from cordum.stream.job_view import job_view
from cordum.stream.jobmeta import JobMeta
from tests.conftest import ACL_REDIS_URL
from tests.helpers import run

NEEDED_RULES = redis_acl.STREAM.rules
"""Its scripts by EVALSHA (loaded by SCRIPT LOAD when Redis lacks them: redis-py's way),
not any of @scripting: no SCRIPT FLUSH or KILL, no EVAL of a script of one's own."""


@pytest.fixture
def admin() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(ACL_REDIS_URL)
    yield client
    client.close()


def as_user(admin: redis.Redis, rules: str) -> tuple[str, str]:
    name, password = f"test-cordum-stream-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    admin.execute_command("ACL", "SETUSER", *setuser_args(AclUser(name, rules), password))
    return name, password


def exercise(admin: redis.Redis, rules: str, unique: str) -> None:
    """Everything cordum-stream does in Redis, as a user with ``rules`` (db 0: an ACL
    user may not SELECT; only keys named after this test are touched)."""
    tenant, job = f"acl-{unique}", f"acl-job-{unique}"
    admin.hset(meta_key(job), mapping={"tenant": tenant, "state": "SUCCEEDED",
                                       "result_ptr": f"redis://res:{job}"})
    admin.set(f"res:{job}", '{"ok": true}')
    name, password = as_user(admin, rules)

    async def scenario() -> None:
        client = aioredis.from_url(ACL_REDIS_URL, username=name, password=password)
        try:
            log = EventLog(client, max_events=100, max_age_s=60)
            first = await log.append(Event(ev.JOB_RESULT, {}, tenant, job_id=job),
                                     seen_key("sys.job.result", unique.encode()))
            assert first is not None
            assert await log.append(Event(ev.JOB_RESULT, {}, tenant, job_id=job),
                                    seen_key("sys.job.result", unique.encode())) is None
            assert await log.last_id(tenant) == first.id
            assert (await log.replay(tenant, "0-0", 10)).events[0].id == first.id
            assert await log.between(tenant, "0-0", first.id) == []
            meta = JobMeta(client, output_policy=False)
            assert (await meta.fields(job))["tenant"] == tenant
            assert (await meta.settled(job, 0.0))[1]
            view, ended = await job_view(client, job, output_policy=False)
            assert ended and view["result"] == {"ok": True}
            with pytest.raises(redis.exceptions.NoPermissionError):
                await client.hset(meta_key(job), "state", "FAILED")
        finally:
            await client.aclose()

    try:
        run(scenario())
    finally:
        admin.execute_command("ACL", "DELUSER", name)
        admin.delete(meta_key(job), f"res:{job}", log_key(tenant),
                     seen_key("sys.job.result", unique.encode()))


def test_the_stream_runs_as_a_user_with_the_rules_it_needs(admin, unique) -> None:
    exercise(admin, NEEDED_RULES, unique)


def test_the_shipped_stream_user_runs_the_service(admin, unique) -> None:
    exercise(admin, redis_acl.STREAM.rules, unique)


def test_the_needed_rules_write_nothing_else(admin, unique) -> None:
    name, password = as_user(admin, NEEDED_RULES)
    client = redis.Redis.from_url(ACL_REDIS_URL, username=name, password=password)
    try:
        for command in (("SET", f"job:meta:acl-{unique}", "x"), ("DEL", f"res:acl-{unique}"),
                        ("KEYS", "*"), ("FLUSHALL",), ("SCRIPT", "FLUSH"),
                        ("EVAL", "return redis.call('SET', KEYS[1], '1')", "1",
                         f"job:meta:acl-{unique}")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.execute_command(*command)
    finally:
        client.close()
        admin.execute_command("ACL", "DELUSER", name)


