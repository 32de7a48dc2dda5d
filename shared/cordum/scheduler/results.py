"""The result path: a worker's result (or a cancel) becomes the job's state.

A result is applied only when its pointer is the job's own and it comes from
the job's worker of record; a SUCCEEDED result goes through the output phase,
and a workflow step's result through the saga.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cordum import protocol
from cordum.errors import RetryAfter
from cordum.metrics import METRICS
from cordum.scheduler.compensation import InvalidCompensation
from cordum.scheduler.output_phase import OutputPhase
from cordum.scheduler.packets import Outcome, decode
from cordum.step_job_ids import parse_step_job_id
from cordum.store.errors import StoreError
from cordum.store.jobs import NO_STATE, OPEN_STATES, JobState
from cordum.store.results import is_worker_pointer, result_pointer

if TYPE_CHECKING:
    from cordum.scheduler.output_phase import OutputScan
    from cordum.scheduler.policy import EnginePolicy
    from cordum.scheduler.ports import EnginePorts
    from cordum.scheduler.transitions import StateWriter

log = logging.getLogger(__name__)

RESULT_STATES = {
    protocol.JobStatus.JOB_STATUS_SUCCEEDED: JobState.SUCCEEDED,
    protocol.JobStatus.JOB_STATUS_FAILED: JobState.FAILED,
    protocol.JobStatus.JOB_STATUS_FAILED_RETRYABLE: JobState.RETRYING,
    protocol.JobStatus.JOB_STATUS_FAILED_FATAL: JobState.FAILED,
    protocol.JobStatus.JOB_STATUS_TIMEOUT: JobState.TIMEOUT,
    protocol.JobStatus.JOB_STATUS_DENIED: JobState.DENIED,
    protocol.JobStatus.JOB_STATUS_CANCELLED: JobState.CANCELLED,
}
"""The state a result's status moves the job to; any other status is FAILED."""

API_NOTICE_WORKER = "api-gateway"
"""The worker_id of the API's own results: a cancel, an approval reject."""
PLATFORM_WORKERS = frozenset({API_NOTICE_WORKER, protocol.SENDER_GATEWAY,
                              protocol.SENDER_SCHEDULER})


def platform_notice(res: protocol.JobResult) -> bool:
    """A result the platform publishes about a state it has written already (it
    carries no output). Told apart only for the log: it is not applied either."""
    return res.worker_id in PLATFORM_WORKERS and not res.result_ptr


