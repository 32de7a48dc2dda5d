"""A Redis reply (or a field of a stored document) as ``str``."""

from __future__ import annotations

from typing import Any


def as_text(value: Any, errors: str = "strict") -> str:
    """``value`` as text: a str as it is, bytes decoded as UTF-8 (``errors`` as for
    ``bytes.decode``: ``"replace"`` for content that may not be UTF-8), None as ``""``,
    anything else through ``str``.

    The registry's snapshot reads call it once per worker field on every read, so the
    common case (a str) is answered first, without an ``isinstance``.
    """
    if value.__class__ is str:
        return value  # type: ignore[no-any-return]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors)
    return "" if value is None else str(value)
