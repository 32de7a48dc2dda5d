"""The scheduler engine: what happens to a job request and to a job result.

Each entry point takes the raw packet bytes a queue delivered and either
returns (done: the record may be deleted), raises ``RetryAfter`` (deliver
again later) or raises ``UnparseableRecord`` (never processable: let the
queue's redrive move it to the DLQ).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cordum import protocol, runtime
from cordum.metrics import METRICS
from cordum.safety.client import Decision, SafetyVerdict
from cordum.safety.output_client import CONTENT_TIMEOUT_S
from cordum.scheduler.approval import approval_binds
from cordum.scheduler.constraints import apply_constraints, parse_constraints, safety_meta
from cordum.scheduler.errorcodes import error_code_enum
from cordum.scheduler.errors import NoWorkers, RetryAfter, UnparseableRecord
from cordum.scheduler.jobhash import APPROVAL_GATE_TOPICS, job_hash
from cordum.scheduler.output_check import (
    ASYNC_QUARANTINE_CODE,
    DECISION_TTL_S,
    QUARANTINE_REASON_CODE,
    decision_key,
)
from cordum.scheduler.saga import InvalidCompensation
from cordum.store.errors import InvalidTransition, StoreError
from cordum.store.jobs import (
    NO_STATE,
    OPEN_STATES,
    TERMINAL_STATES,
    JobState,
    meta_key,
    now_us,
)
from cordum.store.results import is_worker_pointer, result_pointer

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from cordum.bus.publisher import NatsPublisher
    from cordum.safety.client import SafetyClient
    from cordum.scheduler.output_check import OutputChecker, OutputVerdict, Prefetched
    from cordum.scheduler.registry import SnapshotRegistry
    from cordum.store.jobs import JobStore, TransitionResult

log = logging.getLogger(__name__)

RETRY_STORE_S = 1.0
RETRY_PUBLISH_S = 2.0
RETRY_SAFETY_S = 5.0
MAX_SCHEDULING_RETRIES = 50
"""A job that has entered SCHEDULED this many times fails (DLQ max_scheduling_retries)."""
MAX_DISPATCH_PICKS = 3
"""Re-picks when the chosen worker turns out stale."""
DLQ_PUBLISH_RETRY_S = 0.5
OUTPUT_MARGIN_S = 2.0
"""Time kept back from the content check for the writes after it."""
QUARANTINE_RETRY_S = (1.0, 2.0)
"""Pauses between the tries of an async quarantine (3 tries, as Cordum)."""

DISPATCHABLE_FROM = (NO_STATE, JobState.PENDING, JobState.SCHEDULED, JobState.RETRYING,
                     JobState.APPROVAL_REQUIRED)
"""A request in any other state was dispatched already or is over: redelivery is a no-op."""


RESULT_STATES = {
    protocol.JobStatus.JOB_STATUS_SUCCEEDED: JobState.SUCCEEDED,
    protocol.JobStatus.JOB_STATUS_FAILED: JobState.FAILED,
    protocol.JobStatus.JOB_STATUS_FAILED_RETRYABLE: JobState.RETRYING,
    protocol.JobStatus.JOB_STATUS_FAILED_FATAL: JobState.FAILED,
    protocol.JobStatus.JOB_STATUS_TIMEOUT: JobState.TIMEOUT,
    protocol.JobStatus.JOB_STATUS_DENIED: JobState.DENIED,
    protocol.JobStatus.JOB_STATUS_CANCELLED: JobState.CANCELLED,
}



def tenant_of(req: protocol.JobRequest) -> str:
    return req.tenant_id or req.env.get("tenant_id", "") or "default"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of a packet, for logs and tests."""

    job_id: str
    action: str
    state: str = ""
    detail: str = ""


def decode(data: bytes, kinds: str | tuple[str, ...]) -> protocol.BusPacket:
    try:
        decoded = protocol.decode(data)
    except protocol.InvalidPacket as exc:
        raise UnparseableRecord(str(exc)) from exc
    kinds = (kinds,) if isinstance(kinds, str) else kinds
    if decoded.kind not in kinds:
        raise UnparseableRecord(f"expected a {' or '.join(kinds)} packet, got {decoded.kind}")
    return decoded.packet


