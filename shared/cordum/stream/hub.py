"""Each replica's fan-out: the enriched events of every writer, to this replica's clients.

Every replica subscribes to ``<prefix>.>`` (no queue group) and hands each event to
its clients that may see it (``Caller.sees``) and asked for it (``Filters``).

Order and gaps. Writers on several replicas append to one tenant's log, and their
publishes may arrive here out of the log's order. Each tenant with clients here has a
channel holding the last id delivered (its cursor); an event carries the id before it
in the log (``prev``). Then, per tenant:

- an event at or before the cursor was delivered already: skipped;
- an event whose ``prev`` is after the cursor has predecessors not seen yet: they are
  read from the log (``EventLog.between``) and delivered first, then the event;
- the cursor moves to the event.

So every client of a tenant receives that tenant's events once each, in the log's
order, and the last id a client received is a resume point that misses nothing. A
channel made for a client's tenant starts at the log's newest id, read after the
client registered; a client that resumes replays the log up to at least that id
(``session``), so nothing falls between its replay and its live events.

Events of no tenant (heartbeats, alerts of no tenant) carry no id and go to admin keys
as they come.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from cordum.stream.events import Event, id_after

if TYPE_CHECKING:
    from cordum.stream.eventlog import EventLog
    from cordum.stream.events import Filters
    from cordum.stream.keys import Caller

log = logging.getLogger(__name__)


class Subscriber(Protocol):
    """A client as the hub sees it."""

    caller: Caller
    filters: Filters

    def offer(self, event: Event) -> None:
        """Queue ``event`` for the client without waiting (a full queue closes it)."""


@dataclass(slots=True)
class Channel:
    cursor: str = ""
    """The last id of the tenant's log delivered here ('' before the first is known)."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Hub:
    def __init__(self, nc: Any, log_: EventLog, *, subject_prefix: str) -> None:
        self._nc = nc
        self._log = log_
        self._subject = f"{subject_prefix}.>"
        self._sub: Any = None
        self._by_tenant: dict[str | None, set[Subscriber]] = {}
        """Clients by the tenant they stream (None: every tenant): an event is offered
        to its tenant's and the every-tenant clients only."""
        self._channels: dict[str, Channel] = {}

    async def start(self) -> None:
        self._sub = await self._nc.subscribe(self._subject, cb=self._on_msg)

    async def close(self) -> None:
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception as exc:  # the connection may be gone already
                log.debug("unsubscribe: %s", exc)
            self._sub = None

    def _wanted(self, tenant: str) -> bool:
        return bool(self._by_tenant.get(tenant) or self._by_tenant.get(None))

    async def register(self, client: Subscriber) -> None:
        """Deliver events to ``client`` from now on. For a client of one tenant the
        tenant's channel is ready when this returns; a Redis error is raised (and the
        client is not registered)."""
        tenant = client.caller.tenant
        self._by_tenant.setdefault(tenant, set()).add(client)
        if tenant is None:
            return
        channel = self._channels.get(tenant)
        if channel is None:
            channel = self._channels[tenant] = Channel()
        try:
            async with channel.lock:
                if not channel.cursor:
                    channel.cursor = await self._log.last_id(tenant)
        except BaseException:
            self.unregister(client)
            raise

    def unregister(self, client: Subscriber) -> None:
        tenant = client.caller.tenant
        clients = self._by_tenant.get(tenant)
        if clients is None or client not in clients:
            return
        clients.discard(client)
        if clients:
            return
        del self._by_tenant[tenant]
        # A channel is kept while anyone here may want its tenant's events.
        if tenant is not None and not self._wanted(tenant):
            self._channels.pop(tenant, None)
        elif tenant is None:
            for name in [t for t in self._channels if not self._wanted(t)]:
                del self._channels[name]

    async def _on_msg(self, msg: Any) -> None:
        try:
            event = Event.from_wire(msg.data)
        except ValueError as exc:
            log.warning("%s: not a stream event: %s", msg.subject, exc)
            return
        await self.dispatch(event)
        # NATS hands over a burst without yielding: let the clients' tasks write between
        # two events, so a client that keeps up is not closed for a burst's size.
        await asyncio.sleep(0)

    async def dispatch(self, event: Event) -> None:
        if event.tenant is None or not event.id:
            self._deliver(event)
            return
        tenant = event.tenant
        channel = self._channels.get(tenant)
        if channel is None:
            if not self._wanted(tenant):
                return
            # Only all-tenant clients want it: they resume nothing, so the channel
            # starts right before this event.
            channel = self._channels[tenant] = Channel(cursor=event.prev)
        async with channel.lock:
            if channel.cursor and not id_after(event.id, channel.cursor):
                return
            if channel.cursor and id_after(event.prev, channel.cursor):
                try:
                    missed = await self._log.between(tenant, channel.cursor, event.id)
                except Exception as exc:
                    log.error("%s: events before %s not read: %s", tenant, event.id, exc)
                    missed = []
                for earlier in missed:
                    self._deliver(earlier)
            self._deliver(event)
            channel.cursor = event.id

    def _deliver(self, event: Event) -> None:
        if event.tenant is None:  # for admins, whatever tenant they stream
            targets = [c for group in self._by_tenant.values() for c in group]
        else:
            targets = [*self._by_tenant.get(event.tenant, ()), *self._by_tenant.get(None, ())]
        for client in targets:
            if client.caller.sees(event.tenant) and client.filters.matches(event):
                client.offer(event)
