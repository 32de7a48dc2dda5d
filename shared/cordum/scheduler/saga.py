"""Saga compensation: record an undo step when a workflow step succeeds, replay the
undo steps newest-first when the workflow fails fatally.

A workflow's saga is one tenant's: its keys (``store/saga.py``) carry the
tenant, which is the job's stored one, never a packet's claim. Every template
on a stack is the tenant's own job (``compensation.py``), and a rollback checks
that again before it publishes one.

A rollback dispatches each template as a new CRITICAL job on ``sys.job.submit``
(the normal submit path then schedules it). Where it stops early, nothing is
lost: a template whose publish failed is pushed back before the error is
raised (Cordum drops that one), and one left over at the deadline was never
popped. The report says so (``complete`` False) and the caller runs the
rollback again.

Timeline of one rollback under its lock, deadlines as ``time.monotonic()``::

    t=0        SET saga:<t>:<wf>:lock "1" NX EX 120   (held by nobody else until t=120)
    t=0..d     LPOP, check, publish, LPOP, ...     d = min(caller deadline,
                                                       t0 + 120 - 2 x store timeout)
    t<=d+2     push-back of a failed entry (one store call may pass d)
    t<=d+4     DEL the lock

The loop ends before the lock can lapse, so the unconditional DEL (the value is
"1", not a token) can only delete our own lock.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from cordum import protocol
from cordum.scheduler.compensation import (
    WORKFLOW_LABEL,
    InvalidCompensation,
    belongs_to,
    compensation_template,
    is_compensation_job,
    mark_compensation,
    tenant_claims,
    workflow_id_of,
)
from cordum.scheduler.packets import tenant_of
from cordum.store.errors import StoreError
from cordum.store.saga import SagaStack

if TYPE_CHECKING:
    from cordum.bus.publisher import JobPublisher
    from cordum.scheduler.ports import InputSafety
    from cordum.store.saga import RedisSagaClientProtocol

log = logging.getLogger(__name__)

SAGA_SENDER = "cordum-scheduler-saga"
UNMARSHAL_FAILED = "saga_unmarshal_failed"
INVALID_COMPENSATION = "saga_invalid_compensation"
"""DLQ code of a template that parses but cannot be dispatched (e.g. no topic)."""
FOREIGN_COMPENSATION = "saga_foreign_compensation"
"""DLQ code of a template on a tenant's stack that names another tenant."""


@dataclass(frozen=True, slots=True)
class SagaPolicy:
    """Lifetimes and bounds of the saga keys and of one rollback."""

    lock_ttl_s: int = 120
    """TTL of ``saga:<tenant>:<wf>:lock``: how long a crashed rollback blocks the next one
    (Cordum's 2 minutes). A rollback never runs past it."""
    stack_ttl_s: int = 7 * 24 * 3600
    """TTL of the stack and recorded keys, refreshed by every push: a workflow that
    neither fails nor gets cleaned up stops holding memory after a week."""
    store_timeout_s: float = 2.0
    """Bound of one Redis call (Cordum's storeOpTimeout)."""
    safety_timeout_s: float = 3.0
    """Bound of one safety check, above the client's own 2 s (Cordum's engine-side
    defense); a check that times out counts as unavailable and the step proceeds."""
    publish_timeout_s: float = 3.0
    """Bound of one publish, above the publisher's own ack timeout."""
    min_step_s: float = 1.0
    """A further entry is popped only while this much time is left before the
    deadline; below it the rollback stops and reports the rest as remaining."""

    def __post_init__(self) -> None:
        if self.lock_ttl_s <= 0 or self.stack_ttl_s <= 0:
            raise ValueError("lock_ttl_s and stack_ttl_s must be > 0")
        if min(self.store_timeout_s, self.safety_timeout_s, self.publish_timeout_s,
               self.min_step_s) <= 0:
            raise ValueError("timeouts and min_step_s must be > 0")
        if 2 * self.store_timeout_s + self.min_step_s >= self.lock_ttl_s:
            raise ValueError("lock_ttl_s leaves no time for a single step")


