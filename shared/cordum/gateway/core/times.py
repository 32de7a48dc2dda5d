"""Times as the HTTP API writes and reads them: RFC 3339 in UTC out, RFC 3339 or an
epoch number in (``updated_after``, ``updated_before``).

Every feature answers times the same way, so Cordum's client parses all of them with
one rule; and every list that filters by time reads its bounds the same way.
"""

from __future__ import annotations

from datetime import UTC, datetime

from cordum.store.indexes import normalize_cutoff_us


def rfc3339_us(us: str | int | None) -> str | None:
    """Microseconds since the epoch (as stored) as RFC 3339 UTC; None when not a time."""
    if us is None or us == "":
        return None
    try:
        value = int(us)
    except (TypeError, ValueError):
        try:
            value = int(float(us))
        except (TypeError, ValueError):
            return None
    try:
        instant = datetime.fromtimestamp(value / 1e6, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return instant.isoformat().replace("+00:00", "Z")


def rfc3339_s(seconds: float) -> str:
    """Epoch seconds as RFC 3339 UTC."""
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat().replace("+00:00", "Z")


def parse_time_us(raw: str) -> int:
    """``updated_after``/``updated_before``: RFC 3339, or an epoch number in s, ms or µs.

    Raises ValueError when it is neither.
    """
    raw = raw.strip()
    if raw.lstrip("-").isdigit():
        return normalize_cutoff_us(int(raw))
    instant = datetime.fromisoformat(raw.replace("z", "Z"))
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return int(instant.timestamp() * 1_000_000)
