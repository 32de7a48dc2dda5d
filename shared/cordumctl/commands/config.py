"""``cordumctl config``: config documents per scope, and the effective config.

``get`` reads one document (``system/default`` unless ``--scope``/``--id`` say
otherwise); ``set`` writes members of one; ``effective`` shows the config a job of
the caller's tenant runs with (system/default, then the org, team, workflow and step).

``set`` takes ``KEY=VALUE`` pairs, a file of members (``-f``, JSON or YAML), or both
(the pairs win). A VALUE that is JSON is sent as that JSON (``true``, ``5``,
``'["job.x.*"]'``), anything else as text. The API replaces a whole member by its
name, so a KEY with dots (``safety.denied_topics``) sets a place inside a member: the
document is read first and the member sent whole, with the revision read, so a change
made in between is refused (409, exit 5) rather than overwritten.
"""

from __future__ import annotations

import json
from copy import deepcopy
from typing import Annotated, Any

import typer

from cordumctl.arguments import read_document
from cordumctl.output import Column, Format, Printer
from cordumctl.session import Session, session

app = typer.Typer(help="Config documents per scope, and the effective config.",
                  no_args_is_help=True)

CONFIG = "/api/v1/config"
EFFECTIVE = "/api/v1/config/effective"
SCOPES = ("system", "org", "team", "workflow", "step")

DOC_FIELDS = [Column("SCOPE", "scope"), Column("ID", "scope_id"),
              Column("REVISION", "revision"), Column("UPDATED", "updated_at")]
EFFECTIVE_FIELDS = [Column("VERSION", "version"), Column("HASH", "hash")]

ScopeOption = Annotated[str, typer.Option(
    "--scope", metavar="SCOPE", help="system, org, team, workflow or step.")]
IdOption = Annotated[str, typer.Option(
    "--id", metavar="ID", help="The scope's id (system: default; org: your tenant).")]


def _scope(value: str) -> str:
    if value not in SCOPES:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(SCOPES)}",
                                 param_hint="--scope")
    return value


def parse_value(text: str) -> Any:
    """A VALUE as JSON when it is JSON, else as text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_pairs(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as ``{KEY: value}`` (KEY may hold dots)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip() or any(not part for part in name.split(".")):
            raise typer.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="KEY=VALUE")
        out[name.strip()] = parse_value(value)
    return out


def place(data: dict[str, Any], path: str, value: Any) -> None:
    """Set ``value`` at the dotted ``path`` of ``data``, making objects on the way."""
    *parents, last = path.split(".")
    node = data
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[last] = value


def _print_doc(s: Session, doc: dict[str, Any], fields: list[Column]) -> None:
    if s.format is not Format.TABLE:
        s.printer.data(doc)
        return
    s.printer.record(doc, fields)
    Printer(Format.JSON, s.console).data(doc.get("data") or {})  # the data, under the fields


@app.command()
def get(
    ctx: typer.Context,
    scope: ScopeOption = "system",
    id_: IdOption = "",
) -> None:
    """One config document: its scope, id, revision and data."""
    s = session(ctx)
    params = {"scope": _scope(scope), "scope_id": id_, "envelope": "true"}
    doc = s.client.get(CONFIG, params) or {}
    _print_doc(s, doc, DOC_FIELDS)


@app.command("set")
def set_(
    ctx: typer.Context,
    pairs: Annotated[list[str] | None, typer.Argument(
        metavar="KEY=VALUE...", help="Members to set; a dotted KEY sets inside a member.")]
    = None,
    file: Annotated[str | None, typer.Option(
        "--file", "-f", metavar="FILE",
        help="A JSON or YAML object of members to set (- for stdin).")] = None,
    scope: ScopeOption = "system",
    id_: IdOption = "",
    revision: Annotated[int | None, typer.Option(
        min=0, help="Refuse the write unless the document is at this revision (409).")]
    = None,
) -> None:
    """Set members of a config document (admin; the system's takes a key for every tenant)."""
    s = session(ctx)
    _scope(scope)
    data: dict[str, Any] = {}
    if file is not None:
        doc = read_document(file, what="--file")
        if not isinstance(doc, dict):
            raise typer.BadParameter("the file must hold an object of members",
                                     param_hint="--file")
        data.update(doc)
    values = parse_pairs(pairs or [])
    if not data and not values:
        raise typer.BadParameter("give KEY=VALUE pairs or --file")
    nested = {k: v for k, v in values.items() if "." in k}
    data.update({k: v for k, v in values.items() if "." not in k})
    if nested:
        current = s.client.get(CONFIG, {"scope": scope, "scope_id": id_,
                                        "envelope": "true"}) or {}
        found = current.get("data")
        stored: dict[str, Any] = found if isinstance(found, dict) else {}
        if revision is None:
            revision = int(current.get("revision") or 0)
        for path, value in nested.items():
            top = path.split(".", 1)[0]
            if top not in data:
                data[top] = deepcopy(stored.get(top)) if isinstance(stored.get(top),
                                                                    dict) else {}
            if not isinstance(data[top], dict):
                data[top] = {}
            place(data, path, value)
    body: dict[str, Any] = {"scope": scope, "scope_id": id_, "data": data}
    if revision is not None:
        body["revision"] = revision
    s.client.call("PUT", CONFIG, body=body)
    where = f"{scope}/{id_ or ('default' if scope == 'system' else '-')}"
    s.printer.outcome(f"set {', '.join(sorted(data))} in config {where}",
                      {"scope": scope, "scope_id": id_, "set": sorted(data)})


@app.command()
def effective(
    ctx: typer.Context,
    team: Annotated[str, typer.Option(metavar="ID", help="The team's id.")] = "",
    workflow: Annotated[str, typer.Option(metavar="ID", help="The workflow's id.")] = "",
    step: Annotated[str, typer.Option(metavar="ID", help="The step's id.")] = "",
) -> None:
    """The merged config of system/default, your tenant, and the team, workflow, step."""
    s = session(ctx)
    params = {"team_id": team, "workflow_id": workflow, "step_id": step}
    snap = s.client.get(EFFECTIVE, params) or {}
    _print_doc(s, snap, EFFECTIVE_FIELDS)
