"""What a command works with: the client, the printer and the clock, built once per run.

``main()`` may hand in a :class:`Runtime` (tests give a stub transport, a fake clock
and consoles that write to buffers); a real run uses the defaults.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from cordumctl import connection
from cordumctl.client import ApiClient, RetryPolicy
from cordumctl.output import Format, Printer, default_format, shown
from cordumctl.stream import EventStream, ReconnectPolicy, StreamTimeouts

if TYPE_CHECKING:
    import httpx

    from cordumctl.connection import Connection
    from cordumctl.errors import ApiError


@dataclass
class Runtime:
    """Everything outside the process a command touches, injectable."""

    transport: httpx.BaseTransport | None = None
    """The HTTP transport (``httpx.MockTransport`` in tests); ``None`` is the network."""
    environ: Mapping[str, str] | None = None
    """Where ``CORDUM_*`` are read; ``None`` is ``os.environ``."""
    cwd: Path | None = None
    """Where the search for ``.cordum/local.env`` starts; ``None`` is the current folder."""
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    poll_interval_s: float = 1.0
    """How often ``watch`` asks for the job or run when there is no event stream, and how
    often a live tree is redrawn when there is."""
    stream_transport: httpx.BaseTransport | None = None
    """The event stream's transport; ``None`` is ``transport``'s."""
    stream_reconnect: ReconnectPolicy = field(default_factory=ReconnectPolicy)
    stream_timeouts: StreamTimeouts = field(default_factory=StreamTimeouts)
    stream_idle_reread_s: float = 30.0
    """A watch on the stream reads the job or run again after this long without an event
    (a safety net for an event the stream lost)."""
    console: Console | None = None
    err_console: Console | None = None


@dataclass
class Options:
    """The global flags, as given (``None`` when not given)."""

    url: str | None = None
    key: str | None = None
    tenant: str | None = None
    output: Format | None = None
    stream_url: str | None = None


class Session:
    """One command's view of the API."""

    def __init__(self, runtime: Runtime, options: Options) -> None:
        self.runtime = runtime
        self.options = options
        self.console = runtime.console or Console(soft_wrap=False)
        self.err = runtime.err_console or Console(stderr=True, soft_wrap=False)
        self.format = options.output or default_format(self.console)
        self.printer = Printer(self.format, self.console)
        self._connection: Connection | None = None
        self._client: ApiClient | None = None

    def update(self, name: str, value: Any) -> None:
        """A global option given after the command's name (``jobs get X --output json``):
        it counts as if given before it, the later of the two winning."""
        if self._connection is not None:  # pragma: no cover - options are parsed first
            raise RuntimeError("a global option came after the connection was made")
        setattr(self.options, name, value)
        self.format = self.options.output or default_format(self.console)
        self.printer = Printer(self.format, self.console)

    @property
    def connection(self) -> Connection:
        if self._connection is None:
            self._connection = connection.resolve(
                url=self.options.url, key=self.options.key, tenant=self.options.tenant,
                stream_url=self.options.stream_url, environ=self.runtime.environ,
                cwd=self.runtime.cwd)
        return self._connection

    @property
    def client(self) -> ApiClient:
        if self._client is None:
            self._client = ApiClient(self.connection, transport=self.runtime.transport,
                                     retry=self.runtime.retry, sleep=self.runtime.sleep,
                                     on_retry=self._retrying)
        return self._client

    def stream(self, path: str, params: Mapping[str, str | None] | None = None, *,
               last_event_id: str = "", end_is_final: bool = False,
               on_reconnect: Callable[[str, float], None] | None = None) -> EventStream:
        """An event stream of this principal at the stream's URL (not yet connected)."""
        transport = self.runtime.stream_transport or self.runtime.transport
        return EventStream(self.connection.for_stream(), path, params,
                           last_event_id=last_event_id, end_is_final=end_is_final,
                           transport=transport, timeouts=self.runtime.stream_timeouts,
                           reconnect=self.runtime.stream_reconnect, sleep=self.runtime.sleep,
                           on_reconnect=on_reconnect)

    def _retrying(self, error: ApiError, delay: float) -> None:
        self.err.print(shown(f"{error.line()}; retrying in {delay:g}s", "yellow"),
                       highlight=False)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def session(ctx: typer.Context) -> Session:
    """The session the root callback made for this run."""
    found = ctx.find_object(Session)
    if found is None:  # pragma: no cover - the root callback always makes one
        raise RuntimeError("no cordumctl session in the context")
    return found
