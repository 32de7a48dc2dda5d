"""The control plane as the HTTP API shows it: workers, status, health.

``worker_snapshot`` reads the bridge's ``sys:workers:snapshot``; ``status`` adds
Redis and NATS reachability, the shared breakers (read-only "peek" of
``cordum.safety.breaker``) and Cordum's fail-open counter, and never fails:
what cannot be read reads as down, empty or UNKNOWN.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from cordum import runtime
from cordum.gateway.core.times import rfc3339_s
from cordum.gateway.system.views import is_online
from cordum.registry.snapshot import SNAPSHOT_KEY, parse_snapshot
from cordum.registry.workers import WorkerInfo
from cordum.safety.breaker import (
    INPUT_BREAKER_KEY,
    OUTPUT_BREAKER_KEY,
    BreakerPolicy,
    BreakerState,
    CircuitBreaker,
)
from cordum.store.errors import StoreError
from cordum.store.jobs import FAIL_OPEN_COUNTER_KEY
from cordum.store.json_docs import json_object
from cordum.store.reads import JobReads

if TYPE_CHECKING:
    from cordum.config import Settings
    from cordum.store.reads import RedisReadProtocol

STARTED_AT = time.monotonic()
"""When this container loaded the gateway: ``uptime_seconds`` counts from here."""
PROJECT = "cordum-serverless"


@dataclass(frozen=True, slots=True)
class ReadKeys:
    """The shared keys the status and worker views read (tests point them elsewhere)."""

    snapshot: str = SNAPSHOT_KEY
    breaker_prefix: str = ""
    input_fail_open: str = FAIL_OPEN_COUNTER_KEY


KEYS = ReadKeys()


# --------------------------------------------------------------------------- workers


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The worker snapshot as the bridge last wrote it."""

    workers: list[WorkerInfo] = field(default_factory=list)
    writer_id: str = ""
    captured_at: str = ""


async def worker_snapshot(redis: RedisReadProtocol, keys: ReadKeys | None = None) -> Snapshot:
    """The snapshot's workers, fresh or not (an empty one when missing or corrupt)."""
    (raw,) = await JobReads(redis).values((keys or KEYS).snapshot)
    return _snapshot(raw)


def _snapshot(raw: Any) -> Snapshot:
    doc = json_object(raw) or {}
    return Snapshot(parse_snapshot(raw), str(doc.get("writer_id") or ""),
                    str(doc.get("captured_at") or ""))


# --------------------------------------------------------------------------- health


@dataclass(frozen=True, slots=True)
class Connectivity:
    redis_error: str | None
    nats_error: str | None

    @property
    def healthy(self) -> bool:
        return self.redis_error is None and self.nats_error is None


async def _redis_problem(cfg: Settings) -> str | None:
    try:
        await asyncio.wait_for(JobReads(runtime.redis_client(cfg)).ping(), cfg.store_timeout_s)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


async def _nats_problem(cfg: Settings) -> str | None:
    try:
        nc = await asyncio.wait_for(runtime.nats_client(cfg), cfg.publish_timeout_s)
        await asyncio.wait_for(nc.flush(), cfg.publish_timeout_s)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


async def connectivity(cfg: Settings) -> Connectivity:
    """Whether Redis answers a PING and NATS a flush, both at once, each bounded by its
    configured timeout."""
    redis_error, nats_error = await asyncio.gather(_redis_problem(cfg), _nats_problem(cfg))
    return Connectivity(redis_error, nats_error)


# --------------------------------------------------------------------------- status


def redact_url(url: str) -> str:
    """``url`` without password or token (every URL of a comma-separated list)."""
    out = []
    for part in url.split(","):
        parts = urlsplit(part.strip())
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        try:
            port = parts.port
        except ValueError:
            port = None
        netloc = host + (f":{port}" if port else "")
        if parts.username and parts.password is not None and parts.scheme.startswith("redis"):
            netloc = f"{parts.username}@{netloc}"  # a Redis ACL user name is no secret
        out.append(urlunsplit((parts.scheme, netloc, parts.path, "", "")))
    return ",".join(out)


def build_info() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version(PROJECT)
    except PackageNotFoundError:
        ver = "dev"  # Lambda bundles the sources, not the installed distribution
    return {"version": ver, "commit": os.environ.get("CORDUM_BUILD_COMMIT", ""),
            "date": os.environ.get("CORDUM_BUILD_DATE", "")}


async def _redis_reads(redis: RedisReadProtocol, keys: ReadKeys,
                       timeout_s: float) -> tuple[Snapshot, int]:
    try:
        raw, fail_open = await asyncio.wait_for(
            JobReads(redis).values(keys.snapshot, keys.input_fail_open), timeout_s)
    except (StoreError, TimeoutError):
        return Snapshot(), 0
    try:
        return _snapshot(raw), int(fail_open or 0)
    except ValueError:
        return _snapshot(raw), 0


async def _breaker(redis: Any, key: str, keys: ReadKeys, timeout_s: float) -> BreakerState:
    breaker = CircuitBreaker(redis, key=key, key_prefix=keys.breaker_prefix,
                             policy=BreakerPolicy(op_timeout_s=timeout_s))
    return await breaker.state()


def _breaker_view(state: BreakerState) -> dict[str, Any]:
    return {"state": state.state.value, "failures": state.failures,
            "fail_threshold": state.fail_threshold,
            "cooldown_remaining_ms": state.cooldown_remaining_ms}


async def status(redis: RedisReadProtocol, cfg: Settings, *, admin: bool,
                 keys: ReadKeys | None = None, now: float | None = None) -> dict[str, Any]:
    """StatusResponse, plus Cordum's admin extras when ``admin``.

    Where the gateway connects (URLs, hosts) is shown to admins only: to anyone else
    it maps the network. Never fails for Redis or NATS trouble: what cannot be read
    reads as disconnected, no workers, UNKNOWN breakers.
    """
    keys = keys or KEYS
    timeout = cfg.store_timeout_s
    reach, (snapshot, fail_open), input_state, output_state = await asyncio.gather(
        connectivity(cfg),
        _redis_reads(redis, keys, timeout),
        _breaker(redis, INPUT_BREAKER_KEY, keys, timeout),
        _breaker(redis, OUTPUT_BREAKER_KEY, keys, timeout),
    )
    now = time.time() if now is None else now
    body: dict[str, Any] = {
        "time": rfc3339_s(now),
        "uptime_seconds": round(time.monotonic() - STARTED_AT, 3),
        "build": build_info(),
        "nats": {"connected": reach.nats_error is None},
        "redis": {"connected": reach.redis_error is None},
        "workers": sum(1 for w in snapshot.workers if is_online(w, now)),
    }
    if admin:
        body["nats"]["url"] = redact_url(cfg.nats_url)
        body["redis"]["url"] = redact_url(cfg.redis_url)
        body["circuit_breakers"] = {"input": _breaker_view(input_state),
                                    "output": _breaker_view(output_state)}
        body["input_fail_open_total"] = fail_open
        body["snapshot_meta"] = {"writer_id": snapshot.writer_id,
                                 "captured_at": snapshot.captured_at}
    return body
