"""Redis ACL users (cordum.redis_acl) on the real local Redis, and the runtime's client
connecting as one: a worker reads contexts and writes results, nothing else.

Each test creates a throwaway user with the rules under test and deletes it after;
the ``default`` user is never touched. The users may not SELECT (ElastiCache has db 0
only), so these tests run on db 0 (``ACL_REDIS_URL``), on keys named after themselves.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio as aioredis

from cordum import runtime
from cordum.config import load_settings
from cordum.redis_acl import (
    BRIDGE,
    FUNCTIONS,
    KERNEL,
    STREAM,
    USERS,
    WORKERS,
    AclUser,
    setuser_args,
)
from cordum.safety.bundles import POLICY_DOC_KEY
from tests.conftest import ACL_REDIS_URL


@pytest.fixture
def admin() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(ACL_REDIS_URL)
    yield client
    client.close()


def _throwaway(admin: redis.Redis, user: AclUser) -> Iterator[tuple[str, str]]:
    name = f"test-{user.name}-{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    admin.execute_command("ACL", "SETUSER", *setuser_args(AclUser(name, user.rules), password))
    try:
        yield name, password
    finally:
        admin.execute_command("ACL", "DELUSER", name)


@pytest.fixture
def worker(admin: redis.Redis, unique: str) -> Iterator[tuple[redis.Redis, str]]:
    """A client connected as a throwaway user with the workers' rules, and a job id."""
    for name, password in _throwaway(admin, WORKERS):
        client = redis.Redis.from_url(ACL_REDIS_URL, username=name, password=password)
        yield client, f"acl-{unique}"
        client.close()
        admin.delete(f"ctx:acl-{unique}", f"res:acl-{unique}", f"job:meta:acl-{unique}")


def test_worker_reads_its_context_and_writes_its_result(admin, worker) -> None:
    client, job_id = worker
    admin.set(f"ctx:{job_id}", '{"prompt":"hi"}', ex=60)
    # When the worker does what a worker does: GET ctx:<id>, SET res:<id> EX
    assert client.get(f"ctx:{job_id}") == b'{"prompt":"hi"}'
    assert client.set(f"res:{job_id}", '{"echo":"hi"}', ex=60) is True
    # Then the result is there for the control plane
    assert admin.get(f"res:{job_id}") == b'{"echo":"hi"}'


def test_worker_is_refused_the_job_meta(admin, worker) -> None:
    client, job_id = worker
    admin.hset(f"job:meta:{job_id}", mapping={"state": "RUNNING"})
    # When the worker tries to mark its own job done, then Redis answers NOPERM
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.hset(f"job:meta:{job_id}", "state", "SUCCEEDED")
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.set(f"job:meta:{job_id}", "SUCCEEDED")
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.hgetall(f"job:meta:{job_id}")
    # And it may neither overwrite a context nor read another result
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.set(f"ctx:{job_id}", "{}")
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.get(f"res:{job_id}")
    assert admin.hget(f"job:meta:{job_id}", "state") == b"RUNNING"


def test_kernel_is_kept_to_its_velocity_windows(admin) -> None:
    for name, password in _throwaway(admin, KERNEL):
        client = redis.Redis.from_url(ACL_REDIS_URL, username=name, password=password)
        key = f"cordum:safety:velocity:test:{uuid.uuid4().hex}"
        try:
            assert client.zadd(key, {"a": 1}) == 1
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.get("job:meta:any")
        finally:
            client.close()
            admin.delete(key)


def test_kernel_reads_the_policy_bundles_and_cannot_write_them(admin) -> None:
    for name, password in _throwaway(admin, KERNEL):
        client = redis.Redis.from_url(ACL_REDIS_URL, username=name, password=password)
        try:
            # A GET of the document is allowed (it may be absent here: db 0 is shared)
            client.get(POLICY_DOC_KEY)
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.set(POLICY_DOC_KEY, "{}")
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.get("cfg:system:other")
        finally:
            client.close()


