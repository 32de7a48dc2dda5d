"""``cordumctl artifacts``: Artifacts: put, get; read a memory pointer."""

from __future__ import annotations

import typer

app = typer.Typer(help="Artifacts: put, get; read a memory pointer.", no_args_is_help=True)
