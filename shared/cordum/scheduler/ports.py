"""The scheduler's collaborators, typed by what the engine and the saga ask of them.

Each port names its real adapter; a test may hand in anything of the same shape.
The job store (``store.jobs.JobStore``) and the output checker
(``scheduler.output_check.OutputChecker``) are used as they are; the publishers' shapes
are the bus's (``bus.publisher.BusPublisher``, ``JobPublisher``), shared with the
workflow engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence
    from contextlib import AbstractAsyncContextManager

    from cordum import protocol
    from cordum.bus.publisher import BusPublisher
    from cordum.bus.workflow_events import RunEventSink
    from cordum.safety.client import SafetyVerdict
    from cordum.scheduler.output_check import OutputChecker
    from cordum.store.jobs import JobStore
    from cordum.store.locks import Lease


class InputSafety(Protocol):
    """The kernel's verdict on a request, at dispatch or compensation (``SafetyClient``)."""

    async def check(self, req: protocol.JobRequest, tenant: str) -> SafetyVerdict: ...


class WorkerDirectory(Protocol):
    """The workers the scheduler may dispatch to (the registry's snapshot reader).

    The engine only hands the entries from here to the strategy, so it does not
    name their type."""

    async def workers(self, *, refresh: bool = False) -> Sequence[Any]: ...
    def is_alive(self, worker_id: str) -> bool: ...
    def record_dispatch(self, worker_id: str) -> None: ...


class RoutingStrategy(Protocol):
    """Chooses the subject a job is dispatched on (``LeastLoadedStrategy``).

    Raises ``RetryAfter`` while no worker can take the job, anything else when
    routing can never succeed as configured."""

    def pick(self, req: protocol.JobRequest, workers: Sequence[Any]) -> str: ...


class JobLockService(Protocol):
    """The per-job lock (``JobLocks``)."""

    def job_lock(self, job_id: str, *, deadline: float | None = None,
                 read: str | None = None) -> AbstractAsyncContextManager[Lease]: ...


class RetryBackoff(Protocol):
    """Redelivery delay by attempt (``BackoffPolicy``)."""

    def delay(self, attempt: int) -> float: ...


class CompensationRecorder(Protocol):
    """Stacks the undo step of a workflow step that succeeded (``Saga``)."""

    async def record_compensation(self, req: protocol.JobRequest, *, tenant: str = "",
                                  workflow_id: str = "") -> bool: ...


class RequestReader(Protocol):
    """The job's stored request (``JobIndexes``)."""

    async def get_request(self, job_id: str) -> protocol.JobRequest | None: ...


@dataclass(frozen=True, slots=True)
class EnginePorts:
    """One adapter per outside system; the optional ones switch a feature on."""

    store: JobStore
    registry: WorkerDirectory
    strategy: RoutingStrategy
    safety: InputSafety
    publisher: BusPublisher
    locks: JobLockService | None = None
    """Without it the engine takes no job lock (a single consumer, tests)."""
    backoff: RetryBackoff | None = None
    """Without it a retry waits the policy's least delay."""
    saga: CompensationRecorder | None = None
    """Records compensations, together with ``requests``."""
    rollback: RollbackTrigger | None = None
    """Starts the rollback of a workflow whose step failed fatally."""
    requests: RequestReader | None = None
    output: OutputChecker | None = None
    """The output policy checker; None when OUTPUT_POLICY_ENABLED is off."""
    runs: RunEventSink | None = None
    """Told when a workflow step's job ends; None when the stack runs no workflows."""


class RollbackTrigger(Protocol):
    """Starts the rollback of a tenant's workflow whose step failed fatally."""

    async def trigger(self, tenant: str, workflow_id: str) -> None:
        """Return once the rollback is handed off (or done); raise
        ``RollbackTriggerError`` when it was not."""
        ...
