"""Per-process clients for Lambda handlers and services.

A Python Lambda handler is a plain function, while redis.asyncio and nats-py
are asyncio clients. One event loop lives as long as the container and each
invocation drives it with ``run``, so connections survive warm invocations
(``asyncio.run`` would close the loop and force a reconnect every time).
Lambda freezes the process between invocations: the NATS connection is
checked at the start of each use and rebuilt when it is closed.

Redis on AWS is an ElastiCache replication group: TLS, an AUTH token, and a
primary endpoint whose DNS name moves to the replica on failover. The client
retries a command that met a failover (see :class:`RedisRetryPolicy`) on a
fresh connection, which resolves the endpoint again and reaches the new primary.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import os
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from cordum.config import ConfigError, Settings, settings

if TYPE_CHECKING:
    from collections.abc import Coroutine, Mapping

    import nats.aio.client
    import nats.js
    import redis.asyncio

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_redis: redis.asyncio.Redis | None = None
_nats: nats.aio.client.Client | None = None

invocation_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "invocation_deadline", default=None)
"""When the running invocation ends (``time.monotonic()`` scale); None outside Lambda."""


def lambda_deadline(context: Any) -> float | None:
    """When a Lambda invocation ends (``time.monotonic()`` scale), from its context;
    None for anything that is not a Lambda context."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return None
    return time.monotonic() + remaining() / 1000


def time_left(default: float) -> float:
    """Seconds until the invocation ends, or ``default`` when no deadline is set."""
    deadline = invocation_deadline.get()
    return default if deadline is None else deadline - time.monotonic()


def loop() -> asyncio.AbstractEventLoop:
    global _loop
    if _loop is None or _loop.is_closed():
        _loop = asyncio.new_event_loop()
        asyncio.set_event_loop(_loop)
    return _loop


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Drive ``coro`` on the container's loop."""
    return loop().run_until_complete(coro)


@dataclass(frozen=True, slots=True)
class RedisRetryPolicy:
    """How one Redis command rides out a failover.

    A failover shows up three ways: the old primary drops its connections
    (ConnectionError), stops answering while it is replaced (TimeoutError), or
    stays up demoted to a replica and refuses writes (ReadOnlyError, while a
    pooled connection still points at it: redis/redis-py#1764). On each, the
    connection is closed and the command sent again on a new one, after a
    backoff; every pooled connection recovers on its own first error. Only a
    command that failed ``retries + 1`` times reaches the caller.
    """

    retries: int = 3
    """Attempts after the first (redis-py's default is 10). Kept small: a longer
    outage is better failed fast and retried by the caller's own mechanism
    (SQS redelivery, a 503 the client retries) than waited out in a function
    that has a deadline."""
    backoff_base_s: float = 0.1
    """The pause before retry n is drawn below ``base x 2**n`` (full jitter, so
    containers reconnecting together spread out): up to 0.2, 0.4, 0.8 s."""
    backoff_cap_s: float = 1.0
    """No pause is longer than this."""


REDIS_RETRY = RedisRetryPolicy()

FUNCTION_MAX_CONNECTIONS = 20
"""Redis connections one Lambda container may hold. A container runs one invocation
at a time, and the widest one is an SQS batch: 10 records (queues.BATCH_SIZE) handled
together, each with one command in flight plus its job lock's renewal
(cordum.store.locks). At the account's default 1,000 concurrent executions that is
at most 20,000 connections, under ElastiCache's 65,000 maxclients."""
SERVICE_MAX_CONNECTIONS = 50
"""Redis connections of a long-running process (the bridge, the safety kernel's
velocity windows, a worker): its work is bounded by its own concurrency (NATS
callbacks, the forwarder's batches), well under 50 at once; a burst above waits."""
HEALTH_CHECK_INTERVAL_S = 30
"""A pooled connection idle longer than this is checked with a PING before its next
command: one the cache closed (its idle ``timeout``, 300 s on the stack's
ElastiCache) is replaced before the command rather than failing it."""

_auth_tokens: dict[str, str] = {}
"""Secret ARN -> token, read once per process: a token rotation (ElastiCache's
ROTATE strategy accepts both tokens meanwhile) is picked up by new containers."""


@dataclass(frozen=True, slots=True)
class RedisCredentials:
    username: str | None
    """ACL user; None: the connection's ``default`` user (a plain AUTH token)."""
    password: str | None


