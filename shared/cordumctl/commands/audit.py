"""``cordumctl audit``: the tenant's audit chain: follow it, search it, verify it.

Every search page, every poll of a tail and every verify is itself recorded in the
chain (an ``audit.read`` or ``audit.verify`` event of the caller): the API audits
its readers. A tail hides those ``audit.read`` events unless ``--show-reads`` is
given, since its own polls would otherwise be most of what it shows.
"""

from __future__ import annotations

from datetime import UTC
from typing import Annotated, Any

import typer
from rich.text import Text

from cordumctl.errors import ExitCode
from cordumctl.output import Column, Format, parse_time, printable, shown
from cordumctl.session import Session, session

app = typer.Typer(help="The tenant's audit chain: tail, search, verify.", no_args_is_help=True)

EVENTS = "/api/v1/audit/events"
VERIFY = "/api/v1/audit/verify"
TAIL_INTERVAL_S = 2.0
"""How often a tail asks for new events."""
TAIL_PAGE = 20
"""Events one tail poll asks for at a time (it follows the cursor while all are new)."""
TAIL_MAX_PAGES = 10
"""Pages one poll reads at most: a burst of more than 200 events between two polls is
shown from its newest 200."""
READ_EVENT = "audit.read"
SEVERITY_STYLE = {"CRITICAL": "bold red", "HIGH": "red", "MEDIUM": "yellow", "LOW": "cyan",
                  "INFO": "dim"}

EVENT_COLUMNS = [
    Column("SEQ", "seq"), Column("TIME", "occurred_at"), Column("SEVERITY", "severity"),
    Column("TYPE", "type"), Column("ACTOR", "actor"),
    Column("JOB/RUN", lambda e: e.get("job_id") or e.get("run_id") or e.get("workflow_id")),
    Column("REASON", "reason"),
]
VERIFY_FIELDS = [
    Column("STATUS", "status"), Column("TENANT", "tenant"), Column("EVENTS", "total_events"),
    Column("VERIFIED", "verified_events"), Column("FIRST SEQ", "first_seq"),
    Column("LAST SEQ", "last_seq"), Column("HMAC VERIFIED", "hmac_verified"),
    Column("EXPORTED THROUGH", "exported_through_seq"), Column("CHECKED", "checked_at"),
]
VERIFY_EXIT = {"compromised": ExitCode.FAILED}
"""A compromised chain exits 10; ok and partial exit 0."""

TypeOption = Annotated[str | None, typer.Option(
    "--type", metavar="TYPE", help="Only this event type, or a prefix as job.*")]
SeverityOption = Annotated[str | None, typer.Option(
    metavar="LEVEL", help="Only this severity: CRITICAL, HIGH, MEDIUM, LOW or INFO.")]
ActorOption = Annotated[str | None, typer.Option(metavar="PRINCIPAL",
                                                 help="Only what this principal did.")]


def event_line(event: dict[str, Any]) -> Text:
    """``time severity type actor job/run reason``: one event as a tail prints it."""
    when = parse_time(event.get("occurred_at"))
    stamp = when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if when else "-"
    severity = str(event.get("severity") or "-")
    subject = event.get("job_id") or event.get("run_id") or event.get("workflow_id") or "-"
    line = Text()
    line.append(stamp + " ")
    line.append(f"{printable(severity):<8} ", SEVERITY_STYLE.get(severity, ""))
    line.append(f"{printable(str(event.get('type') or '-')):<24} ")
    line.append(f"{printable(str(event.get('actor') or '-'))} ")
    line.append(printable(str(subject)))
    if event.get("reason"):
        line.append(" " + printable(str(event["reason"])), "dim")
    return line


def _matches(event: dict[str, Any], type_: str | None, severity: str | None,
             actor: str | None, show_reads: bool) -> bool:
    kind = str(event.get("type") or "")
    if kind == READ_EVENT and not show_reads and type_ != READ_EVENT:
        return False
    if type_ and (not kind.startswith(type_[:-1]) if type_.endswith(".*") else kind != type_):
        return False
    if severity and str(event.get("severity") or "").upper() != severity.upper():
        return False
    return not actor or event.get("actor") == actor


def _print(s: Session, event: dict[str, Any]) -> None:
    if s.format is Format.TABLE:
        s.console.print(event_line(event), highlight=False, soft_wrap=True)
    else:
        s.printer.data(event)


