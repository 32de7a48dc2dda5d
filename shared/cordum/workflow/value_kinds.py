"""The expr-lang names of value types, as expression errors say them (``cannot fetch
'x' from nil``), shared by the interpreter's adapter and the plain-path fast path."""

from __future__ import annotations

from typing import Any


def value_kind(value: Any) -> str:
    """The expr-lang name of a plain value's type."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list):
        return "list"
    return type(value).__name__
