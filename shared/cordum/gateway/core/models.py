"""Request rules more than one feature applies (Cordum's limits): the body limit, the
roles that may write, what an idempotency key may be.

A job submit and a workflow run start are both writes with a body and an optional
idempotency key; they refuse the same things with the same words. Each feature's own
request bodies are in its ``models`` module.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from cordum.config import ConfigError
from cordum.labels import has_control_chars

if TYPE_CHECKING:
    from collections.abc import Mapping

MAX_IDEMPOTENCY_KEY_BYTES = 512
"""An idempotency key (header or body) is any non-empty string up to this many UTF-8 bytes."""

MAX_BODY_BYTES_ENV = "CORDUM_MAX_BODY_BYTES"
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
"""A submit body larger than this (1 MiB unless CORDUM_MAX_BODY_BYTES says otherwise) is 413."""

SUBMIT_ROLES = ("user", "jobs.write")
"""Roles that may submit jobs, besides admin."""


def max_body_bytes(env: Mapping[str, str] | None = None) -> int:
    """The submit body limit; a value that is not a positive integer is a configuration error."""
    raw = (os.environ if env is None else env).get(MAX_BODY_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BODY_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(f"{MAX_BODY_BYTES_ENV}: must be a positive integer, got {raw!r}")
    return value


def idempotency_key_error(key: str) -> str | None:
    """Why ``key`` is no acceptable idempotency key (None when it is)."""
    if len(key.encode()) > MAX_IDEMPOTENCY_KEY_BYTES:
        return f"at most {MAX_IDEMPOTENCY_KEY_BYTES} bytes"
    if has_control_chars(key):
        return "must not contain control characters"
    return None


def no_default(schema: dict[str, Any]) -> None:
    """For ``json_schema_extra``: the spec gives the field no default, whatever pydantic
    would publish."""
    schema.pop("default", None)
