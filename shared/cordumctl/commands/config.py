"""``cordumctl config``: Config documents per scope, and the effective config."""

from __future__ import annotations

import typer

app = typer.Typer(help="Config documents per scope, and the effective config.",
                  no_args_is_help=True)
