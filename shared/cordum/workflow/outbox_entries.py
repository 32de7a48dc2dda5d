"""A run's outbox entries: one type per kind, built from an event's effects in one
place (:func:`to_outbox`) and turned into and read back from their stored JSON in
one place (:func:`encode`, :func:`decode`).

The stored form is the one every earlier version wrote and read, kept as it is so
that an outbox saved by one version is carried out by the next (and by the one
before, after a rollback): a JSON list of one-key objects, the key naming the kind.

    {"job": {"job_id", "step_id", "topic", "input", "env", "labels", "priority",
             "deadline_ms", "idempotency_key", "meta", "kind"[, "resend"]
             [, "compensation": {"topic", "input"}]}}
    {"cancel": <job id>}          {"alert": {"message", "severity",
    {"timer": <unix s>}                      "source_component", "details", "trace_id"}}
    {"run": <child run spec>}     {"cancel_run": <run id>}     {"parent": <run id>}
    {"news": {"status", "events": [<timeline event>...], "truncated"}}

A job's fields other than ``job_id`` and ``topic`` may be missing (read with their
defaults). An entry of no known kind, or one that does not read, is logged and left
out: the outbox is the engine's own writing, and one bad entry must not keep the
rest of a run's effects (and every later event of the run) from being carried out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cordum import protocol

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from cordum.workflow.definition import Step
    from cordum.workflow.engine import Effects, StepJob

log = logging.getLogger(__name__)

SENDER = protocol.SENDER_WORKFLOW


@dataclass(frozen=True, slots=True)
class UndoJob:
    """A step's compensation, carried on its job's request (recorded on the run's saga
    when the step succeeds)."""

    topic: str
    input: Any = None


@dataclass(frozen=True, slots=True)
class PublishJob:
    """Publish a step's job on ``sys.job.submit`` (its input goes to ``ctx:<job id>``
    with the run's save)."""

    job_id: str
    topic: str
    step_id: str = ""
    """The step's path in the run (``s[2]`` for an item)."""
    input: Any = None
    env: Mapping[str, Any] = field(default_factory=dict)
    labels: Mapping[str, Any] = field(default_factory=dict)
    priority: str = ""
    deadline_ms: int = 0
    idempotency_key: str = ""
    meta: Mapping[str, Any] | None = None
    """The step's ``meta`` (:class:`cordum.workflow.definition.StepMeta`) as JSON."""
    kind: str = "job"
    """``job`` for a worker step, ``approval`` for a gate."""
    resend: int = 0
    """0 for the first send; n for the n-th time the same job is sent again."""
    compensation: UndoJob | None = None

    @classmethod
    def of(cls, job: StepJob, step: Step | None = None) -> PublishJob:
        """The entry of a step job; ``step``: its definition, whose ``compensation``
        rides on a worker step's job."""
        undo = None
        if step is not None and step.compensation is not None and job.kind == "job":
            undo = UndoJob(step.compensation.topic, step.compensation.input)
        meta = job.meta.model_dump(exclude_none=True) if job.meta is not None else None
        return cls(job.job_id, job.topic, job.step_id, job.input, dict(job.env),
                   dict(job.labels), job.priority, job.deadline_ms, job.idempotency_key,
                   meta, job.kind, job.resend, undo)


@dataclass(frozen=True, slots=True)
class CancelJob:
    """Send a JobCancel for a step's job."""

    job_id: str


@dataclass(frozen=True, slots=True)
class SendAlert:
    """A notify step's SystemAlert on ``sys.workflow.event`` (best effort)."""

    message: str
    severity: int = 1
    source_component: str = SENDER
    trace_id: str = ""
    details: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueTimer:
    """Queue the run's timer message for ``fire_at`` (unix s)."""

    fire_at: float


@dataclass(frozen=True, slots=True)
class StartChildRun:
    """Store and start a subworkflow step's child run (:mod:`cordum.workflow.child_runs`
    reads ``spec``)."""

    spec: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CancelChildRun:
    """Cancel a child run: its parent ended before it."""

    run_id: str


@dataclass(frozen=True, slots=True)
class TellParent:
    """Tell the parent run that this (child) run ended: its step waits on it."""

    run_id: str


@dataclass(frozen=True, slots=True)
class RunNews:
    """What changed in the run by one event, for the live stream (best effort): its
    status after the event and the event's timeline, at most NEWS_MAX_EVENTS of it."""

    status: str
    events: tuple[Mapping[str, Any], ...] = ()
    truncated: int = 0
    """Timeline events left out past NEWS_MAX_EVENTS (a wide fan-out's starts)."""


NEWS_MAX_EVENTS = 50
"""Timeline events one RunNews carries: a for_each of 1,000 items starts 1,000 steps
in one event; the stream gets the first 50 and the count of the rest (a client reads
the run for the whole of it)."""


def run_news(status: str, timeline: Sequence[Any]) -> RunNews | None:
    """The news of an event whose timeline is ``timeline`` (TimelineEvents); None when
    nothing happened that a watcher would see."""
    if not timeline:
        return None
    shown = tuple(event.to_json() for event in timeline[:NEWS_MAX_EVENTS])
    return RunNews(status, shown, max(len(timeline) - NEWS_MAX_EVENTS, 0))


