"""``cordumctl dlq``: jobs that ended in the dead-letter queue."""

from __future__ import annotations

from typing import Annotated

import typer

from cordumctl.output import Column, age
from cordumctl.session import session

app = typer.Typer(help="The dead-letter queue: list, retry, delete.", no_args_is_help=True)

DLQ_COLUMNS = [
    Column("JOB", "job_id"), Column("TOPIC", "topic"), Column("REASON", "reason_code"),
    Column("ERROR", "error"), Column("LAST STATE", "original_state"),
    Column("RETRIES", "retry_count"), Column("FAILED", lambda e: age(e.get("failed_at")) + " ago"),
]


@app.command("list")
def list_(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option(min=1, help="Entries per page.")] = 50,
    all_: Annotated[bool, typer.Option("--all", "-A", help="Every page, not only the first.")]
    = False,
) -> None:
    """Dead-lettered jobs, newest first, with why each ended there."""
    s = session(ctx)
    items = list(s.client.pages("/api/v1/dlq/page", {"limit": limit}, follow=all_))
    s.printer.rows(items, DLQ_COLUMNS, empty="the DLQ is empty")


@app.command()
def retry(ctx: typer.Context,
          job_id: Annotated[str, typer.Argument(help="The dead-lettered job's id.")]) -> None:
    """Submit the job again as a new job (``<id>-retry-<hex>``); prints the new id."""
    s = session(ctx)
    answer = s.client.post(f"/api/v1/dlq/{job_id}/retry") or {}
    s.printer.outcome(str(answer.get("job_id", "")), answer)


@app.command()
def delete(ctx: typer.Context,
           job_id: Annotated[str, typer.Argument(help="The dead-lettered job's id.")]) -> None:
    """Remove an entry from the DLQ (the job itself stays)."""
    s = session(ctx)
    s.client.delete(f"/api/v1/dlq/{job_id}")
    s.printer.outcome(f"deleted {job_id}", {"job_id": job_id, "deleted": True})
