"""``cordumctl schemas``: The schema registry and topic input schemas."""

from __future__ import annotations

import typer

app = typer.Typer(help="The schema registry and topic input schemas.", no_args_is_help=True)
