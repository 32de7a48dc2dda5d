"""What the lock routes take: Cordum's ``LockRequest`` body and the ``resource`` query.

Every bad value is a 400 naming its field (``invalid_request``):

- ``resource``: text, surrounding whitespace trimmed (as Cordum does), 1 to
  :data:`MAX_NAME_BYTES` bytes of UTF-8, no control character;
- ``owner``: the same rules; it is a token the caller picks to tell its holds apart,
  not an identity (the lock records the caller's principal beside it);
- ``mode``: ``EXCLUSIVE`` or ``SHARED``, any case; ``EXCLUSIVE`` when absent;
- ``ttl_ms``: an integer; absent, null or 0 take the default (30 s); otherwise
  between the minimum (1 s) and the maximum (1 h).

A body larger than :data:`MAX_BODY_BYTES` is 413 before it is parsed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cordum.gateway.core.errors import InvalidRequest, PayloadTooLarge
from cordum.gateway.core.models import no_default
from cordum.labels import has_control_chars
from cordum.store.resource_locks import (
    DEFAULT_TTL_MS,
    EXCLUSIVE,
    MAX_TTL_MS,
    MIN_TTL_MS,
    MODES,
)

MAX_NAME_BYTES = 256
"""The longest resource name and owner token, in bytes of UTF-8."""
MAX_BODY_BYTES = 8 * 1024
"""A lock request is four short fields; a larger body is 413."""


def _mode_schema(schema: dict[str, Any]) -> None:
    no_default(schema)
    schema["enum"] = list(MODES)


class LockRequest(BaseModel):
    """POST /api/v1/locks/acquire, /renew and /release (renew and release read only
    ``resource``, ``owner`` and, for renew, ``ttl_ms``)."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"additionalProperties": True})

    resource: str = Field(description="The resource's name (1 to 256 bytes, no control "
                                      "character); scoped to the caller's tenant.")
    owner: str = Field(description="The caller's owner token (1 to 256 bytes). Only the "
                                   "principal that took a hold may renew or release it.")
    mode: str = Field(default=EXCLUSIVE, json_schema_extra=_mode_schema,
                      description="EXCLUSIVE (one owner, the default) or SHARED (many); "
                                  "any case.")
    ttl_ms: int = Field(default=DEFAULT_TTL_MS, json_schema_extra=no_default,
                        description=f"Lock time-to-live in milliseconds: {MIN_TTL_MS} to "
                                    f"{MAX_TTL_MS}; absent or 0 is {DEFAULT_TTL_MS}.")


@dataclass(frozen=True, slots=True)
class LockCall:
    """A lock request, checked."""

    resource: str
    owner: str
    mode: str
    ttl_ms: int


def body_size(body: str | None) -> None:
    if len((body or "").encode()) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"request body larger than {MAX_BODY_BYTES} bytes")


def name(value: Any, field: str) -> str:
    """``resource`` or ``owner``, checked (see the module)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InvalidRequest(f"{field} is required")
    if not isinstance(value, str):
        raise InvalidRequest(f"{field} must be a string")
    value = value.strip()
    if len(value.encode()) > MAX_NAME_BYTES:
        raise InvalidRequest(f"{field} is longer than {MAX_NAME_BYTES} bytes")
    if has_control_chars(value) or any(0x80 <= ord(c) <= 0x9F for c in value):
        raise InvalidRequest(f"{field} must not contain control characters")
    return value


def mode(value: Any) -> str:
    if value is None or value == "":
        return EXCLUSIVE
    if not isinstance(value, str) or value.strip().upper() not in MODES:
        raise InvalidRequest("mode must be EXCLUSIVE or SHARED")
    return value.strip().upper()


def ttl_ms(value: Any) -> int:
    if value is None or value == 0:
        return DEFAULT_TTL_MS
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest("ttl_ms must be an integer (milliseconds)")
    if not MIN_TTL_MS <= value <= MAX_TTL_MS:
        raise InvalidRequest(f"ttl_ms must be between {MIN_TTL_MS} and {MAX_TTL_MS} "
                             f"(or 0 for {DEFAULT_TTL_MS})")
    return value


def lock_call(body: dict[str, Any]) -> LockCall:
    """The body of acquire, renew or release, checked field by field."""
    return LockCall(resource=name(body.get("resource"), "resource"),
                    owner=name(body.get("owner"), "owner"), mode=mode(body.get("mode")),
                    ttl_ms=ttl_ms(body.get("ttl_ms")))