class CompensationPublishError(RuntimeError):
    """A compensation job could not be published; the rollback stopped.

    The entry being dispatched is back on the stack (unless even that push
    failed, which is logged with the entry's bytes), and so is everything below
    it: running the rollback again resumes where this one stopped.
    """

    retryable = True

    def __init__(self, report: RollbackReport, cause: Exception) -> None:
        super().__init__(f"saga rollback of {report.workflow_id} (tenant {report.tenant}): "
                         f"publish failed: {cause}")
        self.tenant = report.tenant
        self.workflow_id = report.workflow_id
        self.report = report


@dataclass(slots=True)
class RollbackReport:
    """What one rollback did."""

    workflow_id: str
    tenant: str = ""
    """Whose saga: a rollback only ever reads and dispatches this tenant's stack."""
    acquired: bool = True
    """False when another rollback of the workflow held the lock: nothing was done."""
    dispatched: list[str] = field(default_factory=list)
    """Job ids of the compensation jobs published, in dispatch order."""
    denied: int = 0
    """Entries the safety check denied: consumed, not dispatched."""
    broken: int = 0
    """Entries that could not become a job, reported on sys.job.dlq and consumed."""
    stopped: str = ""
    """Empty when the stack was drained (or the lock was held); "deadline" or
    "publish failed" when entries were left on the stack."""
    remaining: int = 0
    """Entries left on the stack when the rollback stopped early (-1: unknown, Redis
    failed while counting)."""

    @property
    def complete(self) -> bool:
        return not self.stopped

    def counts(self) -> dict[str, Any]:
        return {
            "workflow_id": self.workflow_id,
            "tenant": self.tenant,
            "acquired": self.acquired,
            "dispatched": len(self.dispatched),
            "denied": self.denied,
            "broken": self.broken,
            "remaining": self.remaining,
            "stopped": self.stopped,
        }