def redis_credentials(cfg: Settings | None = None) -> RedisCredentials:
    """Who the process is to Redis: REDIS_USERNAME with REDIS_AUTH_TOKEN, else the
    secret REDIS_AUTH_SECRET_ARN names, which holds a token, or a JSON object
    ``{"username": ..., "password": ...}`` (an ElastiCache user's secret).
    REDIS_USERNAME wins over the secret's username; credentials in REDIS_URL win
    over both (redis-py reads the URL last)."""
    cfg = cfg or settings()
    username = cfg.redis_username
    password = redis_auth_token(cfg)
    login = _json_login(password) if password is not None else None
    if login is not None:
        password = login["password"]
        secret_user = login.get("username")
        username = username or (secret_user if isinstance(secret_user, str) else None)
    return RedisCredentials(username=username, password=password)


def _json_login(secret: str) -> dict[str, Any] | None:
    """A secret's ``{"username": ..., "password": ...}`` object (a password string at
    least), or None when the secret is no such JSON object (a token, ``.creds``)."""
    if not secret.lstrip().startswith("{"):
        return None
    try:
        parsed = json.loads(secret)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) and isinstance(parsed.get("password"), str) \
        else None


def redis_auth_token(cfg: Settings | None = None) -> str | None:
    """The Redis AUTH token: REDIS_AUTH_TOKEN, else the secret REDIS_AUTH_SECRET_ARN
    names (as stored: see :func:`redis_credentials` for a user's JSON secret)."""
    cfg = cfg or settings()
    if cfg.redis_auth_token is not None:
        return cfg.redis_auth_token.get_secret_value()
    arn = cfg.redis_auth_secret_arn
    if arn is None:
        return None
    token = _auth_tokens.get(arn)
    if token is None:
        token = _auth_tokens[arn] = _read_secret(arn)
    return token


def redis_max_connections(cfg: Settings | None = None,
                          env: Mapping[str, str] | None = None) -> int:
    """CORDUM_REDIS_MAX_CONNECTIONS, else the figure for the kind of process: a Lambda
    container (AWS_LAMBDA_FUNCTION_NAME set) or a long-running service."""
    cfg = cfg or settings()
    if cfg.redis_max_connections is not None:
        return cfg.redis_max_connections
    env = os.environ if env is None else env
    if env.get("AWS_LAMBDA_FUNCTION_NAME"):
        return FUNCTION_MAX_CONNECTIONS
    return SERVICE_MAX_CONNECTIONS


def nats_options(cfg: Settings | None = None) -> dict[str, Any]:
    """Connect options every NATS client of ours adds.

    - The credentials, when NATS_CREDS_SECRET_ARN names them (read once per
      process): a ``.creds`` file's text, or JSON ``{"username", "password"}``
      (the stack's own cluster, cordum_infra.nats_cluster).
    - The CA to verify the server against, when NATS_TLS_CA holds one (PEM text
      or a file): only that CA is trusted. Without it a ``tls://`` URL is
      verified against the system trust store.
    """
    cfg = cfg or settings()
    options: dict[str, Any] = {}
    if cfg.nats_tls_ca is not None:
        options["tls"] = nats_tls_context(cfg.nats_tls_ca)
    arn = cfg.nats_creds_secret_arn
    if arn is None:
        return options
    from nats.aio.client import RawCredentials

    creds = _auth_tokens.get(arn)
    if creds is None:
        creds = _auth_tokens[arn] = _read_secret(arn, "NATS_CREDS_SECRET_ARN")
    if creds.lstrip().startswith("{"):
        login = _json_login(creds)
        if login is None or not isinstance(login.get("username"), str):
            raise ConfigError('NATS_CREDS_SECRET_ARN: a JSON secret must hold "username" '
                              'and "password" strings')
        return {**options, "user": login["username"], "password": login["password"]}
    return {**options, "user_credentials": RawCredentials(creds)}


def nats_tls_context(ca: str) -> ssl.SSLContext:
    """A client TLS context that trusts `ca` alone (PEM text, or the path of a PEM file)
    and checks the server's name."""
    text = ca if ca.lstrip().startswith("-----BEGIN ") else _read_pem(ca)
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ConfigError("NATS_TLS_CA: no PEM certificate")
    try:
        return ssl.create_default_context(cadata=text)
    except ssl.SSLError as exc:
        raise ConfigError(f"NATS_TLS_CA: not a usable CA certificate: {exc}") from None


def _read_pem(path: str) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"NATS_TLS_CA: cannot read {path}: {exc}") from None


def _read_secret(arn: str, variable: str = "REDIS_AUTH_SECRET_ARN") -> str:
    # boto3 costs ~300 ms of cold start, paid only by processes that take the
    # token from Secrets Manager (aws.client imports it on first use).
    from cordum import aws

    env = dict(os.environ)
    parts = arn.split(":")
    if len(parts) > 3 and parts[3]:
        env["AWS_REGION"] = parts[3]  # the secret's own region
    try:
        answer = aws.client("secretsmanager", env).get_secret_value(SecretId=arn)
    except Exception as exc:
        response = getattr(exc, "response", None)
        code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
        raise ConfigError(
            f"{variable}: cannot read the secret: {code or type(exc).__name__}"
        ) from None
    token = answer.get("SecretString")
    if not token:
        raise ConfigError(f"{variable}: the secret holds no string")
    return str(token)


