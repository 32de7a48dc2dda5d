"""``cordumctl workflows``: definitions (apply, list, get, delete), starting runs, dry runs."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cordumctl.arguments import read_document
from cordumctl.output import Column, shown
from cordumctl.session import session
from cordumctl.watch import watch_run

app = typer.Typer(help="Workflow definitions: apply, list, get, delete, run, dry-run.",
                  no_args_is_help=True)

WORKFLOW_COLUMNS = [
    Column("ID", "id"), Column("NAME", "name"),
    Column("STEPS", lambda w: str(len(w.get("steps") or {}))),
    Column("VERSION", "version"), Column("UPDATED", "updated_at"),
]
WORKFLOW_FIELDS = [Column("id", "id"), Column("name", "name"), Column("version", "version"),
                   Column("description", "description"), Column("timeout", "timeout_sec"),
                   Column("created", "created_at"), Column("updated", "updated_at")]
STEP_COLUMNS = [Column("STEP", "id"), Column("TYPE", "type"), Column("TOPIC", "topic"),
                Column("DEPENDS ON", lambda st: ", ".join(st.get("depends_on") or []))]
DRY_RUN_COLUMNS = [Column("STEP", "step_id"), Column("TYPE", "step_type"),
                   Column("DECISION", "decision"), Column("RULE", "rule_id"),
                   Column("REASON", "reason")]

InputOption = Annotated[str | None, typer.Option(
    "--input", "-i", metavar="FILE",
    help="The run's input: a JSON or YAML file, '-' for stdin, or inline JSON.")]


@app.command()
def apply(ctx: typer.Context,
          file: Annotated[str, typer.Option(
              "--file", "-f", metavar="FILE",
              help="The definition, JSON or YAML ('-' for stdin).")]) -> None:
    """Create or replace a workflow definition from a file."""
    s = session(ctx)
    doc = read_document(file, what="--file")
    if not isinstance(doc, dict):
        raise typer.BadParameter("a workflow definition is an object", param_hint="--file")
    answer = s.client.post("/api/v1/workflows", doc) or {}
    s.printer.outcome(f"applied {answer.get('id', doc.get('id', ''))}", answer)


@app.command("list")
def list_(ctx: typer.Context,
          limit: Annotated[int, typer.Option(min=1, help="At most this many.")] = 100) -> None:
    """Workflow definitions of the tenant."""
    s = session(ctx)
    answer = s.client.get("/api/v1/workflows", {"limit": limit})
    items = answer if isinstance(answer, list) else (answer or {}).get("items") or []
    s.printer.rows(items, WORKFLOW_COLUMNS, raw=answer, empty="no workflows")


@app.command()
def get(ctx: typer.Context,
        workflow_id: Annotated[str, typer.Argument(help="The workflow's id.")]) -> None:
    """One definition and its steps."""
    s = session(ctx)
    wf = s.client.get(f"/api/v1/workflows/{workflow_id}") or {}
    steps = [{"id": k, **v} for k, v in (wf.get("steps") or {}).items() if isinstance(v, dict)]
    s.printer.record(wf, WORKFLOW_FIELDS,
                     extra=lambda: s.printer.rows(steps, STEP_COLUMNS, empty="no steps"))


@app.command()
def delete(ctx: typer.Context,
           workflow_id: Annotated[str, typer.Argument(help="The workflow's id.")]) -> None:
    """Delete a definition (its runs stay)."""
    s = session(ctx)
    s.client.delete(f"/api/v1/workflows/{workflow_id}")
    s.printer.outcome(f"deleted {workflow_id}", {"id": workflow_id, "deleted": True})


@app.command()
def run(
    ctx: typer.Context,
    workflow_id: Annotated[str, typer.Argument(help="The workflow's id.")],
    input_: InputOption = None,
    idempotency_key: Annotated[str | None, typer.Option(
        help="Starting again with the same key answers the first run.")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Walk the graph without dispatching any job.")] = False,
    watch: Annotated[bool, typer.Option(
        "--watch", "-w", help="Follow the run until it ends; the exit code says how.")] = False,
) -> None:
    """Start a run of a workflow on an input. Prints the run's id."""
    s = session(ctx)
    body: Any = read_document(input_) if input_ is not None else {}
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    params = {"dry_run": "true"} if dry_run else None
    answer = s.client.post(f"/api/v1/workflows/{workflow_id}/runs", body, params=params,
                           headers=headers) or {}
    run_id = str(answer.get("run_id", ""))
    if watch:
        s.err.print(shown(f"started {run_id}"), highlight=False)
        raise typer.Exit(int(watch_run(s, run_id)))
    s.printer.outcome(run_id, answer)


@app.command("dry-run")
def dry_run_(
    ctx: typer.Context,
    workflow_id: Annotated[str, typer.Argument(help="The workflow's id.")],
    input_: InputOption = None,
    environment: Annotated[str | None, typer.Option(
        help="The environment the policy is asked about.")] = None,
) -> None:
    """Ask the policy about each step's job without running anything.

    ALLOW, DENY, REQUIRE_APPROVAL, THROTTLE or ALLOW_WITH_CONSTRAINTS per job step;
    N/A for a step that runs no job.
    """
    s = session(ctx)
    body: dict[str, Any] = {"input": read_document(input_) if input_ is not None else {}}
    if environment:
        body["environment"] = environment
    answer = s.client.post(f"/api/v1/workflows/{workflow_id}/dry-run", body) or {}
    s.printer.rows(answer.get("steps") or [], DRY_RUN_COLUMNS, raw=answer, empty="no steps")