class Saga:
    """Records compensation templates and rolls a failed workflow back."""

    def __init__(
        self,
        redis: RedisSagaClientProtocol,
        publisher: JobPublisher,
        *,
        safety: InputSafety | None = None,
        policy: SagaPolicy | None = None,
    ) -> None:
        self._publisher = publisher
        self._safety = safety
        self.policy = policy or SagaPolicy()
        self._stack = SagaStack(redis, timeout_s=self.policy.store_timeout_s)

    # ------------------------------------------------------------ record

    async def record_compensation(self, req: protocol.JobRequest, *, tenant: str = "",
                                  workflow_id: str = "") -> bool:
        """Stack the undo step of a step that succeeded; True when it was pushed.

        ``tenant`` and ``workflow_id`` are the job's as stored (the engine passes
        its meta's); empty, they are the request's own. The undo step runs as a
        job of that tenant. Nothing is recorded for a compensation job, a step
        without compensation or one outside any workflow, nor for a step recorded
        before (same job id). Raises :class:`InvalidCompensation` (no topic, or a
        compensation naming another tenant) or :class:`StoreError`.
        """
        if is_compensation_job(req) or not req.HasField("compensation"):
            return False
        workflow_id = workflow_id.strip() or workflow_id_of(req)
        if not workflow_id:
            return False
        tenant = tenant or tenant_of(req)
        template = compensation_template(req)
        if template is None:
            return False
        foreign = tenant_claims(template) - {tenant}
        if foreign:
            raise InvalidCompensation(
                f"compensation of {req.job_id} names tenant {sorted(foreign)[0]!r}, "
                f"not the job's tenant {tenant!r}")
        template.tenant_id = tenant
        data = template.SerializeToString(deterministic=True)
        step_id = req.job_id.strip() or hashlib.sha256(data).hexdigest()
        pushed = await self._stack.push(tenant, workflow_id, data,
                                        ttl_s=self.policy.stack_ttl_s, step_id=step_id)
        if not pushed:
            log.info("compensation of %s in workflow %s (tenant %s) was recorded already",
                     step_id, workflow_id, tenant)
        return bool(pushed)

    # ------------------------------------------------------------ rollback

    async def rollback(self, tenant: str, workflow_id: str, *,
                       deadline: float | None = None) -> RollbackReport:
        """Dispatch the compensation jobs of ``tenant``'s workflow, newest first.

        ``deadline`` is a ``time.monotonic()`` instant; the loop also ends before
        the lock could lapse. Returns the report (``acquired`` False when another
        rollback holds the lock; ``complete`` False when entries remain). Raises
        :class:`CompensationPublishError` when a publish fails, :class:`StoreError`
        when Redis does.
        """
        tenant, workflow_id = tenant.strip(), workflow_id.strip()
        report = RollbackReport(workflow_id, tenant=tenant)
        if not tenant or not workflow_id:
            return report
        policy = self.policy
        if not await self._stack.try_lock(tenant, workflow_id, ttl_s=policy.lock_ttl_s):
            log.info("rollback of %s (tenant %s) already in progress", workflow_id, tenant)
            report.acquired = False
            return report
        locked_until = time.monotonic() + policy.lock_ttl_s - 2 * policy.store_timeout_s
        end = locked_until if deadline is None else min(deadline, locked_until)
        try:
            await self._drain(report, end)
        finally:
            try:
                await self._stack.unlock(tenant, workflow_id)
            except StoreError as exc:
                log.warning("%s (the lock expires by itself)", exc)
        if report.dispatched or report.denied or report.broken or report.stopped:
            log.info("rollback of %s: %s", workflow_id, report.counts())
        return report

    async def _drain(self, report: RollbackReport, end: float) -> None:
        tenant, workflow_id = report.tenant, report.workflow_id
        while True:
            if end - time.monotonic() < self.policy.min_step_s:
                report.stopped = "deadline"
                report.remaining = await self._stack.length(tenant, workflow_id)
                if report.remaining == 0:
                    report.stopped = ""
                return
            data = await self._stack.pop(tenant, workflow_id)
            if data is None:
                return
            req = protocol.JobRequest()
            try:
                req.ParseFromString(data)
            except Exception as exc:  # DecodeError, or invalid UTF-8 in a string field
                await self._report_broken(report, data, UNMARSHAL_FAILED,
                                          f"unmarshal compensation: {exc}",
                                          "saga-unmarshal-", end)
                report.broken += 1
                continue
            if not belongs_to(req, report.tenant):
                # Recording puts only the tenant's own jobs here; an entry that says
                # otherwise was written by something else and is never published.
                await self._report_broken(
                    report, data, FOREIGN_COMPENSATION,
                    f"compensation names tenant(s) {sorted(tenant_claims(req))}, "
                    f"not {report.tenant!r}", "saga-foreign-", end)
                report.broken += 1
                continue
            await self._dispatch(req, data, report, end)
            if report.stopped:
                return

    async def _dispatch(self, req: protocol.JobRequest, data: bytes, report: RollbackReport,
                        end: float) -> None:
        workflow_id = report.workflow_id
        topic = req.topic.strip()
        if topic and not topic.startswith("job."):
            topic = "job." + topic
        req.topic = topic
        req.job_id = f"comp-{uuid.uuid4()}"
        req.priority = protocol.JobPriority.JOB_PRIORITY_CRITICAL
        mark_compensation(req, workflow_id)
        try:
            # Workers drop what fails this check, with only a log line: report it here.
            protocol.validate_job_request(req)
        except protocol.InvalidPacket as exc:
            await self._report_broken(report, data, INVALID_COMPENSATION, str(exc),
                                      "saga-invalid-", end)
            report.broken += 1
            return
        if await self._denied(req, end):
            report.denied += 1
            return
        if time.monotonic() >= end:
            # The check took the time that was left: this entry waits for the next run.
            await self._push_back(report, data)
            report.stopped = "deadline"
            report.remaining = await self._remaining(report)
            return
        packet = protocol.packet(trace_id=req.job_id, sender_id=SAGA_SENDER, job_request=req)
        try:
            await asyncio.wait_for(
                self._publisher.publish_durable(protocol.SUBJECT_SUBMIT, packet,
                                                msg_id=req.job_id),
                self._bound(self.policy.publish_timeout_s, end))
        except Exception as exc:
            await self._push_back(report, data)
            report.stopped = "publish failed"
            report.remaining = await self._remaining(report)
            raise CompensationPublishError(report, exc) from exc
        report.dispatched.append(req.job_id)

    async def _denied(self, req: protocol.JobRequest, end: float) -> bool:
        """Only an explicit DENY stops a compensation: an undo step left out because
        the kernel was unreachable would leave the workflow half done."""
        if self._safety is None:
            return False
        from cordum.safety.client import Decision

        try:
            verdict = await asyncio.wait_for(self._safety.check(req, tenant_of(req)),
                                             self._bound(self.policy.safety_timeout_s, end))
        except Exception as exc:
            log.warning("safety check of compensation %s failed, dispatching: %s",
                        req.job_id, exc)
            return False
        if verdict.decision is Decision.DENY:
            log.warning("compensation %s of workflow %s denied by safety, skipped: %s",
                        req.job_id, req.labels.get(WORKFLOW_LABEL, ""), verdict.reason)
            return True
        if verdict.decision is Decision.UNAVAILABLE:
            log.warning("safety unavailable for compensation %s, dispatching: %s",
                        req.job_id, verdict.reason)
        return False

    async def _push_back(self, report: RollbackReport, data: bytes) -> None:
        try:
            await self._stack.push(report.tenant, report.workflow_id, data,
                                   ttl_s=self.policy.stack_ttl_s)
        except StoreError as exc:
            # The last copy of the entry is in this log line.
            log.error("compensation of workflow %s (tenant %s) lost: %s; entry (base64) %s",
                      report.workflow_id, report.tenant, exc, base64.b64encode(data).decode())

    async def _remaining(self, report: RollbackReport) -> int:
        try:
            return await self._stack.length(report.tenant, report.workflow_id)
        except StoreError:
            return -1

    async def _report_broken(self, report: RollbackReport, data: bytes, code: str,
                             reason: str, trace_prefix: str, end: float) -> None:
        """Log the entry and say so on sys.job.dlq; the entry itself is consumed."""
        workflow_id = report.workflow_id
        digest = hashlib.sha256(data).hexdigest()
        log.error("workflow %s (tenant %s): unusable compensation entry (%s: %s; %d bytes, "
                  "sha256 %s)", workflow_id, report.tenant, code, reason, len(data), digest)
        trace_id = f"{trace_prefix}{uuid.uuid4()}"
        # job_id and worker_id are filled so the notice passes result validation.
        res = protocol.JobResult(
            job_id=trace_id,
            status=protocol.JobStatus.JOB_STATUS_FAILED_FATAL,
            worker_id=SAGA_SENDER,
            error_code=code,
            error_message=f"workflow {workflow_id}: {reason} (raw_len={len(data)}, "
                          f"sha256={digest})",
        )
        packet = protocol.packet(trace_id=trace_id, sender_id=SAGA_SENDER, job_result=res)
        try:
            await asyncio.wait_for(self._publisher.publish(protocol.SUBJECT_DLQ, packet),
                                   self._bound(self.policy.publish_timeout_s, end))
        except Exception as exc:
            log.error("DLQ notice for workflow %s not published: %s", workflow_id, exc)

    def _bound(self, timeout_s: float, end: float) -> float:
        return max(0.001, min(timeout_s, end - time.monotonic()))


@lru_cache(maxsize=1)
def default_saga() -> Saga:
    """The saga on the process's Redis, NATS and safety kernel."""
    from cordum import runtime
    from cordum.bus.publisher import NatsPublisher
    from cordum.config import settings
    from cordum.safety.client import process_client

    cfg = settings()
    redis = runtime.redis_client(cfg)
    return Saga(redis, NatsPublisher(cfg), safety=process_client(cfg, redis))
