"""``cordumctl locks``: named locks on a resource of the tenant: take one, hold on to it,
let it go, see who holds it.

An owner token (``--owner``) tells one's holds apart; the API binds each hold to the
key's principal, so only the key that took a hold may renew or release it. Every
acquire answers a fencing token, greater than any before it in the tenant: pass it to
the resource so it can refuse a holder whose hold has since passed on.

Exit codes: 5 when the lock is held by another owner (or the owner holds no such lock
on release), 4 when renewing a hold that is gone, 3 for a key that may not.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from cordumctl.arguments import seconds
from cordumctl.errors import ApiError
from cordumctl.output import Column, age, duration, parse_time
from cordumctl.session import Session, session

app = typer.Typer(help="Named locks: acquire, renew, release, inspect.", no_args_is_help=True)

LOCKS = "/api/v1/locks"
ADMIN_LOCKS = "/api/v1/admin/locks"
WAIT_POLL_S = 1.0
"""How often ``acquire --wait`` asks again while the lock is held."""
BUSY = "lock_unavailable"


def _until(value: Any) -> str:
    """``2026-01-01T00:00:30Z (in 29.8s)``: when, and how soon."""
    when = parse_time(value)
    if when is None:
        return "-"
    left = (when - datetime.now(UTC)).total_seconds()
    return f"{value} (in {duration(left)})" if left > 0 else f"{value} (passed)"


LOCK_FIELDS = [
    Column("RESOURCE", "resource"), Column("MODE", "mode"),
    Column("OWNERS", lambda d: ", ".join(str(o) for o in d.get("owners") or []) or "(none)"),
    Column("OWNER", "owner"),
    Column("FENCING TOKEN", "fencing_token"),
    Column("EXPIRES", lambda d: _until(d.get("expires_at"))),
    Column("MY HOLD EXPIRES", lambda d: _until(d.get("owner_expires_at"))
           if d.get("owner_expires_at") else "-"),
    Column("UPDATED", lambda d: age(d.get("updated_at")) + " ago"
           if d.get("updated_at") else "-"),
]
LIST_COLUMNS = [
    Column("RESOURCE", "key"), Column("MODE", "mode"), Column("HOLDER", "holder"),
    Column("OWNERS", "owner_count"), Column("FENCING TOKEN", "fencing_token"),
    Column("TTL", lambda e: duration((e.get("ttl_remaining_ms") or 0) / 1000)),
]

Resource = Annotated[str, typer.Argument(help="The resource's name (up to 256 bytes).")]
Owner = Annotated[str, typer.Option("--owner", "-O", metavar="TOKEN",
                                    help="Your owner token for this hold.")]
Ttl = Annotated[str | None, typer.Option(
    "--ttl", metavar="DURATION",
    help="How long the hold lasts unless renewed: 1s to 1h (default 30s).")]


def _ttl_ms(value: str | None) -> int | None:
    if value is None:
        return None
    ms = round(seconds(value) * 1000)
    if ms <= 0:
        raise typer.BadParameter("must be longer than 0", param_hint="--ttl")
    return ms


def _body(resource: str, owner: str, ttl: str | None = None, mode: str | None = None
          ) -> dict[str, Any]:
    body: dict[str, Any] = {"resource": resource, "owner": owner}
    ttl_ms = _ttl_ms(ttl)
    if ttl_ms is not None:
        body["ttl_ms"] = ttl_ms
    if mode is not None:
        body["mode"] = mode
    return body


def _take(s: Session, body: dict[str, Any], wait_s: float | None) -> Any:
    """Acquire; with ``wait_s``, ask again every :data:`WAIT_POLL_S` while it is held."""
    deadline = None if wait_s is None else s.runtime.clock() + wait_s
    while True:
        try:
            return s.client.post(f"{LOCKS}/acquire", body)
        except ApiError as exc:
            left = None if deadline is None else deadline - s.runtime.clock()
            if exc.code != BUSY or left is None or left <= 0:
                raise
            s.runtime.sleep(min(WAIT_POLL_S, left))


@app.command()
def get(ctx: typer.Context, resource: Resource) -> None:
    """Who holds the lock, in which mode, until when (exits 4 when no one does)."""
    s = session(ctx)
    s.printer.record(s.client.get(LOCKS, {"resource": resource}) or {}, LOCK_FIELDS)


@app.command()
def acquire(
    ctx: typer.Context,
    resource: Resource,
    owner: Owner,
    ttl: Ttl = None,
    shared: Annotated[bool, typer.Option(
        "--shared", help="A shared hold (others may share it); exclusive by default.")]
    = False,
    wait: Annotated[str | None, typer.Option(
        "--wait", metavar="DURATION",
        help="While another owner holds it, keep asking for this long.")] = None,
) -> None:
    """Take the lock; prints the hold and its fencing token (exits 5 while it is held)."""
    s = session(ctx)
    body = _body(resource, owner, ttl, "SHARED" if shared else "EXCLUSIVE")
    s.printer.record(_take(s, body, None if wait is None else seconds(wait)) or {},
                     LOCK_FIELDS)


@app.command()
def renew(ctx: typer.Context, resource: Resource, owner: Owner, ttl: Ttl = None) -> None:
    """Hold on for another TTL from now; the fencing token stays (exits 4 when the hold
    is gone)."""
    s = session(ctx)
    s.printer.record(s.client.post(f"{LOCKS}/renew", _body(resource, owner, ttl)) or {},
                     LOCK_FIELDS)


@app.command()
def release(ctx: typer.Context, resource: Resource, owner: Owner) -> None:
    """Let the hold go (exits 5 when the owner holds no such lock)."""
    s = session(ctx)
    answer = s.client.post(f"{LOCKS}/release", _body(resource, owner)) or {}
    left = (answer.get("lock") or {}).get("owners") or []
    line = f"released {resource}" + (f" ({len(left)} owner(s) still share it)" if left else "")
    s.printer.outcome(line, answer)


@app.command("list")
def list_(ctx: typer.Context) -> None:
    """The tenant's live locks (admin)."""
    s = session(ctx)
    answer = s.client.get(ADMIN_LOCKS) or {}
    s.printer.rows(answer.get("locks") or [], LIST_COLUMNS, raw=answer, empty="no locks held")
