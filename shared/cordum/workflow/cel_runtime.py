"""cel-python with expr-lang's answers: the evaluator behind cordum.workflow.expressions.

Imported on the first evaluation only (cel-python and its parser take a few hundred
milliseconds to load). CEL is stricter than expr-lang; the functions bound over CEL's
operators here keep expr-lang's results: a missing map key is nil, ints and floats mix,
`/` divides as floats, `%` keeps the dividend's sign, and equality across types is false
instead of an error. Errors are returned as CEL error values, never raised, so they flow
through the expression the way CEL's own do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import celpy
from celpy import celtypes
from celpy.evaluation import CELUnsupportedError, Evaluator

from cordum.workflow.cel_closures import Closure, closure
from cordum.workflow.value_kinds import value_kind

CEL_ERROR = celpy.CELEvalError
"""An error value of an evaluation: raised when it is the program's answer."""

EVAL_ERRORS: tuple[type[Exception], ...] = (
    celpy.CELEvalError,
    CELUnsupportedError,
    TypeError,
    ValueError,
    ArithmeticError,
)
"""What evaluating a program may raise for a bad expression or bad data."""

PARSE_ERRORS: tuple[type[Exception], ...] = (celpy.CELParseError, ValueError)
"""What compiling CEL text may raise."""

_INT64 = (-(2**63), 2**63 - 1)

_CEL_SCALARS = (
    celtypes.BoolType,
    celtypes.IntType,
    celtypes.UintType,
    celtypes.DoubleType,
    celtypes.StringType,
)


