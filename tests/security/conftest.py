"""Security tests: each one is an exploit that once worked, kept as a test.

The gateway is driven in-process with API Gateway proxy events, on the real
Redis and NATS, with three keys: ``alice`` (admin) and ``bob`` (user) in tenant
``default``, ``carol`` (admin) in tenant ``acme``.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from cordum import config, runtime
from cordum.gateway import deps
from tests.conftest import NATS_URL, REDIS_URL

CONFIG = Path(__file__).resolve().parents[2] / "config"

ALICE = "alice-key-0123456789"
BOB = "bob-key-0123456789"
CAROL = "carol-key-0123456789"
KEYS = [
    {"key": ALICE, "tenant": "default", "role": "admin", "principal_id": "alice"},
    {"key": BOB, "tenant": "default", "role": "user", "principal_id": "bob"},
    {"key": CAROL, "tenant": "acme", "role": "admin", "principal_id": "carol"},
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def kernel():
    """A safety kernel with the shipped policy (``config/safety.yaml``) on a free port."""
    from cordum.safety.kernel import Policy, serve

    addr = f"127.0.0.1:{free_port()}"
    server = serve(addr, Policy(CONFIG / "safety.yaml"))
    yield addr
    server.stop(grace=0)


def event(method: str, path: str, body: Any = None, key: str | None = ALICE,
          tenant: str | None = None, headers: dict[str, str] | None = None,
          query: dict[str, str] | None = None) -> dict[str, Any]:
    """An API Gateway (REST, proxy) event; ``body`` as a str is sent as it is."""
    hdrs: dict[str, str] = {"Content-Type": "application/json"}
    if key is not None:
        hdrs["X-API-Key"] = key
    if tenant is not None:
        hdrs["X-Tenant-ID"] = tenant
    hdrs.update(headers or {})
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": hdrs,
        "multiValueHeaders": {k: [v] for k, v in hdrs.items()},
        "queryStringParameters": query,
        "multiValueQueryStringParameters": {k: [v] for k, v in query.items()} if query else None,
        "pathParameters": {"proxy": path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {"stage": "prod", "path": f"/prod{path}", "httpMethod": method,
                           "requestId": "sec-r1", "resourcePath": "/{proxy+}"},
        "body": body if body is None or isinstance(body, str) else json.dumps(body),
        "isBase64Encoded": False,
    }


CREATED: list[str] = []
"""Jobs the gateway accepted during the current test; the ``gateway`` fixture forgets them."""

TOMBSTONE_TTL_S = 900
"""How long a forgotten job stays known as CANCELLED: a stack running beside the tests
consumes sys.job.submit too, and a request it handles late must find the job over."""


async def forget_jobs(redis: Any, job_ids: list[str]) -> None:
    """Take the jobs out of every index and leave each a short-lived CANCELLED tombstone,
    so that waiting jobs of one test never fill another's oldest-first window."""
    if not job_ids:
        return
    indexes = [k async for k in redis.scan_iter(match="job:index:*", count=1000)]
    indexes += [k async for k in redis.scan_iter(match="job:tenant:index:*", count=1000)]
    pipe = redis.pipeline(transaction=False)
    for key in (*indexes, "job:recent", "job:deadline", "dlq:index"):
        pipe.zrem(key, *job_ids)
    for job_id in job_ids:
        pipe.delete(f"job:req:{job_id}", f"job:events:{job_id}", f"ctx:{job_id}",
                    f"res:{job_id}", f"res:{job_id}:redacted", f"dlq:entry:{job_id}",
                    f"job:{job_id}:output_decision")
        pipe.hset(f"job:meta:{job_id}", "state", "CANCELLED")
        pipe.expire(f"job:meta:{job_id}", TOMBSTONE_TTL_S)
    await pipe.execute()


def call(ev: dict[str, Any]) -> tuple[int, Any, dict[str, Any]]:
    """The gateway's answer: status, body (parsed when JSON) and headers."""
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
               **{k: v[-1] for k, v in (resp.get("multiValueHeaders") or {}).items()}}
    return resp["statusCode"], body, headers


def configure(monkeypatch: pytest.MonkeyPatch, keys: list[dict[str, str]] | None = None,
              **env: str) -> None:
    monkeypatch.setenv("CORDUM_API_KEYS", json.dumps(KEYS if keys is None else keys))
    monkeypatch.delenv("CORDUM_API_KEY", raising=False)
    monkeypatch.setenv("REDIS_URL", REDIS_URL)
    monkeypatch.setenv("NATS_URL", NATS_URL)
    monkeypatch.setenv("CORDUM_STORE_TIMEOUT_S", "0.5")
    monkeypatch.setenv("CORDUM_PUBLISH_TIMEOUT_S", "0.5")
    monkeypatch.setenv("CORDUM_SUBMIT_POLICY_CHECK", "off")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config.settings.cache_clear()
    deps.reset()
    runtime.reset()


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch):
    """The gateway with the three keys, submit-time policy off (tests turn it on)."""
    from cordum.bus.streams import ensure_stream

    # The tests import this file as ``tests.security.conftest``, pytest loads it under
    # another name: the list the tests' ``call`` fills is that module's.
    from tests.security import conftest as shared

    configure(monkeypatch)
    runtime.run(ensure_stream(runtime.run(runtime.jetstream())))
    shared.CREATED.clear()
    yield
    runtime.run(forget_jobs(runtime.redis_client(), shared.CREATED))
    shared.CREATED.clear()
    config.settings.cache_clear()
    deps.reset()
    runtime.reset()


def meta_of(job_id: str) -> dict[str, str]:
    raw = runtime.run(runtime.redis_client().hgetall(f"job:meta:{job_id}"))
    return {k.decode(): v.decode() for k, v in raw.items()}
