"""Cordum's live event stream, read as Server-Sent Events, resumed after a dropped connection.

The contract cordumctl codes against (the stream service's):

* Where: ``GET /api/v1/stream`` (the tenant's events) and ``GET /api/v1/jobs/{id}/stream``
  (one job's) on the stream's base URL: ``--stream-url`` / ``CORDUM_STREAM_URL``, else the
  API's own URL (one origin may route both). Auth is the API's: ``X-API-Key`` and
  ``X-Tenant-ID``.
* What: asked with ``Accept: text/event-stream``, it answers 200 ``text/event-stream``;
  each event is ``id: <event id>``, ``event: <type>``, ``data: <one JSON object>`` and a
  blank line, and a comment line (``: ping``) comes every 30 s. Types: ``job.submit``,
  ``job.result``, ``job.progress``, ``job.cancel``, ``job.dlq``, ``worker.heartbeat``,
  ``system.alert``, ``workflow.run``; the per-job stream begins with ``job.state``. A type
  this client does not know is passed on as it came.
* Data: a job event's is a BusPacket in protojson with Cordum's field names (lowerCamelCase,
  int64 as strings, enums by name, ``createdAt`` in RFC 3339), its payload inlined under
  its name: ``jobRequest`` (``jobId``, ``topic``, ``tenantId``, ``labels``...), ``jobResult``
  (``jobId``, ``status`` as ``JOB_STATUS_*``, ``resultPtr``, ``workerId``, ``executionMs``),
  ``jobProgress``, ``jobCancel``, ``heartbeat``, ``alert``. ``workflow.run``'s is
  ``{"type", "runId", "workflowId", "tenantId", "status", "stepId"?, "stepStatus"?,
  "createdAt"}``; ``job.state``'s is the body ``GET /api/v1/jobs/{id}`` answers.
* Filters, in the query: ``types`` (a comma list), ``topic`` (a glob on the job's topic),
  ``job_id``, ``run_id``. Resume: the header ``Last-Event-ID: <id>`` (or ``?since=<id>``)
  asks for what came after that event.
* Ends: the per-job stream sends ``job.state`` first and the server closes it after the
  job's terminal result; the tenant's stream does not end.
* Absent: a server without the stream answers 404, or refuses the connection; clients then
  poll the API instead.

How this client reads it (:class:`EventStream`): the body is parsed as the SSE spec says
(:class:`SseParser`: ``\\r\\n``, ``\\n`` or ``\\r`` ends a line, ``data`` lines join with
``\\n``, comments and unknown fields are skipped, ``id`` and ``retry`` are kept). The first
connection fails at once with :class:`StreamUnavailable` when nothing serves the stream
(refused, 404/405/501, API Gateway's "Missing Authentication Token" 403, or an answer that
is not ``text/event-stream``), and with the API's error for a 401/403 of the key; a 429 or
503 is tried again after its ``Retry-After``. A connection that breaks, goes silent longer
than the read timeout (two pings), or is closed by the server when it should not end, is
opened again with ``Last-Event-ID``, after a backoff that doubles (from the server's
``retry`` when it sent one), a bounded number of times in a row (:class:`ReconnectPolicy`);
then :class:`StreamLost`. A connection that delivered an event, or stayed up a while,
resets that count.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from cordumctl.client import USER_AGENT, api_error, retry_after_s
from cordumctl.errors import ApiError, CliError, ExitCode
from cordumctl.sse import Event, SseParser, StreamLost

if TYPE_CHECKING:
    from cordumctl.connection import Connection

STREAM_PATH = "/api/v1/stream"
EVENT_STREAM = "text/event-stream"
_ABSENT_STATUSES = frozenset({404, 405, 501})
"""Answers that mean nothing serves the stream at that URL."""
_BUSY_STATUSES = frozenset({429, 502, 503, 504})
"""Answers that may pass when sent again later."""


def job_stream_path(job_id: str) -> str:
    return f"/api/v1/jobs/{job_id}/stream"


class StreamUnavailable(CliError):
    """Nothing serves the stream at that URL (404, refused, not SSE): poll instead."""

    exit_code = ExitCode.UNAVAILABLE


@dataclass(frozen=True)
class ReconnectPolicy:
    """How a broken stream is opened again."""

    max_attempts: int = 5
    """Reconnections in a row that may fail before the stream is lost."""
    initial_delay_s: float = 0.5
    """The first wait (the server's ``retry`` instead, when it sent one); doubled each time."""
    max_delay_s: float = 10.0
    """No wait is longer (a ``Retry-After`` included)."""
    healthy_s: float = 10.0
    """A connection up this long (or one that delivered an event) resets the count."""


@dataclass(frozen=True)
class StreamTimeouts:
    connect_s: float = 5.0
    read_s: float = 75.0
    """Silence longer than this (two pings and more) means the connection is dead."""


class _Busy(Exception):
    """An answer that may pass later (429, 502-504)."""

    def __init__(self, error: ApiError, retry_after: float | None) -> None:
        super().__init__(error.line())
        self.error = error
        self.retry_after = retry_after


class EventStream:
    """One stream (a path and its filters) as an iterator of :class:`Event`.

    ``end_is_final``: a clean end by the server is the stream's end (the per-job stream);
    otherwise it is a break, and the stream is opened again.
    """

    def __init__(self, connection: Connection, path: str,
                 params: Mapping[str, str | None] | None = None, *,
                 last_event_id: str = "", end_is_final: bool = False,
                 transport: httpx.BaseTransport | None = None,
                 timeouts: StreamTimeouts | None = None,
                 reconnect: ReconnectPolicy | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 on_reconnect: Callable[[str, float], None] | None = None) -> None:
        self.base_url = connection.url
        self.path = path
        self.params = {k: v for k, v in (params or {}).items() if v}
        self.last_event_id = last_event_id
        self.end_is_final = end_is_final
        self.retry_ms: int | None = None
        self.reconnect = reconnect or ReconnectPolicy()
        self.connections = 0
        """Connections opened so far."""
        self._sleep = sleep
        self._clock = clock
        self._on_reconnect = on_reconnect
        limits = timeouts or StreamTimeouts()
        self._http = httpx.Client(
            base_url=connection.url, transport=transport,
            timeout=httpx.Timeout(limits.read_s, connect=limits.connect_s),
            headers={"X-API-Key": connection.key, "X-Tenant-ID": connection.tenant,
                     "User-Agent": USER_AGENT, "Accept": EVENT_STREAM,
                     "Cache-Control": "no-cache"})
        self._response: httpx.Response | None = None
        self._cancelled = False

    @property
    def url(self) -> str:
        """Where the stream is read (for messages: never the key)."""
        return self.base_url + self.path

    def close(self) -> None:
        self._drop_response()
        self._http.close()

    def cancel(self) -> None:
        """Open no more connections (another thread may call it): a break ends the
        stream with :class:`StreamLost` instead of a reconnection."""
        self._cancelled = True

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def open(self) -> None:
        """Connect, if not yet: :class:`StreamUnavailable` when nothing serves the stream,
        the API's error for a refused key; a 429 or 503 is tried again after its delay."""
        if self._response is not None:
            return
        attempt = 0
        while True:
            attempt += 1
            try:
                self._response = self._connect()
                return
            except _Busy as busy:
                if attempt >= self.reconnect.max_attempts:
                    raise busy.error from None
                delay = self._delay(attempt, busy.retry_after)
                self._notify(busy.error.line(), delay)
                self._sleep(delay)

    def events(self) -> Iterator[Event]:
        """Every event, across reconnections, until the stream ends (``end_is_final``) or
        is lost (:class:`StreamLost`)."""
        try:
            self.open()
            failures = 0
            while True:
                response = self._response
                assert response is not None
                opened_at = self._clock()
                delivered = False
                parser = SseParser(self.last_event_id)
                try:
                    for chunk in response.iter_bytes():
                        for event in parser.feed(chunk):
                            delivered = True
                            self.last_event_id = event.id
                            yield event
                        self.last_event_id = parser.last_event_id
                        if parser.retry_ms is not None:
                            self.retry_ms = parser.retry_ms
                    reason = "the server ended the stream"
                    if self.end_is_final:
                        return
                except httpx.TransportError as exc:
                    reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                self._drop_response()
                if delivered or self._clock() - opened_at >= self.reconnect.healthy_s:
                    failures = 0
                failures = self._reconnect(failures, reason)
        finally:
            self._drop_response()

    def _reconnect(self, failures: int, reason: str) -> int:
        """Open the stream again; the failures in a row so far."""
        retry_after: float | None = None
        while True:
            failures += 1
            if failures > self.reconnect.max_attempts:
                raise StreamLost(f"event stream at {self.url} lost: {reason} "
                                 f"({self.reconnect.max_attempts} reconnections failed)")
            if not self._cancelled:
                delay = self._delay(failures, retry_after)
                self._notify(reason, delay)
                self._sleep(delay)
            if self._cancelled:
                raise StreamLost(f"event stream at {self.url} closed: {reason}")
            try:
                self._response = self._connect()
                return failures
            except StreamUnavailable as exc:
                reason, retry_after = str(exc), None
            except _Busy as busy:
                reason, retry_after = busy.error.line(), busy.retry_after

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        policy = self.reconnect
        if retry_after is not None:
            return min(retry_after, policy.max_delay_s)
        base = self.retry_ms / 1000 if self.retry_ms is not None else policy.initial_delay_s
        return min(base * 2 ** (attempt - 1), policy.max_delay_s)

    def _notify(self, reason: str, delay: float) -> None:
        if self._on_reconnect is not None:
            self._on_reconnect(reason, delay)

    def _connect(self) -> httpx.Response:
        # An id is any text but CR, LF and NUL: sent as its UTF-8 bytes.
        headers = {b"Last-Event-ID": self.last_event_id.encode()} if self.last_event_id else {}
        request = self._http.build_request("GET", self.path, params=self.params,
                                           headers=headers)
        try:
            response = self._http.send(request, stream=True)
        except httpx.TransportError as exc:
            # The message names the URL and the failure; the headers (the key) never.
            raise StreamUnavailable(
                f"cannot reach the event stream at {self.url}: {type(exc).__name__}: {exc}"
            ) from None
        self.connections += 1
        status = response.status_code
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if status < 300 and kind == EVENT_STREAM:
            return response
        try:
            response.read()
        except httpx.HTTPError:
            pass
        finally:
            response.close()
        if status < 300:
            raise StreamUnavailable(f"{self.url} answered {kind or 'no content type'}, "
                                    "not an event stream")
        error = api_error(response)
        if status in _ABSENT_STATUSES or status < 400 or _no_such_route(response):
            raise StreamUnavailable(f"no event stream at {self.url}: {error.line()}")
        if status in _BUSY_STATUSES:
            raise _Busy(error, retry_after_s(response.headers.get("retry-after")))
        raise error

    def _drop_response(self) -> None:
        if self._response is not None:
            response, self._response = self._response, None
            try:
                response.close()
            except httpx.HTTPError:
                pass


def _no_such_route(response: httpx.Response) -> bool:
    """API Gateway's answer for a path it does not route: 403 "Missing Authentication Token"."""
    if response.status_code != 403:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("message") == "Missing Authentication Token"


class _End:
    def __init__(self, error: CliError | None) -> None:
        self.error = error


class Feed:
    """A stream read by a daemon thread, taken in batches with a timeout.

    A watch waits for the next event, its deadline or the next redraw, whichever comes
    first, which a blocking read cannot do. ``finished`` says the stream ended or broke
    (``error``); after it, :meth:`take` answers nothing.
    """

    def __init__(self, stream: EventStream) -> None:
        self.stream = stream
        self.finished = False
        self.error: CliError | None = None
        self._items: queue.Queue[Event | _End] = queue.Queue()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._pump, name="cordumctl-stream",
                                        daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        error: CliError | None = None
        try:
            for event in self.stream.events():
                if self._stopped.is_set():
                    break
                self._items.put(event)
        except CliError as exc:
            error = exc
        except Exception as exc:  # a broken stream must not end the watch: it polls instead
            error = CliError(f"event stream failed: {type(exc).__name__}: {exc}")
        finally:
            self.stream.close()
            self._items.put(_End(error))

    def take(self, timeout_s: float | None) -> list[Event]:
        """What has come, waiting up to ``timeout_s`` (``None``: until something comes)
        for the first; ``[]`` when nothing came."""
        if self.finished:
            return []
        try:
            first = self._items.get(timeout=None if timeout_s is None else max(0.0, timeout_s))
        except queue.Empty:
            return []
        items = [first]
        while True:
            try:
                items.append(self._items.get_nowait())
            except queue.Empty:
                break
        events: list[Event] = []
        for item in items:
            if isinstance(item, _End):
                self.finished, self.error = True, item.error
                break
            events.append(item)
        return events

    def stop(self) -> None:
        """Stop taking: the thread ends at its next event or when the connection ends,
        without reconnecting."""
        self._stopped.set()
        self.stream.cancel()