class Engine:
    def __init__(
        self,
        *,
        store: JobStore,
        registry: SnapshotRegistry,
        strategy: Any,
        safety: SafetyClient,
        publisher: NatsPublisher,
        locks: Any = None,
        backoff: Any = None,
        input_fail_open: bool = False,
        saga: Any = None,
        rollback: Any = None,
        requests: Any = None,
        output: OutputChecker | None = None,
    ) -> None:
        self._store = store
        self._registry = registry
        self._strategy = strategy
        self._safety = safety
        self._publisher = publisher
        self._locks = locks
        self._backoff = backoff
        self._fail_open = input_fail_open
        self._saga = saga
        self._rollback = rollback
        self._requests = requests
        self._output = output
        """The output policy checker; None when OUTPUT_POLICY_ENABLED is off."""

    @property
    def store(self) -> JobStore:
        return self._store

    # ------------------------------------------------------------ requests

    async def handle_request(self, data: bytes) -> Outcome:
        msg = decode(data, "job_request")
        req = msg.job_request
        try:
            protocol.validate_job_request(req)
        except protocol.InvalidPacket as exc:
            # Cordum drops and acks what can never be valid; the log says why.
            log.warning("dropping job request %r: %s", req.job_id, exc)
            return Outcome(req.job_id, "dropped", detail=str(exc))
        env_tenant = req.env.get("tenant_id", "")
        if req.tenant_id and env_tenant and env_tenant != req.tenant_id:
            log.warning("dropping job request %s: tenant_id %r != env tenant_id %r",
                        req.job_id, req.tenant_id, env_tenant)
            return Outcome(req.job_id, "dropped", detail="tenant mismatch")
        return await self.handle_job_request(req, msg.trace_id)

    async def handle_job_request(self, req: protocol.JobRequest, trace_id: str) -> Outcome:
        """Decide and dispatch one job under its job lock (also used by the replayer)."""
        req.job_id, req.topic = req.job_id.strip(), req.topic.strip()
        METRICS.count("jobs_received", topic=req.topic)
        if self._locks is None:
            return await self._process(req, trace_id)
        started = time.monotonic()
        # The job's meta comes back with the lock: one round trip for both.
        async with self._locks.job_lock(req.job_id, read=meta_key(req.job_id)) as lease:
            METRICS.observe_ms("job_lock_wait", (time.monotonic() - started) * 1000)
            return await self._process(req, trace_id, started, lease.data)

    @staticmethod
    def _check_owner(req: protocol.JobRequest, tenant: str, meta: Mapping[str, str]) -> None:
        """Refuse a request whose job id is stored with another tenant or topic.

        The gateway, the approval and the replayer re-send a stored job with its
        own tenant and topic; a packet that differs would take over (or fail)
        someone else's job. Nothing of the job is touched and the record goes to
        the queue's DLQ (``UnparseableRecord``), not under the job's id.
        """
        stored_tenant, stored_topic = meta.get("tenant", ""), meta.get("topic", "").strip()
        if (stored_tenant and stored_tenant != tenant) or (stored_topic
                                                          and stored_topic != req.topic):
            METRICS.count("requests_rejected", reason="job_id_conflict")
            log.error("refusing job request %s: tenant %r topic %r, the stored job has "
                      "tenant %r topic %r", req.job_id, tenant, req.topic, stored_tenant,
                      stored_topic)
            raise UnparseableRecord(f"job {req.job_id} exists with another tenant or topic")

    async def _process(self, req: protocol.JobRequest, trace_id: str,
                       started: float | None = None,
                       meta: dict[str, str] | None = None) -> Outcome:
        job_id, tenant = req.job_id, tenant_of(req)
        if meta is None:
            try:
                meta = await self._store.get(job_id)
            except StoreError as exc:
                # Fail closed: without the state a redelivery could dispatch twice.
                raise RetryAfter(str(exc), RETRY_STORE_S) from exc
        self._check_owner(req, tenant, meta)
        state = meta.get("state", "")
        if state in (JobState.DISPATCHED, JobState.RUNNING):
            return Outcome(job_id, "noop", state, "already dispatched")
        if state in TERMINAL_STATES:
            if state in (JobState.DENIED, JobState.FAILED):
                await self._publish_dlq(job_id, state, meta.get("failure_reason", ""),
                                        "redelivery_dlq_retry")
            return Outcome(job_id, "noop", state, "terminal")
        base = {"topic": req.topic, "tenant": tenant, "trace_id": trace_id}
        workflow_id = req.workflow_id.strip()
        if workflow_id and not meta.get("workflow_id"):
            # Returned by every later transition: the result path learns from it,
            # without another read, that the job is a saga step. Only the field
            # (a label is the client's word), written once: a later packet cannot
            # move the job into another saga.
            base["workflow_id"] = workflow_id
        attempts = int(meta.get("attempts") or 0)
        if not state:
            # Came straight from the bus, not through the gateway: it starts PENDING,
            # with its request stored for the replayer.
            await self._save_request(req)
            await self._transition(job_id, [JobState.PENDING], (NO_STATE,), base)
        elif state == JobState.SCHEDULED:
            # A replayed SCHEDULED job counts as another scheduling attempt.
            await self._bump_attempts(job_id)
            attempts += 1
        if attempts >= MAX_SCHEDULING_RETRIES:
            reason = f"max scheduling retries exceeded (attempts={attempts})"
            return await self._fail(job_id, JobState.FAILED, reason, "max_scheduling_retries",
                                    req.topic, base)

        verdict, safety = await self._decide(req, tenant, meta)
        fields = {**base, **safety}
        if verdict.decision is Decision.THROTTLE:
            raise RetryAfter(f"safety throttle: {verdict.reason}", RETRY_SAFETY_S)
        if verdict.decision is Decision.REQUIRE_APPROVAL:
            await self._transition(job_id, [JobState.APPROVAL_REQUIRED], DISPATCHABLE_FROM, fields)
            return Outcome(job_id, "gated", JobState.APPROVAL_REQUIRED.value, verdict.reason)
        if verdict.decision not in (Decision.ALLOW, Decision.ALLOW_WITH_CONSTRAINTS):
            code = "safety_denied" if verdict.decision is Decision.DENY else "safety_unknown"
            return await self._fail(job_id, JobState.DENIED, verdict.reason or "denied by policy",
                                    code, req.topic, fields)
        if req.topic in APPROVAL_GATE_TOPICS:
            return await self._complete_gate(req, trace_id, fields)

        budgets = verdict.constraints.budgets if verdict.constraints is not None else None
        if budgets is not None:
            apply_constraints(req, verdict.constraints)
            if budgets.max_retries > 0 and attempts >= budgets.max_retries + 1:
                reason = f"max retries exceeded (attempts={attempts}, max_retries=" \
                         f"{budgets.max_retries})"
                return await self._fail(job_id, JobState.FAILED, reason, "max_retries_exceeded",
                                        req.topic, fields)
            if budgets.max_concurrent_jobs > 0:
                active = await self._active_others(tenant, job_id)
                if active >= budgets.max_concurrent_jobs:
                    # Acknowledged: the job stays PENDING until the tenant has room.
                    return await self._wait(job_id, state, f"tenant {tenant} at its limit of "
                                            f"{budgets.max_concurrent_jobs} active jobs")
        if req.budget.deadline_ms > 0 and not meta.get("deadline_unix"):
            fields["deadline_unix"] = str(now_us() + req.budget.deadline_ms * 1000)

        # A job that waits for workers stays PENDING and is picked up again by the
        # queue's retry or by the replayer.
        try:
            subject = await self._pick(req, attempts)
        except RetryAfter as exc:
            # No worker, or all overloaded: acknowledged, the job stays PENDING and
            # the replayer (or a worker coming online) drives it again.
            return await self._wait(job_id, state, exc.reason)
        except Exception as exc:  # routing can never succeed as configured
            code = getattr(exc, "reason_code", "dispatch_failed")
            return await self._fail(job_id, JobState.FAILED, str(exc), code, req.topic, fields)
        worker_id = protocol.worker_of_subject(subject)

        # DISPATCHED is recorded before the publish, so a crash after it leaves a
        # job the reconciler can see; a failed publish rolls back to SCHEDULED.
        applied = await self._transition(
            job_id, [JobState.SCHEDULED, JobState.DISPATCHED], DISPATCHABLE_FROM,
            {**fields, "worker_id": worker_id},
        )
        if not applied:
            return Outcome(job_id, "noop", detail="already dispatched or finished")
        packet = protocol.packet(trace_id=trace_id or job_id,
                                 sender_id=protocol.SENDER_SCHEDULER, job_request=req)
        try:
            await self._publisher.publish(subject, packet)
        except Exception as exc:
            await self._transition(job_id, [JobState.SCHEDULED], (JobState.DISPATCHED,), {})
            raise RetryAfter(f"dispatch to {subject} failed: {exc}",
                             self._delay(attempts + 1, RETRY_PUBLISH_S)) from exc
        self._registry.record_dispatch(worker_id)
        METRICS.count("jobs_dispatched", topic=req.topic)
        if started is not None:
            METRICS.observe_ms("dispatch_latency", (time.monotonic() - started) * 1000,
                               topic=req.topic)
        await self._transition(job_id, [JobState.RUNNING], (JobState.DISPATCHED,), {})
        return Outcome(job_id, "dispatched", JobState.RUNNING.value, worker_id)

    async def _decide(self, req: protocol.JobRequest, tenant: str,
                      meta: Mapping[str, str]) -> tuple[SafetyVerdict, dict[str, str]]:
        """The safety verdict for ``req`` and the job meta fields that record it.

        A job skips the kernel only when its meta (read under the job lock) holds
        an approval the approve endpoint recorded, bound to this exact request (job
        hash) and, outside the approval-gate topics, to the policy snapshot it was
        approved under. The request's own ``approval_*`` labels grant nothing:
        whoever publishes on sys.job.submit can write them.
        """
        current_hash = job_hash(req)
        stored_hash = meta.get("safety_job_hash", "")
        if approval_binds(meta, req.topic, current_hash):
            verdict = SafetyVerdict(
                Decision.ALLOW, "approval granted", meta.get("safety_rule_id", ""),
                meta.get("safety_snapshot", ""),
                constraints=parse_constraints(meta.get("safety_constraints", "")),
            )
            return verdict, {"safety_decision": Decision.ALLOW.value,
                             "safety_reason": verdict.reason, "safety_job_hash": stored_hash}
        verdict = await self._check_safety(req, tenant)
        if verdict.approval_required and verdict.decision in (Decision.ALLOW,
                                                              Decision.ALLOW_WITH_CONSTRAINTS):
            verdict = replace(verdict, decision=Decision.REQUIRE_APPROVAL)
        keep_hash = verdict.decision is Decision.REQUIRE_APPROVAL and stored_hash
        return verdict, safety_meta(verdict, stored_hash if keep_hash else current_hash)

    async def _complete_gate(self, req: protocol.JobRequest, trace_id: str,
                             fields: Mapping[str, str]) -> Outcome:
        """An allowed approval-gate job is done: no worker runs it."""
        applied = await self._transition(req.job_id, [JobState.SUCCEEDED], DISPATCHABLE_FROM,
                                         {**fields, "worker_id": protocol.SENDER_SCHEDULER})
        if applied:
            res = protocol.JobResult(job_id=req.job_id,
                                     status=protocol.JobStatus.JOB_STATUS_SUCCEEDED,
                                     worker_id=protocol.SENDER_SCHEDULER)
            await self._publisher.publish(protocol.SUBJECT_RESULT, protocol.packet(
                trace_id=trace_id or req.job_id, sender_id=protocol.SENDER_SCHEDULER,
                job_result=res))
        return Outcome(req.job_id, "completed" if applied else "noop", JobState.SUCCEEDED.value,
                       "approval gate")

    async def _active_others(self, tenant: str, job_id: str) -> int:
        try:
            return await self._store.count_active(tenant, exclude=job_id)
        except StoreError as exc:
            raise RetryAfter(str(exc), RETRY_STORE_S) from exc

    async def _check_safety(self, req: protocol.JobRequest, tenant: str) -> SafetyVerdict:
        verdict = await self._safety.check(req, tenant)
        if verdict.decision is Decision.DENY:
            METRICS.count("safety_denied", topic=req.topic)
        if verdict.decision is not Decision.UNAVAILABLE:
            return verdict
        METRICS.count("safety_unavailable", topic=req.topic)
        if not self._fail_open:
            raise RetryAfter(f"safety unavailable: {verdict.reason}", RETRY_SAFETY_S)
        # Fail-open is the operator's explicit choice; the job carries the mark.
        log.warning("safety unavailable, fail-open: dispatching %s (%s)", req.job_id,
                    verdict.reason)
        req.labels["safety_bypassed"] = "true"
        req.labels["safety_bypass_reason"] = verdict.reason[:256]
        METRICS.count("safety_fail_open", topic=req.topic)
        try:  # Cordum's counter, shown by GET /api/v1/status
            await self._store.count_fail_open()
        except StoreError as exc:
            log.warning("fail-open counter not updated: %s", exc)
        return replace(verdict, decision=Decision.ALLOW, rule_id="fail-open")

    async def _pick(self, req: protocol.JobRequest, attempts: int) -> str:
        """The subject to dispatch on. A stale pick, or no worker on this container's
        copy of the snapshot (up to 5 s old), is tried again on a fresh read: a worker
        that just came online must not leave the job waiting for the replayer."""
        last: Exception | None = None
        refreshed = False
        for _ in range(MAX_DISPATCH_PICKS):
            workers = await self._registry.workers(refresh=last is not None)
            refreshed = refreshed or last is not None
            try:
                subject = self._strategy.pick(req, workers)
            except RetryAfter as exc:
                last = exc
                if refreshed:
                    break
                continue
            except Exception as exc:
                last = exc
                break
            worker_id = protocol.worker_of_subject(subject)
            if not worker_id or self._registry.is_alive(worker_id):
                return subject
            last = NoWorkers(req.topic)
            log.info("worker %s went stale; picking again", worker_id)
        assert last is not None
        if not isinstance(last, RetryAfter):
            raise last
        # Counted, so a job that never finds a worker ends at the retry cap.
        await self._bump_attempts(req.job_id)
        raise RetryAfter(last.reason, self._delay(attempts, last.delay_s))

    async def _wait(self, job_id: str, state: str, reason: str) -> Outcome:
        """Leave the job waiting. One that was waiting already goes to the young end
        of its index, so the replayer's oldest-first pages reach the jobs behind it."""
        if state in (JobState.PENDING, JobState.SCHEDULED):
            try:
                await self._store.touch(job_id, state)
            except StoreError as exc:
                log.warning("index of waiting job %s not refreshed: %s", job_id, exc)
        return Outcome(job_id, "waiting", state or JobState.PENDING.value, reason)

    async def _save_request(self, req: protocol.JobRequest) -> None:
        from google.protobuf import json_format

        try:
            await self._store.put_request(req.job_id, json_format.MessageToJson(req, indent=None))
        except StoreError as exc:
            raise RetryAfter(str(exc), RETRY_STORE_S) from exc

    async def _bump_attempts(self, job_id: str) -> None:
        try:
            await self._store.incr_attempts(job_id)
        except StoreError as exc:
            log.warning("attempts of %s not counted: %s", job_id, exc)

    def _delay(self, attempts: int, floor: float) -> float:
        if self._backoff is None:
            return floor
        return max(floor, self._backoff.delay(attempts))

    async def _fail(self, job_id: str, state: JobState, reason: str, code: str, topic: str,
                    fields: Mapping[str, str]) -> Outcome:
        """Terminal failure: state and DLQ entry in one step, then the sys.job.dlq packet."""
        applied = await self._transition(
            job_id, [state], (*DISPATCHABLE_FROM, JobState.DISPATCHED, JobState.RUNNING),
            {**fields, "failure_reason": reason},
            dlq={"topic": topic, "status": state.value, "reason": reason, "reason_code": code},
        )
        if applied:
            await self._publish_dlq(job_id, state.value, reason, code)
        return Outcome(job_id, "failed" if applied else "noop", state.value, code)

    async def _publish_dlq(self, job_id: str, state: str, reason: str, code: str) -> None:
        status = {JobState.DENIED: protocol.JobStatus.JOB_STATUS_DENIED,
                  JobState.TIMEOUT: protocol.JobStatus.JOB_STATUS_TIMEOUT,
                  JobState.CANCELLED: protocol.JobStatus.JOB_STATUS_CANCELLED,
                  }.get(JobState(state), protocol.JobStatus.JOB_STATUS_FAILED)
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
                    await asyncio.sleep(DLQ_PUBLISH_RETRY_S)
                else:
                    # The DLQ entry is in Redis already; only the notification is lost.
                    log.error("publish %s for %s failed: %s", protocol.SUBJECT_DLQ, job_id, exc)

    # ------------------------------------------------------------ results

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
        fields = {"worker_id": res.worker_id}
        if state is JobState.SUCCEEDED:
            fields["result_ptr"] = res.result_ptr
        reason = res.error_message or res.error_code
        if reason:
            fields["failure_reason"] = reason
        dlq = None
        if state.terminal and state is not JobState.SUCCEEDED:
            dlq = {"status": protocol.JobStatus.Name(res.status).removeprefix("JOB_STATUS_"),
                   "reason": res.error_message, "reason_code": res.error_code}
        scan: _OutputScan | None = None
        records = None
        if state is JobState.SUCCEEDED and self._output is not None:
            scan = await self._output_sync(res)
            fields.update(scan.fields())
            records = scan.records()
            if scan.verdict.quarantine:
                state = JobState.OUTPUT_QUARANTINED
                fields["result_ptr"] = ""  # quarantined output is never served
                dlq = {"topic": scan.topic, "status": JobState.DENIED.value,
                       "reason": scan.verdict.reason, "reason_code": QUARANTINE_REASON_CODE}
            elif scan.verdict.result_ptr:
                fields["result_ptr"] = scan.verdict.result_ptr
        # Fenced by the worker of record (written at dispatch) in the same script:
        # a result from any other worker changes nothing, at no extra round trip.
        result = await self._transition_result(res.job_id, [state], OPEN_STATES, fields, dlq,
                                               records=records,
                                               worker_of_record=res.worker_id)
        if result is not None and result.foreign:
            if _platform_notice(res):
                # The API's cancel or reject, the gate's completion: the platform wrote
                # the state itself before it said so on the bus.
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
        if scan is not None and state is JobState.SUCCEEDED and result is not None and (
            result.applied or result.previous == state.value
        ):
            # The content scan, awaited here: a task left running after the handler
            # returns is frozen with the container. A redelivery scans again (a lost
            # invocation must not skip it); a quarantine applies once.
            await self._output_async(res.job_id, scan)
        if result is None or not result.applied:
            # Terminal already (a duplicate or a late result) or unknown: ignored.
            return Outcome(res.job_id, "ignored", detail="job is terminal or unknown")
        if state.terminal:
            METRICS.count("jobs_completed", topic=fields.get("topic", ""), status=state.value)
        if scan is not None and scan.verdict.quarantine:
            await self._audit_output(res.job_id, scan.verdict)
            await self._publish_dlq(res.job_id, JobState.DENIED.value, scan.verdict.reason,
                                    QUARANTINE_REASON_CODE)
        elif dlq is not None:
            await self._publish_dlq(res.job_id, state.value, res.error_message, res.error_code)
        return Outcome(res.job_id, "recorded", state.value)

    @staticmethod
    def _reject(res: protocol.JobResult, reason: str, detail: str) -> Outcome:
        """A result that must not be applied: dropped (acknowledged), logged, counted."""
        log.warning("dropping job result %s from worker %r: %s", res.job_id, res.worker_id,
                    detail)
        METRICS.count("results_rejected", reason=reason)
        return Outcome(res.job_id, "dropped", detail=detail)

    # ------------------------------------------------------------ output policy

    async def _output_sync(self, res: protocol.JobResult) -> _OutputScan:
        """The metadata check of a SUCCEEDED result, before its state is written."""
        assert self._output is not None
        started = time.monotonic()
        pre = await self._output.prefetch(res.job_id, res.result_ptr)
        req = pre.request
        topic = (req.topic if req is not None else "") or "unknown"
        tenant = tenant_of(req) if req is not None else ""
        labels = dict(req.labels) if req is not None else {}
        verdict = await self._output.sync_check(res, topic, tenant, labels=labels,
                                                prefetched=pre, record=False)
        self._output_metrics(verdict, topic, started)
        return _OutputScan(res.job_id, topic, tenant, labels, res.result_ptr, pre, verdict)

    async def _output_async(self, job_id: str, scan: _OutputScan) -> None:
        """The content check of a job now SUCCEEDED (Cordum's async phase)."""
        assert self._output is not None
        started = time.monotonic()
        timeout = min(CONTENT_TIMEOUT_S, runtime.time_left(CONTENT_TIMEOUT_S) - OUTPUT_MARGIN_S)
        if timeout <= 0:
            # No time left in this invocation: fail as the kernel being slow would.
            log.warning("job %s: no time left for the output content check", job_id)
            timeout = 0.001
        verdict = await self._output.async_check(
            job_id, scan.topic, scan.tenant, scan.verdict.result_ptr or scan.result_ptr,
            labels=scan.labels, timeout_s=timeout, prefetched=scan.prefetched, record=False)
        self._output_metrics(verdict, scan.topic, started)
        done = replace(scan, verdict=verdict)
        if verdict.quarantine:
            await self._quarantine_async(job_id, done)
            return
        fields = done.fields()
        if verdict.result_ptr and verdict.result_ptr != scan.result_ptr:
            fields["result_ptr"] = verdict.result_ptr
        try:
            await self._store.put_records(job_id, fields, done.records())
        except StoreError as exc:  # the decision stands; only its record is missing
            log.warning("job %s: output decision not recorded: %s", job_id, exc)

    async def _quarantine_async(self, job_id: str, scan: _OutputScan) -> None:
        """SUCCEEDED -> OUTPUT_QUARANTINED under the job lock, at most 3 tries."""
        verdict = scan.verdict
        dlq = {"topic": scan.topic, "status": JobState.DENIED.value, "reason": verdict.reason,
               "reason_code": ASYNC_QUARANTINE_CODE}
        error = ""
        for attempt, pause in enumerate((*QUARANTINE_RETRY_S, None)):
            try:
                async with self._job_lock(job_id):
                    # The pointer goes with the state: quarantined output is never served.
                    result = await self._store.transition(
                        job_id, [JobState.OUTPUT_QUARANTINED], only_from=(JobState.SUCCEEDED,),
                        fields={**scan.fields(), "result_ptr": ""}, dlq=dlq,
                        records=scan.records())
            except (StoreError, RetryAfter, InvalidTransition) as exc:
                error = str(exc)
                log.warning("job %s: async quarantine try %d failed: %s", job_id, attempt + 1,
                            exc)
                if pause is not None:
                    await asyncio.sleep(pause)
                continue
            if result.applied:
                await self._audit_output(job_id, verdict)
                await self._publish_dlq(job_id, JobState.DENIED.value, verdict.reason,
                                        ASYNC_QUARANTINE_CODE)
            return
        # The job stays SUCCEEDED: say so loudly, on the DLQ subject operators watch.
        log.error("job %s: output quarantined by policy but the state was not changed: %s",
                  job_id, error)
        await self._publish_dlq(job_id, JobState.FAILED.value,
                                f"quarantine_state_failed: {error}", "quarantine_failed")

    def _job_lock(self, job_id: str) -> Any:
        if self._locks is None:
            return contextlib.nullcontext()
        return self._locks.job_lock(job_id)

    async def _audit_output(self, job_id: str, verdict: OutputVerdict) -> None:
        from cordum.safety.output_policy import OutputDecision

        status = (protocol.JobStatus.JOB_STATUS_SUCCEEDED
                  if verdict.decision is OutputDecision.REDACT
                  else protocol.JobStatus.JOB_STATUS_DENIED)
        progress = protocol.JobProgress(job_id=job_id, step_id="output_policy", percent=100,
                                        status=status, message=verdict.reason)
        try:
            await self._publisher.publish(protocol.SUBJECT_AUDIT_OUTPUT, protocol.packet(
                trace_id=job_id, sender_id=protocol.SENDER_SCHEDULER, job_progress=progress))
        except Exception as exc:  # the state and the DLQ entry carry the decision
            log.error("output audit for %s not published: %s", job_id, exc)

    @staticmethod
    def _output_metrics(verdict: OutputVerdict, topic: str, started: float) -> None:
        METRICS.count("output_policy_checked", topic=topic)
        if verdict.skipped:
            METRICS.count("output_policy_skipped", topic=topic)
        if verdict.quarantine:
            METRICS.count("output_policy_quarantined", topic=topic)
        METRICS.observe_ms("output_check_latency", (time.monotonic() - started) * 1000,
                           topic=topic, phase=verdict.phase)

    async def _saga_step(self, res: protocol.JobResult, state: JobState, workflow_id: str,
                         request: protocol.JobRequest | None = None) -> None:
        record = (state is JobState.SUCCEEDED and self._saga is not None
                  and self._requests is not None)
        roll_back = (res.status == protocol.JobStatus.JOB_STATUS_FAILED_FATAL
                     and self._rollback is not None)
        if not (record or roll_back):
            return
        # A saga is one tenant's: the job's stored tenant, never a packet's claim
        # (two tenants may well name their workflows alike).
        try:
            tenant = (await self._store.get(res.job_id)).get("tenant", "")
        except StoreError as exc:
            raise RetryAfter(f"saga step: {exc}", RETRY_STORE_S) from exc
        if not tenant:
            log.error("job %s of workflow %s has no stored tenant: saga step skipped",
                      res.job_id, workflow_id)
            return
        if record:
            try:
                req = request or await self._requests.get_request(res.job_id)
                if req is not None and await self._saga.record_compensation(
                        req, tenant=tenant, workflow_id=workflow_id):
                    METRICS.count("saga_recorded")
            except StoreError as exc:
                raise RetryAfter(f"saga record: {exc}", RETRY_STORE_S) from exc
            except InvalidCompensation as exc:  # retrying cannot fix the template
                log.error("saga record for %s skipped: %s", res.job_id, exc)
        if roll_back:
            try:
                await self._rollback.trigger(tenant, workflow_id)
            except Exception as exc:
                raise RetryAfter(f"saga rollback trigger: {exc}", RETRY_STORE_S) from exc
            METRICS.count("saga_rollback_triggered")

    async def cancel_job(self, job_id: str, reason: str = "cancelled by request") -> Outcome:
        """Cancel an open job and tell its worker (one JobCancel on sys.job.cancel)."""
        applied = await self._transition(job_id, [JobState.CANCELLED], OPEN_STATES,
                                         {"failure_reason": reason})
        if not applied:
            return Outcome(job_id, "ignored", detail="job is terminal or unknown")
        notice = protocol.JobCancel(job_id=job_id, reason=reason,
                                    requested_by=protocol.SENDER_SCHEDULER)
        try:
            await self._publisher.publish(protocol.SUBJECT_CANCEL, protocol.packet(
                trace_id=job_id, sender_id=protocol.SENDER_SCHEDULER, job_cancel=notice))
        except Exception as exc:  # the job is CANCELLED; only the worker's notice is lost
            log.error("cancel notice for %s not published: %s", job_id, exc)
        return Outcome(job_id, "cancelled", JobState.CANCELLED.value)

    async def _cancel(self, cancel: protocol.JobCancel) -> Outcome:
        if not cancel.job_id:
            log.warning("dropping cancel without job_id")
            return Outcome("", "dropped", detail="job_id is empty")
        fields = {"failure_reason": cancel.reason or "cancelled"}
        # A store failure raises RetryAfter: the cancel is redelivered, not dropped.
        applied = await self._transition(cancel.job_id, [JobState.CANCELLED], OPEN_STATES, fields)
        if not applied:
            return Outcome(cancel.job_id, "ignored", detail="job is terminal or unknown")
        return Outcome(cancel.job_id, "cancelled", JobState.CANCELLED.value)

    async def _transition(self, job_id: str, path: list[JobState], only_from: Iterable[str],
                          fields: Mapping[str, str],
                          dlq: Mapping[str, Any] | None = None) -> bool:
        result = await self._transition_result(job_id, path, only_from, fields, dlq)
        return result is not None and result.applied

    async def _transition_result(self, job_id: str, path: list[JobState],
                                 only_from: Iterable[str], fields: Mapping[str, str],
                                 dlq: Mapping[str, Any] | None = None, *,
                                 records: Mapping[str, tuple[str, int]] | None = None,
                                 worker_of_record: str = "",
                                 ) -> TransitionResult | None:
        """The store's answer; None when the state machine forbids the move."""
        try:
            return await self._store.transition(job_id, path, only_from=only_from,
                                                fields=fields, dlq=dlq, records=records,
                                                worker_of_record=worker_of_record)
        except InvalidTransition as exc:
            log.warning("%s", exc)
            return None
        except StoreError as exc:
            raise RetryAfter(str(exc), RETRY_STORE_S) from exc


