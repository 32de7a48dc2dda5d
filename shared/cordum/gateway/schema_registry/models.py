"""What the schema and topic routes take: the bodies (the models the OpenAPI document
describes) and their parsing into checked values.

Bodies are read by hand rather than by the models, so that each refusal carries
Cordum's code: ``CONFIG_SCHEMA_VIOLATION`` for a schema, ``TOPIC_SCHEMA_VIOLATION`` for
a topic, always naming the field (413 ``payload_too_large`` for a schema over
``MAX_SCHEMA_BYTES``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cordum.gateway.core.errors import InvalidRequest, PayloadTooLarge
from cordum.gateway.core.models import no_default
from cordum.labels import has_control_chars
from cordum.store.schema_registry import (
    MAX_ID_CHARS,
    MAX_SCHEMA_BYTES,
    canonical,
    schema_digest,
    schema_id_problem,
    topic_name_problem,
)
from cordum.workflow import json_schemas

SCHEMA_CODE = "CONFIG_SCHEMA_VIOLATION"
TOPIC_CODE = "TOPIC_SCHEMA_VIOLATION"
MAX_LIST_ITEMS = 100
MAX_LIST_ITEM_CHARS = 128
"""``requires`` and ``risk_tags``: Cordum's bounds."""
STATUSES = ("active", "deprecated", "disabled")
POOL_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*[a-z0-9]$")


class SchemaRegisterRequest(BaseModel):
    """POST /api/v1/schemas (the SDK's ``SchemaRecord``)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True,
                              json_schema_extra={"additionalProperties": True})

    id: str = Field(description="The schema's id: 1 to 128 letters, digits, '.', '_', '~' "
                                "or '-', starting with a letter or digit.")
    schema_: dict[str, Any] = Field(alias="schema", description=(
        "A JSON Schema (draft by $schema, 2020-12 by default), at most 64 KiB as compact "
        "JSON; references resolve inside it, patterns are RE2."))


class CreateTopicRequest(BaseModel):
    """POST /api/v1/topics (Cordum's ``createTopicRequest``)."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"additionalProperties": True})

    name: str = Field(description="job.<name>, as a submit names its topic.")
    pool: str = Field(default="", json_schema_extra=no_default,
                      description="Required unless status is disabled.")
    input_schema_id: str = Field(default="", json_schema_extra=no_default,
                                 description="A schema of the tenant; submits are checked "
                                             "against it.")
    output_schema_id: str = Field(default="", json_schema_extra=no_default)
    pack_id: str = Field(default="", json_schema_extra=no_default)
    requires: list[str] = Field(default_factory=list, json_schema_extra=no_default)
    risk_tags: list[str] = Field(default_factory=list, json_schema_extra=no_default)
    status: str = Field(default="", json_schema_extra=no_default,
                        description="active (default), deprecated or disabled.")


@dataclass(frozen=True, slots=True)
class NewSchema:
    id: str
    schema: dict[str, Any]
    sha256: str


def _bad(message: str, code: str) -> InvalidRequest:
    return InvalidRequest(message, code)


def _text(body: dict[str, Any], name: str, code: str) -> str:
    value = body.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _bad(f"{name} must be a string", code)
    value = value.strip()
    if has_control_chars(value):
        raise _bad(f"{name} must not contain control characters", code)
    return value


def schema_id(raw: str) -> str:
    """A schema id from the path: 400 unless it can name one."""
    problem = schema_id_problem(raw)
    if problem:
        raise _bad(problem, SCHEMA_CODE)
    return raw


def parse_schema(body: dict[str, Any]) -> NewSchema:
    """The schema to register: 400 naming the field or the schema's problem (its JSON
    path from ``schema``), 413 when larger than ``MAX_SCHEMA_BYTES``."""
    sid = schema_id(_text(body, "id", SCHEMA_CODE))
    schema = body.get("schema")
    if schema is None:
        raise _bad("schema required", SCHEMA_CODE)
    if not isinstance(schema, dict):
        raise _bad("schema must be a JSON object", SCHEMA_CODE)
    try:
        text = canonical(schema)
    except ValueError:
        raise _bad("invalid schema", SCHEMA_CODE) from None
    if len(text.encode()) > MAX_SCHEMA_BYTES:
        raise PayloadTooLarge(f"schema is larger than {MAX_SCHEMA_BYTES} bytes as compact "
                              "JSON")
    problem = json_schemas.check_schema(schema, "schema")
    if problem:
        raise _bad(problem, SCHEMA_CODE)
    return NewSchema(sid, schema, schema_digest(text))


def _strings(body: dict[str, Any], name: str) -> list[str]:
    raw = body.get(name)
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise _bad(f"{name} must be a list of strings", TOPIC_CODE)
    if len(raw) > MAX_LIST_ITEMS:
        raise _bad(f"{name} must contain at most {MAX_LIST_ITEMS} items", TOPIC_CODE)
    for i, value in enumerate(raw):
        if len(value) > MAX_LIST_ITEM_CHARS:
            raise _bad(f"{name}[{i}] must be at most {MAX_LIST_ITEM_CHARS} characters",
                       TOPIC_CODE)
        if has_control_chars(value):
            raise _bad(f"{name}[{i}] must not contain control characters", TOPIC_CODE)
    return sorted({v.strip() for v in raw if v.strip()})


def _pool(name: str) -> str:
    if not 3 <= len(name) <= 63:
        raise _bad(f"pool name must be 3-63 characters, got {len(name)}", TOPIC_CODE)
    if "--" in name or not POOL_NAME.match(name):
        raise _bad(f"pool name must be lowercase alphanumeric with single hyphens: {name!r}",
                   TOPIC_CODE)
    return name


def topic_name(raw: str) -> str:
    """A topic name from the path or a body: 400 unless a submit could name it."""
    problem = topic_name_problem(raw)
    if problem:
        raise _bad(problem, TOPIC_CODE)
    return raw


def parse_topic(body: dict[str, Any], tenant: str) -> dict[str, Any]:
    """The registration to store, normalised as Cordum normalises it (trimmed, lists
    de-duplicated and sorted, status lower case, ``active`` by default)."""
    name = topic_name(_text(body, "name", TOPIC_CODE))
    status = _text(body, "status", TOPIC_CODE).lower() or "active"
    if status not in STATUSES:
        raise _bad(f"invalid topic status {status[:40]!r}: active, deprecated or disabled",
                   TOPIC_CODE)
    pool = _text(body, "pool", TOPIC_CODE)
    if pool:
        _pool(pool)
    elif status != "disabled":
        raise _bad(f"topic pool required for {name!r}", TOPIC_CODE)
    record: dict[str, Any] = {"name": name, "tenant_id": tenant, "pool": pool}
    for field in ("input_schema_id", "output_schema_id"):
        value = _text(body, field, TOPIC_CODE)
        if value:
            problem = schema_id_problem(value)
            if problem:
                raise _bad(f"{field}: {problem}", TOPIC_CODE)
            record[field] = value
    pack = _text(body, "pack_id", TOPIC_CODE)
    if len(pack) > MAX_ID_CHARS:
        raise _bad(f"pack_id is longer than {MAX_ID_CHARS} characters", TOPIC_CODE)
    if pack:
        record["pack_id"] = pack
    for field in ("requires", "risk_tags"):
        items = _strings(body, field)
        if items:
            record[field] = items
    record["status"] = status
    return record


def schema_ids(record: dict[str, Any]) -> set[str]:
    """The schemas a registration names (input and output)."""
    return {str(record[f]) for f in ("input_schema_id", "output_schema_id")
            if isinstance(record.get(f), str) and record[f]}
