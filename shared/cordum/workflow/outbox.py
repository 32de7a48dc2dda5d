"""What a run's step asks of the world, written with the run and carried out after it.

An event's effects (step jobs to publish, JobCancels, notify alerts, child runs to
start or cancel, a timer to queue) are saved as the run's outbox
(``wf:run:outbox:<run_id>``, entries in :mod:`cordum.workflow.outbox_entries`) by
the same write that saves the run, then carried out. The outbox is deleted by the
run lock's release, in the release's own round trip, and only while the lock is
still this runner's. An event whose effects are one step job (with the run's news and
alerts, which are best effort) is saved and unlocked in one round trip and carried out
after: the save keeps only the job's publish, and the lock + load of the job's end
drops it (``lua/read_run.lua``; :func:`cordum.workflow.runner.released_outbox`). A
function killed in between leaves the outbox there: the next event of the run (or the
reconciler) carries it out before anything else. Each effect is
safe to repeat: a step job is published with its job id as the JetStream message id
and the submit path dispatches a job once; a JobCancel of a cancelled job changes
nothing; a timer event is checked against the run; a child run's id is derived from
its step's attempt, so a second start finds the run the first one made.

Timeline (crash after save, before publish)::

    save(run: step running, job id J; outbox: [publish J])  ->  crash (lock expires)
    next event: lock + load (outbox: [publish J]) -> publish J -> apply the event
      -> save (its own outbox, or none, written over [publish J]) -> carry it out
      -> unlock + delete the outbox

One step job (save and unlock in one round trip)::

    lock + load -> save (run, outbox: [publish J]) + unlock -> publish J
    J's end: lock + load (J stored: [publish J] deleted, not returned) -> ...
"""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from cordum import protocol
from cordum.approval import job_hash
from cordum.bus.publisher import NewsPublisher
from cordum.bus.workflow_events import MAX_DELAY_S, RunEvent
from cordum.workflow.engine import CANCEL_REASON
from cordum.workflow.model import format_time
from cordum.workflow.outbox_entries import (
    SENDER,
    CancelChildRun,
    CancelJob,
    Entry,
    PublishJob,
    QueueTimer,
    RunNews,
    SendAlert,
    StartChildRun,
    TellParent,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence
    from typing import Any

    from cordum.bus.publisher import JobPublisher
    from cordum.bus.workflow_events import RunEventSink
    from cordum.workflow.engine import StepJob
    from cordum.workflow.model import WorkflowRun

    Spawn = Callable[[WorkflowRun, dict[str, Any]], Awaitable[None]]
    """Stores and starts a subworkflow step's child run."""
    Tell = Callable[[RunEvent], Awaitable[None]]
    """Sends an event to another run."""

log = logging.getLogger(__name__)

PRIORITIES = {"interactive": 1, "batch": 2, "critical": 3}


def job_doc(job: StepJob) -> PublishJob:
    """The outbox entry of a step job, without its step's compensation: what the
    gateway's dry run builds the engine's request from (:meth:`PublishJob.of`)."""
    return PublishJob.of(job)


def context_json(job: PublishJob) -> str:
    """What ``ctx:<job id>`` holds for a step job: its built input, as JSON."""
    return json.dumps(job.input, separators=(",", ":"), default=str)


def undo_context_id(job_id: str) -> str:
    """Where a step's compensation input is kept: ``ctx:<job id>:undo``."""
    return f"{job_id}:undo"


def contexts_of(jobs: Sequence[PublishJob]) -> dict[str, str]:
    """The ``ctx:`` payloads to store with the run: each step job's input, and its
    compensation's input when it has one (else the undo job gets the step's input)."""
    out = {job.job_id: context_json(job) for job in jobs}
    for job in jobs:
        if job.compensation is not None and job.compensation.input is not None:
            out[undo_context_id(job.job_id)] = json.dumps(job.compensation.input,
                                                          separators=(",", ":"))
    return out


def job_request(run: WorkflowRun, job: PublishJob) -> protocol.JobRequest:
    """The CAP request of a step job. ``workflow_id`` is the run's id: the result path
    hands the job's end to this run, and the saga of its steps is this run's."""
    labels = {str(k): str(v) for k, v in job.labels.items()}
    req = protocol.JobRequest(
        job_id=job.job_id, topic=job.topic, priority=PRIORITIES.get(job.priority, 2),
        context_ptr=protocol.pointer(protocol.context_key(job.job_id)),
        env={str(k): str(v) for k, v in job.env.items()},
        workflow_id=run.id, memory_id=f"run:{run.id}", tenant_id=run.org_id,
        principal_id=run.triggered_by, labels=labels)
    meta = job.meta or {}
    req.meta.tenant_id = run.org_id
    req.meta.idempotency_key = job.idempotency_key
    req.meta.labels.update(labels)
    for name in ("actor_id", "capability", "pack_id"):
        if meta.get(name):
            setattr(req.meta, name, str(meta[name]))
    req.meta.risk_tags.extend(str(t) for t in meta.get("risk_tags") or [])
    req.meta.requires.extend(str(t) for t in meta.get("requires") or [])
    if job.deadline_ms:
        req.budget.deadline_ms = job.deadline_ms
    if job.compensation is not None:
        # Recorded on the run's saga when the step succeeds (the result path keys the
        # saga by the request's workflow_id: this run); undone if the run fails fatally.
        req.compensation.topic = job.compensation.topic
        if job.compensation.input is not None:
            req.compensation.context_ptr = protocol.pointer(
                protocol.context_key(undo_context_id(job.job_id)))
    return req


def request_hash(run: WorkflowRun, job: PublishJob) -> str:
    """The job hash of the request :func:`job_request` makes: recorded with the run, it
    is how the scheduler tells the engine's request from any other under the id."""
    return job_hash(job_request(run, job))


def alert_message(alert: SendAlert) -> protocol.SystemAlert:
    msg = protocol.SystemAlert(message=alert.message, severity=alert.severity,
                               source_component=alert.source_component,
                               trace_id=alert.trace_id)
    for key, value in alert.details.items():
        msg.details[key] = value
    return msg


class OutboxRunner:
    """Carries out a run's outbox: NATS publishes, timer messages, child runs."""

    def __init__(self, publisher: JobPublisher, events: RunEventSink | None, *,
                 spawn: Spawn | None = None, tell: Tell | None = None) -> None:
        self._publisher = publisher
        self._events = events
        self._spawn = spawn
        self._tell = tell

    async def perform(self, run: WorkflowRun, outbox: Sequence[Entry], *,
                      requests: Mapping[str, protocol.JobRequest] | None = None) -> None:
        """Every entry, in order; a failed publish raises (the outbox stays for a retry).
        ``requests``: step job id -> its request as :func:`job_request` made it for
        this run already (hashed for the save), so it is not built twice."""
        for entry in outbox:
            match entry:
                case PublishJob():
                    req = (requests or {}).get(entry.job_id) or job_request(run, entry)
                    await self._publish_job(run, entry, req)
                case CancelJob(job_id=job_id):
                    notice = protocol.JobCancel(job_id=job_id, reason=CANCEL_REASON,
                                                requested_by=SENDER)
                    await self._publisher.publish_durable(
                        protocol.SUBJECT_CANCEL,
                        protocol.packet(trace_id=run.id, sender_id=SENDER, job_cancel=notice),
                        msg_id=f"wf-cancel:{job_id}")
                case SendAlert():
                    try:  # best effort, as Cordum's: core NATS, no stream
                        await self._publisher.publish(
                            protocol.SUBJECT_WORKFLOW_EVENT,
                            protocol.packet(trace_id=run.id, sender_id=SENDER,
                                            alert=alert_message(entry)))
                    except Exception as exc:
                        log.warning("run %s: notify alert not published: %s", run.id, exc)
                case QueueTimer(fire_at=fire_at):
                    await self._queue_timer(run, fire_at)
                case StartChildRun(spec=spec) if self._spawn is not None:
                    await self._spawn(run, spec)
                case CancelChildRun(run_id=child) if self._tell is not None:
                    await self._tell(RunEvent("cancel", child, tenant=run.org_id))
                case RunNews():
                    await self._tell_stream(run, entry)
                case TellParent(run_id=parent) if self._tell is not None:
                    await self._tell(RunEvent("child", parent, tenant=run.org_id,
                                              job_id=run.id))

    async def _tell_stream(self, run: WorkflowRun, news: RunNews) -> None:
        """The run's news on ``sys.workflow.run`` (core NATS, best effort: a watcher that
        missed it reads the run; nothing waits on it)."""
        if not isinstance(self._publisher, NewsPublisher):
            return
        doc: dict[str, Any] = {
            "type": "workflow.run", "runId": run.id, "workflowId": run.workflow_id,
            "tenantId": run.org_id, "status": news.status,
            "createdAt": run.updated_at or format_time(datetime.now(UTC)),
            "events": list(news.events)}
        if news.truncated:
            doc["truncated"] = news.truncated
        steps = [e for e in news.events if e.get("type") == "step_status" and e.get("step_id")]
        if steps:
            doc["stepId"], doc["stepStatus"] = steps[-1]["step_id"], steps[-1].get("status", "")
        try:
            await self._publisher.publish_bytes(
                protocol.SUBJECT_WORKFLOW_RUN, json.dumps(doc, default=str).encode())
        except Exception as exc:
            log.warning("run %s: news not published: %s", run.id, exc)

    async def _publish_job(self, run: WorkflowRun, job: PublishJob,
                           req: protocol.JobRequest) -> None:
        await self._publisher.publish_durable(
            protocol.SUBJECT_SUBMIT,
            protocol.packet(trace_id=run.id, sender_id=SENDER, job_request=req),
            # A job sent again keeps its id (the submit path runs a job once) but not
            # its message id, which JetStream would drop as a duplicate.
            msg_id=f"{job.job_id}#resend{job.resend}" if job.resend else job.job_id)

    async def _queue_timer(self, run: WorkflowRun, fire_at: float) -> None:
        delay = fire_at - time.time()
        if self._events is None or delay > MAX_DELAY_S:
            return  # in cordum:wf:delay:timers already; the tick queues it when near
        event = RunEvent("timer", run.id, tenant=run.org_id, due=fire_at)
        try:
            await self._events.send_timer(event, max(delay, 0.0))
        except Exception as exc:
            # The timer is in Redis: the reconciler fires it when it is due.
            log.warning("run %s: timer message not sent (%s); the reconciler fires it",
                        run.id, exc)
