"""A job's input checked against its topic's registered input schema.

Registered schemas are applied exactly as workflow definitions' schemas are
(:mod:`cordum.workflow.json_schemas`): no I/O (a ``$ref`` resolves inside the schema,
nothing is fetched), ``pattern`` on RE2 (linear time), at most ``MAX_CHECK_COST``
keyword evaluations per check, ``format`` an annotation. A registered schema already
passed that module's ``check_schema`` when it was saved (the schema registry refuses
any other), so here it only has to be compiled, once: validators are kept per
(schema id, content digest), :data:`CACHE_SIZE` of them, least recently used first out.

**What a submit checks** (Cordum's rule): when the submit body carries a ``context``
(not null), the schema applies to that value alone, and a violation's path starts at
``$.context``; otherwise it applies to the object ``{prompt, adapter_id, priority,
topic, created_at, tenant_id}`` built from the request (``tenant_id`` the caller's
tenant, ``created_at`` now, RFC 3339), with paths from ``$``. :func:`submit_value`
builds that value; :func:`check_submit` reads the topic and its schema (two GETs at
most) and checks it.

A refusal is :class:`InputSchemaViolation`: 400 ``schema_validation_failed``, its
``violations`` (``[{path, message}]``, Cordum's field) in path order, as Cordum orders
them, at most :data:`MAX_VIOLATIONS`; an ``anyOf`` / ``oneOf`` failure is told by its
most relevant cause (jsonschema's ``best_match``). The first violation (its ``path``
and ``problem``) is the one the error message names.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from typing import Any

from cordum.gateway.core.errors import GatewayError, InvalidRequest
from cordum.store.schema_registry import (
    StoredSchema,
    canonical,
    read_schema,
    read_topic,
    schema_digest,
    schema_key,
    topic_key,
)
from cordum.workflow import json_schemas

__all__ = ["CACHE_SIZE", "MAX_VIOLATIONS", "InputSchemaMissing", "InputSchemaViolation",
           "Violation", "check_input", "check_stored", "check_submit", "json_path",
           "schema_key", "submit_value", "topic_key"]

CACHE_SIZE = 256
"""Compiled validators kept per process."""
MAX_VIOLATIONS = 10
"""Violations one refusal lists at most (the check stops looking after that many)."""
MAX_PATH_CHARS = 300
"""A violation's path is cut to this many characters (a key may be long)."""
CODE = "schema_validation_failed"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class Violation:
    path: str
    """JSONPath of the offending value (``$.context.amount``, ``$.items[0]``)."""
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


class InputSchemaViolation(InvalidRequest):
    """The input does not satisfy the schema: 400 ``schema_validation_failed``."""

    def __init__(self, violations: list[Violation], schema_id: str = "") -> None:
        first = violations[0]
        named = f"schema {schema_id}" if schema_id else "the schema"
        super().__init__(f"input does not match {named}: {first.path}: {first.message}",
                         CODE)
        self.path = first.path
        self.problem = first.message
        self.violations = violations
        self.schema_id = schema_id

    def body(self) -> dict[str, object]:
        return {**super().body(), "violations": [v.as_dict() for v in self.violations]}


class InputSchemaMissing(GatewayError):
    """The topic names an input schema the tenant does not hold (the registry keeps
    this from happening; a store edited by hand may not): the submit is refused."""

    status = 500

    def __init__(self, schema_id: str) -> None:
        super().__init__(f"the topic's input schema {schema_id} is not registered",
                         "input_schema_missing")


# --------------------------------------------------------------------------- compiling

_CACHE: OrderedDict[tuple[str, str], Any] = OrderedDict()


def _compiled(schema: Any, schema_id: str, digest: str) -> Any:
    """json_schemas' compiled form of ``schema``, from the cache when it holds it."""
    key = (schema_id, digest)
    found = _CACHE.get(key)
    if found is not None:
        _CACHE.move_to_end(key)
        return found
    compiled = json_schemas.compile_schema(schema)
    _CACHE[key] = compiled
    while len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return compiled


def cache_clear() -> None:
    _CACHE.clear()


# --------------------------------------------------------------------------- checking


