"""How answers are printed: a rich table for people, JSON or YAML for programs.

``--output`` picks; without it, a terminal gets tables and a pipe gets JSON, so
``cordumctl jobs list | jq`` works as it is.

Everything the API answers was written by someone else (a worker's result, a label, a
policy's reason), so it is printed as text: never read as rich markup, and with its
control characters shown as escapes (``\\x1b``) instead of reaching the terminal. Only
the CLI's own words carry markup.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""What a terminal could obey in text: C0 controls but tab and newline, DEL, C1 controls
(``\\x9b`` is a CSI on its own), and the bidirectional overrides that reorder a line."""


def printable(value: str) -> str:
    """``value`` with each character of :data:`_CONTROL` written as its escape (``\\x1b``)."""
    return _CONTROL.sub(lambda found: ascii(found.group())[1:-1], value)


def shown(value: str, style: str = "") -> Text:
    """Text from the API, or built from it, ready to print: never markup, controls escaped."""
    return Text(printable(value), style=style)


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


def default_format(console: Console) -> Format:
    return Format.TABLE if console.is_terminal else Format.JSON


@dataclass(frozen=True)
class Column:
    """One column of a table: its header and how a row's cell is read."""

    header: str
    """Shown above the column."""
    field: str | Callable[[dict[str, Any]], Any]
    """A key of the row (dots go into nested objects), or a function of the row."""

    def cell(self, row: dict[str, Any]) -> str:
        """The cell as printable text (:func:`printable`)."""
        value = self.field(row) if callable(self.field) else dig(row, self.field)
        return printable(text(value))


def dig(doc: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(doc, dict):
            return None
        doc = doc.get(part)
    return doc


def text(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def duration(seconds: float | None) -> str:
    """``4.2s``, ``3m05s``, ``2h07m``, ``2d04h`` (``-`` for None): how long, read at a
    glance. cordumctl's tables and watches use it, and ``make status``
    (localstack/process_status.py) too."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def age(value: Any, now: datetime | None = None) -> str:
    """How long ago an RFC 3339 time was."""
    when = parse_time(value)
    if when is None:
        return "-"
    return duration(((now or datetime.now(UTC)) - when).total_seconds())


class Printer:
    """Writes a command's answer in the chosen format to stdout."""

    def __init__(self, fmt: Format, console: Console | None = None) -> None:
        self.format = fmt
        self.console = console or Console(soft_wrap=False)

    def data(self, doc: Any) -> None:
        """The answer as it came, in JSON or YAML (a table of it is the caller's business).

        Both formats escape C0 controls; a document that would still hold a character of
        :data:`_CONTROL` is written all in ASCII, which escapes it too and loses nothing.
        """
        if self.format is Format.YAML:
            written = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
            if _CONTROL.search(written):
                written = yaml.safe_dump(doc, sort_keys=False)
        else:
            written = json.dumps(doc, indent=2, ensure_ascii=False)
            if _CONTROL.search(written):
                written = json.dumps(doc, indent=2)
        self.console.out(written.rstrip(), highlight=False)

    def rows(self, items: Sequence[dict[str, Any]], columns: Sequence[Column], *,
             raw: Any = None, empty: str = "nothing") -> None:
        """A list: a table of ``columns``, else ``raw`` (default: ``items``) as data."""
        if self.format is not Format.TABLE:
            self.data(items if raw is None else raw)
            return
        if not items:
            self.console.print(f"[dim]({empty})[/dim]")
            return
        table = Table(box=None, pad_edge=False, header_style="bold")
        for column in columns:
            table.add_column(column.header, overflow="fold")
        for item in items:
            table.add_row(*(Text(column.cell(item)) for column in columns))
        self.console.print(table)

    def record(self, doc: dict[str, Any], fields: Iterable[Column], *,
               extra: Callable[[], None] | None = None) -> None:
        """One object: ``FIELD  value`` lines in a table, else the whole object as data."""
        if self.format is not Format.TABLE:
            self.data(doc)
            return
        table = Table(box=None, pad_edge=False, show_header=False)
        table.add_column(style="bold")
        table.add_column(overflow="fold")
        for column in fields:
            cell = column.cell(doc)
            if cell != "-":  # a field the answer leaves out is not worth a line
                table.add_row(column.header, Text(cell))
        self.console.print(table)
        if extra is not None:
            extra()

    def outcome(self, line: str | Text, doc: Any) -> None:
        """What a command did: ``line`` in table mode, ``doc`` as data otherwise."""
        if self.format is Format.TABLE:
            self.message(line)
        else:
            self.data(doc)

    def message(self, line: str | Text) -> None:
        """A short confirmation (``approved job ...``) in table mode; data modes get JSON.

        A ``str`` is printed as :func:`shown` text; a styled line comes as a ``Text``
        built from :func:`shown` parts.
        """
        self.console.print(shown(line) if isinstance(line, str) else line, highlight=False)
