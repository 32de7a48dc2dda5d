"""Workflow expressions: expr-lang forms evaluated through CEL, nil rules, templates."""

from __future__ import annotations

from typing import Any

import pytest

from cordum.workflow.expressions import (
    MAX_EXPRESSION,
    ExpressionError,
    evaluate,
    has_template,
    render,
    truthy,
)
from cordum.workflow.exprlang import MAX_DEPTH, translate

SCOPE: dict[str, Any] = {
    "input": {
        "total": 3,
        "price": 2.5,
        "name": "Ada",
        "items": [10, 20, 30],
        "tags": ["urgent", "billing"],
        "flag": True,
        "empty": [],
        "nested": {"value": None, "deep": {"x": 1}},
        "for": "reserved word as a key",
    },
    "ctx": {"region": "eu"},
    "steps": {"fetch": {"output": {"ok": True, "count": 2}}},
    "item": {"id": "i-1"},
    "loop": {"index": 1},
    "child": {"status": "succeeded"},
}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # literals
        ("nil", None),
        ("true", True),
        ("false", False),
        ("42", 42),
        ("1_000", 1000),
        ("0x1F", 31),
        ("2.5", 2.5),
        ("1e3", 1000.0),
        ('"double"', "double"),
        ("'single'", "single"),
        ("`raw \\n`", "raw \\n"),
        (r'"tab\there \u00e9"', "tab\there é"),
        ("[1, 'a', nil]", [1, "a", None]),
        ("{a: 1, 'b c': [true]}", {"a": 1, "b c": [True]}),
        # member access and indexing
        ("input.total", 3),
        ("input['name']", "Ada"),
        ('input["nested"].deep.x', 1),
        ("input.items[0]", 10),
        ("input.items[-1]", 30),
        ("input.for", "reserved word as a key"),
        ("steps.fetch.output.count", 2),
        ("ctx.region", "eu"),
        ("item.id", "i-1"),
        ("loop.index", 1),
        ("child.status", "succeeded"),
        # comparisons, with ints and floats mixed
        ("input.total > 3.5", False),
        ("input.total < 3.5", True),
        ("input.total >= 3", True),
        ("input.total <= 2.9", False),
        ("input.total == 3.0", True),
        ("input.total != 3.0", False),
        ("input.price > input.total", False),
        ("input.name < 'Bob'", True),
        # equality across kinds is false, never an error
        ("input.total == '3'", False),
        ("input.flag == 1", False),
        ("input.tags == ['urgent', 'billing']", True),
        ("input.nested.deep == {x: 1.0}", True),
        # logic, both spellings
        ("input.flag && input.total > 1", True),
        ("input.flag and false", False),
        ("false || input.flag", True),
        ("false or false", False),
        ("!input.flag", False),
        ("not input.flag", False),
        ("not false and true", True),
        ("true || false && false", True),
        # ternary
        ("input.total > 2 ? 'big' : 'small'", "big"),
        ("input.total > 5 ? 'big' : input.total > 1 ? 'mid' : 'small'", "mid"),
        # in and contains
        ("'urgent' in input.tags", True),
        ("'other' in input.tags", False),
        ("20.0 in input.items", True),
        ("'name' in input", True),
        ("'other' not in input.tags", True),
        ("input.name contains 'd'", True),
        ("input.name not contains 'z'", True),
        ("contains(input.name, 'A')", True),
        ("input.name startsWith 'A'", True),
        ("input.name endsWith 'a'", True),
        ("input.name matches '^A.a$'", True),
        # functions
        ("length(input.items)", 3),
        ("len(input.name)", 3),
        ("length(input.nested)", 2),
        ("first(input.items)", 10),
        ("last(input.items)", 30),
        ("first(input.empty)", None),
        ("first(input.missing)", None),
        # arithmetic, as expr-lang computes it
        ("input.total + 0.5", 3.5),
        ("input.total * 2", 6),
        ("input.total - 5", -2),
        ("input.total / 2", 1.5),
        ("6 / 3", 2.0),
        ("7 % 3", 1),
        ("-7 % 3", -1),
        ("-input.total", -3),
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("'a' + input.name", "aAda"),
        ("input.items + [40]", [10, 20, 30, 40]),
        # nil coalescing and optional chaining
        ("input.missing ?? 'default'", "default"),
        ("input.total ?? 0", 3),
        ("input.missing?.x", None),
        ("input.nested?.deep?.x", 1),
        # whole values come back as plain JSON
        ("input.nested", {"value": None, "deep": {"x": 1}}),
        ("steps.fetch", {"output": {"ok": True, "count": 2}}),
    ],
)
def test_accepted_forms(expr: str, expected: Any) -> None:
    result = evaluate(expr, SCOPE)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("input.missing", None),
        ("input.missing == nil", True),
        ("input.missing != nil", False),
        ("input.nested.value == nil", True),
        ("undefined_name", None),
        ("undefined_name == nil", True),
        ("steps.never_ran == nil", True),
        ("input.missing in input.tags", False),
        ("'x' in input.missing", False),
        ("input.total != nil", True),
    ],
)
def test_undefined_names_and_missing_keys_are_nil(expr: str, expected: Any) -> None:
    assert evaluate(expr, SCOPE) is expected


