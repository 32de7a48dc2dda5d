"""Server-Sent Events as the SSE spec reads them: the parser of cordumctl's stream
client (cordumctl.stream), fed the bytes of a response as they arrive."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from cordumctl.errors import CliError, ExitCode

MAX_LINE_BYTES = 16 * 1024 * 1024
"""A line longer than this is not Cordum's: the stream is given up."""
_EOL = re.compile(rb"\r\n|\r|\n")


class StreamLost(CliError):
    """The stream broke and could not be opened again within its reconnect policy."""

    exit_code = ExitCode.UNAVAILABLE


@dataclass(frozen=True)
class Event:
    """One dispatched event: its type (``message`` when it named none), data and id."""

    type: str
    data: str
    id: str = ""
    """The last event id when it was dispatched (the SSE spec's ``lastEventId``)."""

    def json(self) -> Any:
        """The data as JSON; ``None`` when it is not JSON."""
        try:
            return json.loads(self.data)
        except ValueError:
            return None

    def doc(self) -> dict[str, Any]:
        """The data as a JSON object; ``{}`` when it is not one."""
        found = self.json()
        return found if isinstance(found, dict) else {}


class SseParser:
    """The SSE spec's event stream interpretation, fed bytes as they arrive.

    Lines end with CRLF, LF or CR (a CRLF split between two chunks is one end); the body
    is UTF-8 (a bad byte becomes U+FFFD); a leading BOM is dropped. A blank line dispatches
    the event being built, when it has data; an event the body ends in the middle of is
    never dispatched.
    """

    def __init__(self, last_event_id: str = "") -> None:
        self.last_event_id = last_event_id
        """The id the next reconnection sends (set when an event block is dispatched)."""
        self.retry_ms: int | None = None
        """The reconnection time the server asked for, if it did."""
        self.lines = 0
        """Lines read, comments included."""
        self._id_buffer = last_event_id
        self._type = ""
        self._data: list[str] = []
        self._pending = b""
        self._after_cr = False
        self._first = True

    def feed(self, chunk: bytes) -> list[Event]:
        """The events the chunk completes."""
        if not chunk:
            return []
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._after_cr = False
        text = self._pending + chunk
        events: list[Event] = []
        start = 0
        for end in _EOL.finditer(text):
            event = self._line(text[start:end.start()])
            if event is not None:
                events.append(event)
            start = end.end()
            if end.group() == b"\r" and start == len(text):
                self._after_cr = True
        self._pending = text[start:]
        if len(self._pending) > MAX_LINE_BYTES:
            raise StreamLost(f"event stream line longer than {MAX_LINE_BYTES} bytes")
        return events

    def _line(self, raw: bytes) -> Event | None:
        line = raw.decode("utf-8", errors="replace")
        if self._first:
            self._first = False
            line = line.removeprefix("\ufeff")
        self.lines += 1
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._type = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            if "\0" not in value:
                self._id_buffer = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self.retry_ms = int(value)
        return None

    def _dispatch(self) -> Event | None:
        self.last_event_id = self._id_buffer
        data, kind = self._data, self._type
        self._data, self._type = [], ""
        if not data:
            return None
        return Event(type=kind or "message", data="\n".join(data), id=self.last_event_id)
