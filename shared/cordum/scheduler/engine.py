"""The scheduler engine: what happens to a job request and to a job result.

Each entry point takes the raw packet bytes a queue delivered and either
returns (done: the record may be deleted), raises ``RetryAfter`` (deliver
again later) or raises ``UnparseableRecord`` (never processable: let the
queue's redrive move it to the DLQ).

This is the front of three paths over one set of ports: the request path
(``dispatch.py``), the result path (``results.py``) with its output phase
(``output_phase.py``); the approval rule they honour is ``approval.py``.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from cordum.scheduler.packets import Outcome
from cordum.scheduler.policy import DEFAULT_ENGINE_POLICY, EnginePolicy
from cordum.scheduler.ports import EnginePorts
from cordum.scheduler.transitions import StateWriter

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cordum import protocol
    from cordum.bus.publisher import BusPublisher
    from cordum.bus.workflow_events import RunEventSink
    from cordum.safety.client import SafetyVerdict
    from cordum.scheduler.dispatch import Dispatcher
    from cordum.scheduler.output_check import OutputChecker
    from cordum.scheduler.ports import (
        CompensationRecorder,
        InputSafety,
        JobLockService,
        RequestReader,
        RetryBackoff,
        RollbackTrigger,
        RoutingStrategy,
        WorkerDirectory,
    )
    from cordum.scheduler.results import ResultPath
    from cordum.store.jobs import JobStore

__all__ = ["Engine", "EnginePolicy", "EnginePorts", "Outcome"]


class Engine:
    """The submit and result functions' entry points (and the replayer's)."""

    def __init__(
        self,
        *,
        store: JobStore,
        registry: WorkerDirectory,
        strategy: RoutingStrategy,
        safety: InputSafety,
        publisher: BusPublisher,
        locks: JobLockService | None = None,
        backoff: RetryBackoff | None = None,
        input_fail_open: bool = False,
        saga: CompensationRecorder | None = None,
        rollback: RollbackTrigger | None = None,
        requests: RequestReader | None = None,
        output: OutputChecker | None = None,
        runs: RunEventSink | None = None,
        policy: EnginePolicy = DEFAULT_ENGINE_POLICY,
    ) -> None:
        self.input_fail_open = input_fail_open
        """Dispatch when the kernel cannot be asked (the operator's explicit choice)."""
        self.policy = policy
        self._wire(EnginePorts(store=store, registry=registry, strategy=strategy,
                               safety=safety, publisher=publisher, locks=locks,
                               backoff=backoff, saga=saga, rollback=rollback,
                               requests=requests, output=output, runs=runs))

    def _wire(self, ports: EnginePorts) -> None:
        self.ports = ports
        self._writer = StateWriter(ports, self.policy)

    # Each path is built, and its modules imported, on its first use: the submit
    # function never loads the result path (nor the output policy's client), the result
    # function never loads routing and dispatch.

    @cached_property
    def _dispatch(self) -> Dispatcher:
        from cordum.scheduler.dispatch import Dispatcher

        return Dispatcher(self.ports, self._writer, self.policy,
                          input_fail_open=self.input_fail_open)

    @cached_property
    def _results(self) -> ResultPath:
        from cordum.scheduler.results import ResultPath

        return ResultPath(self.ports, self._writer, self.policy)

    @property
    def store(self) -> JobStore:
        return self.ports.store

    async def handle_request(self, data: bytes) -> Outcome:
        """A job request from the submit queue."""
        return await self._dispatch.handle_request(data)

    async def handle_job_request(self, req: protocol.JobRequest, trace_id: str) -> Outcome:
        """Decide and dispatch one job under its job lock (also used by the replayer)."""
        return await self._dispatch.handle_job_request(req, trace_id)

    async def handle_result(self, data: bytes) -> Outcome:
        """A job result, or a cancel (the result queue carries both)."""
        return await self._results.handle_result(data)

    async def decide(self, req: protocol.JobRequest, tenant: str,
                     meta: Mapping[str, str]) -> tuple[SafetyVerdict, dict[str, str]]:
        """The safety verdict the request path would reach for ``req`` given the job's
        ``meta`` (a recorded approval included), and the meta fields recording it;
        nothing is written or dispatched."""
        return await self._dispatch.decide(req, tenant, meta)
