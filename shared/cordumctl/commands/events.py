"""``cordumctl events``: the live event stream of the tenant, one line per event."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
import yaml
from rich.text import Text

from cordumctl.output import Format, parse_time, printable, shown
from cordumctl.session import Session, session
from cordumctl.states import styled
from cordumctl.stream import STREAM_PATH, Event, StreamUnavailable

PAYLOADS = ("jobRequest", "jobResult", "jobProgress", "jobCancel", "heartbeat", "alert")
"""Where a BusPacket's payload is, by its protojson name."""
TYPE_WIDTH = 16
ID_WIDTH = 36


def payload(data: dict[str, Any]) -> dict[str, Any]:
    """A BusPacket's payload (``jobResult``, ...), or ``{}`` for other data."""
    for name in PAYLOADS:
        found = data.get(name)
        if isinstance(found, dict):
            return found
    return {}


def event_doc(event: Event) -> dict[str, Any]:
    """``{"id", "type", "data"}``: the data as JSON, or as the text it came as."""
    data: Any = event.json()
    if data is None and event.data.strip() != "null":
        data = event.data
    return {"id": event.id, "type": event.type, "data": data}


def _time(data: dict[str, Any]) -> str:
    when = parse_time(data.get("createdAt") or data.get("created_at")
                      or data.get("updated_at"))
    return (when or datetime.now(UTC)).astimezone(UTC).strftime("%H:%M:%S")


def _subject(event: Event, data: dict[str, Any], body: dict[str, Any]) -> str:
    """The job, run or worker the event is about."""
    if event.type == "job.state":
        return str(data.get("id") or "")
    for found in (body.get("jobId"), body.get("workerId"), data.get("runId"),
                  data.get("jobId"), data.get("job_id"), data.get("run_id")):
        if found:
            return str(found)
    return ""


def _detail(event: Event, data: dict[str, Any], body: dict[str, Any]) -> list[Text]:
    """The status or topic, and what else says what happened."""
    parts: list[Text] = []
    kind = event.type
    if kind == "job.state":
        parts += [styled(str(data.get("state") or "")), shown(str(data.get("topic") or ""))]
    elif kind == "workflow.run":
        parts += [styled(str(data.get("status") or "")),
                  shown(str(data.get("workflowId") or ""))]
        if data.get("stepId"):
            parts.append(shown(f"step {data['stepId']} {data.get('stepStatus') or ''}"))
    elif "status" in body:
        parts += [styled(str(body["status"]).removeprefix("JOB_STATUS_")),
                  shown(str(body.get("errorMessage") or ""))]
    elif kind == "job.progress":
        parts += [shown(f"{body.get('percent', 0)}%"), shown(str(body.get("message") or ""))]
    elif kind == "worker.heartbeat":
        parts += [shown(str(body.get("pool") or "")),
                  shown(f"{body.get('activeJobs', 0)}/{body.get('maxParallelJobs', '-')}")]
    elif kind == "system.alert":
        parts += [shown(str(body.get("level") or "")), shown(str(body.get("message") or ""))]
    else:
        parts += [shown(str(body.get("topic") or body.get("reason") or ""))]
    return [part for part in parts if part.plain] or [Text("-")]


def event_line(event: Event) -> Text:
    """``10:00:00  job.result        <job id>  SUCCEEDED``: time, type, subject, status."""
    data = event.doc()
    body = payload(data)
    subject = _subject(event, data, body) or "-"
    return Text.assemble(f"{_time(data)}  ", shown(f"{event.type:<{TYPE_WIDTH}}"), "  ",
                         shown(f"{subject:<{ID_WIDTH}}"), "  ",
                         Text("  ").join(_detail(event, data, body)))


def print_event(s: Session, event: Event) -> None:
    if s.format is Format.TABLE:
        s.console.print(event_line(event), highlight=False, soft_wrap=True)
        return
    doc = event_doc(event)
    if s.format is Format.YAML:
        written = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, explicit_start=True)
        if printable(written) != written:
            written = yaml.safe_dump(doc, sort_keys=False, explicit_start=True)
    else:
        written = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
        if printable(written) != written:  # a control character: all in ASCII escapes it
            written = json.dumps(doc, separators=(",", ":"))
    s.console.out(written.rstrip(), highlight=False)


def events(
    ctx: typer.Context,
    type_: Annotated[list[str] | None, typer.Option(
        "--type", "-t", metavar="TYPE",
        help="Only events of this type (job.submit, job.result, job.progress, job.cancel, "
             "job.dlq, worker.heartbeat, system.alert, workflow.run); repeat or "
             "comma-separate for more.")] = None,
    topic: Annotated[str | None, typer.Option(
        metavar="GLOB", help="Only job events whose topic matches, e.g. 'job.echo.*'.")] = None,
    job: Annotated[str | None, typer.Option(
        "--job", metavar="ID", help="Only this job's events.")] = None,
    run: Annotated[str | None, typer.Option(
        "--run", metavar="ID", help="Only this workflow run's events.")] = None,
    since: Annotated[str | None, typer.Option(
        metavar="EVENT_ID",
        help="Start after this event id: what came since it is sent first.")] = None,
    count: Annotated[int | None, typer.Option(
        min=1, metavar="N", help="Stop after N events.")] = None,
) -> None:
    """Tail the live event stream: a line per event until Ctrl-C (exit 0) or --count.

    A table line is the time, type, job (or run, or worker) and status or topic; JSON is
    one object per line: {"id", "type", "data"}. A dropped connection is opened again
    from the last event. Exits 6 when no event stream is served there (set --stream-url
    or CORDUM_STREAM_URL when it has a URL of its own).
    """
    s = session(ctx)
    types = ",".join(t.strip() for value in type_ or [] for t in value.split(",") if t.strip())
    stream = s.stream(STREAM_PATH, {"types": types, "topic": topic, "job_id": job,
                                    "run_id": run},
                      last_event_id=since or "", on_reconnect=lambda reason, delay: s.err.print(
                          shown(f"event stream: {reason}; reconnecting in {delay:g}s",
                                "yellow"), highlight=False, soft_wrap=True))
    shown_events = 0
    try:
        with stream:
            try:
                stream.open()
            except StreamUnavailable as exc:
                raise StreamUnavailable(f"{exc}; if the stream has a URL of its own, give "
                                        "--stream-url or set CORDUM_STREAM_URL") from None
            for event in stream.events():
                print_event(s, event)
                shown_events += 1
                if count is not None and shown_events >= count:
                    return
    except KeyboardInterrupt:  # Ctrl-C is how a tail ends
        return
