"""Workflow run events: the one message format of the workflow queues, and their sender.

A run advances only when one of these is applied to it (by the ``workflow``
function): its start, a step job's end, a timer coming due, a cancel. Run events
go on a FIFO queue whose message group is the run, so one run's events are
applied in order and never two at once; timers go on a standard queue, the only
kind that delays single messages (up to 15 minutes). The scheduler sends ``job``
events, so the format lives here, below both the scheduler and the engine.

The body names the run and, for ``job`` events, the job; nothing in it is
trusted: the engine finds the run of a job through its own mapping, and reads
the job's state from the job store.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from cordum.step_job_ids import parse_step_job_id

if TYPE_CHECKING:
    from cordum.bus.sqs import SqsClient

log = logging.getLogger(__name__)

VERSION = 1
KINDS = frozenset({"start", "job", "timer", "cancel", "child"})
MAX_DELAY_S = 900
"""SQS's longest per-message delay: a timer further out waits in Redis for the tick."""


class InvalidRunEvent(ValueError):
    """A queue message that is not a run event (it goes to the queue's DLQ)."""


@dataclass(frozen=True, slots=True)
class RunEvent:
    kind: str
    run_id: str
    tenant: str = ""
    job_id: str = ""
    due: float = 0.0
    """For timers: the fire time it was sent for (unix seconds); part of its identity."""

    @classmethod
    def job_ended(cls, job_id: str, run_id: str = "") -> RunEvent:
        """The event of a step job that turned terminal. A step job id names its run
        (:mod:`cordum.step_job_ids`); the engine checks that against its mapping."""
        return cls("job", run_id or run_of_job(job_id), job_id=job_id)

    @property
    def id(self) -> str:
        """The deduplication id: the same event sent twice within SQS's 5 minutes is
        delivered once (and applying it twice changes nothing either)."""
        seed = f"{self.kind}|{self.run_id}|{self.job_id}|{self.due:.3f}"
        return hashlib.sha256(seed.encode()).hexdigest()

    def body(self) -> str:
        doc: dict[str, object] = {"v": VERSION, "kind": self.kind, "run_id": self.run_id}
        if self.tenant:
            doc["tenant"] = self.tenant
        if self.job_id:
            doc["job_id"] = self.job_id
        if self.due:
            doc["due"] = self.due
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def parse(cls, text: str) -> RunEvent:
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise InvalidRunEvent(f"not JSON: {exc}") from exc
        if not isinstance(doc, dict) or doc.get("v") != VERSION:
            raise InvalidRunEvent("not a run event of version 1")
        kind, run_id = doc.get("kind"), doc.get("run_id")
        if kind not in KINDS or not isinstance(run_id, str) or not run_id:
            raise InvalidRunEvent(f"bad kind or run id: {kind!r} {run_id!r}")
        job_id = doc.get("job_id", "")
        if kind in ("job", "child") and (not isinstance(job_id, str) or not job_id):
            raise InvalidRunEvent(f"a {kind} event without a job or child run id")
        due = doc.get("due", 0.0)
        return cls(kind, run_id, tenant=str(doc.get("tenant", "")), job_id=str(job_id),
                   due=float(due) if isinstance(due, int | float) else 0.0)


def run_of_job(job_id: str) -> str:
    """The run a step job id names; '' for any other job id (nothing to tell a run)."""
    parts = parse_step_job_id(job_id)
    return parts.run_id if parts is not None else ""


class RunEventSink(Protocol):
    """Where run events go."""

    async def send(self, event: RunEvent) -> None:
        """Queue an event for its run (in order with the run's other events)."""

    async def send_timer(self, event: RunEvent, delay_s: float) -> None:
        """Queue a timer event delivered after ``delay_s`` (at most MAX_DELAY_S)."""


class SqsRunEvents:
    """``RunEventSink`` over the two SQS queues (SendMessage on the event loop)."""

    def __init__(self, client: SqsClient, queue_url: str, timer_queue_url: str) -> None:
        self._client = client
        self.queue_url = queue_url
        self.timer_queue_url = timer_queue_url

    async def send(self, event: RunEvent) -> None:
        params: dict[str, object] = {"QueueUrl": self.queue_url, "MessageBody": event.body()}
        if self.queue_url.endswith(".fifo"):
            params["MessageGroupId"] = event.run_id
            params["MessageDeduplicationId"] = event.id
        await self._client.call("SendMessage", params)

    async def send_timer(self, event: RunEvent, delay_s: float) -> None:
        if not self.timer_queue_url:
            return  # no timer queue: the workflow tick fires it from Redis
        delay = min(max(math.ceil(delay_s), 0), MAX_DELAY_S)
        await self._client.call("SendMessage", {"QueueUrl": self.timer_queue_url,
                                                "MessageBody": event.body(),
                                                "DelaySeconds": delay})


def sqs_run_events(queue_url: str, timer_queue_url: str) -> SqsRunEvents | None:
    """The sender for the configured queues; None when the stack has no workflow queue."""
    if not queue_url:
        return None
    from cordum.bus.sqs import SqsClient

    return SqsRunEvents(SqsClient.from_env(), queue_url, timer_queue_url)
