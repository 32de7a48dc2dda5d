"""The workflow store and runner wired to the process's clients, once per process."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cordum.workflow.limits import RunLimits
    from cordum.workflow.runner import WorkflowRunner
    from cordum.workflow.store import WorkflowStore


@lru_cache(maxsize=1)
def default_store() -> WorkflowStore:
    from cordum import runtime
    from cordum.workflow.store import WorkflowStore

    return WorkflowStore(runtime.redis_client())


@lru_cache(maxsize=1)
def default_runner() -> WorkflowRunner:
    """Events go to the configured queues; with none (a bare test stack) a start is
    applied at once by the caller instead of being queued."""
    from cordum import runtime
    from cordum.bus.publisher import NatsPublisher
    from cordum.bus.workflow_events import sqs_run_events
    from cordum.config import settings
    from cordum.workflow import limits
    from cordum.workflow.runner import WorkflowRunner

    cfg = settings()
    return WorkflowRunner(default_store(), runtime.redis_client(cfg), NatsPublisher(cfg),
                          sqs_run_events(cfg.workflow_queue_url, cfg.workflow_timer_queue_url),
                          limits.load(cfg.config_dir),
                          max_active_runs=cfg.workflow_max_active_runs,
                          run_limits=run_limits())


@lru_cache(maxsize=1)
def run_limits() -> RunLimits:
    """timeouts.yaml's ``limits`` section, read once per process."""
    from cordum.config import settings
    from cordum.workflow import limits

    return limits.load_run_limits(settings().config_dir)
