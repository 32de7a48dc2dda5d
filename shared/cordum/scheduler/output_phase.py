"""The output phase of a SUCCEEDED result: the metadata check before its state is
written, the content check after it, and an async quarantine with its audit.

A content check that could not reach the kernel (fail-closed) holds the output: the
job stays SUCCEEDED with no final decision (unserved) and enters the held set
(:mod:`cordum.store.held_outputs`); :meth:`OutputPhase.recheck` asks again later.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from cordum import protocol, runtime
from cordum.errors import RetryAfter
from cordum.metrics import METRICS
from cordum.safety.output_client import CONTENT_TIMEOUT_S
from cordum.safety.output_wire import OutputDecision
from cordum.scheduler.output_check import (
    ASYNC_QUARANTINE_CODE,
    QUARANTINE_REASON_CODE,
    UNAVAILABLE_QUARANTINE_CODE,
)
from cordum.store.audit_trail import AuditTrail, governance, process_hmac_key
from cordum.store.errors import InvalidTransition, StoreError
from cordum.store.held_outputs import HeldOutputs
from cordum.store.jobs import JobState, now_us
from cordum.store.results import DECISION_TTL_S, decision_key

OUTPUT_POLICY_ACTOR = "system:output-policy"
"""The actor of a quarantine or redaction: the output policy, no person."""

if TYPE_CHECKING:
    from cordum.bus.publisher import BusPublisher
    from cordum.scheduler.output_check import OutputChecker, OutputVerdict
    from cordum.scheduler.output_prefetch import Prefetched
    from cordum.scheduler.policy import EnginePolicy
    from cordum.scheduler.ports import EnginePorts
    from cordum.scheduler.transitions import StateWriter
    from cordum.store.audit import AuditEvent
    from cordum.store.jobs import AuditParts, JobStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OutputScan:
    """One result's output checks: what they were asked about and their verdict."""

    job_id: str
    topic: str
    tenant: str
    labels: dict[str, str]
    result_ptr: str
    prefetched: Prefetched
    verdict: OutputVerdict
    code: str = QUARANTINE_REASON_CODE
    """The DLQ code of a quarantine: the metadata check's or the content scan's."""
    held: bool = False
    """The content scan reached no kernel (fail-closed): the metadata check's verdict is
    recorded and the output is held, unserved, until a later scan decides."""
    earlier: OutputScan | None = None
    """The metadata check's scan, when this is the content scan after it."""
    record: str = field(init=False, repr=False, compare=False)
    """The verdict's record as JSON, encoded once: the meta field and the decision key
    carry the same document."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "record", self.verdict.record_json())

    @property
    def served_ptr(self) -> str:
        """The pointer the job's result is served from: the redacted copy after a
        redaction, else the worker's."""
        return self.verdict.result_ptr or self.result_ptr

    @property
    def request(self) -> protocol.JobRequest | None:
        return self.prefetched.request  # type: ignore[no-any-return]

    def fields(self) -> dict[str, str]:
        """The job meta fields that carry the decision (Cordum's ``output_safety``)."""
        return {"output_safety": self.record, "output_decision": self.verdict.decision.value}

    def records(self) -> dict[str, tuple[str, int]]:
        return {decision_key(self.job_id): (self.record, DECISION_TTL_S)}

    def audit_event(self) -> AuditEvent | None:
        """The audit event of the output policy's act on this job: a quarantine or a
        redaction (None for any other decision). The actor is the output policy."""
        verdict = self.verdict
        if verdict.quarantine:
            kind = "output.quarantine"
        elif verdict.decision is OutputDecision.REDACT:
            kind = "output.redact"
        else:
            # A clean content scan of an output the metadata check redacted: the act
            # on the job is that redaction.
            return None if self.earlier is None else self.earlier.audit_event()
        return governance(kind, self.tenant or "default", OUTPUT_POLICY_ACTOR,
                          job_id=self.job_id, reason=verdict.reason or None,
                          extra={"topic": self.topic, "decision": verdict.decision.value})


class ContentOutcome(StrEnum):
    """What a content check left the job with."""

    DECIDED = "decided"
    """The final decision is recorded: the output is served as it says."""
    QUARANTINED = "quarantined"
    """OUTPUT_QUARANTINED (or no longer SUCCEEDED: nothing left to decide)."""
    HELD = "held"
    """No decision: the kernel was not reached; the output stays unserved."""
    UNRECORDED = "unrecorded"
    """Decided, but the record or the state could not be written."""


