"""``sys.config.changed`` on NATS, turned into a call (the kernel re-reads its bundles).

:class:`ConfigChangeListener` runs its own asyncio loop in a daemon thread beside
the kernel's gRPC threads. The message's body is not read: any message means "read
the bundles now" (:meth:`cordum.safety.live_policy.LivePolicy.notify`).

NATS is a shortcut, not a dependency: while it is out of reach the kernel's periodic
read still picks every change up within one interval. The connection is retried for
as long as the process runs; the outage is logged once, and so is its end. After a
reconnect ``on_change`` is called once, since messages sent meanwhile are gone.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING, Any

from cordum.runtime import nats_options
from cordum.safety.bundles import CONFIG_CHANGED_SUBJECT

if TYPE_CHECKING:
    from collections.abc import Callable

    from cordum.config import Settings

log = logging.getLogger("cordum.safety.kernel")

CONNECT_TIMEOUT_S = 2.0
"""Per connection attempt."""
RECONNECT_WAIT_S = 1.0
"""Between two attempts, for ever (a kernel runs as long as it runs)."""


class ConfigChangeListener:
    """Calls ``on_change`` (from its own thread) for each ``subject`` message."""

    def __init__(self, cfg: Settings, on_change: Callable[[], None], *,
                 subject: str = CONFIG_CHANGED_SUBJECT,
                 name: str = "cordum-safety-kernel") -> None:
        self._cfg = cfg
        self._on_change = on_change
        self._subject = subject
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._down = False
        self._closing = False
        self.subscribed = threading.Event()
        """Set once the subscription is in place (tests wait on it)."""

    def start(self) -> None:
        if self._thread is not None:
            return
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,),
                                        name="config-changes", daemon=True)
        self._thread.start()
        ready.wait(5)

    def close(self) -> None:
        loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._task = loop.create_task(self._listen())
            ready.set()
            loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        except Exception:
            # A bad NATS setting (credentials, CA): the periodic read carries on alone.
            log.exception("NATS listener for %s stopped", self._subject)
        finally:
            loop.close()

    async def _listen(self) -> None:
        import nats

        # Connected here rather than through cordum.runtime.connect_nats: that one logs
        # every failed attempt of a service; this listener logs an outage once.
        nc = await nats.connect(
            servers=[u.strip() for u in self._cfg.nats_url.split(",")],
            name=self._name,
            connect_timeout=CONNECT_TIMEOUT_S,
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=RECONNECT_WAIT_S,
            error_cb=self._on_error,
            disconnected_cb=self._on_disconnected,
            reconnected_cb=self._on_reconnected,
            **nats_options(self._cfg),
        )
        try:
            await nc.subscribe(self._subject, cb=self._on_message)
            await nc.flush(timeout=round(CONNECT_TIMEOUT_S))
            self._back()
            self.subscribed.set()
            log.info("listening for %s on NATS", self._subject)
            await asyncio.Event().wait()  # until cancelled by close()
        finally:
            self._closing = True  # the disconnect that follows is ours, not an outage
            try:
                await nc.close()
            except Exception:
                pass

    async def _on_message(self, msg: Any) -> None:
        self._on_change()

    async def _on_error(self, exc: Exception) -> None:
        if not self._down:
            self._down = True
            log.warning("NATS unreachable (%s: %s); bundle changes are picked up by the "
                        "periodic read until it is back", type(exc).__name__, exc)

    async def _on_disconnected(self) -> None:
        if not self._closing:
            await self._on_error(ConnectionError("disconnected"))

    async def _on_reconnected(self) -> None:
        self._back()
        self._on_change()

    def _back(self) -> None:
        if self._down:
            self._down = False
            log.info("NATS reachable again: listening for %s", self._subject)