def json_path(root: str, parts: Iterable[str | int]) -> str:
    """``root`` followed by ``.key``, ``['odd key']`` and ``[index]`` parts."""
    out = root
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENTIFIER.match(part):
            out += f".{part}"
        else:
            out += "['" + part.replace("\\", "\\\\").replace("'", "\\'") + "']"
    return out if len(out) <= MAX_PATH_CHARS else out[:MAX_PATH_CHARS] + "..."


def check_input(schema: Mapping[str, Any], value: Any, *, schema_id: str = "",
                digest: str = "", root: str = "$") -> None:
    """Nothing when ``value`` satisfies ``schema``; else :class:`InputSchemaViolation`
    whose first violation's path starts at ``root``. ``digest`` (the schema's
    :func:`~cordum.store.schema_registry.schema_digest`) spares hashing it again; the
    cost of a check is bounded by ``MAX_CHECK_COST`` whatever the schema and value."""
    if not digest:
        digest = schema_digest(canonical(schema))
    compiled = _compiled(schema, schema_id, digest)
    if compiled.validator is None:  # only a schema the registry never took
        where = json_schemas.join_path("", compiled.at)
        raise InputSchemaViolation([Violation(root, json_schemas.cut(
            f"invalid schema: {where}: {compiled.problem}" if where
            else f"invalid schema: {compiled.problem}"))], schema_id)
    found = _violations(compiled.validator, value, root)
    if found:
        raise InputSchemaViolation(found, schema_id)


def check_stored(stored: StoredSchema, value: Any, *, root: str = "$") -> None:
    """:func:`check_input` with a registered schema (its id and stored digest)."""
    check_input(stored.schema, value, schema_id=stored.id, digest=stored.sha256, root=root)


def _violations(validator: Any, value: Any, root: str) -> list[Violation]:
    from jsonschema.exceptions import best_match

    try:
        with json_schemas.budget():
            # Each error of an anyOf / oneOf is replaced by its most relevant cause.
            errors = [best_match([e]) for e in islice(validator.iter_errors(value),
                                                      MAX_VIOLATIONS)]
    except json_schemas.OverBudget:
        return [Violation(root, "schema check stopped: it would cost more than "
                                f"{json_schemas.MAX_CHECK_COST} keyword evaluations")]
    except RecursionError:
        return [Violation(root, "the value or its schema nests too deeply")]
    except Exception as exc:  # a schema is data: its failure is the caller's refusal
        return [Violation(root, f"the schema could not be applied ({type(exc).__name__})")]
    found = {_violation(e, root) for e in errors if e is not None}
    return sorted(found, key=lambda v: (v.path, v.message))


def _violation(error: Any, root: str) -> Violation:
    return Violation(json_path(root, error.absolute_path), json_schemas.cut(error.message))


# --------------------------------------------------------------------------- submits


def submit_value(body: Mapping[str, Any], tenant: str,
                 now: datetime | None = None) -> tuple[Any, str]:
    """(the value a topic's input schema applies to, the JSON path it sits at): the
    body's ``context`` when it has one that is not null, else the submit's payload
    object (see the module)."""
    context = body.get("context")
    if context is not None:
        return context, "$.context"
    created = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"prompt": body.get("prompt", ""), "adapter_id": body.get("adapter_id", ""),
            "priority": body.get("priority", "interactive"),
            "topic": body.get("topic", "job.default"), "created_at": created,
            "tenant_id": tenant}, "$"


async def check_submit(redis: Any, tenant: str, body: Mapping[str, Any], *,
                       now: datetime | None = None) -> dict[str, Any] | None:
    """Check a submit against its topic's input schema; the tenant's registration of
    the topic (None when it registered none), for the caller's own topic rules.

    One GET for the topic, one more when it names an input schema (StoreError when
    Redis fails). :class:`InputSchemaViolation` when the input breaks the schema,
    :class:`InputSchemaMissing` when the schema is gone."""
    topic = str(body.get("topic") or "job.default")
    registration = await read_topic(redis, tenant, topic)
    schema_id = str((registration or {}).get("input_schema_id") or "").strip()
    if not schema_id:
        return registration
    stored = await read_schema(redis, tenant, schema_id)
    if stored is None:
        raise InputSchemaMissing(schema_id)
    value, root = submit_value(body, tenant, now)
    check_stored(stored, value, root=root)
    return registration
