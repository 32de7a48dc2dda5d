"""Field types shared by the safety.yaml models (input rules, output rules, derivers)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator


def as_list(value: Any) -> Any:
    """YAML lets a one-item list be written as the item itself."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return value


StrList = Annotated[list[str], BeforeValidator(as_list)]
