"""The engine wired to its real adapters, once per process."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar, cast

from cordum import runtime
from cordum.bus.publisher import NatsPublisher
from cordum.bus.workflow_events import sqs_run_events
from cordum.config import Settings, settings
from cordum.safety.failmode import FailMode, input_fail_mode, output_fail_mode
from cordum.scheduler.engine import Engine
from cordum.scheduler.saga_trigger import default_rollback_trigger
from cordum.store.indexes import JobIndexes
from cordum.store.jobs import JobStore
from cordum.store.locks import JobLocks

if TYPE_CHECKING:
    from collections.abc import Callable

    from cordum.registry.reader import SnapshotReader
    from cordum.safety.client import SafetyClient
    from cordum.scheduler.backoff import BackoffPolicy
    from cordum.scheduler.output_check import OutputChecker
    from cordum.scheduler.saga import Saga
    from cordum.scheduler.strategy import LeastLoadedStrategy

T = TypeVar("T")


class _OnFirstUse:
    """Stands in for an adapter that some paths never call: the adapter is built, and
    its module imported, when one of its attributes is first read. The result
    function never routes nor asks the kernel about a request; the submit function
    and the ticks never record a compensation. Whichever function calls it imports its
    module with its path (functions/*.py), so that first read costs no import there."""

    __slots__ = ("_build", "_adapter")

    def __init__(self, build: Callable[[], object]) -> None:
        self._build: Callable[[], object] | None = build
        self._adapter: object = None

    def __getattr__(self, name: str) -> Any:
        if self._build is not None:
            self._adapter, self._build = self._build(), None
        return getattr(self._adapter, name)


def _on_first_use(build: Callable[[], T]) -> T:
    return cast(T, _OnFirstUse(build))


@lru_cache(maxsize=1)
def default_engine(*, snapshot_key: str | None = None, results: bool = True) -> Engine:
    """The engine as the functions wire it; ``snapshot_key`` reads another worker
    snapshot than the stack's (a benchmark's own). ``results=False``: an engine for the
    request path only (the submit function, the reconciler), which never checks an
    output: the output policy's client is neither built nor imported."""
    cfg = settings()
    redis = runtime.redis_client(cfg)
    saga = _on_first_use(lambda: _saga(cfg, redis))
    return Engine(
        store=JobStore(redis),
        registry=_on_first_use(lambda: _registry(redis, snapshot_key)),
        strategy=_on_first_use(lambda: _strategy(cfg)),
        safety=_on_first_use(lambda: _safety(cfg, redis)),
        publisher=NatsPublisher(cfg),
        locks=JobLocks(redis),
        backoff=_on_first_use(_backoff),
        input_fail_open=input_fail_mode(config_dir=cfg.config_dir) is FailMode.OPEN,
        saga=saga,
        rollback=default_rollback_trigger(saga),
        requests=JobIndexes(redis),
        output=_output_checker(cfg, redis) if results and cfg.output_policy_enabled else None,
        runs=sqs_run_events(cfg.workflow_queue_url, cfg.workflow_timer_queue_url),
    )


# The request path's adapters (dispatch.py calls them).

def _registry(redis: Any, snapshot_key: str | None) -> SnapshotReader:
    from cordum.registry.reader import SnapshotReader

    return (SnapshotReader(redis) if snapshot_key is None
            else SnapshotReader(redis, key=snapshot_key))


def _strategy(cfg: Settings) -> LeastLoadedStrategy:
    from cordum.config import load_pools
    from cordum.scheduler.strategy import LeastLoadedStrategy

    return LeastLoadedStrategy(load_pools(cfg.config_dir))


def _safety(cfg: Settings, redis: Any) -> SafetyClient:
    from cordum.safety.client import process_client

    return process_client(cfg, redis)


def _backoff() -> BackoffPolicy:
    from cordum.scheduler.backoff import BackoffPolicy

    return BackoffPolicy()


# The result path's: results.py records compensations with the saga.

def _saga(cfg: Settings, redis: Any) -> Saga:
    from cordum.scheduler.saga import Saga

    # As default_saga wires it (the saga-rollback function's), but only a rollback
    # asks the kernel: here one run in process, off Lambda. The result function
    # records compensations only, and never builds the kernel's client.
    return Saga(redis, NatsPublisher(cfg), safety=_on_first_use(lambda: _safety(cfg, redis)))


def _output_checker(cfg: Settings, redis: Any) -> OutputChecker:
    from cordum.safety.breaker import OUTPUT_BREAKER_KEY, CircuitBreaker
    from cordum.safety.output_client import OutputPolicyClient
    from cordum.scheduler.output_check import OutputChecker

    # The output policy service is served by the safety kernel's process.
    client = OutputPolicyClient(cfg.safety_kernel_addr,
                                breaker=CircuitBreaker(redis, key=OUTPUT_BREAKER_KEY),
                                fail_mode=output_fail_mode(config_dir=cfg.config_dir))
    return OutputChecker(client, redis)
