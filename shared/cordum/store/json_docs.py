"""Stored JSON read leniently: a value that is absent or malformed is None, never raised."""

from __future__ import annotations

import json
from typing import Any


def json_value(raw: str | bytes | None) -> Any:
    """A stored JSON value; None when absent, empty or malformed."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def json_object(raw: str | bytes | None) -> dict[str, Any] | None:
    """A stored JSON object; None when absent, malformed or not an object."""
    value = json_value(raw)
    return value if isinstance(value, dict) else None
