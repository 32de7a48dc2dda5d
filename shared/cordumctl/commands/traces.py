"""``cordumctl traces``: Traces: every job of one trace."""

from __future__ import annotations

import typer

app = typer.Typer(help="Traces: every job of one trace.", no_args_is_help=True)
