"""The request path: a job request is judged, routed and dispatched to a worker.

Under the job's lock: the stored state decides whether there is anything to
do; the safety verdict (or a recorded approval, :mod:`cordum.approval`) whether the
job may run; the strategy which worker runs it. DISPATCHED is written before
the publish, RUNNING after it.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from cordum import protocol, runtime
from cordum.approval import APPROVAL_GATE_TOPICS, approval_binds, job_hash
from cordum.errors import RetryAfter
from cordum.metrics import METRICS
from cordum.safety.client import Decision, SafetyVerdict
from cordum.scheduler.constraints import apply_constraints, parse_constraints, safety_meta
from cordum.scheduler.errors import NoWorkers
from cordum.scheduler.packets import Outcome, decode, tenant_of
from cordum.scheduler.step_jobs import check_owner, check_step_job
from cordum.store.errors import InvalidTransition, StoreError
from cordum.store.jobs import NO_STATE, TERMINAL_STATES, JobState, meta_key, now_us

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cordum.scheduler.policy import EnginePolicy
    from cordum.scheduler.ports import EnginePorts
    from cordum.scheduler.transitions import StateWriter
    from cordum.store.locks import Lease

log = logging.getLogger(__name__)

DISPATCHABLE_FROM = (NO_STATE, JobState.PENDING, JobState.SCHEDULED, JobState.RETRYING,
                     JobState.APPROVAL_REQUIRED)
"""A request in any other state was dispatched already or is over: redelivery is a no-op."""


class Dispatcher:
    """Decides and dispatches job requests."""

    def __init__(self, ports: EnginePorts, writer: StateWriter, policy: EnginePolicy, *,
                 input_fail_open: bool = False) -> None:
        self._store = ports.store
        self._registry = ports.registry
        self._strategy = ports.strategy
        self._safety = ports.safety
        self._publisher = ports.publisher
        self._locks = ports.locks
        self._backoff = ports.backoff
        self._runs = ports.runs
        self._writer = writer
        self._policy = policy
        self._fail_open = input_fail_open

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
        # The job's meta comes back with the lock: one round trip for both. The wait
        # for a busy lock ends with the invocation (no deadline outside one).
        async with self._locks.job_lock(req.job_id, deadline=runtime.invocation_deadline.get(),
                                        read=meta_key(req.job_id)) as lease:
            METRICS.observe_ms("job_lock_wait", (time.monotonic() - started) * 1000)
            return await self._process(req, trace_id, started, lease.data, lease)

    async def _process(self, req: protocol.JobRequest, trace_id: str,
                       started: float | None = None, meta: dict[str, str] | None = None,
                       lease: Lease | None = None) -> Outcome:
        job_id, tenant = req.job_id, tenant_of(req)
        if meta is None:
            try:
                meta = await self._store.get(job_id)
            except StoreError as exc:
                # Fail closed: without the state a redelivery could dispatch twice.
                raise RetryAfter(str(exc), self._policy.retry_store_s) from exc
        check_owner(req, tenant, meta)
        await check_step_job(self._store, req, tenant, self._policy.retry_store_s)
        state = meta.get("state", "")
        if state in (JobState.DISPATCHED, JobState.RUNNING):
            return Outcome(job_id, "noop", state, "already dispatched")
        if state in TERMINAL_STATES:
            if state in (JobState.DENIED, JobState.FAILED):
                await self._writer.publish_dlq(job_id, state, meta.get("failure_reason", ""),
                                               "redelivery_dlq_retry")
            if not meta.get("tenant"):
                # Cancelled before its request came (a run's cancel overtook it): the
                # request says whose job it is, so its tenant can look it up.
                await self._own_tombstone(req, tenant, trace_id)
            return Outcome(job_id, "noop", state, "terminal")
        # The request's own fields, less those the stored meta holds as they are.
        base = {k: v for k, v in (("topic", req.topic), ("tenant", tenant),
                                  ("trace_id", trace_id)) if meta.get(k) != v}
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
            # Its submitter, as the gateway records one: an approval of this job by
            # the same principal (a run's starter approving its own gate) is refused.
            first = {**base, "principal": req.principal_id} if req.principal_id else base
            if req.labels:
                first["labels"] = json.dumps(dict(req.labels), separators=(",", ":"))
            await self._writer.transition(job_id, [JobState.PENDING], (NO_STATE,), first)
        elif state == JobState.SCHEDULED:
            # A replayed SCHEDULED job counts as another scheduling attempt (Cordum's
            # rule); any other job's attempt is counted by its move into SCHEDULED.
            await self._bump_attempts(job_id)
            attempts += 1
        if attempts >= self._policy.max_scheduling_retries:
            reason = f"max scheduling retries exceeded (attempts={attempts})"
            return await self._fail(job_id, JobState.FAILED, reason, "max_scheduling_retries",
                                    req.topic, base)

        verdict, safety = await self.decide(req, tenant, meta)
        fields = {**base, **safety}
        if verdict.decision is Decision.THROTTLE:
            raise RetryAfter(f"safety throttle: {verdict.reason}", self._policy.retry_safety_s)
        if verdict.decision is Decision.REQUIRE_APPROVAL:
            await self._writer.transition(job_id, [JobState.APPROVAL_REQUIRED],
                                          DISPATCHABLE_FROM, fields)
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
        return await self._dispatch(req, trace_id, subject, attempts, fields, started, lease)

    async def _dispatch(self, req: protocol.JobRequest, trace_id: str, subject: str,
                        attempts: int, fields: Mapping[str, str],
                        started: float | None, lease: Lease | None) -> Outcome:
        job_id = req.job_id
        worker_id = protocol.worker_of_subject(subject)
        # DISPATCHED is recorded before the publish, so a crash after it leaves a
        # job the reconciler can see; a failed publish rolls back to SCHEDULED.
        applied = await self._writer.transition(
            job_id, [JobState.SCHEDULED, JobState.DISPATCHED], DISPATCHABLE_FROM,
            {**fields, "worker_id": worker_id})
        if not applied:
            return Outcome(job_id, "noop", detail="already dispatched or finished")
        packet = protocol.packet(trace_id=trace_id or job_id,
                                 sender_id=protocol.SENDER_SCHEDULER, job_request=req)
        try:
            await self._publisher.publish(subject, packet)
        except Exception as exc:
            await self._writer.transition(job_id, [JobState.SCHEDULED], (JobState.DISPATCHED,),
                                          {})
            raise RetryAfter(f"dispatch to {subject} failed: {exc}",
                             self._delay(attempts + 1, self._policy.retry_publish_s)) from exc
        self._registry.record_dispatch(worker_id)
        METRICS.count("jobs_dispatched", topic=req.topic)
        if started is not None:
            METRICS.observe_ms("dispatch_latency", (time.monotonic() - started) * 1000,
                               topic=req.topic)
        await self._running(job_id, lease)
        return Outcome(job_id, "dispatched", JobState.RUNNING.value, worker_id)

    async def _running(self, job_id: str, lease: Lease | None) -> bool:
        """DISPATCHED -> RUNNING after the publish; a held lease is released by the same script."""
        if lease is None or lease.lost:
            return await self._writer.transition(job_id, [JobState.RUNNING],
                                                 (JobState.DISPATCHED,), {})
        try:
            return (await lease.release_with(lambda key, token: self._store.transition_release(
                job_id, [JobState.RUNNING], only_from=(JobState.DISPATCHED,), lock_key=key,
                token=token))).applied
        except InvalidTransition as exc:  # as StateWriter.transition answers one
            log.warning("%s", exc)
            return False
        except StoreError as exc:
            raise RetryAfter(str(exc), self._policy.retry_store_s) from exc

    async def decide(self, req: protocol.JobRequest, tenant: str,
                     meta: Mapping[str, str]) -> tuple[SafetyVerdict, dict[str, str]]:
        """The safety verdict for ``req`` and the job meta fields that record it.

        A job skips the kernel only when its meta (read under the job lock) holds
        an approval that binds this request (:func:`approval_binds`). The
        request's own ``approval_*`` labels grant nothing: whoever publishes on
        sys.job.submit can write them.
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
        if verdict.decision in (Decision.ALLOW, Decision.ALLOW_WITH_CONSTRAINTS) and (
                verdict.approval_required or req.topic in APPROVAL_GATE_TOPICS):
            # A gate job is a question for a human whatever the policy says of its
            # topic: only the approve endpoint's record ends it SUCCEEDED.
            verdict = replace(verdict, decision=Decision.REQUIRE_APPROVAL)
        keep_hash = verdict.decision is Decision.REQUIRE_APPROVAL and stored_hash
        return verdict, safety_meta(verdict, stored_hash if keep_hash else current_hash)

    async def _check_safety(self, req: protocol.JobRequest, tenant: str) -> SafetyVerdict:
        verdict = await self._safety.check(req, tenant)
        if verdict.decision is Decision.DENY:
            METRICS.count("safety_denied", topic=req.topic)
        if verdict.decision is not Decision.UNAVAILABLE:
            return verdict
        METRICS.count("safety_unavailable", topic=req.topic)
        if not self._fail_open:
            raise RetryAfter(f"safety unavailable: {verdict.reason}", self._policy.retry_safety_s)
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

    async def _complete_gate(self, req: protocol.JobRequest, trace_id: str,
                             fields: Mapping[str, str]) -> Outcome:
        """An allowed approval-gate job is done: no worker runs it."""
        applied = await self._writer.transition(
            req.job_id, [JobState.SUCCEEDED], DISPATCHABLE_FROM,
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
            raise RetryAfter(str(exc), self._policy.retry_store_s) from exc

    async def _pick(self, req: protocol.JobRequest, attempts: int) -> str:
        """The subject to dispatch on. A stale pick, or no worker on this container's
        copy of the snapshot (up to 5 s old), is tried again on a fresh read: a worker
        that just came online must not leave the job waiting for the replayer."""
        last: Exception | None = None
        refreshed = False
        for _ in range(self._policy.max_dispatch_picks):
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
            raise RetryAfter(str(exc), self._policy.retry_store_s) from exc

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
        applied = await self._writer.transition(
            job_id, [state], (*DISPATCHABLE_FROM, JobState.DISPATCHED, JobState.RUNNING),
            {**fields, "failure_reason": reason},
            dlq={"topic": topic, "status": state.value, "reason": reason, "reason_code": code},
        )
        if applied:
            await self._writer.publish_dlq(job_id, state.value, reason, code)
            await self._tell_run(job_id)
        return Outcome(job_id, "failed" if applied else "noop", state.value, code)

    async def _own_tombstone(self, req: protocol.JobRequest, tenant: str,
                             trace_id: str) -> None:
        fields = {"topic": req.topic, "tenant": tenant, "trace_id": trace_id}
        if req.principal_id:
            fields["principal"] = req.principal_id
        try:
            await self._store.put_records(req.job_id, fields, {})
        except StoreError as exc:  # only its visibility is lost; the job stays over
            log.warning("job %s: owner of a cancelled job not recorded: %s", req.job_id, exc)

    async def _tell_run(self, job_id: str) -> None:
        """A workflow step's job refused at dispatch: its run hears it now (the result
        path never sees it). A lost send is found by the workflow reconciler."""
        from cordum.bus.workflow_events import RunEvent, run_of_job

        if self._runs is None or not run_of_job(job_id):
            return
        try:
            await self._runs.send(RunEvent.job_ended(job_id))
        except Exception as exc:
            log.error("workflow event for %s not sent: %s", job_id, exc)
