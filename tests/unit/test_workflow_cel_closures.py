"""Compiled closures answer what cel-python's interpreter answers for the same program:
the same values (and kinds), the same errors with the same messages."""

from __future__ import annotations

import pytest

from cordum.workflow import expressions
from cordum.workflow.cel_runtime import CEL_ERROR, EVAL_ERRORS

SCOPES = [
    {"a": {"b": 1, "c": 2.5, "s": "x", "l": [1, 2, 3], "m": {"k": True}, "n": None, "z": 0},
     "x": 3, "y": "str", "t": True, "f": False, "big": 2**62},
    {},
    {"a": [1, 2], "x": None, "y": 0},
]
COVERED = [
    "a.b + 1", "a.b - x", "a.c * 2", "a.b / a.z", "a.b % a.z", "x % 2", "a.s + y",
    "a.l + a.l", "a.b < 2", "a.b <= a.c", "a.c > x", "a.s >= y", "a.b == 1", "a.b != a.c",
    "a.s in a.l", "2 in a.l", "'k' in a.m", "t && f", "t || f", "t && a.b", "a.b || t",
    "a.l[0]", "a.l[5]", "a.l[-1]", "a.m['k']", "a.n + 1", "a.q.r + 1", "x + y", "y + x",
    "(a.b + 1) * (x - 2)", "a.b + 1.5", "big * 4", "big * big * big", "a.l[a.b]",
    "a.m[a.b]", "1 / 0", "5 % 0", "x * a.s", "a.s == 'x'", "'a\\tb' + a.s",
    "a.b + 1 == 2 && t", "a.l[0] + a.l[1] * a.l[2]", "x - 1 - 1", "x / 2", "a.b + 1e3",
]
LEFT_TO_THE_INTERPRETER = ["not t", "-x", "len(a.l)", "a.b > 0 ? 1 : 2", "[1, 2]",
                           "x in [1, 2, 3]", "x ?? 1"]


def _answer(program, scope, *, fast: bool):
    runtime = expressions._runtime()
    variables = {alias: runtime.cel(scope.get(name)) for name, alias in program.names}
    try:
        if fast:
            result = program.fast(variables)
            if isinstance(result, CEL_ERROR):
                raise result
        else:
            result = program.runner.evaluate(variables)
    except EVAL_ERRORS as exc:
        return "error", type(exc).__name__, str(exc.args[0] if exc.args else "")
    plain = runtime.plain(result)
    return "value", type(plain).__name__, plain


@pytest.mark.parametrize("expr", COVERED)
def test_closures_answer_as_the_interpreter(expr):
    program = expressions._compile(expr)
    assert program.fast is not None
    for scope in SCOPES:
        assert _answer(program, scope, fast=True) == _answer(program, scope, fast=False)


@pytest.mark.parametrize("expr", LEFT_TO_THE_INTERPRETER)
def test_shapes_not_covered_keep_the_interpreter(expr):
    assert expressions._compile(expr).fast is None
