"""The engine wired to its real adapters, once per process."""

from __future__ import annotations

from functools import lru_cache

from cordum import runtime
from cordum.bus.publisher import NatsPublisher
from cordum.config import load_pools, settings
from cordum.safety.client import SafetyClient
from cordum.scheduler.engine import Engine
from cordum.scheduler.registry import SnapshotRegistry
from cordum.store.jobs import JobStore


@lru_cache(maxsize=1)
def default_engine() -> Engine:
    cfg = settings()
    redis = runtime.redis_client(cfg)
    return Engine(
        store=JobStore(redis),
        registry=SnapshotRegistry(redis),
        safety=SafetyClient(cfg.safety_kernel_addr, cfg.safety_timeout_s),
        publisher=NatsPublisher(cfg),
        pools=load_pools(cfg.config_dir),
    )
