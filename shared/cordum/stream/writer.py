"""The taps: bus messages in, enriched events out, each written by exactly one replica.

Every replica subscribes to the taps (``frames.TAP_SUBJECTS``) in the NATS queue
group ``cordum-stream``, so NATS hands each message to one of them. That replica

1. reads it (``frames``): its type, its frame, its job;
2. finds its tenant: a job's from the job's meta (a request's own tenantId only
   while no meta exists yet: a step job the engine just sent), a workflow run
   event's from the event, an alert's from its envelope identity;
3. for a worker's result, waits until the platform decided (terminal state, output
   decision recorded; at most STREAM_RESULT_SETTLE_S) and shows what it decided;
4. appends it to the tenant's log (``eventlog``), once per bus message;
5. publishes it with its id on ``<prefix>.<tenant>``, which every replica's hub reads.

Heartbeats and events of no known tenant are not logged: they go out live on
``<prefix>._admin`` for admin keys.

One job's events are written in the order they arrived (each waits for the one before
it of the same job), so a result that waits for the platform holds back that job's
later events, not anyone else's.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING, Any

from cordum import protocol
from cordum.store.results import served_result_ptr
from cordum.stream import events as ev
from cordum.stream.eventlog import seen_key
from cordum.stream.events import Event, subject_token
from cordum.stream.frames import (
    SUBJECT_WORKFLOW_RUN,
    TAP_SUBJECTS,
    Tapped,
    is_terminal,
    read_packet,
    read_run_event,
    settle_result,
    strip_pointers,
)

if TYPE_CHECKING:
    from cordum.stream.counters import StreamCounters
    from cordum.stream.eventlog import EventLog
    from cordum.stream.jobmeta import JobMeta

log = logging.getLogger(__name__)

MAX_PENDING_EVENTS = 10_000
"""Bus messages being written at once; past it a message is dropped and counted
(StreamEventsDropped). Results waiting for the platform are most of them."""
STOP_TIMEOUT_S = 5.0
"""At shutdown, how long the writes in flight get before they are cancelled."""


class TapWriter:
    def __init__(self, nc: Any, log_: EventLog, meta: JobMeta, counters: StreamCounters, *,
                 queue_group: str, subject_prefix: str, settle_s: float) -> None:
        self._nc = nc
        self._log = log_
        self._meta = meta
        self._counters = counters
        self._queue_group = queue_group
        self._prefix = subject_prefix
        self._settle_s = settle_s
        self._subs: list[Any] = []
        self._pending: set[asyncio.Task[None]] = set()
        self._chains: dict[str, asyncio.Task[None]] = {}

    async def start(self) -> None:
        for subject in TAP_SUBJECTS:
            self._subs.append(await self._nc.subscribe(subject, queue=self._queue_group,
                                                       cb=self._on_msg))

    async def close(self) -> None:
        for sub in self._subs:
            try:
                await sub.unsubscribe()
            except Exception as exc:  # the connection may be gone already
                log.debug("unsubscribe: %s", exc)
        self._subs.clear()
        if self._pending:
            _, late = await asyncio.wait(set(self._pending), timeout=STOP_TIMEOUT_S)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    async def _on_msg(self, msg: Any) -> None:
        if len(self._pending) >= MAX_PENDING_EVENTS:
            self._counters.events_dropped += 1
            log.warning("writer full (%d in flight): %s dropped", len(self._pending),
                        msg.subject)
            return
        tapped = read(msg.subject, msg.data)
        if tapped is None:
            return
        self.submit(tapped, seen_key(msg.subject, msg.data))

    def submit(self, tapped: Tapped, seen: str) -> asyncio.Task[None]:
        """Write ``tapped`` after the job's earlier events (a task; tests await it)."""
        before = self._chains.get(tapped.job_id) if tapped.job_id else None
        task = asyncio.create_task(self._write(tapped, seen, before))
        self._pending.add(task)
        if tapped.job_id:
            self._chains[tapped.job_id] = task
        task.add_done_callback(functools.partial(self._done, tapped.job_id))
        return task

    def _done(self, job_id: str, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        if job_id and self._chains.get(job_id) is task:
            del self._chains[job_id]
        if not task.cancelled() and task.exception() is not None:
            log.error("stream event not written: %r", task.exception())

    async def _write(self, tapped: Tapped, seen: str,
                     before: asyncio.Task[None] | None) -> None:
        if before is not None:
            await asyncio.wait({before})
        await self.emit(await self.enrich(tapped), seen)

    async def enrich(self, tapped: Tapped) -> Event:
        """The event of a tapped message: its tenant, and for a job what the platform
        stored about it."""
        kind = tapped.type
        if kind in (ev.WORKER_HEARTBEAT, ev.SYSTEM_ALERT, ev.WORKFLOW_RUN):
            return Event(kind, tapped.frame, tapped.claimed_tenant or None,
                         run_id=tapped.run_id)
        job_id = tapped.job_id
        final = False
        if kind == ev.JOB_RESULT:
            meta, decided = await self._meta.settled(job_id, self._settle_s)
            served = served_result_ptr(job_id, meta, output_policy=self._meta.output_policy) \
                if decided else None
            settle_result(tapped.frame, meta.get("state") if decided else None, served)
            final = decided
        else:
            meta = await self._meta.fields(job_id)
            if kind == ev.JOB_DLQ:
                strip_pointers(tapped.frame, "job_result")
            final = kind in (ev.JOB_CANCEL, ev.JOB_DLQ) and is_terminal(meta)
        tenant = meta.get("tenant") or (tapped.claimed_tenant if kind == ev.JOB_SUBMIT
                                        and not meta else "")
        return Event(kind, tapped.frame, tenant or None, job_id=job_id,
                     run_id=tapped.run_id, topic=tapped.topic or meta.get("topic", ""),
                     final=final)

    async def emit(self, event: Event, seen: str) -> Event | None:
        """Log ``event`` (when it has a tenant) and send it to every replica; None when
        the same bus message was written already."""
        if event.tenant is not None:
            try:
                appended = await self._log.append(event, seen)
            except Exception as exc:
                # Live clients still get it; a resume will not.
                log.error("event of %s not logged: %s: %s", event.tenant,
                          type(exc).__name__, exc)
            else:
                if appended is None:
                    return None
                event = appended
        await self._nc.publish(f"{self._prefix}.{subject_token(event.tenant)}",
                               event.to_wire())
        self._counters.events_written += 1
        return event


def read(subject: str, data: bytes) -> Tapped | None:
    """A tapped message as the stream reads it; None for one that is not ours."""
    if subject == SUBJECT_WORKFLOW_RUN:
        return read_run_event(data)
    try:
        return read_packet(subject, data)
    except protocol.InvalidPacket as exc:
        log.debug("%s: dropped: %s", subject, exc)
        return None
