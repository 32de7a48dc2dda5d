"""State moves and DLQ notices, as every path of the engine makes them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from cordum import protocol
from cordum.errors import RetryAfter
from cordum.scheduler.errorcodes import error_code_enum
from cordum.store.errors import InvalidTransition, StoreError
from cordum.store.jobs import JobState

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from cordum.scheduler.policy import EnginePolicy
    from cordum.scheduler.ports import EnginePorts
    from cordum.store.jobs import AuditParts, TransitionResult

log = logging.getLogger(__name__)

DLQ_STATUS = {
    JobState.DENIED: protocol.JobStatus.JOB_STATUS_DENIED,
    JobState.TIMEOUT: protocol.JobStatus.JOB_STATUS_TIMEOUT,
    JobState.CANCELLED: protocol.JobStatus.JOB_STATUS_CANCELLED,
}
"""The status a sys.job.dlq notice carries by the job's state; any other is FAILED."""


class StateWriter:
    """Moves a job's state in the store and says so on ``sys.job.dlq``.

    A store error becomes ``RetryAfter`` (the record is delivered again); a move
    the state machine forbids is logged and reported as not applied.
    """

    def __init__(self, ports: EnginePorts, policy: EnginePolicy) -> None:
        self._store = ports.store
        self._publisher = ports.publisher
        self._locks = ports.locks
        self._policy = policy

    async def transition(self, job_id: str, path: list[JobState], only_from: Iterable[str],
                         fields: Mapping[str, str],
                         dlq: Mapping[str, Any] | None = None) -> bool:
        """Whether the move was applied."""
        result = await self.transition_result(job_id, path, only_from, fields, dlq)
        return result is not None and result.applied

    async def transition_result(self, job_id: str, path: list[JobState],
                                only_from: Iterable[str], fields: Mapping[str, str],
                                dlq: Mapping[str, Any] | None = None, *,
                                records: Mapping[str, tuple[str, int]] | None = None,
                                worker_of_record: str = "",
                                audit: AuditParts | None = None,
                                ) -> TransitionResult | None:
        """The store's answer; None when the state machine forbids the move. ``audit``:
        the event of the governance act the move is (an output quarantined)."""
        try:
            return await self._store.transition(job_id, path, only_from=only_from,
                                                fields=fields, dlq=dlq, records=records,
                                                worker_of_record=worker_of_record,
                                                audit=audit)
        except InvalidTransition as exc:
            log.warning("%s", exc)
            return None
        except StoreError as exc:
            raise RetryAfter(str(exc), self._policy.retry_store_s) from exc

    def job_lock(self, job_id: str) -> Any:
        """The job's lock as an async context manager (a no-op without locks)."""
        if self._locks is None:
            return contextlib.nullcontext()
        return self._locks.job_lock(job_id)

    async def publish_dlq(self, job_id: str, state: str, reason: str, code: str) -> None:
        """The sys.job.dlq notice of a job whose DLQ entry is written; one retry."""
        status = DLQ_STATUS.get(JobState(state), protocol.JobStatus.JOB_STATUS_FAILED)
        res = protocol.JobResult(job_id=job_id, status=status, error_code=code,
                                 error_code_enum=error_code_enum(code), error_message=reason,
                                 worker_id=protocol.SENDER_SCHEDULER)
        packet = protocol.packet(trace_id=job_id, sender_id=protocol.SENDER_SCHEDULER,
                                 job_result=res)
        for attempt in range(2):
            try:
                await self._publisher.publish(protocol.SUBJECT_DLQ, packet)
                return
            except Exception as exc:
                if attempt == 0:
                    await asyncio.sleep(self._policy.dlq_publish_retry_s)
                else:
                    # The DLQ entry is in Redis already; only the notification is lost.
                    log.error("publish %s for %s failed: %s", protocol.SUBJECT_DLQ, job_id, exc)
