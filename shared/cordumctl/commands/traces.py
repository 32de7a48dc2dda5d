"""``cordumctl traces``: Traces: every job of one trace.

``traces get TRACE_ID`` reads ``GET /api/v1/traces/{id}``: the tenant's jobs of the
trace as job details, at most 200, the newest (the API says how many there are in
``X-Total-Count`` and whether some were left out in ``X-Has-More``). A table shows
them as a time line, oldest first: when each was created, started and completed,
relative to the first job's creation, with its state, topic and worker. Any other
output prints the API's answer as it came (newest first).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from urllib.parse import quote

import typer
from rich.text import Text

from cordumctl.output import Column, Format, duration, parse_time, shown
from cordumctl.session import session

app = typer.Typer(help="Traces: every job of one trace.", no_args_is_help=True)

TRACES = "/api/v1/traces"


def path_segment(value: str) -> str:
    """``value`` as one path segment (a ``/`` in it would name another route)."""
    return quote(value, safe=":@~")


def _offset(start: datetime | None, value: Any) -> str:
    """``+1.2s``: how long after ``start`` the time ``value`` was (``-`` when unknown)."""
    when = parse_time(value)
    if start is None or when is None:
        return "-"
    return "+" + duration((when - start).total_seconds())


def timeline(jobs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], datetime | None]:
    """The jobs oldest first (by creation, then update) and the first creation time."""
    def key(job: dict[str, Any]) -> tuple[str, str]:
        return (str(job.get("created_at") or job.get("updated_at") or ""),
                str(job.get("updated_at") or ""))

    ordered = sorted(jobs, key=key)
    starts = [t for j in ordered if (t := parse_time(j.get("created_at"))) is not None]
    return ordered, min(starts) if starts else None


def _columns(start: datetime | None) -> list[Column]:
    return [
        Column("JOB", "id"),
        Column("STATE", "state"),
        Column("TOPIC", "topic"),
        Column("CREATED", lambda j: _offset(start, j.get("created_at"))),
        Column("STARTED", lambda j: _offset(start, j.get("started_at"))),
        Column("COMPLETED", lambda j: _offset(start, j.get("completed_at"))),
        Column("WORKER", "worker_id"),
    ]


@app.command()
def get(ctx: typer.Context,
        trace_id: Annotated[str, typer.Argument(help="The trace's id (a job's trace_id).")]
        ) -> None:
    """Every job of the trace on a time line: created, started and completed (relative to
    the first job), state, topic and worker."""
    s = session(ctx)
    jobs, headers = s.client.get_with_headers(f"{TRACES}/{path_segment(trace_id)}")
    items = [j for j in jobs or [] if isinstance(j, dict)]
    if s.format is not Format.TABLE:
        s.printer.data(items)
        return
    ordered, start = timeline(items)
    if start is not None:
        s.console.print(shown(f"trace {trace_id}, from {start.isoformat()}", "dim"))
    s.printer.rows(ordered, _columns(start), empty="no jobs")
    total = headers.get("X-Total-Count")
    if headers.get("X-Has-More") == "true":
        s.console.print(Text(f"(the newest {len(items)} of {total} jobs; "
                             "`cordumctl jobs list --trace-id` lists them all)", style="dim"))
