"""``cordumctl schemas``: the tenant's JSON schemas, and (``schemas topics``) the topic
registrations that name an input schema, which every submit to the topic is checked
against.

``put`` registers a schema from a file (JSON or YAML; ``-`` for stdin) or replaces the
one registered under that id; ``delete`` refuses (exit 5) while a topic names it.
``topics set`` creates or replaces a registration: what it does not say is reset, as
the API replaces the whole registration.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cordumctl.arguments import read_document
from cordumctl.output import Column
from cordumctl.session import session

app = typer.Typer(help="The schema registry and topic input schemas.", no_args_is_help=True)
topics = typer.Typer(help="Topic registrations: pool, input and output schemas, status.",
                     no_args_is_help=True)
app.add_typer(topics, name="topics")

SCHEMAS = "/api/v1/schemas"
TOPICS = "/api/v1/topics"
PAGE = 100
"""Schemas or topics one list request asks for (every page is followed)."""

SCHEMA_COLUMNS = [
    Column("ID", "id"), Column("UPDATED", "updated_at"),
    Column("SHA256", lambda r: str(r.get("sha256") or "")[:12]),
    Column("TYPE", lambda r: (r.get("schema") or {}).get("type")),
]
TOPIC_COLUMNS = [
    Column("TOPIC", "name"), Column("STATUS", "status"), Column("POOL", "pool"),
    Column("INPUT SCHEMA", "input_schema_id"), Column("OUTPUT SCHEMA", "output_schema_id"),
    Column("WORKERS", "active_worker_count"),
]


def _all(s: Any, path: str, field: str) -> list[dict[str, Any]]:
    """Every item of a paged list whose items are under ``field``."""
    items: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": PAGE}
    while True:
        answer = s.client.get(path, params) or {}
        items += answer.get(field) or []
        cursor = answer.get("next_cursor")
        if not cursor:
            return items
        params["cursor"] = str(cursor)


@app.command("list")
def list_(ctx: typer.Context) -> None:
    """The tenant's schemas, in id order."""
    s = session(ctx)
    s.printer.rows(_all(s, SCHEMAS, "schemas"), SCHEMA_COLUMNS, empty="no schemas")


@app.command()
def get(ctx: typer.Context,
        schema_id: Annotated[str, typer.Argument(metavar="ID", help="The schema's id.")]
        ) -> None:
    """One schema: its document, as JSON (or YAML with -o yaml)."""
    s = session(ctx)
    # A document reads best as itself: JSON in table mode too.
    s.printer.data(s.client.get(f"{SCHEMAS}/{schema_id}") or {})


@app.command()
def put(ctx: typer.Context,
        schema_id: Annotated[str, typer.Argument(metavar="ID", help="The schema's id.")],
        file: Annotated[str, typer.Argument(
            metavar="FILE", help="The JSON Schema: a JSON or YAML file, '-' for stdin.")]
        ) -> None:
    """Register a schema under ID, or replace the one registered there."""
    s = session(ctx)
    schema = read_document(file, what="FILE")
    if not isinstance(schema, dict):
        raise typer.BadParameter("a schema is a JSON object", param_hint="FILE")
    s.client.post(SCHEMAS, {"id": schema_id, "schema": schema})
    s.printer.outcome(f"registered {schema_id}", {"id": schema_id, "registered": True})


@app.command()
def delete(ctx: typer.Context,
           schema_id: Annotated[str, typer.Argument(metavar="ID", help="The schema's id.")]
           ) -> None:
    """Delete a schema (refused while a topic names it)."""
    s = session(ctx)
    s.client.delete(f"{SCHEMAS}/{schema_id}")
    s.printer.outcome(f"deleted {schema_id}", {"id": schema_id, "deleted": True})


@topics.command("list")
def topics_list(ctx: typer.Context) -> None:
    """The tenant's topic registrations, in name order."""
    s = session(ctx)
    s.printer.rows(_all(s, TOPICS, "items"), TOPIC_COLUMNS, empty="no topics registered")


@topics.command("set")
def topics_set(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The topic (job.<name>).")],
    input_schema: Annotated[str | None, typer.Option(
        "--input-schema", metavar="ID", help="Submits to the topic are checked against it.")]
    = None,
    output_schema: Annotated[str | None, typer.Option(
        "--output-schema", metavar="ID", help="The schema of the topic's results.")] = None,
    pool: Annotated[str | None, typer.Option(
        metavar="POOL", help="The pool serving it (required unless --status disabled).")]
    = None,
    pack: Annotated[str | None, typer.Option("--pack", metavar="ID",
                                             help="The pack it belongs to.")] = None,
    requires: Annotated[list[str] | None, typer.Option(
        "--requires", metavar="CAP", help="A capability its workers need (repeatable).")]
    = None,
    risk_tag: Annotated[list[str] | None, typer.Option(
        "--risk-tag", metavar="TAG", help="A risk tag of its jobs (repeatable).")] = None,
    status: Annotated[str | None, typer.Option(
        metavar="STATUS", help="active (default), deprecated or disabled.")] = None,
) -> None:
    """Create or replace a topic's registration (the whole of it)."""
    s = session(ctx)
    body: dict[str, Any] = {"name": name}
    for field, value in (("input_schema_id", input_schema), ("output_schema_id", output_schema),
                         ("pool", pool), ("pack_id", pack), ("status", status)):
        if value is not None:
            body[field] = value
    if requires:
        body["requires"] = list(requires)
    if risk_tag:
        body["risk_tags"] = list(risk_tag)
    answer = s.client.post(TOPICS, body) or {}
    s.printer.outcome(f"set {answer.get('name', name)}", answer)


@topics.command("delete")
def topics_delete(ctx: typer.Context,
                  name: Annotated[str, typer.Argument(metavar="NAME", help="The topic.")]
                  ) -> None:
    """Delete a topic's registration."""
    s = session(ctx)
    s.client.delete(f"{TOPICS}/{name}")
    s.printer.outcome(f"deleted {name}", {"name": name, "deleted": True})
