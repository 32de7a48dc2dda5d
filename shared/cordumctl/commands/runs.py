"""``cordumctl runs``: workflow runs: list, inspect, follow, cancel, rerun, timeline."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cordumctl.arguments import seconds
from cordumctl.output import Column, Format, age, shown, text
from cordumctl.session import session
from cordumctl.watch import definition_of, run_tree, step_order, watch_run

app = typer.Typer(help="Workflow runs: list, get, watch, cancel, rerun, timeline.",
                  no_args_is_help=True)

RUN_COLUMNS = [
    Column("RUN", "id"), Column("WORKFLOW", "workflow_id"), Column("STATUS", "status"),
    Column("STARTED", lambda r: age(r.get("started_at")) + " ago"),
    Column("BY", "triggered_by"), Column("RERUN OF", "rerun_of"),
]
RUN_FIELDS = [Column("run", "id"), Column("workflow", "workflow_id"), Column("status", "status"),
              Column("started", "started_at"), Column("completed", "completed_at"),
              Column("started by", "triggered_by"), Column("input", "input"),
              Column("output", "output"), Column("error", "error"),
              Column("rerun of", "rerun_of"), Column("dry run", "dry_run")]
STEP_COLUMNS = [Column("STEP", "step_id"), Column("STATUS", "status"),
                Column("ATTEMPTS", "attempts"), Column("JOB", "job_id"),
                Column("STARTED", "started_at"), Column("COMPLETED", "completed_at"),
                Column("ERROR", lambda st: text((st.get("error") or {}).get("message")
                                                if isinstance(st.get("error"), dict)
                                                else st.get("error")))]
EVENT_COLUMNS = [Column("TIME", "timestamp"), Column("EVENT", "type"), Column("STEP", "step_id"),
                 Column("STATUS", "status"), Column("MESSAGE", "message")]

RunId = Annotated[str, typer.Argument(help="The run's id.")]


@app.command("list")
def list_(
    ctx: typer.Context,
    workflow: Annotated[str | None, typer.Option(
        "--workflow", help="Only runs of this workflow.")] = None,
    status: Annotated[str | None, typer.Option(
        help="Only runs with this status (running, waiting, succeeded, failed, ...).")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Runs per page.")] = 50,
    all_: Annotated[bool, typer.Option("--all", "-A", help="Every page, not only the first.")]
    = False,
) -> None:
    """Runs of the tenant, newest first."""
    s = session(ctx)
    params = {"workflow_id": workflow, "status": status, "limit": limit}
    items = list(s.client.pages("/api/v1/workflow-runs", params, follow=all_))
    s.printer.rows(items, RUN_COLUMNS, empty="no runs")


@app.command()
def get(ctx: typer.Context, run_id: RunId) -> None:
    """One run: its status, input, output, and each step."""
    s = session(ctx)
    run = s.client.get(f"/api/v1/workflow-runs/{run_id}") or {}
    steps = run.get("steps") or {}
    rows: list[dict[str, Any]] = [{"step_id": k, **(steps[k] or {})}
                                  for k in step_order(None, run)]
    s.printer.record(run, RUN_FIELDS,
                     extra=lambda: s.printer.rows(rows, STEP_COLUMNS, empty="no steps yet"))


@app.command()
def watch(
    ctx: typer.Context,
    run_id: RunId,
    timeout: Annotated[str | None, typer.Option(
        metavar="DURATION", help="Give up after this long (exit 15).")] = None,
) -> None:
    """Follow a run: a live tree of its steps (states, attempts, timers) until it ends.

    Exit code: 0 succeeded, 10 failed, 11 cancelled, 12 timed out, 13 denied,
    15 --timeout passed.
    """
    code = watch_run(session(ctx), run_id, timeout_s=seconds(timeout) if timeout else None)
    raise typer.Exit(int(code))


@app.command()
def cancel(ctx: typer.Context, run_id: RunId) -> None:
    """Cancel an open run and its open jobs and child runs."""
    s = session(ctx)
    run = s.client.get(f"/api/v1/workflow-runs/{run_id}") or {}
    s.client.post(f"/api/v1/workflows/{run.get('workflow_id', '')}/runs/{run_id}/cancel")
    after = s.client.get(f"/api/v1/workflow-runs/{run_id}") or {}
    s.printer.outcome(f"{run_id}  {after.get('status', '')}",
                      {"run_id": run_id, "status": after.get("status")})


@app.command()
def rerun(
    ctx: typer.Context,
    run_id: RunId,
    from_step: Annotated[str | None, typer.Option(
        help="Run again from this step; the steps it depends on keep their outputs.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Dispatch nothing.")] = False,
    watch: Annotated[bool, typer.Option(
        "--watch", "-w", help="Follow the new run until it ends.")] = False,
) -> None:
    """Start a new run of the same definition and input. Prints the new run's id."""
    s = session(ctx)
    body: dict[str, Any] = {"dry_run": dry_run}
    if from_step:
        body["from_step"] = from_step
    answer = s.client.post(f"/api/v1/workflow-runs/{run_id}/rerun", body) or {}
    new_id = str(answer.get("run_id", ""))
    if watch:
        s.err.print(shown(f"started {new_id}"), highlight=False)
        raise typer.Exit(int(watch_run(s, new_id)))
    s.printer.outcome(new_id, answer)


@app.command()
def timeline(ctx: typer.Context, run_id: RunId) -> None:
    """What happened in a run, in order: dispatches, waits, approvals, completions."""
    s = session(ctx)
    events = s.client.get(f"/api/v1/workflow-runs/{run_id}/timeline") or []
    s.printer.rows(events, EVENT_COLUMNS, empty="no events")


@app.command()
def tree(ctx: typer.Context, run_id: RunId) -> None:
    """The run's steps as a tree, once (what ``watch`` draws live)."""
    s = session(ctx)
    run = s.client.get(f"/api/v1/workflow-runs/{run_id}") or {}
    if s.format is not Format.TABLE:
        s.printer.data(run)
        return
    s.console.print(run_tree(run, definition_of(s, run)))
