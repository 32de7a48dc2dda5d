"""Step conditions and input templates: Cordum's expr-lang expressions, evaluated as CEL.

Definitions are written for Cordum, whose expressions are expr-lang. Each expression is
translated to CEL (exprlang.py: parsed with expr-lang's precedence, written back fully
parenthesised, string literals re-encoded rather than edited) and run by cel-python's
tree interpreter with expr-lang's operator semantics bound over CEL's (cel_runtime.py);
a program of the shapes templates mostly take (names, literals, indexing, binary
operators) runs as closures made once from its tree instead (cel_closures.py), with
the interpreter's answers and a twentieth of its cost. Never Python's eval.

cel-python is imported on the first evaluation, not with this module: a workflow event
whose run has no condition or template never pays for loading it. Compiled programs are
kept per expression string in a bounded LRU, since a run's expressions repeat on each of
its events.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from cordum.workflow.exprlang import TranslationError, translate
from cordum.workflow.value_kinds import value_kind

if TYPE_CHECKING:
    from cordum.workflow.cel_runtime import CelRuntime

MAX_EXPRESSION = 4096
"""Longest accepted expression, in characters (Cordum's limit)."""

_PROGRAM_CACHE = 512
"""Compiled expressions (and split templates) kept per process: enough for the
definitions one function instance serves; an evicted one is just compiled again."""


class ExpressionError(Exception):
    """An expression that does not parse or cannot be evaluated; the message says where and why."""


def evaluate(expr: str, scope: Mapping[str, Any]) -> Any:
    """The value of one expr-lang expression, as plain JSON values (nil is None)."""
    if not isinstance(expr, str):
        raise ExpressionError(f"an expression must be a string, not {type(expr).__name__}")
    if len(expr) > MAX_EXPRESSION:
        raise ExpressionError(
            f"expression is {len(expr)} characters long; at most {MAX_EXPRESSION} are accepted"
        )
    path = _member_path(expr)
    if path is not None:
        return _follow(expr, path, scope)
    program = _compile(expr)
    from cordum.workflow.cel_runtime import CEL_ERROR, EVAL_ERRORS

    runtime = _runtime()
    activation = {alias: runtime.cel(scope.get(name)) for name, alias in program.names}
    try:
        if program.fast is None:
            result = program.runner.evaluate(activation)
        else:  # the same answer as the interpreter's, without its walk of the tree
            result = program.fast(activation)
            if isinstance(result, CEL_ERROR):
                raise result
    except EVAL_ERRORS as exc:
        raise ExpressionError(f"cannot evaluate {_quote(expr)}: {_reason(exc)}") from exc
    except RecursionError as exc:
        raise ExpressionError(f"cannot evaluate {_quote(expr)}: nested too deeply") from exc
    return runtime.plain(result)


_PATH = re.compile(r"\s*([A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*)\s*")
_WORDS = frozenset({"nil", "true", "false", "not", "and", "or", "in", "contains", "matches",
                    "startsWith", "endsWith", "let"})


@lru_cache(maxsize=_PROGRAM_CACHE)
def _member_path(expr: str) -> tuple[str, ...] | None:
    """``input.order.id`` -> ("input", "order", "id"): the form most templates take, read
    without the CEL interpreter (same answers: a missing name or key is nil, a field of
    nil or of a scalar is an error). None for anything else."""
    match = _PATH.fullmatch(expr)
    if match is None:
        return None
    parts = tuple(part.strip() for part in match.group(1).split("."))
    return None if parts[0] in _WORDS else parts


def _follow(expr: str, path: tuple[str, ...], scope: Mapping[str, Any]) -> Any:
    value = scope.get(path[0])
    for key in path[1:]:
        if isinstance(value, dict):
            value = value.get(key)
            continue
        if isinstance(value, list):
            raise ExpressionError(f"cannot evaluate {_quote(expr)}: a list index must be an "
                                  "integer, not string")
        kind = value_kind(value)
        raise ExpressionError(f"cannot evaluate {_quote(expr)}: cannot fetch {key!r} from "
                              f"{kind}")
    return copy.deepcopy(value) if isinstance(value, dict | list) else value


def truthy(value: Any) -> bool:
    """Whether a condition's value lets its step run: nil, false, 0 and empty values do not."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float, str, list, dict)):
        return bool(value)
    return True


def render(template: Any, scope: Mapping[str, Any]) -> Any:
    """A step input with every `${...}` replaced by its value, recursively.

    A string that is exactly one `${...}` becomes the value itself (a number stays a
    number); text around or between templates makes the result text. A map entry whose
    template gives nil is left out, so optional fields stay absent rather than null.
    """
    if isinstance(template, str):
        return _render_text(template, scope)
    if isinstance(template, list):
        return [render(item, scope) for item in template]
    if isinstance(template, dict):
        rendered: dict[str, Any] = {}
        for key, value in template.items():
            result = render(value, scope)
            if result is None and has_template(value):
                continue
            rendered[key] = result
        return rendered
    return template


def has_template(value: Any) -> bool:
    """Whether rendering could change the value (it holds a `${` somewhere)."""
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, list):
        return any(has_template(item) for item in value)
    if isinstance(value, dict):
        return any(has_template(item) for item in value.values())
    return False


# --- templates ---------------------------------------------------------------------


def _render_text(text: str, scope: Mapping[str, Any]) -> Any:
    parts = _template_parts(text)
    if len(parts) == 1 and parts[0][0]:
        return evaluate(parts[0][1], scope)
    if not any(is_expr for is_expr, _ in parts):
        return text
    return "".join(_as_text(evaluate(part, scope)) if is_expr else part for is_expr, part in parts)


@lru_cache(maxsize=_PROGRAM_CACHE)
def _template_parts(text: str) -> tuple[tuple[bool, str], ...]:
    """The text split into (False, literal) and (True, expression) parts, in order.

    The closing brace is found by reading the expression, not by searching for `}`:
    a map literal or a string holding `}` must not end it early.
    """
    parts: list[tuple[bool, str]] = []
    start = 0
    while (open_at := text.find("${", start)) >= 0:
        if open_at > start:
            parts.append((False, text[start:open_at]))
        close_at = _template_end(text, open_at + 2)
        parts.append((True, text[open_at + 2 : close_at]))
        start = close_at + 1
    if start < len(text) or not parts:
        parts.append((False, text[start:]))
    return tuple(parts)


def _template_end(text: str, pos: int) -> int:
    depth = 0
    quote = ""
    while pos < len(text):
        char = text[pos]
        if quote:
            if char == "\\" and quote != "`":
                pos += 1
            elif char == quote:
                quote = ""
        elif char in "\"'`":
            quote = char
        elif char == "{":
            depth += 1
        elif char == "}":
            if depth == 0:
                return pos
            depth -= 1
        pos += 1
    raise ExpressionError(f"unterminated ${{...}} in {_quote(text)}")


def _as_text(value: Any) -> str:
    """How a value reads inside text; the forms Cordum (Go) prints them in."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return str(value)


def _float_text(value: float) -> str:
    # JSON numbers are float64 in Go, so an integral value prints without ".0".
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return repr(value)


# --- compilation and evaluation ----------------------------------------------------


@dataclass(frozen=True)
class _Program:
    runner: Any
    """celpy Runner of the CEL text."""
    names: tuple[tuple[str, str], ...]
    """(scope name, CEL variable) for every name the expression reads."""
    fast: Any = None
    """The program as closures (:mod:`cordum.workflow.cel_closures`), when they cover it."""


@lru_cache(maxsize=_PROGRAM_CACHE)
def _compile(expr: str) -> _Program:
    try:
        translation = translate(expr)
    except TranslationError as exc:
        raise ExpressionError(f"{exc} in {_quote(expr)}") from None
    from cordum.workflow.cel_runtime import PARSE_ERRORS

    try:
        runner = _runtime().compile(translation.cel)
    except PARSE_ERRORS as exc:  # the translation is checked, so only limits land here
        raise ExpressionError(f"cannot compile {_quote(expr)}: {_reason(exc)}") from exc
    fast = _runtime().closure(runner, frozenset(alias for _, alias in translation.names))
    return _Program(runner, translation.names, fast)


@lru_cache(maxsize=1)
def _runtime() -> CelRuntime:
    from cordum.workflow.cel_runtime import CelRuntime

    return CelRuntime()


def _reason(exc: BaseException) -> str:
    message = exc.args[0] if exc.args else ""
    return str(message) or type(exc).__name__


_QUOTE_LIMIT = 120


def _quote(expr: str) -> str:
    shown = expr if len(expr) <= _QUOTE_LIMIT else expr[: _QUOTE_LIMIT - 3] + "..."
    return repr(shown)