class CelRuntime:
    """One cel-python environment, and the functions that give CEL expr-lang's answers."""

    def __init__(self) -> None:
        self.env = celpy.Environment()
        ordered = {
            "_<_": lambda a, b: a < b,
            "_<=_": lambda a, b: a <= b,
            "_>_": lambda a, b: a > b,
            "_>=_": lambda a, b: a >= b,
        }
        self.functions: dict[str, Callable[..., Any]] = {
            **{name: self._ordering(test) for name, test in ordered.items()},
            "_==_": self._equal,
            "_!=_": lambda a, b: self._failed(a, b) or celtypes.BoolType(not self._equal(a, b)),
            "_&&_": self._logic("&&", absorbing=False),
            "_||_": self._logic("||", absorbing=True),
            "_+_": self._add,
            "_-_": self._arithmetic("-", lambda a, b: a - b),
            "_*_": self._arithmetic("*", lambda a, b: a * b),
            "_/_": self._divide,
            "_%_": self._modulo,
            "_in_": self._in,
            "_[_]": self._fetch,
            "x_opt": lambda a, b: self._failed(a, b) or (None if a is None else self._fetch(a, b)),
            "x_coalesce": lambda a, b: b if a is None else a,
            "x_contains": self._contains,
            "x_size": self._size,
            "x_first": lambda a: self._failed(a) or self._end(a, 0),
            "x_last": lambda a: self._failed(a) or self._end(a, -1),
        }

    def compile(self, cel_text: str) -> celpy.Runner:
        """The interpreted program of CEL text (CompiledRunner would exec generated Python)."""
        return self.env.program(self.env.compile(cel_text), functions=self.functions)

    def closure(self, runner: celpy.Runner, names: frozenset[str]) -> Closure | None:
        """The program as closures (:mod:`cordum.workflow.cel_closures`), None when it
        has a node they do not cover; ``names``: the variables each evaluation binds."""
        evaluator = Evaluator(ast=runner.ast, activation=runner.new_activation())
        return closure(runner.ast, self.functions, evaluator, names)

    # Conversions. Scope values are converted one level at a time, as they are read,
    # so a large run context costs nothing for the parts an expression never touches.

    def cel(self, value: Any) -> Any:
        if value is None or isinstance(value, (_CEL_SCALARS, dict, list)):
            return value
        if isinstance(value, bool):
            return celtypes.BoolType(value)
        if isinstance(value, int):
            if _INT64[0] <= value <= _INT64[1]:
                return celtypes.IntType(value)
            return celtypes.DoubleType(value)
        if isinstance(value, float):
            return celtypes.DoubleType(value)
        if isinstance(value, str):
            return celtypes.StringType(value)
        if isinstance(value, tuple):
            return list(value)
        return value

    def plain(self, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, (bool, celtypes.BoolType)):
            return bool(value)
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            return float(value)
        if isinstance(value, str):
            return str(value)
        if isinstance(value, dict):
            return {_key_text(self.plain(k)): self.plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.plain(item) for item in value]
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        return str(value)

    def _plains(self, *values: Any) -> list[Any]:
        return [self.plain(value) for value in values]

    def _failed(self, *values: Any) -> Any:
        """The first CEL error among the arguments: errors flow through, as in CEL."""
        for value in values:
            if isinstance(value, celpy.CELEvalError):
                return value
        return None

    def _error(self, message: str) -> Any:
        return celpy.CELEvalError(message, TypeError, None)

    # Operators

    def _equal(self, a: Any, b: Any) -> Any:
        return self._failed(a, b) or celtypes.BoolType(_same(*self._plains(a, b)))

    def _logic(self, symbol: str, *, absorbing: bool) -> Callable[[Any, Any], Any]:
        # Left to right, as expr-lang: a left side of `absorbing` decides alone (the right
        # side's error is dropped, as a short circuit would), and both sides must be bools.
        def apply(a: Any, b: Any) -> Any:
            for side in (a, b):
                if failed := self._failed(side):
                    return failed
                if not isinstance(side, celtypes.BoolType):
                    return self._error(f"{symbol} needs bools, not {_kind(side)}")
                if bool(side) is absorbing:
                    return side
            return b

        return apply

    def _ordering(self, test: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Any]:
        def compare(a: Any, b: Any) -> Any:
            if failed := self._failed(a, b):
                return failed
            x, y = self._plains(a, b)
            if (_number(x) and _number(y)) or (isinstance(x, str) and isinstance(y, str)):
                return celtypes.BoolType(test(x, y))
            return self._error(f"cannot compare {_kind(x)} with {_kind(y)}")

        return compare

    def _arithmetic(self, symbol: str, op: Callable[[Any, Any], Any]) -> Callable[..., Any]:
        def apply(a: Any, b: Any) -> Any:
            if failed := self._failed(a, b):
                return failed
            x, y = self._plains(a, b)
            if _number(x) and _number(y):
                return self.cel(op(x, y))
            return self._error(f"cannot apply {symbol} to {_kind(x)} and {_kind(y)}")

        return apply

    def _add(self, a: Any, b: Any) -> Any:
        if failed := self._failed(a, b):
            return failed
        if isinstance(a, str) and isinstance(b, str):
            return celtypes.StringType(a + b)
        if isinstance(a, list) and isinstance(b, list):
            return [*a, *b]
        return self._arithmetic("+", lambda x, y: x + y)(a, b)

    def _divide(self, a: Any, b: Any) -> Any:
        if failed := self._failed(a, b):
            return failed
        x, y = self._plains(a, b)
        if not (_number(x) and _number(y)):
            return self._error(f"cannot apply / to {_kind(x)} and {_kind(y)}")
        if y == 0:
            return self._error("division by zero")
        return celtypes.DoubleType(float(x) / float(y))

    def _modulo(self, a: Any, b: Any) -> Any:
        if failed := self._failed(a, b):
            return failed
        x, y = self._plains(a, b)
        if not (_integer(x) and _integer(y)):
            return self._error(f"cannot apply % to {_kind(x)} and {_kind(y)}")
        if y == 0:
            return self._error("integer divide by zero")
        remainder = abs(x) % abs(y)  # the sign follows the dividend, as in Go
        return celtypes.IntType(-remainder if x < 0 else remainder)

    def _in(self, needle: Any, haystack: Any) -> Any:
        if failed := self._failed(needle, haystack):
            return failed
        if haystack is None:
            return celtypes.BoolType(False)
        if isinstance(haystack, list):
            wanted = self.plain(needle)
            return celtypes.BoolType(any(_same(wanted, self.plain(item)) for item in haystack))
        if isinstance(haystack, dict):
            return celtypes.BoolType(isinstance(needle, str) and str(needle) in haystack)
        return self._error(f"`in` needs a list or a map on its right, not {_kind(haystack)}")

    def _fetch(self, container: Any, key: Any) -> Any:
        if failed := self._failed(container, key):
            return failed
        if isinstance(container, dict):
            found = dict.get(container, self.plain(key)) if isinstance(key, str) else None
            return self.cel(found)
        if isinstance(container, list):
            if not _integer(self.plain(key)):
                return self._error(f"a list index must be an integer, not {_kind(key)}")
            index = int(key) + len(container) if int(key) < 0 else int(key)
            if not 0 <= index < len(container):
                return self._error(f"index {int(key)} out of range (length {len(container)})")
            return self.cel(container[index])
        return self._error(f"cannot fetch {self.plain(key)!r} from {_kind(container)}")

    def _contains(self, text: Any, part: Any) -> Any:
        if failed := self._failed(text, part):
            return failed
        if isinstance(text, str) and isinstance(part, str):
            return celtypes.BoolType(str(part) in str(text))
        return self._error(
            f"contains needs two strings, not {_kind(text)} and {_kind(part)} "
            "(for list membership use `x in list`)"
        )

    def _size(self, value: Any) -> Any:
        if failed := self._failed(value):
            return failed
        if isinstance(value, (str, list, dict)):
            return celtypes.IntType(len(value))
        return self._error(f"length() needs a string, a list or a map, not {_kind(value)}")

    def _end(self, value: Any, index: int) -> Any:
        # expr-lang's first()/last() answer nil for anything without that element.
        if isinstance(value, list) and value:
            return self.cel(value[index])
        return None


def _same(a: Any, b: Any) -> bool:
    """expr-lang equality on plain values: numbers by value, other kinds never equal."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if _number(a) and _number(b):
        return bool(a == b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    """The expr-lang name of a value's type (cel-python's bool counted as a bool)."""
    if type(value).__name__ == "BoolType":
        return "bool"
    return value_kind(value)


def _key_text(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)