class OutputPhase:
    """Runs the output policy checks of a result and applies a late quarantine."""

    def __init__(self, checker: OutputChecker, ports: EnginePorts, writer: StateWriter,
                 policy: EnginePolicy, held: HeldOutputs | None = None) -> None:
        self._checker = checker
        self._store: JobStore = ports.store
        self._publisher: BusPublisher = ports.publisher
        self._writer = writer
        self._policy = policy
        store: Any = checker.store  # the checker's Redis client
        self._held = held or HeldOutputs(store)
        self._audit = AuditTrail(store, process_hmac_key())

    def audit_parts(self, scan: OutputScan) -> AuditParts | None:
        """What a transition passes on to append ``scan``'s audit event, if it has one."""
        event = scan.audit_event()
        return None if event is None else self._audit.script_parts(event)

    async def check_result(self, res: protocol.JobResult) -> OutputScan:
        """Both checks of a SUCCEEDED result, before its state is written: the metadata
        check, then (unless it quarantined) the content scan of what would be served.
        One kernel call makes both for most results (``OutputChecker.check_both``); a
        result larger than the prefetch, a redaction by the metadata check and an
        invocation with too little time left take the two calls.

        The state is written once, with the final decision: a job never shows
        SUCCEEDED and then OUTPUT_QUARANTINED, its result is served from the moment it
        is SUCCEEDED, and the decision costs no write of its own. Only a scan that
        reached no kernel under fail-closed leaves the output held (:attr:`OutputScan.held`,
        the metadata verdict recorded): the caller adds it to the held set once the
        state is written."""
        timeout = min(CONTENT_TIMEOUT_S,
                      runtime.time_left(CONTENT_TIMEOUT_S) - self._policy.output_margin_s)
        started = time.monotonic()
        pre = await self._checker.prefetch(res.job_id, res.result_ptr)
        topic, tenant, labels = pre.asked()
        both = None
        if timeout > self._checker.client.meta_timeout_s:
            both = await self._checker.check_both(res, topic, tenant, labels=labels,
                                                  prefetched=pre, timeout_s=timeout)
        if both is None:
            sync = await self._checker.sync_check(res, topic, tenant, labels=labels,
                                                  prefetched=pre, record=False)
            scanned = None
        else:
            sync, scanned = both
        self._metrics(sync, topic, started)
        scan = OutputScan(res.job_id, topic, tenant, labels, res.result_ptr, pre, sync)
        if sync.quarantine:
            return scan
        served = scan.served_ptr
        if scanned is None:
            if timeout <= 0:
                # No time left in this invocation: end as a slow kernel would (held,
                # when the output fails closed).
                log.warning("job %s: no time left for the output content check", res.job_id)
                timeout = 0.001
            started = time.monotonic()
            scanned = await self._checker.async_check(
                res.job_id, topic, tenant, served, labels=labels, timeout_s=timeout,
                prefetched=pre, record=False)
        self._metrics(scanned, topic, started)
        if scanned.held:
            return replace(scan, held=True)
        return OutputScan(res.job_id, topic, tenant, labels, served, pre, scanned,
                          code=ASYNC_QUARANTINE_CODE, earlier=scan)

    async def hold(self, job_id: str) -> None:
        """Puts a SUCCEEDED job's output in the held set (``RetryAfter`` when it cannot:
        the result is delivered again, and scanned again)."""
        try:
            await self._held.hold(job_id, now_us())
        except StoreError as exc:
            raise RetryAfter(f"job {job_id}: {exc}", self._policy.retry_store_s) from exc

    async def recheck(self, job_id: str, result_ptr: str, timeout_s: float, *,
                      give_up_s: float | None = None) -> ContentOutcome:
        """The content check of a held job again, its request and result read anew. With
        ``give_up_s`` (how long it has been held, past the limit) a kernel still not
        reached quarantines it (``output_check_unavailable``) instead."""
        pre = await self._checker.prefetch(job_id, result_ptr)
        return await self._content(job_id, pre, result_ptr, timeout_s, give_up_s=give_up_s)

    async def _content(self, job_id: str, pre: Prefetched, result_ptr: str, timeout_s: float,
                       *, give_up_s: float | None = None) -> ContentOutcome:
        """The content scan of ``result_ptr`` and what it decides, applied."""
        started = time.monotonic()
        topic, tenant, labels = pre.asked()
        verdict = await self._checker.async_check(
            job_id, topic, tenant, result_ptr, labels=labels, timeout_s=timeout_s,
            prefetched=pre, record=False)
        self._metrics(verdict, topic, started)
        if verdict.held and give_up_s is None:
            return ContentOutcome.HELD
        code = ASYNC_QUARANTINE_CODE
        if verdict.held:
            code = UNAVAILABLE_QUARANTINE_CODE
            verdict = replace(verdict, held=False, quarantine=True, reason=(
                f"output check unavailable for {give_up_s:.0f} s: {verdict.reason}"))
        done = OutputScan(job_id, topic, tenant, labels, result_ptr, pre, verdict, code=code)
        return await self.settle(job_id, done)

    async def settle(self, job_id: str, done: OutputScan) -> ContentOutcome:
        """Applies a content decision to a job already SUCCEEDED: a quarantine moves it
        to OUTPUT_QUARANTINED, any other decision is recorded (the output is served from
        then on). For a held output decided later, and for a redelivered result that
        finds the job SUCCEEDED with its output held."""
        verdict, result_ptr = done.verdict, done.result_ptr
        if verdict.quarantine:
            return await self._quarantine(job_id, done, done.code)
        fields = done.fields()
        if verdict.result_ptr and verdict.result_ptr != result_ptr:
            fields["result_ptr"] = verdict.result_ptr
        try:
            await self._checker.records.record(job_id, fields, done.records())
        except StoreError as exc:  # the decision stands; only its record is missing
            log.warning("job %s: output decision not recorded: %s", job_id, exc)
            return ContentOutcome.UNRECORDED
        if (event := done.audit_event()) is not None:
            # A redaction of the content: no script moves a state here, so its event is
            # appended after the records (the pointer the reader gets is redacted already).
            try:
                await self._audit.record(event)
            except StoreError as exc:
                log.error("job %s: audit event %s not recorded: %s", job_id, event.type, exc)
        return ContentOutcome.DECIDED

    async def _quarantine(self, job_id: str, scan: OutputScan,
                          code: str = ASYNC_QUARANTINE_CODE) -> ContentOutcome:
        """SUCCEEDED -> OUTPUT_QUARANTINED under the job lock, a bounded number of tries."""
        verdict = scan.verdict
        dlq = {"topic": scan.topic, "status": JobState.DENIED.value, "reason": verdict.reason,
               "reason_code": code}
        error = ""
        for attempt, pause in enumerate((*self._policy.quarantine_retry_s, None)):
            try:
                async with self._writer.job_lock(job_id):
                    # The pointer goes with the state: quarantined output is never served.
                    result = await self._store.transition(
                        job_id, [JobState.OUTPUT_QUARANTINED], only_from=(JobState.SUCCEEDED,),
                        fields={**scan.fields(), "result_ptr": ""}, dlq=dlq,
                        records=scan.records(), audit=self.audit_parts(scan))
            except (StoreError, RetryAfter, InvalidTransition) as exc:
                error = str(exc)
                log.warning("job %s: async quarantine try %d failed: %s", job_id, attempt + 1,
                            exc)
                if pause is not None:
                    await asyncio.sleep(pause)
                continue
            if result.applied:
                await self.audit(job_id, verdict)
                await self._writer.publish_dlq(job_id, JobState.DENIED.value, verdict.reason,
                                               code)
            return ContentOutcome.QUARANTINED
        # The job stays SUCCEEDED: say so loudly, on the DLQ subject operators watch.
        log.error("job %s: output quarantined by policy but the state was not changed: %s",
                  job_id, error)
        await self._writer.publish_dlq(job_id, JobState.FAILED.value,
                                       f"quarantine_state_failed: {error}", "quarantine_failed")
        return ContentOutcome.UNRECORDED

    async def audit(self, job_id: str, verdict: OutputVerdict) -> None:
        """The decision on ``sys.audit.output_policy``, best effort."""
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
    def _metrics(verdict: OutputVerdict, topic: str, started: float) -> None:
        METRICS.count("output_policy_checked", topic=topic)
        if verdict.skipped:
            METRICS.count("output_policy_skipped", topic=topic)
        if verdict.held:
            METRICS.count("output_policy_held", topic=topic)
        if verdict.quarantine:
            METRICS.count("output_policy_quarantined", topic=topic)
        METRICS.observe_ms("output_check_latency", (time.monotonic() - started) * 1000,
                           topic=topic, phase=verdict.phase)