@dataclass(frozen=True, slots=True)
class _OutputScan:
    """One result's output checks: what they were asked about and their verdict."""

    job_id: str
    topic: str
    tenant: str
    labels: dict[str, str]
    result_ptr: str
    prefetched: Prefetched
    verdict: OutputVerdict

    @property
    def request(self) -> protocol.JobRequest | None:
        return self.prefetched.request  # type: ignore[no-any-return]

    def fields(self) -> dict[str, str]:
        """The job meta fields that carry the decision (Cordum's ``output_safety``)."""
        return {"output_safety": self.verdict.record_json(),
                "output_decision": self.verdict.decision.value}

    def records(self) -> dict[str, tuple[str, int]]:
        return {decision_key(self.job_id): (self.verdict.record_json(),
                                                       DECISION_TTL_S)}


API_NOTICE_WORKER = "api-gateway"
"""The worker_id of the API's own results: a cancel, an approval reject."""
PLATFORM_WORKERS = frozenset({API_NOTICE_WORKER, protocol.SENDER_GATEWAY,
                              protocol.SENDER_SCHEDULER})


def _platform_notice(res: protocol.JobResult) -> bool:
    """A result the platform publishes about a state it has written already (it
    carries no output). Told apart only for the log: it is not applied either."""
    return res.worker_id in PLATFORM_WORKERS and not res.result_ptr