def test_scope_without_the_name_is_nil() -> None:
    # Given a scope that has no `item` (a step outside for_each)
    # When an expression reads it, Then it is nil rather than an error
    assert evaluate("item == nil", {"input": {}}) is True
    assert evaluate("item", {}) is None


def test_string_literals_are_never_rewritten() -> None:
    # Words the translation maps (nil, length, contains, not, and) stay as written in strings
    for text in ["nil", "length(x)", "a contains b", "not x and y", "${input.total}", "'q'"]:
        assert evaluate(repr(text), SCOPE) == text
    assert evaluate('"say \\"nil\\""', SCOPE) == 'say "nil"'


def test_a_name_equal_to_a_cel_keyword_is_an_ordinary_name() -> None:
    scope = {"loop": {"for": 1}, "in": 2, "null": 3, "size": [1]}
    assert evaluate("loop.for", scope) == 1
    assert evaluate("null", scope) == 3
    assert evaluate("size", scope) == [1]


def test_results_are_plain_python_values() -> None:
    result = evaluate("{n: input.total, f: input.price, s: input.name, l: [true, nil]}", SCOPE)
    assert result == {"n": 3, "f": 2.5, "s": "Ada", "l": [True, None]}
    assert [type(v) for v in result.values()] == [int, float, str, list]
    assert type(result["l"][0]) is bool
    # The result is a copy: changing it leaves the scope alone
    evaluate("input.nested", SCOPE)["deep"]["x"] = 99
    assert SCOPE["input"]["nested"]["deep"]["x"] == 1


def test_the_same_expression_is_compiled_once() -> None:
    from cordum.workflow import expressions

    expr = "input.total + 41"
    assert evaluate(expr, SCOPE) == 44
    before = expressions._compile.cache_info()
    assert evaluate(expr, {"input": {"total": 1}}) == 42
    after = expressions._compile.cache_info()
    assert after.hits == before.hits + 1 and after.misses == before.misses


