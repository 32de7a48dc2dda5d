"""Parsing of the values commands take: durations, ``key=value`` labels, JSON input."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import typer
import yaml

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def seconds(value: str) -> float:
    """``1500ms``, ``30s``, ``5m``, ``1h`` or plain seconds."""
    match = _DURATION.match(value)
    if not match:
        raise typer.BadParameter(f"{value!r} is not a duration (e.g. 30s, 5m, 1500ms)")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def labels(pairs: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"{pair!r} is not key=value", param_hint="--label")
        out[name] = value
    return out


def read_document(path: str, *, what: str = "--input") -> Any:
    """A JSON (or YAML) document from a file, ``-`` for stdin, or inline JSON (``{...}``)."""
    stripped = path.strip()
    if stripped.startswith(("{", "[")):
        text = stripped
    elif path == "-":
        text = sys.stdin.read()
    else:
        file = Path(path)
        if not file.is_file():
            raise typer.BadParameter(f"no such file: {path}", param_hint=what)
        text = file.read_text()
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise typer.BadParameter(f"not JSON or YAML: {exc}", param_hint=what) from None
