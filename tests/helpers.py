"""What many tests need: a bounded event-loop run, a poll on a condition, a free port, a
safety kernel on it, the gateway configured with a test's keys, API Gateway events and the
gateway's answer, and job clean-up.

Imports of the library stay inside the functions that need them: a unit test that only
wants ``run`` does not load gRPC or the gateway.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import socket
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import pytest

    from cordum.protocol import BusPacket
    from cordum.safety.kernel_service import PolicyKernel
    from cordum.safety.policy_file import Policy
    from cordum.safety.tls import ServerTLS

T = TypeVar("T")

RUN_TIMEOUT_S = 10.0
"""How long ``run`` lets a coroutine take before it fails the test instead of hanging it."""

SHIPPED_POLICY = Path(__file__).resolve().parents[1] / "config" / "safety.yaml"

REQUEST_ID = "test-request-1"
"""The ``requestContext.requestId`` of every event: the gateway answers it as X-Request-Id."""

TOMBSTONE_TTL_S = 900
"""How long a forgotten job stays known as CANCELLED: sys.job.submit is shared, and a
request for it that a handler of the tests takes late must find the job over instead
of creating it anew. (A local stack running beside the tests reads its own database,
not the tests': tests/redis_db.py.)"""


# --------------------------------------------------------------------------- time


def run(coro: Awaitable[T], timeout: float | None = RUN_TIMEOUT_S, *,
        loop: asyncio.AbstractEventLoop | None = None) -> T:
    """Drive ``coro`` to its end; after ``timeout`` seconds it fails the test instead.

    On ``loop`` when given: a Redis or NATS client belongs to the loop it was made on,
    so a test that keeps one across calls keeps that loop. Else on a fresh loop.
    """
    bounded = asyncio.wait_for(coro, timeout)
    if loop is None:
        return asyncio.run(bounded)
    return loop.run_until_complete(bounded)


async def eventually(predicate: Callable[[], Any], timeout: float = 3.0,
                     every: float = 0.02) -> Any:
    """Poll ``predicate`` (plain, or returning an awaitable) until it gives a truthy value,
    and return that value; AssertionError when ``timeout`` seconds pass first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            name = getattr(predicate, "__qualname__", repr(predicate))
            raise AssertionError(f"condition not met within {timeout} s: {name}")
        await asyncio.sleep(every)


# --------------------------------------------------------------------------- servers


def free_port() -> int:
    """A loopback port nobody listens on (the OS's pick; free until someone binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving_kernel(policy: Policy | PolicyKernel | Path = SHIPPED_POLICY, *,
                   tls: ServerTLS | None = None) -> Iterator[str]:
    """The safety kernel serving ``policy`` (a policy file, or a built policy) on a free
    loopback port, over TLS when ``tls`` is given; yields its address, stops it after."""
    from cordum.safety.kernel import serve
    from cordum.safety.policy_file import Policy

    addr = f"127.0.0.1:{free_port()}"
    server = serve(addr, Policy(policy) if isinstance(policy, Path) else policy, tls=tls)
    try:
        yield addr
    finally:
        server.stop(grace=0)


# --------------------------------------------------------------------------- the gateway


@contextmanager
def gateway_process() -> Iterator[None]:
    """The gateway function's process state around one test: the job stream made sure
    of first; after it, the cached clients closed and the cached settings and
    dependencies dropped, so that the next test reads its environment anew."""
    from cordum import config, runtime
    from cordum.bus.streams import ensure_stream
    from cordum.gateway.core import deps

    runtime.run(ensure_stream(runtime.run(runtime.jetstream())))
    try:
        yield
    finally:
        runtime.run(runtime.aclose())
        config.settings.cache_clear()
        deps.reset()
        runtime.reset()


CREATED: list[str] = []
"""Jobs the gateway accepted through :func:`call` (a POST answered with a job_id). A
fixture that forgets the jobs of its test clears it before and after."""


KEY_SOURCES = ("CORDUM_API_KEY", "CORDUM_API_KEYS_PATH", "CORDUM_API_KEYS_SSM_PARAMETER",
               "CORDUM_API_KEYS_SECRET_ARN", "CORDUM_API_KEYS_SECRET_ID")
"""The key sources besides CORDUM_API_KEYS: unset, so a test's keys are the only ones."""


def use_gateway(monkeypatch: pytest.MonkeyPatch, keys: list[dict[str, str]], *,
                redis_url: str = "", unset: tuple[str, ...] = (), **env: str) -> None:
    """The gateway of this process with exactly ``keys``, the tests' Redis (or
    ``redis_url``) and NATS, rate limiting off, ``env`` set and ``unset`` unset; its
    cached settings, clients and services forgotten."""
    from cordum import config, runtime
    from cordum.gateway.core import deps
    from tests.conftest import NATS_URL, REDIS_URL

    monkeypatch.setenv("CORDUM_API_KEYS", json.dumps(keys))
    for var in (*KEY_SOURCES, *unset):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("REDIS_URL", redis_url or REDIS_URL)
    monkeypatch.setenv("NATS_URL", NATS_URL)
    monkeypatch.setenv("CORDUM_RATE_LIMIT_RPS", "0")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config.settings.cache_clear()
    deps.reset()
    runtime.reset()


def event(method: str, path: str, body: Any = None, *, key: str | None = None,
          tenant: str | None = None, headers: Mapping[str, str | None] | None = None,
          query: Mapping[str, str] | None = None,
          content_type: str | None = "application/json", stage: str = "prod",
          ) -> dict[str, Any]:
    """An API Gateway (REST, proxy integration) event, as the gateway function gets it.

    ``key`` and ``tenant`` are sent as X-API-Key and X-Tenant-ID; ``headers`` come after
    them, and a None there leaves that header out. A str ``body`` is sent as it is,
    anything else as JSON.
    """
    hdrs: dict[str, str | None] = {}
    if content_type is not None:
        hdrs["Content-Type"] = content_type
    if key is not None:
        hdrs["X-API-Key"] = key
    if tenant is not None:
        hdrs["X-Tenant-ID"] = tenant
    hdrs.update(headers or {})
    sent = {name: value for name, value in hdrs.items() if value is not None}
    method = method.upper()
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": sent,
        "multiValueHeaders": {name: [value] for name, value in sent.items()},
        "queryStringParameters": dict(query) if query else None,
        "multiValueQueryStringParameters": {k: [v] for k, v in query.items()} if query else None,
        "pathParameters": {"proxy": path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {"stage": stage, "path": f"/{stage}{path}", "httpMethod": method,
                           "requestId": REQUEST_ID, "resourcePath": "/{proxy+}"},
        "body": body if body is None or isinstance(body, str) else json.dumps(body),
        "isBase64Encoded": False,
    }


def call(ev: Mapping[str, Any]) -> tuple[int, Any, dict[str, str]]:
    """The gateway function's answer to ``ev``: status, body (parsed when it is JSON) and
    headers under the names the gateway gave them."""
    from cordum.gateway import app as gateway

    resp = gateway.handle(ev, None)
    body = resp["body"]
    try:
        body = json.loads(body)
    except (TypeError, ValueError):
        pass
    if isinstance(body, dict) and body.get("job_id") and ev["httpMethod"] == "POST":
        CREATED.append(str(body["job_id"]))
    headers = {**(resp.get("headers") or {}),
               **{name: values[-1] for name, values in
                  (resp.get("multiValueHeaders") or {}).items()}}
    return resp["statusCode"], body, headers


# --------------------------------------------------------------------------- clean-up


async def forget_jobs(redis: Any, job_ids: list[str], *, tombstone: bool = True) -> None:
    """Take the jobs out of every index and delete what is stored for them.

    With ``tombstone`` each job's meta stays a short while as CANCELLED (see
    TOMBSTONE_TTL_S); without it the meta goes too. Either way waiting jobs of one test
    never fill another's oldest-first window.
    """
    from cordum import protocol
    from cordum.store.jobs import (
        DEADLINE_KEY,
        DLQ_INDEX_KEY,
        RECENT_KEY,
        dlq_entry_key,
        events_key,
        meta_key,
        request_key,
    )
    from cordum.store.locks import job_lock_key
    from cordum.store.reads import trace_key
    from cordum.store.results import decision_key, redacted_key

    if not job_ids:
        return
    read = redis.pipeline(transaction=False)
    for job_id in job_ids:
        read.hget(meta_key(job_id), "trace_id")
    traces = await read.execute()
    indexes = [k async for k in redis.scan_iter(match="job:index:*", count=1000)]
    indexes += [k async for k in redis.scan_iter(match="job:tenant:index:*", count=1000)]
    pipe = redis.pipeline(transaction=False)
    for key in (*indexes, RECENT_KEY, DEADLINE_KEY, DLQ_INDEX_KEY):
        pipe.zrem(key, *job_ids)
    for job_id, trace in zip(job_ids, traces, strict=True):
        pipe.delete(request_key(job_id), events_key(job_id), protocol.context_key(job_id),
                    protocol.result_key(job_id), redacted_key(job_id), dlq_entry_key(job_id),
                    decision_key(job_id), job_lock_key(job_id))
        if trace:
            pipe.delete(trace_key(trace.decode() if isinstance(trace, bytes) else trace))
        if tombstone:
            pipe.hset(meta_key(job_id), "state", "CANCELLED")
            pipe.expire(meta_key(job_id), TOMBSTONE_TTL_S)
        else:
            pipe.delete(meta_key(job_id))
    await pipe.execute()


async def delete_keys(redis: Any, pattern: str) -> None:
    """Delete every key matching ``pattern`` (a test's own keys, named after its tag)."""
    doomed = [k async for k in redis.scan_iter(match=pattern, count=1000)]
    if doomed:
        await redis.delete(*doomed)


async def drop_from_stream(js: Any, stream: str, first_seq: int,
                           ours: Callable[[BusPacket], bool]) -> None:
    """Delete the messages of ``stream`` from ``first_seq`` on that ``ours`` picks, so a
    stack consuming the stream beside the tests never works on a test's packets."""
    from cordum import protocol

    last = (await js.stream_info(stream)).state.last_seq
    for seq in range(first_seq, last + 1):
        try:
            raw = await js.get_msg(stream, seq)
        except Exception:  # consumed or deleted already
            continue
        try:
            packet = protocol.BusPacket.FromString(raw.data or b"")
        except Exception:  # not a packet: nobody's job
            continue
        if ours(packet):
            await js.delete_msg(stream, seq)
