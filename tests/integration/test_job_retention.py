"""How long a job stays in Redis: an open job META_TTL_S from its last write, a
terminal one the configured retention (CORDUM_JOB_RETENTION_S or Cordum's
JOB_META_TTL / JOB_META_TTL_SECONDS); and the runtime's bounded Redis pool."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from cordum import runtime
from cordum.config import DEFAULT_JOB_RETENTION_S, ConfigError, load_settings
from cordum.store.jobs import META_TTL_S, JobState, JobStore, NewJob
from tests.conftest import REDIS_URL

RETENTION_S = 2 * 3600


@pytest.fixture
def env(unique):
    loop = asyncio.new_event_loop()
    client = aioredis.Redis.from_url(REDIS_URL)
    store = JobStore(client, retention_s=RETENTION_S)
    job = NewJob(job_id=f"job-{unique}", trace_id=f"tr-{unique}", tenant=f"t-{unique}",
                 topic="job.default", context="{}", request='{"topic":"job.default"}', meta={})
    yield loop, client, store, job
    keys = loop.run_until_complete(client.keys(f"*{unique}*"))
    if keys:
        loop.run_until_complete(client.delete(*keys))
    for state in JobState:
        loop.run_until_complete(client.zrem(f"job:index:{state.lower()}", job.job_id))
    loop.run_until_complete(client.zrem("job:recent", job.job_id))
    loop.run_until_complete(client.aclose())
    loop.close()


def _ttls(loop, client, job_id: str) -> dict[str, int]:
    keys = (f"job:meta:{job_id}", f"job:events:{job_id}", f"job:req:{job_id}")
    return {k.split(":")[1]: loop.run_until_complete(client.ttl(k)) for k in keys}


def test_open_job_keeps_the_meta_ttl(env) -> None:
    loop, client, store, job = env
    loop.run_until_complete(store.create(job))
    loop.run_until_complete(store.transition(job.job_id, [JobState.SCHEDULED, JobState.DISPATCHED]))
    # Then a job still running lives META_TTL_S (7 days), not the shorter retention
    assert all(RETENTION_S < ttl <= META_TTL_S for ttl in _ttls(loop, client, job.job_id).values())


def test_terminal_job_lives_the_retention(env) -> None:
    loop, client, store, job = env
    loop.run_until_complete(store.create(job))
    loop.run_until_complete(store.transition(
        job.job_id, [JobState.SCHEDULED, JobState.DISPATCHED, JobState.SUCCEEDED],
        records={f"res:{job.job_id}": ("{}", 60)}))
    # Then meta, event log and stored request all expire after the retention
    ttls = _ttls(loop, client, job.job_id)
    assert all(RETENTION_S - 5 < ttl <= RETENTION_S for ttl in ttls.values()), ttls
    # And the side record written with the move is still the one asked for
    assert 0 < loop.run_until_complete(client.ttl(f"res:{job.job_id}")) <= 60
    # And the terminal index holds the job, expiring with the retention
    assert loop.run_until_complete(client.zscore("job:index:succeeded", job.job_id)) is not None
    tenant_index = f"job:tenant:index:{job.tenant}:succeeded"
    assert 0 < loop.run_until_complete(client.ttl(tenant_index)) <= RETENTION_S


def test_retention_is_read_from_the_settings(monkeypatch) -> None:
    from cordum import config

    monkeypatch.setenv("CORDUM_JOB_RETENTION_S", "7200")
    config.settings.cache_clear()
    try:
        assert JobStore(aioredis.Redis.from_url(REDIS_URL)).retention_s == 7200
    finally:
        config.settings.cache_clear()


@pytest.mark.parametrize(
    ("env", "seconds"),
    [
        ({}, DEFAULT_JOB_RETENTION_S),
        ({"JOB_META_TTL_SECONDS": "7200"}, 7200),
        ({"JOB_META_TTL": "72h"}, 72 * 3600),
        ({"JOB_META_TTL": "1h30m"}, 5400),
        ({"JOB_META_TTL": "86400"}, 86400),
        ({"CORDUM_JOB_RETENTION_S": "3600", "JOB_META_TTL": "72h"}, 3600),
    ],
)
def test_retention_settings_and_cordum_aliases(env: dict[str, str], seconds: int) -> None:
    assert load_settings(env=env).job_retention_s == seconds


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CORDUM_JOB_RETENTION_S": "60"}, "CORDUM_JOB_RETENTION_S: .*3600"),
        ({"JOB_META_TTL": "3d"}, "JOB_META_TTL: not a duration"),
        ({"JOB_META_TTL_SECONDS": "10"}, "JOB_META_TTL_SECONDS: .*3600"),
    ],
)
def test_bad_retention_names_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(env=env)


# --- the runtime's pool ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"AWS_LAMBDA_FUNCTION_NAME": "cordum-gateway"}, runtime.FUNCTION_MAX_CONNECTIONS),
        ({}, runtime.SERVICE_MAX_CONNECTIONS),
        ({"CORDUM_REDIS_MAX_CONNECTIONS": "3"}, 3),
    ],
)
def test_pool_is_bounded_per_process_kind(monkeypatch, env: dict[str, str], expected: int
                                          ) -> None:
    for key in ("AWS_LAMBDA_FUNCTION_NAME", "CORDUM_REDIS_MAX_CONNECTIONS"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    runtime.reset()
    try:
        client = runtime.redis_client(load_settings(env={"REDIS_URL": REDIS_URL, **env}))
        pool = client.connection_pool
        assert isinstance(pool, aioredis.BlockingConnectionPool)
        assert pool.max_connections == expected
        assert pool.connection_kwargs["health_check_interval"] == runtime.HEALTH_CHECK_INTERVAL_S
    finally:
        runtime.reset()


def test_a_full_pool_waits_instead_of_opening_more(aloop, monkeypatch) -> None:
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    runtime.reset()
    cfg = load_settings(env={"REDIS_URL": REDIS_URL, "CORDUM_REDIS_MAX_CONNECTIONS": "2"})
    try:
        client = runtime.redis_client(cfg)

        async def burst() -> list[object]:
            return list(await asyncio.gather(*(client.ping() for _ in range(20))))

        # When 20 commands are sent at once, then all succeed over at most 2 connections
        assert aloop.run_until_complete(burst()) == [True] * 20
        pool = client.connection_pool
        assert len(pool._available_connections) + len(pool._in_use_connections) <= 2
        aloop.run_until_complete(client.aclose())
    finally:
        runtime.reset()


def test_a_user_secret_gives_username_and_password() -> None:
    cfg = load_settings(env={"REDIS_URL": "rediss://cache.example:6379",
                             "REDIS_AUTH_TOKEN": '{"username":"cordum-bridge","password":"p" }'})
    assert runtime.redis_credentials(cfg) == runtime.RedisCredentials("cordum-bridge", "p")
    # And REDIS_USERNAME wins over the secret's username; a plain token has no user
    named = cfg.model_copy(update={"redis_username": "other"})
    assert runtime.redis_credentials(named).username == "other"
    plain = load_settings(env={"REDIS_URL": "rediss://cache.example:6379",
                               "REDIS_AUTH_TOKEN": "x" * 32})
    assert runtime.redis_credentials(plain) == runtime.RedisCredentials(None, "x" * 32)
