"""The engine wired to its real adapters, once per process."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from cordum import runtime
from cordum.bus.publisher import NatsPublisher
from cordum.bus.workflow_events import sqs_run_events
from cordum.config import Settings, load_pools, settings
from cordum.registry.reader import SnapshotReader
from cordum.safety.breaker import OUTPUT_BREAKER_KEY, CircuitBreaker
from cordum.safety.client import SafetyClient, payload_reader_for
from cordum.safety.failmode import FailMode, input_fail_mode, output_fail_mode
from cordum.scheduler.backoff import BackoffPolicy
from cordum.scheduler.engine import Engine
from cordum.scheduler.saga import default_saga
from cordum.scheduler.saga_trigger import default_rollback_trigger
from cordum.scheduler.strategy import LeastLoadedStrategy
from cordum.store.indexes import JobIndexes
from cordum.store.jobs import JobStore
from cordum.store.locks import JobLocks

if TYPE_CHECKING:
    from cordum.scheduler.output_check import OutputChecker


@lru_cache(maxsize=1)
def default_engine(*, snapshot_key: str | None = None, results: bool = True) -> Engine:
    """The engine as the functions wire it; ``snapshot_key`` reads another worker
    snapshot than the stack's (a benchmark's own). ``results=False``: an engine for the
    request path only (the submit function, the reconciler), which never checks an
    output: the output policy's client is neither built nor imported."""
    cfg = settings()
    redis = runtime.redis_client(cfg)
    saga = default_saga()
    return Engine(
        store=JobStore(redis),
        registry=SnapshotReader(redis) if snapshot_key is None
        else SnapshotReader(redis, key=snapshot_key),
        strategy=LeastLoadedStrategy(load_pools(cfg.config_dir)),
        safety=SafetyClient(cfg.safety_kernel_addr, cfg.safety_timeout_s,
                            breaker=CircuitBreaker(redis),
                            payload_reader=payload_reader_for(cfg.config_dir, redis)),
        publisher=NatsPublisher(cfg),
        locks=JobLocks(redis),
        backoff=BackoffPolicy(),
        input_fail_open=input_fail_mode(config_dir=cfg.config_dir) is FailMode.OPEN,
        saga=saga,
        rollback=default_rollback_trigger(saga),
        requests=JobIndexes(redis),
        output=_output_checker(cfg, redis) if results and cfg.output_policy_enabled else None,
        runs=sqs_run_events(cfg.workflow_queue_url, cfg.workflow_timer_queue_url),
    )


def _output_checker(cfg: Settings, redis: Any) -> OutputChecker:
    from cordum.safety.output_client import OutputPolicyClient
    from cordum.scheduler.output_check import OutputChecker

    # The output policy service is served by the safety kernel's process.
    client = OutputPolicyClient(cfg.safety_kernel_addr,
                                breaker=CircuitBreaker(redis, key=OUTPUT_BREAKER_KEY),
                                fail_mode=output_fail_mode(config_dir=cfg.config_dir))
    return OutputChecker(client, redis)
