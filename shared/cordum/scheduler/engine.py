"""The scheduler engine: what happens to a job request and to a job result.

Each entry point takes the raw packet bytes a queue delivered and either
returns (done: the record may be deleted), raises ``RetryAfter`` (deliver
again later) or raises ``UnparseableRecord`` (never processable: let the
queue's redrive move it to the DLQ).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cordum import protocol
from cordum.safety.client import Decision
from cordum.scheduler.errors import NoWorkers, RetryAfter, UnparseableRecord
from cordum.scheduler.registry import pick_worker
from cordum.store.errors import InvalidTransition, StoreError
from cordum.store.jobs import NO_STATE, JobState

if TYPE_CHECKING:
    from cordum.bus.publisher import NatsPublisher
    from cordum.config import PoolsConfig
    from cordum.safety.client import SafetyClient
    from cordum.scheduler.registry import SnapshotRegistry
    from cordum.store.jobs import JobStore

log = logging.getLogger(__name__)

RETRY_STORE_S = 1.0
RETRY_PUBLISH_S = 2.0
RETRY_SAFETY_S = 5.0

DISPATCHABLE_FROM = (NO_STATE, JobState.PENDING, JobState.SCHEDULED, JobState.RETRYING)
"""A request in any other state was dispatched already or is over: redelivery is a no-op."""

OPEN_STATES = (
    JobState.PENDING,
    JobState.APPROVAL_REQUIRED,
    JobState.SCHEDULED,
    JobState.DISPATCHED,
    JobState.RUNNING,
    JobState.RETRYING,
)

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
        safety: SafetyClient,
        publisher: NatsPublisher,
        pools: PoolsConfig,
    ) -> None:
        self._store = store
        self._registry = registry
        self._safety = safety
        self._publisher = publisher
        self._pools = pools

    async def handle_request(self, data: bytes) -> Outcome:
        msg = decode(data, "job_request")
        req = msg.job_request
        try:
            protocol.validate_job_request(req)
        except protocol.InvalidPacket as exc:
            # Cordum drops and acks what can never be valid; the log says why.
            log.warning("dropping job request %r: %s", req.job_id, exc)
            return Outcome(req.job_id, "dropped", detail=str(exc))
        return await self._dispatch(req, msg.trace_id)

    async def _dispatch(self, req: protocol.JobRequest, trace_id: str) -> Outcome:
        job_id, tenant = req.job_id, tenant_of(req)
        base = {"topic": req.topic, "tenant": tenant, "trace_id": trace_id}

        verdict = await self._safety.check(req, tenant)
        safety = {
            "safety_decision": verdict.decision.value,
            "safety_reason": verdict.reason,
            "safety_rule_id": verdict.rule_id,
            "safety_snapshot": verdict.policy_snapshot,
        }
        if verdict.decision in (Decision.UNAVAILABLE, Decision.THROTTLE):
            raise RetryAfter(f"safety {verdict.decision.value.lower()}: {verdict.reason}",
                             RETRY_SAFETY_S)
        if verdict.decision in (Decision.DENY, Decision.REQUIRE_APPROVAL):
            target = JobState.DENIED if verdict.decision is Decision.DENY else \
                JobState.APPROVAL_REQUIRED
            fields = {**base, **safety}
            if target is JobState.DENIED:
                fields["failure_reason"] = verdict.reason
            result = await self._transition(job_id, [target], DISPATCHABLE_FROM, fields)
            return Outcome(job_id, "gated" if result else "noop", target.value, verdict.reason)

        workers = await self._registry.workers()
        worker = pick_worker(workers, self._pools.pools_for(req.topic))
        if worker is None:
            raise NoWorkers(req.topic)

        # DISPATCHED is recorded before the publish, so a crash after it leaves a
        # job the reconciler can see; a failed publish rolls back to SCHEDULED.
        fields = {**base, **safety, "worker_id": worker.worker_id}
        applied = await self._transition(
            job_id, [JobState.SCHEDULED, JobState.DISPATCHED], DISPATCHABLE_FROM, fields
        )
        if not applied:
            return Outcome(job_id, "noop", detail="already dispatched or finished")
        packet = protocol.packet(trace_id=trace_id, sender_id=protocol.SENDER_SCHEDULER,
                                 job_request=req)
        subject = protocol.direct_subject(worker.worker_id)
        try:
            await self._publisher.publish(subject, packet)
        except Exception as exc:
            await self._transition(job_id, [JobState.SCHEDULED], (JobState.DISPATCHED,), {})
            raise RetryAfter(f"dispatch to {subject} failed: {exc}", RETRY_PUBLISH_S) from exc
        await self._transition(job_id, [JobState.RUNNING], (JobState.DISPATCHED,), {})
        return Outcome(job_id, "dispatched", JobState.RUNNING.value, worker.worker_id)

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
        state = RESULT_STATES.get(res.status, JobState.FAILED)
        # The result pointer is written by the same script as the state, so a
        # reader never sees a terminal job without its result.
        fields = {"worker_id": res.worker_id}
        if res.result_ptr:
            fields["result_ptr"] = res.result_ptr
        if res.error_message or res.error_code:
            fields["failure_reason"] = res.error_message or res.error_code
        applied = await self._transition(res.job_id, [state], OPEN_STATES, fields)
        if not applied:
            # Terminal already (a duplicate or a late result) or unknown: ignored.
            return Outcome(res.job_id, "ignored", detail="job is terminal or unknown")
        return Outcome(res.job_id, "recorded", state.value)

    async def _cancel(self, cancel: protocol.JobCancel) -> Outcome:
        if not cancel.job_id:
            log.warning("dropping cancel without job_id")
            return Outcome("", "dropped", detail="job_id is empty")
        fields = {"failure_reason": cancel.reason or "cancelled"}
        applied = await self._transition(cancel.job_id, [JobState.CANCELLED], OPEN_STATES, fields)
        if not applied:
            return Outcome(cancel.job_id, "ignored", detail="job is terminal or unknown")
        return Outcome(cancel.job_id, "cancelled", JobState.CANCELLED.value)

    async def _transition(self, job_id: str, path: list[JobState], only_from, fields) -> bool:
        try:
            result = await self._store.transition(job_id, path, only_from=only_from,
                                                  fields=fields)
        except InvalidTransition as exc:
            log.warning("%s", exc)
            return False
        except StoreError as exc:
            raise RetryAfter(str(exc), RETRY_STORE_S) from exc
        return result.applied
