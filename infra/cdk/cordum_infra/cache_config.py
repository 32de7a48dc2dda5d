"""The cache's context keys (engine, node type, terminal-job retention), checked at synth.

Kept apart from ``cache`` (no CDK import): ``settings`` reads these with the rest
of the context before any construct exists. docs/deploy-sizing.md turns the node
types into jobs retained.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Engine:
    """An ElastiCache engine the job store runs on."""

    version: str
    family: str
    """Parameter group family of ``version``; its defaults keep cluster mode disabled."""


ENGINES = {
    "redis": Engine(version="7.1", family="redis7"),
    "valkey": Engine(version="8.0", family="valkey8"),
}
"""Redis OSS 7.1 and Valkey 8.0 both run Cordum's Lua scripts, ``SET ... PXAT`` and
ACL users (ElastiCache RBAC needs Redis 6+ or Valkey 7.2+). Valkey node hours cost
about 20 % less than Redis OSS ones for the same node type."""
DEFAULT_ENGINE = "redis"

DEFAULT_NODE_TYPE = "cache.t4g.small"
"""1.37 GiB maxmemory, about 1.03 GiB for data once ElastiCache's 25 % reserved memory
is set aside: 1M jobs a month at the default retention use about 36 % of it."""
NODE_TYPE = re.compile(r"^cache\.[a-z][a-z0-9-]*\.[a-z0-9]+$")
PREVIOUS_GENERATIONS = re.compile(r"^cache\.(t1|t2|m1|m2|m3|m4|c1|r3|r4)\.")
"""Families ElastiCache lists as previous generation: no Graviton price, and t1/m1
cannot run Redis 7 or encryption in transit at all."""

DEFAULT_JOB_RETENTION_S = 3 * 24 * 3600
"""Same default as the runtime's (cordum.config.DEFAULT_JOB_RETENTION_S), written
into the functions' environment so a template states the retention it runs with."""
MIN_JOB_RETENTION_S = 3600
MAX_JOB_RETENTION_S = 365 * 24 * 3600
"""The bounds the runtime accepts (cordum.config): a value outside would stop every
function at its first invocation, so synth refuses it first."""
JOB_RETENTION_ENV = "CORDUM_JOB_RETENTION_S"


@dataclass(frozen=True)
class CacheConfig:
    engine: str = DEFAULT_ENGINE
    node_type: str = DEFAULT_NODE_TYPE
    job_retention_s: int = DEFAULT_JOB_RETENTION_S

    @property
    def engine_version(self) -> str:
        return ENGINES[self.engine].version

    @property
    def parameter_group_family(self) -> str:
        return ENGINES[self.engine].family


def cache_config(get: Callable[[str], str | None], *, aws: bool) -> CacheConfig:
    """The cache context keys, checked; ``aws`` is False for a stack given a redisUrl,
    which creates no cache and so takes no engine or node type."""
    from cordum_infra.settings import ContextError

    engine, node_type = get("cacheEngine"), get("cacheNodeType")
    for key, value in (("cacheEngine", engine), ("cacheNodeType", node_type)):
        if value is not None and not aws:
            raise ContextError(
                f"context {key} sizes the ElastiCache the stack creates: it needs an AWS "
                "stack (no redisUrl); a local stack uses the Redis its redisUrl names"
            )
    engine = (engine or DEFAULT_ENGINE).lower()
    if engine not in ENGINES:
        raise ContextError(f"context cacheEngine must be redis or valkey: {engine}")
    node_type = node_type or DEFAULT_NODE_TYPE
    if not NODE_TYPE.match(node_type):
        raise ContextError(
            "context cacheNodeType must be an ElastiCache node type such as "
            f"{DEFAULT_NODE_TYPE} or cache.r7g.large: {node_type}"
        )
    if PREVIOUS_GENERATIONS.match(node_type):
        raise ContextError(
            f"context cacheNodeType {node_type} is a previous-generation node: pick a "
            "current one (t4g, m7g, r7g, ...; see docs/deploy-sizing.md)"
        )
    raw = get("jobRetentionSeconds")
    retention = DEFAULT_JOB_RETENTION_S
    if raw is not None:
        if not raw.isdigit():
            raise ContextError(
                f"context jobRetentionSeconds must be a whole number of seconds: {raw}"
            )
        retention = int(raw)
        if not MIN_JOB_RETENTION_S <= retention <= MAX_JOB_RETENTION_S:
            raise ContextError(
                f"context jobRetentionSeconds must be between {MIN_JOB_RETENTION_S} (1 hour) "
                f"and {MAX_JOB_RETENTION_S} (365 days): {retention}"
            )
    return CacheConfig(engine=engine, node_type=node_type, job_retention_s=retention)
