"""JSON Schemas of workflow definitions: checked when saved, applied at run start and
on every step.

A definition's schemas come from its author and are applied inside the VPC, so they
do no I/O and their cost is bounded:

- ``$ref`` (and ``$dynamicRef``) resolves inside the schema document, or to a bundled
  JSON Schema meta-schema. Nothing is ever retrieved: a reference elsewhere, or to
  nothing, is a problem.
- ``pattern`` and ``patternProperties`` (also where ``additionalProperties`` reads
  them) match on RE2, in time linear in the text; a pattern RE2 cannot compile
  (lookaround, backreferences) is refused. jsonschema's ``unevaluatedProperties``
  matches ``patternProperties`` with Python's backtracking ``re`` by itself, so a
  schema may not use both.
- one application spends at most ``MAX_CHECK_COST`` (keywords evaluated, references
  followed), which bounds references that branch (each ``anyOf`` doubling the walk).
- ``format`` is an annotation, as jsonschema applies it by default (no format
  checker): nothing is asserted, nothing is looked up.

A schema is compiled once per process and kept (``CACHE_SIZE`` of them, by JSON text):
the same definition schemas are applied on every step. jsonschema loads on first use.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from jsonschema.protocols import Validator
    from referencing.jsonschema import SchemaRegistry

MAX_PROBLEM_CHARS = 300
"""A problem may quote the offending value; it keeps only this much."""
MAX_CHECK_COST = 400_000
"""What one application of a schema may spend before it stops with a problem: one per
keyword evaluated, ``REFERENCE_COST`` per reference followed. About a second of CPU at
most; 20,000 objects of a few typed fields, each reached through a ``$ref``, spend
300,000."""
REFERENCE_COST = 10
"""Following a ``$ref`` takes about as long as evaluating ten plain keywords."""
CACHE_SIZE = 256
"""Compiled schemas kept per process."""

_SUBSCHEMA = frozenset({
    "additionalItems", "additionalProperties", "contains", "contentSchema", "else",
    "extends", "if", "items", "not", "propertyNames", "then", "unevaluatedItems",
    "unevaluatedProperties"})
"""Keywords whose value is a schema (or, for ``items`` and ``extends``, a list of them)."""
_SUBSCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items", "extends"})
_SUBSCHEMA_MAPS = frozenset({
    "$defs", "definitions", "dependencies", "dependentSchemas", "patternProperties",
    "properties"})
_REFERENCES = ("$ref", "$dynamicRef")
_FOLLOWS = frozenset({*_REFERENCES, "$recursiveRef"})

KeyPath = tuple[str | int, ...]

_BUDGET: ContextVar[list[int] | None] = ContextVar("cordum_schema_budget", default=None)
"""What the application in progress may still spend (None: not counting)."""


class OverBudget(Exception):
    """An application spent ``MAX_CHECK_COST``."""


@contextmanager
def budget() -> Iterator[None]:
    """Count the keyword evaluations of the applications within: past
    ``MAX_CHECK_COST`` the one in progress raises :class:`OverBudget`."""
    token = _BUDGET.set([MAX_CHECK_COST])
    try:
        yield
    finally:
        _BUDGET.reset(token)


@dataclass(frozen=True, slots=True)
class _Compiled:
    validator: Validator | None = None
    at: KeyPath = ()
    """Where in the schema the problem is."""
    problem: str = ""


def check_schema(schema: Any, where: str) -> str:
    """"" when ``schema`` is usable; else the problem, prefixed with its JSON path (which
    starts at ``where``): invalid for its draft, a reference outside the schema or to
    nothing in it, a pattern RE2 cannot compile."""
    compiled = _compiled(schema)
    if compiled.validator is not None:
        return ""
    return cut(f"{join_path(where, compiled.at)}: {compiled.problem}")


def problem(value: Any, schema: Any, *, at: str = "") -> str:
    """"" when ``value`` satisfies ``schema``; else the best reason it does not. Never
    raises: an unusable schema, or an application that nests too deeply or spends
    ``MAX_CHECK_COST``, is a problem too. With ``at`` (``"input"``) the reason
    starts with the path of the offending part of the value."""
    from jsonschema.exceptions import best_match

    compiled = _compiled(schema)
    if compiled.validator is None:
        return cut(f"invalid schema: {join_path('', compiled.at)}: {compiled.problem}"
                   if compiled.at else f"invalid schema: {compiled.problem}")
    try:
        with budget():
            error = best_match(compiled.validator.iter_errors(value))
    except OverBudget:
        return cut(_prefixed(at, "schema check stopped: it would cost more than "
                                 f"{MAX_CHECK_COST} keyword evaluations"))
    except RecursionError:
        return cut(_prefixed(at, "the value or its schema nests too deeply"))
    except Exception as exc:  # a step's check must not crash its run
        return cut(_prefixed(at, f"the schema could not be applied ({type(exc).__name__})"))
    if error is None:
        return ""
    if not at:
        return cut(error.message)
    where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}"
                    for p in error.absolute_path)
    return cut(f"{at}{where}: {error.message}")


def cut(text: str) -> str:
    return text if len(text) <= MAX_PROBLEM_CHARS else text[:MAX_PROBLEM_CHARS] + "..."


def join_path(where: str, at: KeyPath) -> str:
    """``where`` followed by the keys of ``at`` (``properties.x.$ref``, ``allOf[0]``)."""
    out = where
    for part in at:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _prefixed(at: str, text: str) -> str:
    return f"{at}: {text}" if at else text


# --------------------------------------------------------------------------- compiling


def compile_schema(schema: Any) -> _Compiled:
    """The validator of ``schema`` (``validator`` None and ``problem`` said when it is
    unusable), built as :func:`check_schema` and :func:`problem` build it."""
    return _compiled(schema)


def _compiled(schema: Any) -> _Compiled:
    try:
        document = json.dumps(schema, ensure_ascii=False, separators=(",", ":"),
                              allow_nan=False)
    except (TypeError, ValueError):
        return _Compiled(problem="the schema is not a JSON document")
    return _compile(document)


@lru_cache(maxsize=CACHE_SIZE)
def _compile(document: str) -> _Compiled:
    """The safe validator of the schema ``document`` (JSON text: the cache's key, and a
    copy nobody else holds), or where and why it is refused."""
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import Draft202012Validator, validator_for

    schema = json.loads(document)
    if not isinstance(schema, dict | bool):
        return _Compiled(problem="a schema is a JSON object")
    # An unknown $schema reads as the latest draft, as jsonschema reads it (without
    # its deprecation warning).
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
        refused = _refused(schema, cls)
        if refused is not None:
            return _Compiled(at=refused[0], problem=refused[1])
        return _Compiled(validator=_safe_class(cls)(schema, registry=_registry()))
    except SchemaError as exc:
        return _Compiled(at=tuple(exc.path), problem=exc.message)
    except RecursionError:
        return _Compiled(problem="the schema nests too deeply")
    except Exception as exc:  # a schema is data: its flaw is a problem
        return _Compiled(problem=f"the schema cannot be compiled ({type(exc).__name__})")


def _refused(schema: dict[str, Any] | bool, cls: type[Validator]) -> tuple[KeyPath, str] | None:
    """The first reference or pattern of ``schema`` (document order) that is refused,
    with its path."""
    import referencing.jsonschema

    mixed = _mixed_property_keywords(schema)
    if mixed is not None:
        return mixed, ("not supported together with patternProperties (jsonschema "
                       "matches those with a backtracking engine here)")
    specification = referencing.jsonschema.specification_with(
        cls.ID_OF(cls.META_SCHEMA) or "urn:unknown-dialect",
        default=referencing.Specification.OPAQUE)
    resolver = _registry().resolver_with_root(specification.create_resource(schema))
    stack: list[tuple[KeyPath, Any, Any]] = [((), schema, resolver)]
    while stack:
        at, node, resolver = stack.pop()
        if not isinstance(node, dict):
            continue
        # A subschema's own $id is the base its references resolve against.
        resolver = resolver.in_subresource(specification.create_resource(node))
        for keyword in _REFERENCES:
            ref = node.get(keyword)
            if isinstance(ref, str):
                unresolved = _unresolved(resolver, ref)
                if unresolved:
                    return (*at, keyword), unresolved
        pattern = node.get("pattern")
        if isinstance(pattern, str) and (bad := _re2_problem(pattern)):
            return (*at, "pattern"), bad
        patterns = node.get("patternProperties")
        for key in patterns if isinstance(patterns, dict) else ():
            if bad := _re2_problem(key):
                return (*at, "patternProperties", key), bad
        stack.extend(reversed([(path, sub, resolver) for path, sub in _children(at, node)]))
    return None


def _children(at: KeyPath, node: dict[str, Any]) -> Iterator[tuple[KeyPath, Any]]:
    for key, value in node.items():
        if isinstance(value, dict) and key in _SUBSCHEMA_MAPS:
            yield from (((*at, key, name), sub) for name, sub in value.items())
        elif isinstance(value, dict | bool) and key in _SUBSCHEMA:
            yield (*at, key), value
        elif isinstance(value, list) and key in _SUBSCHEMA_LISTS:
            yield from (((*at, key, i), sub) for i, sub in enumerate(value))


def _mixed_property_keywords(schema: Any) -> KeyPath | None:
    """The path of an ``unevaluatedProperties`` when the document (anywhere: a reference
    may lead anywhere) also has a ``patternProperties``."""
    first: KeyPath | None = None
    patterned = False
    stack: list[tuple[KeyPath, Any]] = [((), schema)]
    while stack:
        at, node = stack.pop()
        if isinstance(node, dict):
            patterned = patterned or "patternProperties" in node
            if first is None and "unevaluatedProperties" in node:
                first = (*at, "unevaluatedProperties")
            stack.extend(((*at, k), v) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend(((*at, i), v) for i, v in reversed(list(enumerate(node))))
    return first if patterned else None


def _unresolved(resolver: Any, ref: str) -> str:
    """Why ``ref`` does not resolve with ``resolver`` (a ``referencing`` resolver), or ""."""
    import referencing.exceptions as refs

    try:
        resolver.lookup(ref)
    except (refs.PointerToNowhere, refs.NoSuchAnchor, refs.InvalidAnchor):
        return f"{ref!r} points nowhere in the schema"
    except Exception:  # NoSuchResource, Unretrievable: never fetched
        return f"{ref!r} is not inside the schema (references are never fetched)"
    return ""


def _refuse(uri: str) -> NoReturn:
    import referencing.exceptions

    raise referencing.exceptions.NoSuchResource(uri)


@lru_cache(maxsize=1)
def _registry() -> SchemaRegistry:
    """The bundled meta-schemas, and a retrieval that refuses every URI."""
    import referencing
    from jsonschema_specifications import REGISTRY

    # attrs makes the field private (_retrieve), which mypy does not see.
    return REGISTRY.combine(referencing.Registry(retrieve=_refuse))  # type: ignore[call-arg]


# --------------------------------------------------------------------------- keywords


@lru_cache(maxsize=1024)
def _regex(pattern: str) -> Any:
    import re2

    options = re2.Options()
    options.log_errors = False
    return re2.compile(pattern, options)


def _re2_problem(pattern: str) -> str:
    import re2

    try:
        _regex(pattern)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode(errors="replace")
        return f"not supported by RE2: {reason}"
    return ""


def _pattern(validator: Validator, pattern: str, instance: Any,
             schema: dict[str, Any]) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not _regex(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Validator, patterns: dict[str, Any], instance: Any,
                        schema: dict[str, Any]) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        regex = _regex(pattern)
        for key, value in instance.items():
            if regex.search(key):
                yield from validator.descend(value, subschema, path=key,
                                             schema_path=pattern)


def _additional_properties(validator: Validator, extra: Any, instance: Any,
                           schema: dict[str, Any]) -> Iterator[Any]:
    """jsonschema's ``additionalProperties``, matching ``patternProperties`` on RE2."""
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    known = schema.get("properties", {})
    patterns = [_regex(p) for p in schema.get("patternProperties", {})]
    extras = {k for k in instance
              if k not in known and not any(r.search(k) for r in patterns)}
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        listed = ", ".join(repr(k) for k in sorted(extras))
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            regexes = ", ".join(repr(p) for p in sorted(schema["patternProperties"]))
            yield ValidationError(f"{listed} {verb} not match any of the regexes: {regexes}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed "
                                  f"({listed} {verb} unexpected)")


_RE2_KEYWORDS: dict[str, Callable[..., Iterator[Any]]] = {
    "pattern": _pattern, "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties}


def _counted(keyword: Callable[..., Any], cost: int) -> Callable[..., Any]:
    def counted(validator: Validator, value: Any, instance: Any, schema: Any) -> Any:
        left = _BUDGET.get()
        if left is not None:
            left[0] -= cost
            if left[0] < 0:
                raise OverBudget
        return keyword(validator, value, instance, schema)

    return counted


@lru_cache(maxsize=16)
def _safe_class(cls: type[Validator]) -> type[Validator]:
    """``cls`` with the RE2 keywords, every keyword counted against the budget."""
    from jsonschema.validators import extend

    keywords = {name: _RE2_KEYWORDS.get(name, keyword)
                for name, keyword in cls.VALIDATORS.items()}
    return extend(cls, {name: _counted(keyword, REFERENCE_COST if name in _FOLLOWS else 1)
                        for name, keyword in keywords.items()})