def _newer(s: Session, after: int) -> list[dict[str, Any]]:
    """The events above seq ``after``, oldest first."""
    found: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": TAIL_PAGE}
    for _ in range(TAIL_MAX_PAGES):
        page = s.client.get(EVENTS, params) or {}
        done = False
        for item in page.get("items") or []:
            if int(item.get("seq") or 0) <= after:
                done = True
                break
            found.append(item)
        cursor = page.get("next_cursor")
        if done or not cursor:
            break
        params["cursor"] = str(cursor)
    found.reverse()
    return found


@app.command()
def tail(
    ctx: typer.Context,
    type_: TypeOption = None,
    severity: SeverityOption = None,
    actor: ActorOption = None,
    show_reads: Annotated[bool, typer.Option(
        "--show-reads", help="Show audit.read events too (each poll of a tail is one).")]
    = False,
    count: Annotated[int | None, typer.Option(min=1, metavar="N",
                                              help="Stop after N events.")] = None,
) -> None:
    """Follow new events of the chain: a line per event until Ctrl-C (exit 0) or --count.

    Polls every 2 s from the newest event when it starts. A table line is the time,
    severity, type, actor, job or run and reason; JSON is one object per event.
    """
    s = session(ctx)
    shown_events = 0
    try:
        newest = (s.client.get(EVENTS, {"limit": 1}) or {}).get("items") or []
        after = int(newest[0].get("seq") or 0) if newest else 0
        while True:
            s.runtime.sleep(TAIL_INTERVAL_S)
            for event in _newer(s, after):
                after = max(after, int(event.get("seq") or 0))
                if not _matches(event, type_, severity, actor, show_reads):
                    continue
                _print(s, event)
                shown_events += 1
                if count is not None and shown_events >= count:
                    return
    except KeyboardInterrupt:  # Ctrl-C is how a tail ends
        return


@app.command()
def search(
    ctx: typer.Context,
    type_: TypeOption = None,
    severity: SeverityOption = None,
    actor: ActorOption = None,
    job: Annotated[str | None, typer.Option("--job", metavar="ID",
                                            help="Only this job's events.")] = None,
    run: Annotated[str | None, typer.Option("--run", metavar="ID",
                                            help="Only this workflow run's events.")] = None,
    from_: Annotated[str | None, typer.Option(
        "--from", metavar="TIME", help="At or after this RFC 3339 time.")] = None,
    to: Annotated[str | None, typer.Option(
        "--to", metavar="TIME", help="At or before this RFC 3339 time.")] = None,
    text: Annotated[str | None, typer.Option(
        "--search", "-s", metavar="TEXT",
        help="Text in the type, actor, job, run, workflow or reason (any case).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200, help="Events per page.")] = 100,
    all_: Annotated[bool, typer.Option("--all", "-A", help="Every page, not only the first.")]
    = False,
) -> None:
    """Events of the chain, newest first, that match every filter given."""
    s = session(ctx)
    params: dict[str, str | int] = {name: value for name, value in (
        ("type", type_), ("severity", severity), ("actor", actor), ("job_id", job),
        ("run_id", run), ("from", from_), ("to", to), ("search", text)) if value}
    params["limit"] = limit
    items = list(s.client.pages(EVENTS, params, follow=all_))
    s.printer.rows(items, EVENT_COLUMNS, empty="no audit events")


@app.command()
def verify(ctx: typer.Context) -> None:
    """Check the chain's hashes, links and HMACs; prints the status and each finding.

    Exits 10 when the chain is compromised (0 for ok and partial).
    """
    s = session(ctx)
    result = s.client.get(VERIFY) or {}
    status = str(result.get("status") or "")

    def gaps() -> None:
        for gap in result.get("gaps") or []:
            more = f" (x{gap['count']})" if gap.get("count") else ""
            s.console.print(shown(f"  seq {gap.get('at_seq')}: {gap.get('type')}{more}",
                                  "red"), highlight=False)
        if result.get("gaps_truncated"):
            s.console.print(shown("  (more findings not shown)", "red"), highlight=False)

    s.printer.record(result, VERIFY_FIELDS, extra=gaps)
    code = VERIFY_EXIT.get(status, ExitCode.OK)
    if code is not ExitCode.OK:
        raise typer.Exit(int(code))
