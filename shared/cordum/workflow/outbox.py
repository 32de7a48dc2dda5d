"""What a run's step asks of the world, written with the run and carried out after it.

An event's effects (step jobs to publish, JobCancels, notify alerts, a timer to
queue) are saved in ``wf:run:outbox:<run_id>`` by the same write that saves the
run, carried out, then removed. A function killed in between leaves them there:
the next event of the run (or the reconciler) carries them out first. Each
effect is safe to repeat: a step job is published with its job id as the
JetStream message id and the submit path dispatches a job once; a JobCancel of a
cancelled job changes nothing; a timer event is checked against the run.

Timeline (crash after save, before publish)::

    save(run: step running, job id J; outbox: [publish J])  ->  crash
    next event: load -> outbox not empty -> publish J -> clear -> apply the event
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from cordum import protocol
from cordum.bus.workflow_events import MAX_DELAY_S, RunEvent
from cordum.scheduler.jobhash import job_hash

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from cordum.bus.workflow_events import RunEventSink
    from cordum.scheduler.ports import DurablePublisher
    from cordum.workflow.definition import Step
    from cordum.workflow.engine import Effects, StepJob
    from cordum.workflow.model import WorkflowRun

    Spawn = Callable[[WorkflowRun, dict[str, Any]], Awaitable[None]]
    """Stores and starts a subworkflow step's child run."""
    Tell = Callable[[RunEvent], Awaitable[None]]
    """Sends an event to another run."""

log = logging.getLogger(__name__)

SENDER = protocol.SENDER_WORKFLOW
CANCEL_REASON = "workflow run cancelled"
PRIORITIES = {"interactive": 1, "batch": 2, "critical": 3}


def to_outbox(effects: Effects, *, timer_at: float | None,
              steps: Mapping[str, Step] | None = None) -> list[dict[str, Any]]:
    """The effects as outbox entries (JSON-safe); empty when there is nothing to do.
    ``timer_at``: a new fire time of the run's timer, to queue; ``steps``: the
    definition's steps, whose ``compensation`` rides on their jobs."""
    out: list[dict[str, Any]] = []
    for job in effects.jobs:
        doc = job_doc(job)
        step = (steps or {}).get(job.definition_step or job.step_id)
        if step is not None and step.compensation is not None and job.kind == "job":
            doc["compensation"] = {"topic": step.compensation.topic,
                                   "input": step.compensation.input}
        out.append({"job": doc})
    out += [{"cancel": job_id} for job_id in effects.cancels]
    out += [{"alert": alert} for alert in effects.alerts]
    out += [{"run": spec} for spec in effects.runs]
    out += [{"cancel_run": run_id} for run_id in effects.cancel_runs]
    if timer_at is not None:
        out.append({"timer": timer_at})
    return out


def job_doc(job: StepJob) -> dict[str, Any]:
    meta = job.meta.model_dump(exclude_none=True) if job.meta is not None else None
    return {"job_id": job.job_id, "step_id": job.step_id, "topic": job.topic,
            "input": job.input, "env": dict(job.env), "labels": dict(job.labels),
            "priority": job.priority, "deadline_ms": job.deadline_ms,
            "idempotency_key": job.idempotency_key, "meta": meta, "kind": job.kind,
            **({"resend": job.resend} if job.resend else {})}


def context_json(doc: dict[str, Any]) -> str:
    """What ``ctx:<job id>`` holds for a step job: its built input, as JSON."""
    return json.dumps(doc["input"], separators=(",", ":"), default=str)


def undo_context_id(job_id: str) -> str:
    """Where a step's compensation input is kept: ``ctx:<job id>:undo``."""
    return f"{job_id}:undo"


def contexts_of(docs: list[dict[str, Any]]) -> dict[str, str]:
    """The ``ctx:`` payloads to store with the run: each step job's input, and its
    compensation's input when it has one (else the undo job gets the step's input)."""
    out = {doc["job_id"]: context_json(doc) for doc in docs}
    for doc in docs:
        comp = doc.get("compensation")
        if comp and comp.get("input") is not None:
            out[undo_context_id(doc["job_id"])] = json.dumps(comp["input"],
                                                             separators=(",", ":"))
    return out