def test_stream_reads_job_keys_and_writes_only_its_event_logs(admin, unique) -> None:
    meta, log = f"job:meta:acl-{unique}", f"cordum:stream:acl-{unique}"
    admin.hset(meta, "state", "RUNNING")
    for name, password in _throwaway(admin, STREAM):
        client = redis.Redis.from_url(ACL_REDIS_URL, username=name, password=password)
        try:
            # It reads a job's meta, appends to, trims and expires its event log
            assert client.hget(meta, "state") == b"RUNNING"
            assert client.xadd(log, {"event": "job.running"})
            assert client.xtrim(log, maxlen=100) == 0
            assert client.expire(log, 60) is True
            assert len(client.xrange(log)) == 1
            # And writes nothing else, nor wipes or lists the keyspace
            refused = (("HSET", meta, "state", "SUCCEEDED"), ("XADD", f"{meta}:x", "*", "a", "1"),
                       ("DEL", log), ("KEYS", "*"), ("FLUSHALL",))
            for command in refused:
                with pytest.raises(redis.exceptions.NoPermissionError):
                    client.execute_command(*command)
        finally:
            client.close()
            admin.delete(meta, log)


def test_kernel_user_runs_the_velocity_script_through_redis(admin) -> None:
    """The kernel's windows are shared only while its script runs as its user: a refused
    command would send every replica back to counting on its own."""
    from cordum.safety.velocity import RedisVelocityCounter

    for name, password in _throwaway(admin, KERNEL):
        client = redis.Redis.from_url(ACL_REDIS_URL, username=name, password=password)
        rule = f"acl-{uuid.uuid4().hex[:8]}"
        counter = RedisVelocityCounter(client)
        try:
            assert counter.record(rule, "tenant", "job-1", 60.0) == 1
            assert counter.record(rule, "tenant", "job-2", 60.0) == 2
            assert counter.peek(rule, "tenant", 60.0) == 2
            assert not counter.degraded
        finally:
            client.close()
            admin.delete(counter.key(rule, "tenant"))


def test_control_plane_users_may_not_wipe_or_reconfigure(admin) -> None:
    for user in (FUNCTIONS, BRIDGE):
        for name, password in _throwaway(admin, user):
            client = redis.Redis.from_url(ACL_REDIS_URL, username=name, password=password)
            try:
                assert client.ping()
                for command in (("FLUSHALL",), ("CONFIG", "GET", "maxmemory"), ("KEYS", "*")):
                    with pytest.raises(redis.exceptions.NoPermissionError):
                        client.execute_command(*command)
            finally:
                client.close()
    assert {u.name for u in USERS} == {
        "cordum-functions", "cordum-bridge", "cordum-kernel", "cordum-worker", "cordum-stream"}


def test_runtime_client_connects_as_the_user_in_its_url(admin, unique, aloop) -> None:
    for name, password in _throwaway(admin, WORKERS):
        url = ACL_REDIS_URL.replace("redis://", f"redis://{name}:{password}@", 1)
        cfg = load_settings(env={"REDIS_URL": url})
        runtime.reset()
        try:
            client: aioredis.Redis = runtime.redis_client(cfg)
            # Then it is the worker: its result write works, a meta write is refused
            assert aloop.run_until_complete(client.set(f"res:{unique}", "{}", ex=60))
            with pytest.raises(redis.exceptions.NoPermissionError):
                aloop.run_until_complete(client.hset(f"job:meta:{unique}", "state", "x"))
            aloop.run_until_complete(client.aclose())
        finally:
            runtime.reset()
            admin.delete(f"res:{unique}")


def test_runtime_client_takes_the_username_setting(admin, unique, aloop) -> None:
    for name, password in _throwaway(admin, WORKERS):
        cfg = load_settings(env={"REDIS_URL": ACL_REDIS_URL, "REDIS_USERNAME": name})
        # A plain redis:// URL takes no token setting (TLS only): pass it as the
        # token a unix socket or a rediss:// URL would carry, straight to the pool
        runtime.reset()
        try:
            cfg = cfg.model_copy(update={"redis_auth_token": None})
            client = runtime.redis_client(cfg)
            kwargs = client.connection_pool.connection_kwargs
            assert kwargs["username"] == name
            kwargs["password"] = password
            assert aloop.run_until_complete(client.set(f"res:{unique}", "{}", ex=60))
            with pytest.raises(redis.exceptions.NoPermissionError):
                aloop.run_until_complete(client.hset(f"job:meta:{unique}", "state", "x"))
            aloop.run_until_complete(client.aclose())
        finally:
            runtime.reset()
            admin.delete(f"res:{unique}")