class ResultPath:
    """Applies job results and cancels."""

    def __init__(self, ports: EnginePorts, writer: StateWriter, policy: EnginePolicy) -> None:
        self._store = ports.store
        self._saga = ports.saga
        self._rollback = ports.rollback
        self._requests = ports.requests
        self._runs = ports.runs
        self._writer = writer
        self._policy = policy
        self._output = (OutputPhase(ports.output, ports, writer, policy)
                        if ports.output is not None else None)

    async def handle_result(self, data: bytes) -> Outcome:
        """A job result, or a cancel (the result queue carries both)."""
        msg = decode(data, ("job_result", "job_cancel"))
        if msg.WhichOneof("payload") == "job_cancel":
            return await self._cancel(msg.job_cancel)
        res = msg.job_result
        try:
            protocol.validate_job_result(res)
        except protocol.InvalidPacket as exc:
            log.warning("dropping job result %r: %s", res.job_id, exc)
            return Outcome(res.job_id, "dropped", detail=str(exc))
        if res.result_ptr and not is_worker_pointer(res.job_id, res.result_ptr):
            # The API serves what the pointer names: another job's context, a meta
            # hash, ... would be served as this job's output. Whatever the status.
            return self._reject(res, "foreign_result_ptr",
                                f"result_ptr {res.result_ptr!r} is not "
                                f"{result_pointer(res.job_id)!r}")
        state = RESULT_STATES.get(res.status, JobState.FAILED)
        # The result pointer is written by the same script as the state, so a
        # reader never sees a terminal job without its result. Only a SUCCEEDED
        # result has one, written even when empty: a pointer an earlier attempt
        # left must not stand for this result, which is the one scanned.
        # The status as the worker said it: a workflow retries FAILED but never
        # FAILED_FATAL, which the job's state alone does not tell apart.
        fields = {"worker_id": res.worker_id,
                  "result_status": protocol.JobStatus.Name(res.status).removeprefix("JOB_STATUS_")}
        if state is JobState.SUCCEEDED:
            fields["result_ptr"] = res.result_ptr
        reason = res.error_message or res.error_code
        if reason:
            fields["failure_reason"] = reason
        dlq = None
        if state.terminal and state is not JobState.SUCCEEDED:
            dlq = {"status": protocol.JobStatus.Name(res.status).removeprefix("JOB_STATUS_"),
                   "reason": res.error_message, "reason_code": res.error_code}
        scan: OutputScan | None = None
        records = None
        if state is JobState.SUCCEEDED and self._output is not None:
            # Both checks before the state is written: it is written once, with the
            # decision (a job never flips from SUCCEEDED to OUTPUT_QUARANTINED).
            scan = await self._output.check_result(res)
            fields.update(scan.fields())
            records = scan.records()
            if scan.verdict.quarantine:
                state = JobState.OUTPUT_QUARANTINED
                fields["result_ptr"] = ""  # quarantined output is never served
                dlq = {"topic": scan.topic, "status": JobState.DENIED.value,
                       "reason": scan.verdict.reason, "reason_code": scan.code}
            else:
                fields["result_ptr"] = scan.served_ptr
        # Fenced by the worker of record (written at dispatch) in the same script:
        # a result from any other worker changes nothing, at no extra round trip.
        audit = None
        if scan is not None:
            assert self._output is not None
            audit = self._output.audit_parts(scan)  # a quarantine or a redaction only
        result = await self._writer.transition_result(res.job_id, [state], OPEN_STATES, fields,
                                                      dlq, records=records,
                                                      worker_of_record=res.worker_id,
                                                      audit=audit)
        if result is not None and result.foreign:
            if platform_notice(res):
                # The API's cancel or reject, the gate's completion: the platform wrote
                # the state itself before it said so on the bus.
                await self._tell_run(result.workflow_id, res.job_id)
                return Outcome(res.job_id, "ignored", detail="platform notice")
            return self._reject(res, "worker_mismatch",
                                f"worker {res.worker_id!r} is not the job's worker of record")
        if result is not None and result.workflow_id and (
            result.applied or result.previous == state.value
        ):
            # Also on a redelivery that finds the state already written: recording is
            # idempotent per job and a second rollback trigger finds nothing to undo.
            await self._saga_step(res, state, result.workflow_id,
                                  scan.request if scan is not None else None)
        if scan is not None and scan.held and state is JobState.SUCCEEDED and (
            result is not None and (result.applied or result.previous == state.value)
        ):
            # The content scan reached no kernel: the output waits, unserved, in the held
            # set (again on a redelivery: the first may have stopped before it).
            assert self._output is not None
            await self._output.hold(res.job_id)
        elif scan is not None and not scan.held and result is not None and (
            not result.applied and result.previous == JobState.SUCCEEDED.value
        ):
            # A redelivery that finds the job SUCCEEDED: its first delivery may have
            # left the output held; this scan decided, so the decision is applied now.
            assert self._output is not None
            await self._output.settle(res.job_id, scan)
        if result is not None and state.terminal and (
            result.applied or result.previous == state.value or platform_notice(res)
        ):
            # Again on a redelivery that finds the state written: the send may be what
            # failed. The run applies a job's end once.
            await self._tell_run(result.workflow_id, res.job_id)
        if result is None or not result.applied:
            # Terminal already (a duplicate or a late result) or unknown: ignored.
            return Outcome(res.job_id, "ignored", detail="job is terminal or unknown")
        if state.terminal:
            METRICS.count("jobs_completed", topic=fields.get("topic", ""), status=state.value)
        if scan is not None and scan.verdict.quarantine:
            assert self._output is not None
            await self._output.audit(res.job_id, scan.verdict)
            await self._writer.publish_dlq(res.job_id, JobState.DENIED.value,
                                           scan.verdict.reason, scan.code)
        elif dlq is not None:
            await self._writer.publish_dlq(res.job_id, state.value, res.error_message,
                                           res.error_code)
        return Outcome(res.job_id, "recorded", state.value)

    async def _tell_run(self, run_id: str, job_id: str) -> None:
        """Hand a workflow step's end on to its run (``workflow_id`` is the run's id on
        step jobs). A failed send is retried with the record: the run must hear it."""
        if not run_id or self._runs is None:
            return
        from cordum.bus.workflow_events import RunEvent

        try:
            await self._runs.send(RunEvent.job_ended(job_id, run_id))
        except Exception as exc:
            raise RetryAfter(f"workflow event for {job_id}: {exc}",
                             self._policy.retry_store_s) from exc

    @staticmethod
    def _reject(res: protocol.JobResult, reason: str, detail: str) -> Outcome:
        """A result that must not be applied: dropped (acknowledged), logged, counted."""
        log.warning("dropping job result %s from worker %r: %s", res.job_id, res.worker_id,
                    detail)
        METRICS.count("results_rejected", reason=reason)
        return Outcome(res.job_id, "dropped", detail=detail)

    async def _saga_step(self, res: protocol.JobResult, state: JobState, workflow_id: str,
                         request: protocol.JobRequest | None = None) -> None:
        record = (state is JobState.SUCCEEDED and self._saga is not None
                  and self._requests is not None)
        roll_back = (res.status == protocol.JobStatus.JOB_STATUS_FAILED_FATAL
                     and self._rollback is not None)
        if not (record or roll_back):
            return
        retry_s = self._policy.retry_store_s
        # A saga is one tenant's: the job's stored tenant, never a packet's claim
        # (two tenants may well name their workflows alike).
        try:
            tenant = (await self._store.get(res.job_id)).get("tenant", "")
        except StoreError as exc:
            raise RetryAfter(f"saga step: {exc}", retry_s) from exc
        if not tenant:
            log.error("job %s of workflow %s has no stored tenant: saga step skipped",
                      res.job_id, workflow_id)
            return
        if record:
            assert self._saga is not None and self._requests is not None
            try:
                req = request or await self._requests.get_request(res.job_id)
                if req is not None and await self._saga.record_compensation(
                        req, tenant=tenant, workflow_id=workflow_id):
                    METRICS.count("saga_recorded")
            except StoreError as exc:
                raise RetryAfter(f"saga record: {exc}", retry_s) from exc
            except InvalidCompensation as exc:  # retrying cannot fix the template
                log.error("saga record for %s skipped: %s", res.job_id, exc)
        if roll_back:
            assert self._rollback is not None
            try:
                await self._rollback.trigger(tenant, workflow_id)
            except Exception as exc:
                raise RetryAfter(f"saga rollback trigger: {exc}", retry_s) from exc
            METRICS.count("saga_rollback_triggered")

    # ------------------------------------------------------------ cancel

    async def _cancel(self, cancel: protocol.JobCancel) -> Outcome:
        if not cancel.job_id:
            log.warning("dropping cancel without job_id")
            return Outcome("", "dropped", detail="job_id is empty")
        fields = {"failure_reason": cancel.reason or "cancelled"}
        only_from: tuple[str, ...] = tuple(OPEN_STATES)
        if cancel.requested_by == protocol.SENDER_WORKFLOW:
            # A run's cancel can overtake its step's request, still on its way through
            # the bridge and the submit queue: the job is stored CANCELLED now, and
            # the request, when it comes, finds it over (no orphaned gate or job).
            only_from += (NO_STATE,)
        # A store failure raises RetryAfter: the cancel is redelivered, not dropped.
        applied = await self._writer.transition(cancel.job_id, [JobState.CANCELLED],
                                                only_from, fields)
        step_job = parse_step_job_id(cancel.job_id) if applied else None
        if step_job is not None:
            # A step job cancelled from the bus (its run's own cancel, or a producer):
            # the run hears it like any end; the run checks that the job is its step's.
            await self._tell_run(step_job.run_id, cancel.job_id)
        if not applied:
            return Outcome(cancel.job_id, "ignored", detail="job is terminal or unknown")
        return Outcome(cancel.job_id, "cancelled", JobState.CANCELLED.value)