def job_request(run: WorkflowRun, doc: dict[str, Any]) -> protocol.JobRequest:
    """The CAP request of a step job. ``workflow_id`` is the run's id: the result path
    hands the job's end to this run, and the saga of its steps is this run's."""
    job_id = doc["job_id"]
    labels = {str(k): str(v) for k, v in (doc.get("labels") or {}).items()}
    req = protocol.JobRequest(
        job_id=job_id, topic=doc["topic"], priority=PRIORITIES.get(doc.get("priority", ""), 2),
        context_ptr=protocol.pointer(protocol.context_key(job_id)),
        env={str(k): str(v) for k, v in (doc.get("env") or {}).items()},
        workflow_id=run.id, memory_id=f"run:{run.id}", tenant_id=run.org_id,
        principal_id=run.triggered_by, labels=labels)
    meta = doc.get("meta") or {}
    req.meta.tenant_id = run.org_id
    req.meta.idempotency_key = doc.get("idempotency_key", "")
    req.meta.labels.update(labels)
    for name in ("actor_id", "capability", "pack_id"):
        if meta.get(name):
            setattr(req.meta, name, str(meta[name]))
    req.meta.risk_tags.extend(str(t) for t in meta.get("risk_tags") or [])
    req.meta.requires.extend(str(t) for t in meta.get("requires") or [])
    if doc.get("deadline_ms"):
        req.budget.deadline_ms = int(doc["deadline_ms"])
    comp = doc.get("compensation")
    if comp:
        # Recorded on the run's saga when the step succeeds (the result path keys the
        # saga by the request's workflow_id: this run); undone if the run fails fatally.
        req.compensation.topic = comp["topic"]
        if comp.get("input") is not None:
            req.compensation.context_ptr = protocol.pointer(
                protocol.context_key(undo_context_id(job_id)))
    return req


def request_hash(run: WorkflowRun, doc: dict[str, Any]) -> str:
    """The job hash of the request :func:`job_request` makes: recorded with the run, it
    is how the scheduler tells the engine's request from any other under the id."""
    return job_hash(job_request(run, doc))


def alert_message(alert: dict[str, Any]) -> protocol.SystemAlert:
    msg = protocol.SystemAlert(message=str(alert.get("message", "")),
                               severity=int(alert.get("severity", 1)),
                               source_component=str(alert.get("source_component", SENDER)),
                               trace_id=str(alert.get("trace_id", "")))
    for key, value in (alert.get("details") or {}).items():
        msg.details[str(key)] = str(value)
    return msg


class OutboxRunner:
    """Carries out a run's outbox: NATS publishes and timer messages."""

    def __init__(self, publisher: DurablePublisher, events: RunEventSink | None, *,
                 spawn: Spawn | None = None, tell: Tell | None = None) -> None:
        self._publisher = publisher
        self._events = events
        self._spawn = spawn
        self._tell = tell

    async def perform(self, run: WorkflowRun, outbox: list[dict[str, Any]]) -> None:
        """Every entry, in order; a failed publish raises (the outbox stays for a retry)."""
        for entry in outbox:
            if "job" in entry:
                req = job_request(run, entry["job"])
                await self._publisher.publish_durable(
                    protocol.SUBJECT_SUBMIT,
                    protocol.packet(trace_id=run.id, sender_id=SENDER, job_request=req),
                    # A job sent again keeps its id (the submit path runs a job once) but
                    # not its message id, which JetStream would drop as a duplicate.
                    msg_id=(f"{req.job_id}#resend{entry['job']['resend']}"
                            if entry["job"].get("resend") else req.job_id))
            elif "cancel" in entry:
                job_id = entry["cancel"]
                notice = protocol.JobCancel(job_id=job_id, reason=CANCEL_REASON,
                                            requested_by=SENDER)
                await self._publisher.publish_durable(
                    protocol.SUBJECT_CANCEL,
                    protocol.packet(trace_id=run.id, sender_id=SENDER, job_cancel=notice),
                    msg_id=f"wf-cancel:{job_id}")
            elif "alert" in entry:
                try:  # best effort, as Cordum's: core NATS, no stream
                    await self._publisher.publish(
                        protocol.SUBJECT_WORKFLOW_EVENT,
                        protocol.packet(trace_id=run.id, sender_id=SENDER,
                                        alert=alert_message(entry["alert"])))
                except Exception as exc:
                    log.warning("run %s: notify alert not published: %s", run.id, exc)
            elif "timer" in entry:
                await self._queue_timer(run, float(entry["timer"]))
            elif "run" in entry and self._spawn is not None:
                await self._spawn(run, entry["run"])
            elif "cancel_run" in entry and self._tell is not None:
                await self._tell(RunEvent("cancel", str(entry["cancel_run"]), tenant=run.org_id))
            elif "parent" in entry and self._tell is not None:
                await self._tell(RunEvent("child", str(entry["parent"]), tenant=run.org_id,
                                          job_id=run.id))

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
