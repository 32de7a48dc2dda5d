"""``cordumctl policy proposals``: policy changes that wait for a second person.

With ``CORDUM_POLICY_TWO_PERSON`` on the API, a change of the bundles in force (publish,
rollback, an apply or delete of a bundle in force) is kept as a proposal; another
identity than its author confirms it, and anyone who may change the policy may reject
it (its author withdraws it so). docs/policy.md, "Two people for a change".
"""

from __future__ import annotations

from typing import Annotated

import typer

from cordumctl.commands.policy_requests import Access, asking, snapshot_lines
from cordumctl.output import Column, age
from cordumctl.session import session

app = typer.Typer(help="Policy changes waiting for a second person: list, confirm, reject.",
                  no_args_is_help=True)

PROPOSALS = "/api/v1/policy/proposals"
PROPOSAL_COLUMNS = [
    Column("ID", "id"), Column("ACTION", "action"),
    Column("BUNDLES", lambda p: ", ".join(p.get("bundle_ids") or []) or p.get("snapshot_id")),
    Column("BY", "proposed_by"), Column("AGE", lambda p: age(p.get("proposed_at")) + " ago"),
    Column("EXPIRES", "expires_at"), Column("MESSAGE", "message"),
]
ProposalId = Annotated[str, typer.Argument(help="The proposal's id (prop-...).")]


@app.command("list")
def list_(ctx: typer.Context) -> None:
    """The changes waiting for confirmation, oldest first."""
    s = session(ctx)
    with asking(Access.READ):
        answer = s.client.get(PROPOSALS) or {}
    s.printer.rows(answer.get("items") or [], PROPOSAL_COLUMNS,
                   empty="no policy change waits for confirmation")


@app.command()
def confirm(ctx: typer.Context, proposal_id: ProposalId) -> None:
    """Put a proposed change in force. Its author cannot; another identity must."""
    s = session(ctx)
    with asking(Access.CHANGE):
        answer = s.client.post(f"{PROPOSALS}/{proposal_id}/confirm") or {}
    line = (f"confirmed {proposal_id}: proposed by {answer.get('proposed_by')}, "
            f"confirmed by {answer.get('confirmed_by')}, now in force")
    s.printer.outcome("\n".join([line, *snapshot_lines(answer)]), answer)


@app.command()
def reject(
    ctx: typer.Context, proposal_id: ProposalId,
    reason: Annotated[str | None, typer.Option(
        "--reason", "-r", help="Why; kept in the policy audit.")] = None,
) -> None:
    """Drop a proposed change (its author may withdraw it)."""
    s = session(ctx)
    with asking(Access.CHANGE):
        answer = s.client.post(f"{PROPOSALS}/{proposal_id}/reject",
                               {"reason": reason} if reason else {}) or {}
    s.printer.outcome(f"rejected {proposal_id}", answer)