def test_translation_parenthesises_with_expr_lang_precedence() -> None:
    # expr-lang binds `not` tighter than `in`: `not a in b` is `(not a) in b`
    assert translate("not a in b").cel == "((!v0) in v1)"
    assert translate("a not in b").cel == "!(v0 in v1)"
    assert translate("a || b && c").cel == "(v0 || (v1 && v2))"
    assert translate("-a % b").cel == "((-v0) % v1)"
    assert translate("a.b").names == (("a", "v0"),)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("input.total >", "syntax error: unexpected end of expression"),
        ("(input.total", "expected ')'"),
        ("input.total )", "unexpected ')' at column 13"),
        ("input..total", "ranges (`..`) are not supported"),
        ("1..3", "ranges (`..`) are not supported"),
        ("2 ** 3", "powers (`**`) are not supported"),
        ("input.items | map(#)", "pipes (`|`) are not supported"),
        ("input.items[1:2]", "slices are not supported"),
        ("input.name.upper()", "methods are not supported"),
        ("upper(input.name)", "unknown function 'upper'"),
        ("length(input.items, 2)", "length() takes 1 argument, got 2"),
        ("'unterminated", "unexpected character"),
        ("input.total @ 2", "unexpected character '@' at column 13"),
        ('"bad \\q escape"', "unknown escape"),
        ("", "empty expression"),
        ("   ", "empty expression"),
        ("99999999999999999999", "too large"),
    ],
)
def test_syntax_errors_say_where_and_why(expr: str, message: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        evaluate(expr, SCOPE)
    assert message in str(caught.value)
    assert repr(expr) in str(caught.value)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("input.missing.x", "cannot fetch 'x' from nil"),
        ("input.items[7]", "index 7 out of range (length 3)"),
        ("input.items['a']", "a list index must be an integer"),
        ("input.missing < 3", "cannot compare nil with int"),
        ("input.name > 1", "cannot compare string with int"),
        ("input.total / 0", "division by zero"),
        ("input.total % 0", "integer divide by zero"),
        ("input.total % 1.5", "cannot apply %"),
        ("input.name - 1", "cannot apply - to string and int"),
        ("input.tags contains 'urgent'", "contains needs two strings"),
        ("length(input.missing)", "length() needs a string, a list or a map, not nil"),
        ("'a' in input.name", "`in` needs a list or a map"),
        ("input.total && true", "&& needs bools, not int"),
        ("false || input.missing", "|| needs bools, not nil"),
        ("!input.total", "cannot evaluate"),
        ("input.missing ? 1 : 2", "cannot evaluate"),
    ],
)
def test_evaluation_errors_are_expression_errors(expr: str, message: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        evaluate(expr, SCOPE)
    assert message in str(caught.value)


def test_logical_operators_decide_left_to_right() -> None:
    # The right side is not needed once the left decides, so its error does not count
    assert evaluate("false && input.missing.x", SCOPE) is False
    assert evaluate("true || input.missing.x", SCOPE) is True
    assert evaluate("input.missing != nil && input.missing.x > 1", SCOPE) is False
    with pytest.raises(ExpressionError, match="cannot fetch"):
        evaluate("input.missing.x > 1 && false", SCOPE)


def test_length_limit() -> None:
    at_limit = "1" + " " * (MAX_EXPRESSION - 1)
    assert evaluate(at_limit, {}) == 1
    with pytest.raises(ExpressionError, match=f"at most {MAX_EXPRESSION}"):
        evaluate(at_limit + " ", {})


def _at_stack_depth(frames: int, run: Any) -> Any:
    return run() if frames == 0 else _at_stack_depth(frames - 1, run)


def test_nesting_limit() -> None:
    # The deepest accepted expressions still evaluate from a deep caller stack
    chain = " + ".join(["1"] * (MAX_DEPTH - 1))
    assert _at_stack_depth(300, lambda: evaluate(chain, {})) == MAX_DEPTH - 1
    parens = "(" * (MAX_DEPTH - 1) + "1" + ")" * (MAX_DEPTH - 1)
    assert _at_stack_depth(300, lambda: evaluate(parens, {})) == 1
    with pytest.raises(ExpressionError, match="nested too deeply"):
        evaluate("(" * 2000 + "1" + ")" * 2000, {})
    with pytest.raises(ExpressionError, match="nested too deeply"):
        evaluate("!" * 3000 + "true", {})
    with pytest.raises(ExpressionError, match="nested too deeply"):
        evaluate(" + ".join(["1"] * 1000), {})


def test_a_non_string_expression_is_refused() -> None:
    with pytest.raises(ExpressionError, match="must be a string"):
        evaluate(["input"], SCOPE)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, False),
        (False, False),
        (True, True),
        (0, False),
        (0.0, False),
        (2, True),
        ("", False),
        ("no", True),
        ([], False),
        ([0], True),
        ({}, False),
        ({"a": 1}, True),
    ],
)
def test_truthy(value: Any, expected: bool) -> None:
    assert truthy(value) is expected