def redis_client(cfg: Settings | None = None) -> redis.asyncio.Redis:
    """The process's Redis client (a pool; connections are made lazily).

    With an AUTH token the URL must be ``rediss://`` (checked by Settings), so
    the token only ever travels over TLS. The pool holds at most
    :func:`redis_max_connections`; a command that finds them all busy waits for
    one, up to the store timeout, instead of opening another.
    """
    global _redis
    if _redis is None:
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import ExponentialWithJitterBackoff
        from redis.exceptions import ConnectionError, ReadOnlyError, TimeoutError

        cfg = cfg or settings()
        policy = REDIS_RETRY
        credentials = redis_credentials(cfg)
        auth = {key: value for key, value in (("username", credentials.username),
                                              ("password", credentials.password))
                if value is not None}
        pool = aioredis.BlockingConnectionPool.from_url(
            cfg.redis_url,
            max_connections=redis_max_connections(cfg),
            timeout=cfg.store_timeout_s,
            socket_timeout=cfg.store_timeout_s,
            socket_connect_timeout=cfg.store_timeout_s,
            health_check_interval=HEALTH_CHECK_INTERVAL_S,
            retry=Retry(
                ExponentialWithJitterBackoff(
                    base=policy.backoff_base_s, cap=policy.backoff_cap_s
                ),
                policy.retries,
                supported_errors=(ConnectionError, TimeoutError, ReadOnlyError),
            ),
            **auth,
        )
        _redis = aioredis.Redis.from_pool(pool)
    return _redis


@dataclass(frozen=True, slots=True)
class NatsReconnectPolicy:
    """How a NATS connection rides out a server restart."""

    attempts: int
    """Reconnect attempts before the connection gives up and closes; -1 never gives up."""
    wait_s: float
    """Pause between two attempts."""


FUNCTION_RECONNECT = NatsReconnectPolicy(attempts=2, wait_s=0.2)
"""A function answers within its deadline: a short try, then the caller's retry."""
SERVICE_RECONNECT = NatsReconnectPolicy(attempts=-1, wait_s=1.0)
"""A long-running process (the bridge, a worker) waits for NATS as long as it takes."""


async def connect_nats(cfg: Settings | None = None, *, name: str = "cordum",
                       reconnect: NatsReconnectPolicy = FUNCTION_RECONNECT,
                       ) -> nats.aio.client.Client:
    """A new NATS connection with every option of ours (servers, timeout, credentials).

    Every NATS client of the project connects here; ``nats_client`` caches one
    per function container. A service's first connect, too, retries
    ``reconnect.attempts`` times, so it may wait a long time: bound it by the caller.
    """
    import nats

    cfg = cfg or settings()
    log = logging.getLogger("cordum.nats")

    async def on_error(exc: Exception) -> None:
        log.error("nats %s: %s: %s", name, type(exc).__name__, exc)

    persistent = reconnect.attempts < 0
    return await nats.connect(
        servers=[u.strip() for u in cfg.nats_url.split(",")],
        name=name,
        connect_timeout=cfg.publish_timeout_s,
        allow_reconnect=True,
        max_reconnect_attempts=reconnect.attempts,
        reconnect_time_wait=reconnect.wait_s,
        # A function's errors surface as exceptions in the call; a service logs the
        # ones that happen between calls (a dropped connection, a slow consumer).
        **({"error_cb": on_error} if persistent else {}),
        **nats_options(cfg),
    )


async def nats_client(cfg: Settings | None = None) -> nats.aio.client.Client:
    """A connected NATS client, reconnecting when the previous one was closed."""
    global _nats
    if _nats is not None and _nats.is_connected:
        return _nats
    if _nats is not None and not _nats.is_closed:
        try:
            await _nats.close()
        except Exception:
            pass
    _nats = await connect_nats(cfg)
    return _nats


async def jetstream(cfg: Settings | None = None) -> nats.js.JetStreamContext:
    nc = await nats_client(cfg)
    return nc.jetstream(timeout=(cfg or settings()).publish_timeout_s)


async def aclose() -> None:
    """Close the cached clients (end of a service, or of a test)."""
    global _redis, _nats
    if _nats is not None and not _nats.is_closed:
        try:
            await _nats.close()
        except Exception:
            pass
    if _redis is not None:
        await _redis.aclose()
    _redis = None
    _nats = None


def reset() -> None:
    """Forget the cached clients (tests, and after a fatal connection error).

    The Redis AUTH token read from Secrets Manager is kept: a new client
    reconnects without another call to AWS."""
    global _redis, _nats
    _redis = None
    _nats = None
