"""``cordumctl jobs``: submit, follow, list, cancel and inspect jobs."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.text import Text

from cordumctl.arguments import labels, read_document, seconds
from cordumctl.output import Column, Format, age, shown
from cordumctl.session import session
from cordumctl.states import styled
from cordumctl.watch import watch_job


class Priority(StrEnum):
    INTERACTIVE = "interactive"
    BATCH = "batch"
    CRITICAL = "critical"


app = typer.Typer(help="Submit, follow, list, cancel and inspect jobs.", no_args_is_help=True)

JOB_COLUMNS = [Column("ID", "id"), Column("STATE", "state"), Column("TOPIC", "topic"),
               Column("UPDATED", lambda j: age(j.get("updated_at")) + " ago")]
JOB_FIELDS = [
    Column("id", "id"), Column("state", "state"), Column("topic", "topic"),
    Column("tenant", "tenant"), Column("priority", "priority"), Column("labels", "labels"),
    Column("created", "created_at"), Column("updated", "updated_at"),
    Column("completed", "completed_at"), Column("retries", "retry_count"),
    Column("safety", "safety_decision"), Column("safety reason", "safety_reason"),
    Column("remediations", lambda j: offers(j.get("safety_remediations"))),
    Column("approval", "approval_status"), Column("error", "error"), Column("result", "result"),
    Column("trace", "trace_id"),
]
DECISION_COLUMNS = [Column("RULE", "rule_id"), Column("ACTION", "action"),
                    Column("REASON", "reason"), Column("AT", "evaluated_at")]


def offers(remediations: Any) -> str | None:
    """The remediations a job's decision offers, as ``id: title (topic)``, for
    ``jobs remediate``; None when there are none (no line)."""
    if not isinstance(remediations, list) or not remediations:
        return None
    shown_ = []
    for rem in remediations:
        if not isinstance(rem, dict):
            continue
        topic = rem.get("replacement_topic") or ""
        line = f"{rem.get('id') or '(no id)'}: {rem.get('title') or 'use ' + (topic or '?')}"
        shown_.append(f"{line} ({topic})" if topic and rem.get("title") else line)
    return "; ".join(shown_) or None


def show_job(ctx: typer.Context, job: dict[str, Any]) -> None:
    session(ctx).printer.record(job, JOB_FIELDS)


@app.command()
def submit(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="The job's topic, e.g. job.echo.")],
    prompt: Annotated[str | None, typer.Argument(help="The prompt (or give --input).")] = None,
    input_: Annotated[str | None, typer.Option(
        "--input", "-i", metavar="FILE",
        help="The job's input (its context) from a JSON or YAML file, '-' for stdin, "
             "or inline JSON.")] = None,
    label: Annotated[list[str] | None, typer.Option(
        "--label", "-l", metavar="KEY=VALUE", help="A label; repeat for more.")] = None,
    team: Annotated[str | None, typer.Option(
        metavar="TEAM", help="The team the job is for: its config documents apply to it "
        "(cordumctl config).")] = None,
    priority: Annotated[Priority, typer.Option(
        help="How the scheduler ranks the job.", case_sensitive=False)] = Priority.INTERACTIVE,
    deadline: Annotated[str | None, typer.Option(
        metavar="DURATION", help="How long the job may take, e.g. 30s or 5m.")] = None,
    idempotency_key: Annotated[str | None, typer.Option(
        help="Sending the same key again answers the first job instead of a new one.")] = None,
    wait: Annotated[bool, typer.Option(
        "--wait", "-w", help="Follow the job until it ends; the exit code says how.")] = False,
    timeout: Annotated[str | None, typer.Option(
        metavar="DURATION", help="With --wait: give up after this long (exit 15).")] = None,
) -> None:
    """Submit a job. Prints its id; with --wait, follows it and prints the ended job."""
    s = session(ctx)
    body: dict[str, Any] = {"topic": topic, "priority": priority.value}
    if input_ is not None:
        doc = read_document(input_)
        body["context"] = doc
        if prompt is None and isinstance(doc, dict) and isinstance(doc.get("prompt"), str):
            prompt = doc["prompt"]
    # The API requires a prompt; an input-only job sends a short one that names the input.
    body["prompt"] = prompt if prompt is not None else ("(input)" if input_ is not None else "")
    if not body["prompt"]:
        raise typer.BadParameter("give a PROMPT or --input")
    if label:
        body["labels"] = labels(label)
    if team:
        body["team_id"] = team
    if deadline:
        body["deadline_ms"] = int(seconds(deadline) * 1000)
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    answer = s.client.post("/api/v1/jobs", body, headers=headers) or {}
    job_id = str(answer.get("job_id") or "")
    if not wait:
        if s.format is Format.TABLE:
            line = shown(job_id)
            if answer.get("status") == "approval_required":
                line.append_text(Text.assemble("  ", styled("APPROVAL_REQUIRED"), ": ",
                                               shown(str(answer.get("reason", "")))))
            s.printer.message(line)
        else:
            s.printer.data(answer)
        return
    s.err.print(shown(f"submitted {job_id}"), highlight=False)
    code, job = watch_job(s, job_id, timeout_s=seconds(timeout) if timeout else None,
                          to_stderr=True)
    show_job(ctx, job)
    raise typer.Exit(int(code))


@app.command()
def get(ctx: typer.Context,
        job_id: Annotated[str, typer.Argument(help="The job's id.")]) -> None:
    """Show one job: state, labels, times, safety and approval, result or error."""
    show_job(ctx, session(ctx).client.get(f"/api/v1/jobs/{job_id}"))


@app.command("list")
def list_(
    ctx: typer.Context,
    state: Annotated[str | None, typer.Option(
        help="Only jobs in this state, e.g. RUNNING.")] = None,
    topic: Annotated[str | None, typer.Option(help="Only jobs of this topic.")] = None,
    trace_id: Annotated[str | None, typer.Option(help="Only jobs of this trace.")] = None,
    updated_after: Annotated[str | None, typer.Option(
        metavar="TIME", help="Only jobs updated after this RFC 3339 time.")] = None,
    updated_before: Annotated[str | None, typer.Option(
        metavar="TIME", help="Only jobs updated before this RFC 3339 time.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Jobs per page.")] = 50,
    all_: Annotated[bool, typer.Option("--all", "-A", help="Every page, not only the first.")]
    = False,
) -> None:
    """List jobs, newest first."""
    s = session(ctx)
    params = {"state": state, "topic": topic, "trace_id": trace_id, "limit": limit,
              "updated_after": updated_after, "updated_before": updated_before}
    items = list(s.client.pages("/api/v1/jobs", params, follow=all_))
    s.printer.rows(items, JOB_COLUMNS, empty="no jobs")


@app.command()
def cancel(ctx: typer.Context,
           job_id: Annotated[str, typer.Argument(help="The job's id.")]) -> None:
    """Cancel a job that has not ended (an ended job answers its state)."""
    s = session(ctx)
    answer = s.client.post(f"/api/v1/jobs/{job_id}/cancel") or {}
    if s.format is Format.TABLE:
        reason = f" ({answer['reason']})" if answer.get("reason") else ""
        s.printer.message(Text.assemble(shown(str(answer.get("id", job_id))), "  ",
                                        styled(str(answer.get("state"))), shown(reason)))
    else:
        s.printer.data(answer)


@app.command()
def remediate(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(help="The job the policy did not allow as sent.")],
    remediation_id: Annotated[str | None, typer.Argument(
        help="The remediation to apply (see jobs get); optional when only one is offered."),
    ] = None,
    idempotency_key: Annotated[str | None, typer.Option(
        help="Sending the same key again answers the first job instead of a new one.")] = None,
) -> None:
    """Submit the job again with a remediation its policy decision offered. Prints the
    new job's id; the new job is checked by the policy like any submit."""
    s = session(ctx)
    body = {"remediation_id": remediation_id} if remediation_id else {}
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    answer = s.client.post(f"/api/v1/jobs/{job_id}/remediate", body, headers=headers) or {}
    if s.format is not Format.TABLE:
        s.printer.data(answer)
        return
    line = shown(str(answer.get("job_id") or ""))
    if answer.get("status") == "approval_required":
        line.append_text(Text.assemble("  ", styled("APPROVAL_REQUIRED"), ": ",
                                       shown(str(answer.get("reason", "")))))
    s.printer.message(line)


@app.command()
def decisions(ctx: typer.Context,
              job_id: Annotated[str, typer.Argument(help="The job's id.")]) -> None:
    """The safety decisions taken about a job."""
    s = session(ctx)
    items = s.client.get(f"/api/v1/jobs/{job_id}/decisions") or []
    s.printer.rows(items, DECISION_COLUMNS, empty="no decisions")


@app.command()
def watch(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(help="The job's id.")],
    timeout: Annotated[str | None, typer.Option(
        metavar="DURATION", help="Give up after this long (exit 15).")] = None,
) -> None:
    """Follow a job: a line per state change until it ends.

    Exit code: 0 succeeded, 10 failed, 11 cancelled, 12 timed out, 13 denied,
    14 output quarantined, 15 --timeout passed.
    """
    code, _ = watch_job(session(ctx), job_id, timeout_s=seconds(timeout) if timeout else None)
    raise typer.Exit(int(code))