Entry = (PublishJob | CancelJob | SendAlert | QueueTimer | StartChildRun | CancelChildRun
         | TellParent | RunNews)


def to_outbox(effects: Effects, *, timer_at: float | None,
              steps: Mapping[str, Step] | None = None) -> list[Entry]:
    """The effects as outbox entries; empty when there is nothing to do. ``timer_at``: a
    new fire time of the run's timer, to queue; ``steps``: the definition's steps."""
    out: list[Entry] = [
        PublishJob.of(job, (steps or {}).get(job.definition_step or job.step_id))
        for job in effects.jobs]
    out += [CancelJob(job_id) for job_id in effects.cancels]
    out += [_alert(alert) for alert in effects.alerts]
    out += [StartChildRun(spec) for spec in effects.runs]
    out += [CancelChildRun(run_id) for run_id in effects.cancel_runs]
    if timer_at is not None:
        out.append(QueueTimer(timer_at))
    return out


def encode(entries: Sequence[Entry]) -> list[dict[str, Any]]:
    """The entries in their stored form (JSON-safe; see the module)."""
    return [_encoded(entry) for entry in entries]


def decode(raw: Any) -> list[Entry]:
    """The entries of a stored outbox (None: none), in order, leaving out any that does
    not read (logged)."""
    out: list[Entry] = []
    for doc in raw if isinstance(raw, list) else []:
        try:
            entry = _decoded(doc)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            entry = None
            log.error("outbox entry %.200r left out: %s", doc, exc)
        if entry is not None:
            out.append(entry)
    return out


def _encoded(entry: Entry) -> dict[str, Any]:
    match entry:
        case PublishJob():
            doc = {"job_id": entry.job_id, "step_id": entry.step_id, "topic": entry.topic,
                   "input": entry.input, "env": dict(entry.env),
                   "labels": dict(entry.labels), "priority": entry.priority,
                   "deadline_ms": entry.deadline_ms,
                   "idempotency_key": entry.idempotency_key,
                   "meta": dict(entry.meta) if entry.meta is not None else None,
                   "kind": entry.kind}
            if entry.resend:
                doc["resend"] = entry.resend
            if entry.compensation is not None:
                doc["compensation"] = {"topic": entry.compensation.topic,
                                       "input": entry.compensation.input}
            return {"job": doc}
        case CancelJob():
            return {"cancel": entry.job_id}
        case SendAlert():
            return {"alert": {"message": entry.message, "severity": entry.severity,
                              "source_component": entry.source_component,
                              "details": dict(entry.details), "trace_id": entry.trace_id}}
        case QueueTimer():
            return {"timer": entry.fire_at}
        case StartChildRun():
            return {"run": dict(entry.spec)}
        case CancelChildRun():
            return {"cancel_run": entry.run_id}
        case TellParent():
            return {"parent": entry.run_id}
        case RunNews():
            return {"news": {"status": entry.status, "events": [dict(e) for e in entry.events],
                             "truncated": entry.truncated}}


def _decoded(doc: Any) -> Entry | None:
    """The entry of one stored object; None for one of no known kind."""
    if not isinstance(doc, dict):
        raise TypeError("not an object")
    if "job" in doc:
        return _job(doc["job"])
    if "cancel" in doc:
        return CancelJob(str(doc["cancel"]))
    if "alert" in doc:
        return _alert(doc["alert"])
    if "timer" in doc:
        return QueueTimer(float(doc["timer"]))
    if "run" in doc:
        if not isinstance(doc["run"], dict):
            raise TypeError("a child run spec that is not an object")
        return StartChildRun(doc["run"])
    if "cancel_run" in doc:
        return CancelChildRun(str(doc["cancel_run"]))
    if "parent" in doc:
        return TellParent(str(doc["parent"]))
    if "news" in doc:
        news = doc["news"]
        return RunNews(str(news["status"]), tuple(dict(e) for e in news.get("events") or ()),
                       int(news.get("truncated") or 0))
    log.warning("outbox entry of no known kind left out: %.200r", doc)
    return None


def _job(doc: Mapping[str, Any]) -> PublishJob:
    comp = doc.get("compensation")
    return PublishJob(
        job_id=str(doc["job_id"]), topic=str(doc["topic"]), step_id=str(doc.get("step_id", "")),
        input=doc.get("input"), env=dict(doc.get("env") or {}),
        labels=dict(doc.get("labels") or {}), priority=str(doc.get("priority") or ""),
        deadline_ms=int(doc.get("deadline_ms") or 0),
        idempotency_key=str(doc.get("idempotency_key") or ""),
        meta=dict(meta) if isinstance(meta := doc.get("meta"), dict) else None,
        kind=str(doc.get("kind") or "job"), resend=int(doc.get("resend") or 0),
        compensation=UndoJob(str(comp["topic"]), comp.get("input")) if comp else None)


def _alert(doc: Mapping[str, Any]) -> SendAlert:
    """A notify step's alert (the engine's dict, or its stored form)."""
    return SendAlert(message=str(doc.get("message", "")), severity=int(doc.get("severity", 1)),
                     source_component=str(doc.get("source_component", SENDER)),
                     trace_id=str(doc.get("trace_id", "")),
                     details={str(k): str(v) for k, v in (doc.get("details") or {}).items()})
