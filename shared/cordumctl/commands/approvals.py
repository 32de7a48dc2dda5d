"""``cordumctl approvals``: jobs waiting for a human, and the decision about each."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from cordumctl.errors import ApiError
from cordumctl.output import Column, Format, age, shown, text
from cordumctl.session import session
from cordumctl.states import styled

app = typer.Typer(help="Jobs waiting for approval: list, show, approve, reject.",
                  no_args_is_help=True)

GATE_TOPICS = frozenset({"sys.approval.gate", "job.cordum.approval-gate"})
"""Topics of workflow approval gates: their jobs have a context document."""

APPROVAL_COLUMNS = [
    Column("JOB", "job.id"), Column("TOPIC", "job.topic"), Column("DECISION", "decision"),
    Column("RULE", "policy_rule_id"), Column("REASON", "policy_reason"),
    Column("WAITING", lambda a: age(a.get("requested_at"))),
]
SHOW_FIELDS = [
    Column("job", "job.id"), Column("state", "job.state"), Column("topic", "job.topic"),
    Column("labels", "job.labels"), Column("submitted by", "job.principal_id"),
    Column("policy rule", "job.safety_rule_id"), Column("policy reason", "job.safety_reason"),
    Column("constraints", "job.safety_constraints"), Column("approval", "job.approval_status"),
    Column("requested", "job.safety_checked_at"),
]
GATE_FIELDS = [
    Column("workflow", "workflow.workflow_id"), Column("run", "workflow.run_id"),
    Column("step", "workflow.step_id"), Column("step name", "workflow.step_name"),
    Column("started by", "workflow.triggered_by"), Column("decides on", "decision"),
]

ReasonOption = Annotated[str, typer.Option(
    "--reason", "-r", help="Why (kept with the decision; required).")]
NoteOption = Annotated[str | None, typer.Option(help="A longer note for the record.")]


@app.command("list")
def list_(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option(min=1, help="Approvals per page.")] = 50,
    all_: Annotated[bool, typer.Option("--all", "-A", help="Every page, not only the first.")]
    = False,
) -> None:
    """Jobs waiting for approval, with the policy rule that asked for it."""
    s = session(ctx)
    items = list(s.client.pages("/api/v1/approvals", {"limit": limit}, follow=all_))
    s.printer.rows(items, APPROVAL_COLUMNS, empty="nothing waits for approval")


@app.command()
def show(ctx: typer.Context,
         job_id: Annotated[str, typer.Argument(help="The waiting job's id.")]) -> None:
    """One approval: the job, the policy's reason, and for a workflow gate its context
    (the workflow, run and step, and what the approver decides on)."""
    s = session(ctx)
    job = s.client.get(f"/api/v1/jobs/{job_id}") or {}
    doc: dict[str, Any] = {"job": job}
    if job.get("topic") in GATE_TOPICS:
        try:
            doc["gate"] = s.client.get(f"/api/v1/approvals/{job_id}/context")
        except ApiError as exc:
            if exc.status != 404:
                raise
    if s.format is not Format.TABLE:
        s.printer.data(doc)
        return
    s.printer.record(doc, SHOW_FIELDS)
    if doc.get("gate"):
        s.console.print("\n[bold]workflow gate[/bold]")
        s.printer.record(doc["gate"], GATE_FIELDS)


def _decide(ctx: typer.Context, job_id: str, verb: str, reason: str, note: str | None) -> None:
    s = session(ctx)
    body = {"reason": reason, **({"note": note} if note else {})}
    answer = s.client.post(f"/api/v1/approvals/{job_id}/{verb}", body) or {}
    if s.format is not Format.TABLE:
        s.printer.data(answer)
        return
    done = "APPROVED" if verb == "approve" else "REJECTED"
    status = answer.get("status")
    extra = f" ({text(status)})" if status else ""
    s.printer.message(Text.assemble(shown(job_id), "  ", styled(done), shown(extra)))


@app.command()
def approve(ctx: typer.Context,
            job_id: Annotated[str, typer.Argument(help="The waiting job's id.")],
            reason: ReasonOption, note: NoteOption = None) -> None:
    """Approve a job: it goes on to be scheduled (a workflow gate: the run goes on).

    Whoever submitted the job (or started the run) cannot approve it: use another key.
    """
    _decide(ctx, job_id, "approve", reason, note)


@app.command()
def reject(ctx: typer.Context,
           job_id: Annotated[str, typer.Argument(help="The waiting job's id.")],
           reason: ReasonOption, note: NoteOption = None) -> None:
    """Reject a job: it ends DENIED (a workflow gate: its step fails)."""
    _decide(ctx, job_id, "reject", reason, note)
