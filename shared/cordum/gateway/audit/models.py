"""What the audit routes take: the filters and page of an events read, the hold's body.

Every bad value is a 400 with its own code (``INVALID_LIMIT``, ``INVALID_CURSOR``,
``INVALID_FROM``, ``INVALID_TO``, ``INVALID_RANGE``, ``INVALID_SEVERITY``,
``INVALID_FILTER``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cordum.gateway.core.errors import InvalidRequest
from cordum.gateway.core.models import no_default
from cordum.gateway.core.times import parse_time_us
from cordum.store.audit import Severity

if TYPE_CHECKING:
    from collections.abc import Mapping

DEFAULT_LIMIT = 100
MAX_LIMIT = 200
MAX_CURSOR = 2**53 - 1
MAX_FILTER_CHARS = 256
"""The longest value of a text filter (it goes into the read's own audit event)."""
REASON_MAX_BYTES = 512
"""A hold's reason is cut to this many bytes of UTF-8."""
MATCHED = ("actor", "job_id", "run_id")
"""Filters that match their field exactly."""
SEARCHED = ("type", "actor", "job_id", "run_id", "workflow_id", "reason")
"""Fields ``search`` looks in (case-insensitive substring)."""


def _bad(message: str, code: str) -> InvalidRequest:
    return InvalidRequest(message, code)


def _text(params: Mapping[str, str], name: str) -> str:
    value = (params.get(name) or "").strip()
    if len(value) > MAX_FILTER_CHARS:
        raise _bad(f"{name} is longer than {MAX_FILTER_CHARS} characters", "INVALID_FILTER")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _bad(f"{name} is not valid UTF-8", "INVALID_FILTER") from None
    return value


def parse_limit(raw: str) -> int:
    """``limit``: default :data:`DEFAULT_LIMIT`, clamped to :data:`MAX_LIMIT`."""
    raw = raw.strip()
    if not raw:
        return DEFAULT_LIMIT
    if not raw.isascii() or not raw.isdigit() or int(raw) < 1:
        raise _bad("limit must be a positive integer", "INVALID_LIMIT")
    return min(int(raw), MAX_LIMIT)


def parse_cursor(raw: str) -> int | None:
    """``cursor``: the seq to continue below (None: from the newest)."""
    raw = raw.strip()
    if not raw:
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 16 or not 1 <= int(raw) <= MAX_CURSOR:
        raise _bad("cursor is not a next_cursor of this list", "INVALID_CURSOR")
    return int(raw)


def _time(params: Mapping[str, str], name: str, code: str) -> int | None:
    raw = (params.get(name) or "").strip()
    if not raw:
        return None
    try:
        return parse_time_us(raw)
    except (ValueError, OverflowError):
        raise _bad(f"{name} must be an RFC 3339 time", code) from None


@dataclass(frozen=True, slots=True)
class EventFilter:
    type: str = ""
    """Exact, or a prefix when it ends in ``.*`` (``job.*``)."""
    severity: str = ""
    actor: str = ""
    job_id: str = ""
    run_id: str = ""
    since_us: int | None = None
    until_us: int | None = None
    search: str = ""

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> EventFilter:
        severity = _text(params, "severity").upper()
        if severity and severity not in set(Severity):
            raise _bad(f"severity must be one of {', '.join(Severity)}", "INVALID_SEVERITY")
        since = _time(params, "from", "INVALID_FROM")
        until = _time(params, "to", "INVALID_TO")
        if since is not None and until is not None and since > until:
            raise _bad("from is after to", "INVALID_RANGE")
        return cls(type=_text(params, "type"), severity=severity, actor=_text(params, "actor"),
                   job_id=_text(params, "job_id"), run_id=_text(params, "run_id"),
                   since_us=since, until_us=until, search=_text(params, "search").lower())

    def as_dict(self) -> dict[str, Any]:
        """The filters set, as the read's own audit event names them."""
        out: dict[str, Any] = {k: getattr(self, k) for k in
                               ("type", "severity", "actor", "job_id", "run_id", "search")
                               if getattr(self, k)}
        if self.since_us is not None:
            out["from"] = self.since_us
        if self.until_us is not None:
            out["to"] = self.until_us
        return out

    def matches(self, event: Mapping[str, Any]) -> bool:
        kind = _field(event, "type")
        if self.type:
            if self.type.endswith(".*"):
                if not kind.startswith(self.type[:-1]):
                    return False
            elif kind != self.type:
                return False
        if self.severity and _field(event, "severity").upper() != self.severity:
            return False
        for name in MATCHED:
            wanted = getattr(self, name)
            if wanted and _field(event, name) != wanted:
                return False
        if self.since_us is not None or self.until_us is not None:
            at = event.get("at")
            if isinstance(at, bool) or not isinstance(at, int):
                return False
            if self.since_us is not None and at < self.since_us:
                return False
            if self.until_us is not None and at > self.until_us:
                return False
        if self.search:
            return any(self.search in _field(event, name).lower() for name in SEARCHED)
        return True


def _field(event: Mapping[str, Any], name: str) -> str:
    value = event.get(name)
    return value if isinstance(value, str) else ""


def cut(value: str, most: int = REASON_MAX_BYTES) -> str:
    """Trimmed, and cut to ``most`` bytes of UTF-8 on a character boundary."""
    return value.strip().encode()[:most].decode(errors="ignore").strip()


class HoldRequest(BaseModel):
    """PUT /api/v1/audit/hold."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"additionalProperties": True})

    reason: str = Field(default="", json_schema_extra=no_default,
                        description="Why the chain is held (a case, a request); cut to "
                                    "512 bytes.")

    @field_validator("reason")
    @classmethod
    def _cut(cls, value: str) -> str:
        return cut(value)
