"""``cordumctl locks``: Named locks: acquire, renew, release, inspect."""

from __future__ import annotations

import typer

app = typer.Typer(help="Named locks: acquire, renew, release, inspect.", no_args_is_help=True)