# --- templates ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("${input.total}", 3),
        ("${input.price}", 2.5),
        ("${input.flag}", True),
        ("${input.tags}", ["urgent", "billing"]),
        ("${input.nested}", {"value": None, "deep": {"x": 1}}),
        ("${input.missing}", None),
        ("${ input.total > 1 }", True),
    ],
)
def test_a_single_template_keeps_the_type(template: str, expected: Any) -> None:
    result = render(template, SCOPE)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("total=${input.total}", "total=3"),
        ("${input.total}${input.total}", "33"),
        ("price ${input.price}, ok ${input.flag}", "price 2.5, ok true"),
        ("missing [${input.missing}]", "missing []"),
        ("tags ${input.tags}", 'tags ["urgent","billing"]'),
        ("deep ${input.nested.deep}", 'deep {"x":1}'),
        ("whole float ${input.total * 1.0}", "whole float 3"),
        ("half ${input.total / 2}", "half 1.5"),
        ("no templates here", "no templates here"),
        ("brace in a string ${'}'} ok", "brace in a string } ok"),
        ("map literal ${ {k: 'v'}.k }", "map literal v"),
        (" ${input.total}", " 3"),
    ],
)
def test_mixed_text_renders_values_as_text(template: str, expected: str) -> None:
    assert render(template, SCOPE) == expected


def test_render_walks_lists_and_maps_and_drops_nil_keys() -> None:
    # Given a step input with templates at several depths
    template = {
        "order": "${input.total}",
        "who": {"name": "${input.name}", "region": "${ctx.region}"},
        "optional": "${input.missing}",
        "kept_literal_null": None,
        "list": ["${input.items[0]}", "${input.missing}", "plain", 7],
        "text": "n=${input.missing}",
        "count": 5,
    }
    # When it is rendered
    result = render(template, SCOPE)
    # Then templates are replaced, a key whose template is nil is gone, lists keep nil
    assert result == {
        "order": 3,
        "who": {"name": "Ada", "region": "eu"},
        "kept_literal_null": None,
        "list": [10, None, "plain", 7],
        "text": "n=",
        "count": 5,
    }
    # And the template itself is untouched
    assert template["order"] == "${input.total}"


def test_render_leaves_non_templates_alone() -> None:
    for value in [None, 3, 2.5, True, "text", [], {}]:
        assert render(value, SCOPE) == value


def test_template_errors() -> None:
    with pytest.raises(ExpressionError, match="unterminated"):
        render("value ${input.total", SCOPE)
    with pytest.raises(ExpressionError, match="empty expression"):
        render("${}", SCOPE)
    with pytest.raises(ExpressionError, match="syntax error"):
        render({"a": ["${input.total >}"]}, SCOPE)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("${x}", True),
        ("a ${x} b", True),
        ("plain", False),
        ("$ {x}", False),
        (["a", {"b": "${x}"}], True),
        ({"${key}": "value"}, False),
        (3, False),
        (None, False),
    ],
)
def test_has_template(value: Any, expected: bool) -> None:
    assert has_template(value) is expected


@pytest.mark.parametrize("path", ["input", "input.total", "input.items", "input.missing",
                                  "steps", "nothing_here", "input . total"])
def test_a_plain_member_path_reads_as_the_interpreter_reads_it(path: str) -> None:
    # A bare path is read without the interpreter; in parentheses it goes through it.
    assert evaluate(path, SCOPE) == evaluate(f"({path})", SCOPE)


@pytest.mark.parametrize("path", ["input.missing.x", "input.total.x", "input.items.x"])
def test_a_plain_member_path_fails_as_the_interpreter_fails(path: str) -> None:
    with pytest.raises(ExpressionError) as fast:
        evaluate(path, SCOPE)
    with pytest.raises(ExpressionError) as slow:
        evaluate(f"({path})", SCOPE)
    assert str(fast.value).split(": ", 1)[1] == str(slow.value).split(": ", 1)[1]
