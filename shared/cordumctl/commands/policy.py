"""``cordumctl policy``: the system policy's bundles, questions to the policy, publish,
rollback, snapshots, the audit of changes, and replays of past jobs.

Bundles govern every tenant, so a change (apply, delete, publish, rollback) takes an
``admin`` or ``policy.write`` key whose tenant is ``*``; reads take ``admin``,
``policy.read`` or ``policy.write``; simulate, explain and replay take ``admin`` or
``policy.write`` (docs/policy.md, "cordumctl policy"). A bundle id's ``/`` travels as
``~`` in a path, which the API reads back as ``/``.

A file's id: ``apply -f deny-prod.yaml`` writes the bundle ``secops/deny-prod`` (the
file's name without its extension, under ``secops/``, where Cordum keeps the bundles
operators write) unless ``--id`` names another; ``simulate -f`` and ``replay -f`` try
the file as that same bundle, so each says what applying the file would do.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from cordumctl.commands import policy_proposals
from cordumctl.commands.policy_requests import (
    BUNDLES,
    Access,
    BundleFile,
    asking,
    bundle_id_for,
    bundle_path,
    confirm,
    instant,
    noted,
    question,
    remedy,
    replay_pages,
    short_decision,
    snapshot_lines,
    waiting_line,
)
from cordumctl.output import Column, Format, age, shown, text
from cordumctl.session import session

if TYPE_CHECKING:
    from cordumctl.session import Session

app = typer.Typer(help="The system policy: bundles, simulate, explain, publish, rollback, "
                       "snapshots, audit, replay.", no_args_is_help=True)
bundles_app = typer.Typer(help="Policy bundles: list, get, apply, delete.",
                          no_args_is_help=True)
app.add_typer(bundles_app, name="bundles")
app.add_typer(policy_proposals.app, name="proposals")

"""Where ``apply -f FILE`` puts a bundle unless ``--id`` says otherwise."""
"""``replay`` follows ``next_cursor`` at most this many times (a server that kept
answering a cursor would otherwise hold the command forever)."""
BUNDLE_COLUMNS = [
    Column("ID", "id"), Column("ENABLED", "enabled"), Column("RULES", "rule_count"),
    Column("AUTHOR", "author"), Column("UPDATED", lambda b: age(b.get("updated_at")) + " ago"),
    Column("MESSAGE", "message"),
]
BUNDLE_FIELDS = [
    Column("id", "id"), Column("enabled", "enabled"), Column("source", "source"),
    Column("rules", "rule_count"), Column("author", "author"), Column("message", "message"),
    Column("created", "created_at"), Column("updated", "updated_at"),
    Column("sha256", "sha256"),
]
DECISION_FIELDS = [
    Column("decision", lambda d: short_decision(d.get("decision"))),
    Column("rule", lambda d: d.get("rule_id") or d.get("ruleId")),
    Column("reason", "reason"),
    Column("snapshot", lambda d: d.get("policy_snapshot") or d.get("policySnapshot")),
    Column("approval", lambda d: "required" if d.get("approvalRequired") else None),
    Column("approval ref", "approvalRef"),
    Column("constraints", "constraints"),
    Column("remediations", lambda d: "; ".join(remedy(r) for r in d.get("remediations") or [])),
]
SNAPSHOT_COLUMNS = [
    Column("ID", "id"), Column("CREATED", lambda s: age(s.get("created_at")) + " ago"),
    Column("AUTHOR", "author"), Column("BUNDLES", lambda s: ", ".join(s.get("bundle_ids") or [])),
    Column("NOTE", "note"),
]
KERNEL_SNAPSHOT_COLUMNS = [Column("SNAPSHOT", "id"), Column("IN FORCE", "in_force")]
AUDIT_COLUMNS = [
    Column("AT", "created_at"), Column("ACTION", "action"), Column("BY", "actor_id"),
    Column("BUNDLES", lambda e: ", ".join(e.get("bundle_ids") or []) or e.get("resource_id")),
    Column("MESSAGE", "message"), Column("SNAPSHOT AFTER", "snapshot_after"),
]
CHANGE_COLUMNS = [
    Column("JOB", "job_id"), Column("AT", "at"), Column("TOPIC", "topic"),
    Column("WAS", "original_decision"), Column("NOW", "new_decision"),
    Column("DIRECTION", "direction"), Column("RULE", "new_rule_id"),
]

BundleId = Annotated[str, typer.Argument(help="The bundle's id, e.g. secops/deny-prod.")]
MessageOption = Annotated[str | None, typer.Option(
    "--message", "-m", help="Why; kept with the change and in the audit.")]
TopicOption = Annotated[str, typer.Option(help="The job's topic, e.g. job.deploy.prod.")]
LabelOption = Annotated[list[str] | None, typer.Option(
    "--label", "-l", metavar="KEY=VALUE", help="A label of the job; repeat for more.")]
CapabilityOption = Annotated[str | None, typer.Option(help="The capability the job asks for.")]
RiskTagOption = Annotated[list[str] | None, typer.Option(
    "--risk-tag", metavar="TAG", help="A risk tag of the job; repeat for more.")]
JobIdOption = Annotated[str | None, typer.Option(
    help="The job's id (named as the approval ref when approval is required).")]


@bundles_app.command("list")
def list_(ctx: typer.Context) -> None:
    """The bundles: in force (enabled) or a draft, rules, who changed each last and when."""
    s = session(ctx)
    with asking(Access.READ):
        answer = s.client.get(BUNDLES) or {}
    s.printer.rows(answer.get("items") or [], BUNDLE_COLUMNS, empty="no policy bundles")


@bundles_app.command()
def get(ctx: typer.Context, bundle_id: BundleId) -> None:
    """One bundle: its facts, then its YAML."""
    s = session(ctx)
    with asking(Access.READ):
        bundle = s.client.get(bundle_path(bundle_id)) or {}

    def content() -> None:
        s.console.print()
        s.console.print(shown(str(bundle.get("content") or "").rstrip()), highlight=False)

    s.printer.record(bundle, BUNDLE_FIELDS, extra=content)


@bundles_app.command()
def apply(
    ctx: typer.Context,
    file: Annotated[str, typer.Option(
        "--file", "-f", metavar="FILE", help="The bundle's YAML ('-' for stdin, with --id).")],
    id_: Annotated[str | None, typer.Option(
        "--id", help="The bundle's id (default: secops/<the file's name without extension>).")]
    = None,
    enable: Annotated[bool | None, typer.Option(
        "--enable/--disable", show_default=False,
        help="Put it in force now, or make it a draft. Without either a new bundle is a "
             "draft until published and a bundle in force stays in force.")] = None,
    message: MessageOption = None,
) -> None:
    """Create or replace a bundle from a YAML file; the API checks it and names the line
    and the rule of a mistake."""
    s = session(ctx)
    bundle_id = bundle_id_for(id_, file, "--id")
    source = BundleFile.read(file)
    body: dict[str, Any] = {"content": source.content}
    if enable is not None:
        body["enabled"] = enable
    if message:
        body["message"] = message
    with asking(Access.CHANGE, source):
        answer = s.client.call("PUT", bundle_path(bundle_id), body=body) or {}
    if (waiting := waiting_line(answer)) is not None:
        s.printer.outcome(waiting, answer)
        return
    written = str(answer.get("id") or bundle_id)
    state = ("in force" if answer.get("enabled") else
             f"a draft: `cordumctl policy publish {written}` puts it in force")
    s.printer.outcome(f"applied {written} ({state})", answer)


@bundles_app.command()
def delete(
    ctx: typer.Context, bundle_id: BundleId,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Delete without asking.")] = False,
) -> None:
    """Delete a bundle: its rules stop applying to every tenant at once."""
    s = session(ctx)
    if not yes:
        confirm(f"delete policy bundle {shown(bundle_id).plain}, for every tenant?")
    with asking(Access.CHANGE):
        answer = s.client.delete(bundle_path(bundle_id))
    if (waiting := waiting_line(answer)) is not None:
        s.printer.outcome(waiting, answer)
        return
    s.printer.outcome(f"deleted {bundle_id}", {"id": bundle_id, "deleted": True})


# -- questions --------------------------------------------------------------------------

def show_decision(s: Session, answer: dict[str, Any], *, explain: bool = False) -> None:
    if s.format is not Format.TABLE:
        s.printer.data(answer)
        return
    fields = [c for c in DECISION_FIELDS if not (explain and c.header == "reason")]
    s.printer.record(answer, fields)
    if explain:
        s.console.print()
        for part in re.split(r"\. (?=also matched: |not matched: )", str(answer.get("reason"))):
            if part.startswith("not matched: "):
                s.console.print("not matched:")
                for why in part.removeprefix("not matched: ").split("; "):
                    s.console.print(shown(f"  {why}"), highlight=False)
            else:
                s.console.print(shown(part), highlight=False)


@app.command()
def simulate(
    ctx: typer.Context, topic: TopicOption, label: LabelOption = None,
    capability: CapabilityOption = None, risk_tag: RiskTagOption = None,
    job_id: JobIdOption = None,
    bundle: Annotated[str | None, typer.Option(
        "--bundle", "-b", help="Decide with this bundle in force (a draft included).")] = None,
    file: Annotated[str | None, typer.Option(
        "--file", "-f", metavar="FILE",
        help="Decide with this YAML as the bundle (--bundle, else secops/<file name>).")]
    = None,
) -> None:
    """What the policy would decide about a job, counting nothing and storing nothing.

    With --bundle or --file: under the policy with that bundle in force (its content
    from the file when given), as `bundles apply -f FILE --enable` would make it.
    """
    s = session(ctx)
    request = question(topic, label, capability, risk_tag, job_id)
    if bundle is None and file is None:
        with asking(Access.ASK):
            answer = s.client.post("/api/v1/policy/simulate", request) or {}
    else:
        bundle_id = bundle_id_for(bundle, file, "--bundle")
        source = BundleFile.read(file) if file is not None else None
        body: dict[str, Any] = {"request": request}
        if source is not None:
            body["content"] = source.content
        with asking(Access.ASK, source):
            answer = s.client.post(bundle_path(bundle_id, "simulate"), body) or {}
    show_decision(s, answer)


@app.command()
def explain(
    ctx: typer.Context, topic: TopicOption, label: LabelOption = None,
    capability: CapabilityOption = None, risk_tag: RiskTagOption = None,
    job_id: JobIdOption = None,
) -> None:
    """Why the policy in force decides as it does about a job: the deciding rule, the
    other rules that matched, and why each remaining rule did not."""
    s = session(ctx)
    with asking(Access.ASK):
        answer = s.client.post("/api/v1/policy/explain",
                               question(topic, label, capability, risk_tag, job_id)) or {}
    show_decision(s, answer, explain=True)


# -- publish, rollback, snapshots, audit ------------------------------------------------

NoteOption = Annotated[str | None, typer.Option(help="A note for the snapshots taken.")]


@app.command()
def publish(
    ctx: typer.Context,
    bundle_ids: Annotated[list[str] | None, typer.Argument(
        help="The bundles to put in force; every bundle when none is named.",
        show_default=False)] = None,
    message: MessageOption = None, note: NoteOption = None,
) -> None:
    """Put bundles in force. The bundles are snapshotted before and after, so a publish
    is undone by rolling back to the snapshot before."""
    s = session(ctx)
    body = noted({"bundle_ids": bundle_ids} if bundle_ids else {}, message, note)
    with asking(Access.CHANGE):
        answer = s.client.post("/api/v1/policy/publish", body) or {}
    if (waiting := waiting_line(answer)) is not None:
        s.printer.outcome(waiting, answer)
        return
    line = "published " + ", ".join(str(b) for b in answer.get("published") or [])
    s.printer.outcome("\n".join([line, *snapshot_lines(answer)]), answer)


@app.command()
def rollback(
    ctx: typer.Context,
    snapshot_id: Annotated[str, typer.Argument(
        help="The snapshot to restore (`cordumctl policy snapshots`).")],
    message: MessageOption = None, note: NoteOption = None,
) -> None:
    """Restore the bundles of a snapshot, as they were, in force or not."""
    s = session(ctx)
    with asking(Access.CHANGE):
        answer = s.client.post("/api/v1/policy/rollback",
                               noted({"snapshot_id": snapshot_id}, message, note)) or {}
    if (waiting := waiting_line(answer)) is not None:
        s.printer.outcome(waiting, answer)
        return
    line = f"rolled back to {answer.get('rollback_to') or snapshot_id}"
    s.printer.outcome("\n".join([line, *snapshot_lines(answer)]), answer)


@app.command()
def snapshots(
    ctx: typer.Context,
    kernel: Annotated[bool, typer.Option(
        "--kernel", help="The policies the safety kernel had in force (its decisions name "
                         "them), not the bundles' snapshots a rollback restores.")] = False,
) -> None:
    """The bundles' snapshots a rollback restores, newest first (at most 10)."""
    s = session(ctx)
    with asking(Access.READ):
        if kernel:
            found = s.client.get("/api/v1/policy/snapshots") or []
            s.printer.rows(found, KERNEL_SNAPSHOT_COLUMNS, empty="no snapshots")
            return
        answer = s.client.get(f"{BUNDLES}/snapshots") or {}
    s.printer.rows(answer.get("items") or [], SNAPSHOT_COLUMNS, empty="no snapshots")


