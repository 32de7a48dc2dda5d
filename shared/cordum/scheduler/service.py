"""The engine wired to its real adapters, once per process."""

from __future__ import annotations

from functools import lru_cache

from cordum import runtime
from cordum.bus.publisher import NatsPublisher
from cordum.config import load_pools, settings
from cordum.safety.breaker import CircuitBreaker
from cordum.safety.client import SafetyClient
from cordum.safety.failmode import FailMode, input_fail_mode
from cordum.scheduler.backoff import BackoffPolicy
from cordum.scheduler.engine import Engine
from cordum.scheduler.registry import SnapshotRegistry
from cordum.scheduler.saga import default_saga
from cordum.scheduler.saga_trigger import default_rollback_trigger
from cordum.scheduler.strategy import LeastLoadedStrategy
from cordum.store.indexes import JobIndexes
from cordum.store.jobs import JobStore
from cordum.store.locks import JobLocks


@lru_cache(maxsize=1)
def default_engine() -> Engine:
    cfg = settings()
    redis = runtime.redis_client(cfg)
    saga = default_saga()
    return Engine(
        store=JobStore(redis),
        registry=SnapshotRegistry(redis),
        strategy=LeastLoadedStrategy(load_pools(cfg.config_dir)),
        safety=SafetyClient(cfg.safety_kernel_addr, cfg.safety_timeout_s,
                            breaker=CircuitBreaker(redis)),
        publisher=NatsPublisher(cfg),
        locks=JobLocks(redis),
        backoff=BackoffPolicy(),
        input_fail_open=input_fail_mode(config_dir=cfg.config_dir) is FailMode.OPEN,
        saga=saga,
        rollback=default_rollback_trigger(saga),
        requests=JobIndexes(redis),
    )
