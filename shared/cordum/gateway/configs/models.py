"""What the config routes take: the write's body (Cordum's two forms) and its checks.

A body whose ``scope`` is a non-empty string is a document write
``{scope, scope_id, data, meta, revision}``; any other JSON object is Cordum's flat
form, the members to set in ``system/default``. Every bad value is a 400 naming the
field: ``invalid_request`` (a field of the wrong type), ``config_request_invalid``
(a scope or id), ``config_too_large`` / ``config_too_deep`` (the bounds of
:mod:`cordum.store.config_docs`), ``config_schema_violation`` (a ``safety`` topic
list that is not a list of strings, a number JSON has no text for).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from cordum.gateway.core.errors import InvalidRequest
from cordum.gateway.core.models import no_default
from cordum.store.config_docs import MAX_DATA_BYTES, MAX_DEPTH, SYSTEM, SYSTEM_DEFAULT_ID, depth_of

MAX_BODY_BYTES = MAX_DATA_BYTES + 16 * 1024
"""A write's body, at most: a full document's data and room for the envelope."""
MAX_META = 32
"""``meta`` entries a document keeps, at most (after the merge)."""
MAX_META_CHARS = 256
"""A ``meta`` name or value, at most."""
MAX_TOPICS = 256
"""Patterns a ``safety.allowed_topics`` / ``denied_topics`` list holds, at most."""
MAX_TOPIC_CHARS = 256
SAFETY_LISTS = ("allowed_topics", "denied_topics")
POLICY_KEY = "bundles"
"""A member of ``system/default`` that Cordum refuses: bundles live in system/policy."""


class ConfigWrite(BaseModel):
    """PUT or POST /api/v1/config, the document form. ``data``'s members replace the
    document's members of the same names (Cordum's merge of a write); ``meta``'s are
    added the same way. With ``revision``, the write is refused (409
    ``config_version_conflict``) unless the document is at that revision now (0: it
    does not exist yet)."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"additionalProperties": True})

    scope: Literal["system", "org", "team", "workflow", "step"] = Field(
        description="Which scope the document is of.")
    scope_id: str = Field(default="", max_length=256, json_schema_extra=no_default,
                          description="The team, workflow or step id; the org id is always "
                                      "the caller's tenant; system: default when empty.")
    data: dict[str, Any] = Field(default_factory=dict, json_schema_extra=no_default,
                                 description="Members to set (at most 64 KiB of JSON in the "
                                             "document, 16 levels deep).")
    meta: dict[str, str] = Field(default_factory=dict, json_schema_extra=no_default,
                                 description="Labels of the document (at most 32).")
    revision: StrictInt | None = Field(default=None, ge=0, le=2**53 - 1,
                                       json_schema_extra=no_default,
                                       description="The revision the writer read: a stale "
                                                   "one is 409.")


@dataclass(frozen=True, slots=True)
class Write:
    """A write, whichever form it came in."""

    scope: str
    scope_id: str
    data: dict[str, Any]
    meta: dict[str, str] = field(default_factory=dict)
    revision: int | None = None


def parse_write(body: dict[str, Any]) -> Write:
    """The write a body asks for (see the module)."""
    scope = body.get("scope")
    if not isinstance(scope, str) or not scope:
        write = Write(SYSTEM, SYSTEM_DEFAULT_ID, body)
    else:
        if scope not in ("system", "org", "team", "workflow", "step"):
            raise InvalidRequest("scope must be one of system, org, team, workflow, step",
                                 "config_request_invalid")
        parsed = ConfigWrite.model_validate(body)
        write = Write(parsed.scope, parsed.scope_id.strip(), parsed.data, parsed.meta,
                      parsed.revision)
    check_data(write.data)
    return write


def check_data(data: dict[str, Any]) -> None:
    """400 when ``data`` nests too deeply, holds a number JSON cannot write (NaN,
    Infinity) or a ``safety`` section the kernel cannot read."""
    if depth_of(data) > MAX_DEPTH:
        raise InvalidRequest(f"data nests deeper than {MAX_DEPTH} levels", "config_too_deep")
    try:
        json.dumps(data, allow_nan=False)
    except ValueError:
        raise InvalidRequest("data holds NaN or Infinity, which JSON has no text for",
                             "config_schema_violation") from None
    check_safety(data.get("safety"), "data.safety")


def check_safety(safety: Any, where: str) -> None:
    """The topic lists the safety kernel applies must be lists of strings (or absent)."""
    if safety is None:
        return
    if not isinstance(safety, dict):
        raise InvalidRequest(f"{where} must be an object", "config_schema_violation")
    for name in SAFETY_LISTS:
        value = safety.get(name)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InvalidRequest(f"{where}.{name} must be a list of strings",
                                 "config_schema_violation")
        if len(value) > MAX_TOPICS or any(len(v) > MAX_TOPIC_CHARS for v in value):
            raise InvalidRequest(f"{where}.{name} holds more than {MAX_TOPICS} patterns or "
                                 f"one longer than {MAX_TOPIC_CHARS} characters",
                                 "config_schema_violation")


def merged_meta(before: Any, update: dict[str, str]) -> dict[str, str]:
    """The document's meta after the write; 400 beyond the bounds."""
    meta = {k: v for k, v in (before or {}).items() if isinstance(v, str)} \
        if isinstance(before, dict) else {}
    for name, value in update.items():
        if not name or len(name) > MAX_META_CHARS or len(value) > MAX_META_CHARS:
            raise InvalidRequest(f"meta names and values are 1 to {MAX_META_CHARS} characters",
                                 "invalid_request")
        meta[name] = value
    if len(meta) > MAX_META:
        raise InvalidRequest(f"meta holds more than {MAX_META} entries", "invalid_request")
    return meta