@app.command()
def audit(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many entries.")]
    = 50,
    action: Annotated[str | None, typer.Option(
        help="Only this action: edit, delete, snapshot, publish or rollback.")] = None,
    bundle: Annotated[str | None, typer.Option(
        "--bundle", "-b", help="Only changes of this bundle (or snapshot id).")] = None,
    search: Annotated[str | None, typer.Option(help="Only entries holding this text.")]
    = None,
) -> None:
    """Changes of the policy, newest first: who, what, why, and the snapshots around each."""
    s = session(ctx)
    params = {"limit": limit, "action": action, "rule_id": bundle, "search": search}
    with asking(Access.READ):
        items, page = s.client.get_with_headers("/api/v1/policy/audit", params)
    items = items or []
    s.printer.rows(items, AUDIT_COLUMNS, empty="no policy changes recorded")
    if s.format is Format.TABLE and page.get("x-has-more") == "true":
        s.console.print(shown(f"({len(items)} of {page.get('x-total-count')}; --limit shows "
                              "more)", "dim"))


# -- replay -----------------------------------------------------------------------------

@app.command()
def replay(
    ctx: typer.Context,
    from_: Annotated[str, typer.Option(
        "--from", metavar="TIME", help="Jobs since this RFC 3339 time, or this long ago (24h).")],
    to: Annotated[str | None, typer.Option(
        "--to", metavar="TIME", help="Jobs until this time or this long ago (default: now).")]
    = None,
    bundle: Annotated[str | None, typer.Option(
        "--bundle", "-b", help="Replay with this bundle in force (with --file: as the file).")]
    = None,
    file: Annotated[str | None, typer.Option(
        "--file", "-f", metavar="FILE",
        help="Replay with this YAML as the bundle (--bundle, else secops/<file name>).")]
    = None,
    current: Annotated[bool, typer.Option(
        "--current", help="Replay under the policy in force now.")] = False,
    max_jobs: Annotated[int | None, typer.Option(
        min=1, help="Jobs the API replays per page.")] = None,
) -> None:
    """Decide past jobs again under a candidate policy: which decisions would change.

    Give --bundle, --file (or both), or --current. Every page is followed.
    """
    s = session(ctx)
    if current and (bundle or file):
        raise typer.BadParameter("--current replays the policy in force: no --bundle or "
                                 "--file with it", param_hint="--current")
    if not (current or bundle or file):
        raise typer.BadParameter("give --bundle, --file or --current", param_hint="--bundle")
    now = datetime.now(UTC)
    body: dict[str, Any] = {"from": instant(from_, now, "--from"),
                            "to": instant(to or "0s", now, "--to")}
    source = None
    if current:
        body["use_current_policy"] = True
    else:
        body["candidate_bundle_id"] = bundle_id_for(bundle, file, "--bundle")
        source = BundleFile.read(file) if file is not None else None
        if source is not None:
            body["candidate_content"] = source.content
    if max_jobs is not None:
        body["max_jobs"] = max_jobs
    answer = replay_pages(s, body, source)
    if s.format is not Format.TABLE:
        s.printer.data(answer)
        return
    counts = ", ".join(f"{k.replace('_', ' ')} {text(v)}" for k, v in answer["summary"].items())
    s.printer.message(Text.assemble(("replayed: ", "bold"), shown(counts or "-")))
    for warning in answer.get("warnings") or []:
        s.console.print(shown(f"warning: {warning}", "yellow"), highlight=False)
    s.printer.rows(answer["changes"], CHANGE_COLUMNS, empty="no decision would change")
