"""expr-lang source -> CEL source, for the forms Cordum's workflow expressions use.

The expression is tokenized and parsed with expr-lang's precedence table (the one in
expr-lang's `parser/operator`), then written back as CEL with a pair of parentheses
around every operation, so what CEL's own precedence would make of it never matters.
String literals are decoded and re-encoded, never edited in place.

Names are renamed to `v0`, `v1`, ... in the CEL text: the scope's names (`loop`,
`item`, ...) may be words CEL reserves, and the evaluator binds every name the
expression reads (nil when the scope lacks it). Member access is always written as an
index (`a["b"]`), so one function answers both and a key may be any word.

Standard library only; nothing here imports cel-python.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

MAX_DEPTH = 32
"""Deepest nesting of operations accepted. The CEL parse tree is about ten nodes per
level and cel-python walks it recursively (about 50 Python frames per level, against
the limit of 2500 it sets), so this leaves room for the caller's own stack."""

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<number>0[xX][0-9a-fA-F_]+|\d[\d_]*(?:\.\d[\d_]*)?(?:[eE][+-]?\d+)?)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`[^`]*`)
  | (?P<name>(?:[^\W\d]|\$)[\w$]*)
  | (?P<op>\?\.|\?\?|\.\.|\*\*|==|!=|<=|>=|&&|\|\||[-+*/%<>!?:.,()\[\]{}\#|^])
    """,
    re.VERBOSE,
)

_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|x[0-9a-fA-F]{2}|[0-7]{3}|.)", re.S)
_SIMPLE_ESCAPES = {
    "n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "a": "\a",
    "\\": "\\", '"': '"', "'": "'", "`": "`",
}  # fmt: skip

_BINARY = {
    "||": 10, "or": 10,
    "&&": 15, "and": 15,
    "==": 20, "!=": 20, "<": 20, ">": 20, "<=": 20, ">=": 20,
    "in": 20, "contains": 20, "startsWith": 20, "endsWith": 20, "matches": 20,
    "+": 30, "-": 30,
    "*": 60, "/": 60, "%": 60,
    "??": 500,
}  # fmt: skip
"""Binary operators and their expr-lang precedence (all left-associative)."""

_NEGATABLE = frozenset({"in", "contains", "startsWith", "endsWith", "matches"})
"""Operators expr-lang also accepts as `not <op>`."""

_UNARY = {"!": 50, "not": 50, "-": 90, "+": 90}

_UNSUPPORTED = {
    "..": "ranges (`..`)",
    "**": "powers (`**`)",
    "^": "powers (`^`)",
    "|": "pipes (`|`)",
    "#": "predicates (`#`)",
}

_FUNCTIONS = {
    "len": ("x_size", 1),
    "length": ("x_size", 1),
    "first": ("x_first", 1),
    "last": ("x_last", 1),
    "contains": ("x_contains", 2),
}
"""expr-lang function -> (CEL function the evaluator binds, number of arguments)."""

_INT64_MAX = 2**63 - 1


class TranslationError(ValueError):
    """The expression is not expr-lang this module accepts; the message says where."""


@dataclass(frozen=True)
class Translation:
    cel: str
    """The CEL text."""
    names: tuple[tuple[str, str], ...]
    """(expr-lang name, CEL variable) for every name the expression reads."""


@dataclass(frozen=True)
class _Token:
    kind: str  # number, string, name, op, end
    text: str
    pos: int


def translate(source: str) -> Translation:
    """The CEL form of an expr-lang expression; TranslationError when it does not parse."""
    return _Parser(source).parse()


def _tokenize(source: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(source):
        match = _TOKEN.match(source, pos)
        if match is None:
            raise TranslationError(f"unexpected character {source[pos]!r} at column {pos + 1}")
        kind = match.lastgroup or ""
        if kind != "space":
            tokens.append(_Token(kind, match.group(), pos))
        pos = match.end()
    tokens.append(_Token("end", "", len(source)))
    return tokens


def _cel_string(value: str) -> str:
    # JSON string syntax is a subset of CEL's double-quoted strings.
    return json.dumps(value, ensure_ascii=False)


def _decode_string(token: _Token) -> str:
    body = token.text[1:-1]
    if token.text[0] == "`":
        return body

    def unescape(match: re.Match[str]) -> str:
        code = match.group(1)
        if code[0] in "uUx" and len(code) > 1:
            return chr(int(code[1:], 16))
        if code[0] in "01234567" and len(code) == 3:
            return chr(int(code, 8))
        if code in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[code]
        raise TranslationError(f"unknown escape \\{code} in string at column {token.pos + 1}")

    return _ESCAPE.sub(unescape, body)


def _number(token: _Token) -> str:
    text = token.text.replace("_", "")
    if text[:2].lower() == "0x" or not any(c in text for c in ".eE"):
        value = int(text, 0) if text[:2].lower() == "0x" else int(text)
        if value > _INT64_MAX:
            raise TranslationError(f"integer {token.text} at column {token.pos + 1} is too large")
        return str(value)
    number = float(text)
    if number in (float("inf"), float("-inf")):
        raise TranslationError(f"number {token.text} at column {token.pos + 1} is too large")
    return repr(number)


class _Parser:
    """Pratt parser over expr-lang tokens; every method returns (CEL text, nesting depth)."""

    def __init__(self, source: str) -> None:
        self.tokens = _tokenize(source)
        self.index = 0
        self.names: dict[str, str] = {}
        self.level = 0  # parser recursion, bounded before any text is built

    def parse(self) -> Translation:
        if self._peek().kind == "end":
            raise TranslationError("empty expression")
        text, _ = self._conditional()
        self._expect_end()
        return Translation(text, tuple(self.names.items()))

    # tokens

    def _peek(self, ahead: int = 0) -> _Token:
        return self.tokens[min(self.index + ahead, len(self.tokens) - 1)]

    def _next(self) -> _Token:
        token = self._peek()
        self.index += 1
        return token

    def _is(self, text: str, ahead: int = 0) -> bool:
        token = self._peek(ahead)
        return token.kind in ("op", "name") and token.text == text

    def _expect(self, text: str) -> None:
        if not self._is(text):
            raise self._unexpected(f"expected {text!r}")
        self.index += 1

    def _expect_end(self) -> None:
        if self._peek().kind != "end":
            raise self._unexpected("expected the end of the expression")

    def _unexpected(self, wanted: str = "") -> TranslationError:
        token = self._peek()
        if token.kind == "end":
            found = "unexpected end of expression"
        elif token.text in _UNSUPPORTED:
            found = f"{_UNSUPPORTED[token.text]} are not supported (column {token.pos + 1})"
            return TranslationError(found)
        else:
            found = f"unexpected {token.text!r} at column {token.pos + 1}"
        return TranslationError(f"syntax error: {found}" + (f"; {wanted}" if wanted else ""))

    # grammar

    def _conditional(self) -> tuple[str, int]:
        condition, depth = self._binary(0)
        if not self._is("?"):
            return condition, depth
        self.index += 1
        yes, yes_depth = self._conditional()
        self._expect(":")
        no, no_depth = self._conditional()
        return _nest(f"({condition} ? {yes} : {no})", depth, yes_depth, no_depth)

    def _binary(self, min_precedence: int) -> tuple[str, int]:
        self.level += 1
        if self.level > MAX_DEPTH:
            raise TranslationError(
                f"expression is nested too deeply (more than {MAX_DEPTH} levels)"
            )
        try:
            return self._binary_chain(min_precedence)
        finally:
            self.level -= 1

    def _binary_chain(self, min_precedence: int) -> tuple[str, int]:
        left, depth = self._unary()
        while True:
            token = self._peek()
            negate = (
                token.text == "not" and token.kind == "name" and self._peek(1).text in _NEGATABLE
            )
            operator = self._peek(1).text if negate else token.text
            if token.kind not in ("op", "name") or operator not in _BINARY:
                if token.kind == "op" and token.text in _UNSUPPORTED:
                    raise self._unexpected()
                return left, depth
            precedence = _BINARY[operator]
            if precedence < min_precedence:
                return left, depth
            self.index += 2 if negate else 1
            right, right_depth = self._binary(precedence + 1)
            text = _binary_cel(operator, left, right)
            left, depth = _nest(f"!{text}" if negate else text, depth, right_depth)

    def _unary(self) -> tuple[str, int]:
        token = self._peek()
        if token.kind in ("op", "name") and token.text in _UNARY:
            self.index += 1
            operand, depth = self._binary(_UNARY[token.text])
            if token.text == "+":
                return operand, depth
            symbol = "-" if token.text == "-" else "!"
            return _nest(f"({symbol}{operand})", depth)
        return self._postfix()

    def _postfix(self) -> tuple[str, int]:
        text, depth = self._primary()
        while True:
            if self._is(".") or self._is("?."):
                optional = self._next().text == "?."
                field = self._next()
                if field.kind != "name":
                    self.index -= 1
                    raise self._unexpected("expected a field name")
                key = _cel_string(field.text)
                if self._is("("):
                    raise self._unexpected("methods are not supported; call functions by name")
                access = f"x_opt({text}, {key})" if optional else f"{text}[{key}]"
                text, depth = _nest(access, depth)
            elif self._is("["):
                self.index += 1
                if self._is(":"):
                    raise self._unexpected("slices are not supported")
                index, index_depth = self._conditional()
                if self._is(":"):
                    raise self._unexpected("slices are not supported")
                self._expect("]")
                text, depth = _nest(f"{text}[{index}]", depth, index_depth)
            else:
                return text, depth

    def _primary(self) -> tuple[str, int]:
        token = self._peek()
        if token.kind == "number":
            self.index += 1
            return _number(token), 0
        if token.kind == "string":
            self.index += 1
            return _cel_string(_decode_string(token)), 0
        if token.kind == "name":
            self.index += 1
            if token.text in ("true", "false"):
                return token.text, 0
            if token.text == "nil":
                return "null", 0
            if self._is("("):
                return self._call(token)
            alias = self.names.setdefault(token.text, f"v{len(self.names)}")
            return alias, 0
        if self._is("("):
            self.index += 1
            inner, depth = self._conditional()
            self._expect(")")
            return _nest(f"({inner})", depth)
        if self._is("["):
            return self._list()
        if self._is("{"):
            return self._map()
        raise self._unexpected()

    def _call(self, name: _Token) -> tuple[str, int]:
        if name.text not in _FUNCTIONS:
            known = ", ".join(sorted(_FUNCTIONS))
            raise TranslationError(
                f"unknown function {name.text!r} at column {name.pos + 1} (known: {known})"
            )
        cel_name, arity = _FUNCTIONS[name.text]
        args, depth = self._sequence("(", ")")
        if len(args) != arity:
            raise TranslationError(
                f"{name.text}() takes {arity} argument{'s' if arity > 1 else ''}, "
                f"got {len(args)} (column {name.pos + 1})"
            )
        return _nest(f"{cel_name}({', '.join(args)})", depth)

    def _list(self) -> tuple[str, int]:
        items, depth = self._sequence("[", "]")
        return _nest(f"[{', '.join(items)}]", depth)

    def _map(self) -> tuple[str, int]:
        self._expect("{")
        entries: list[str] = []
        depth = 0
        while not self._is("}"):
            key = self._next()
            if key.kind == "name":
                key_text = _cel_string(key.text)
            elif key.kind == "string":
                key_text = _cel_string(_decode_string(key))
            else:
                self.index -= 1
                raise self._unexpected("map keys are names or strings")
            self._expect(":")
            value, value_depth = self._conditional()
            entries.append(f"{key_text}: {value}")
            depth = max(depth, value_depth)
            if not self._is(","):
                break
            self.index += 1
        self._expect("}")
        return _nest(f"{{{', '.join(entries)}}}", depth)

    def _sequence(self, open_text: str, close_text: str) -> tuple[list[str], int]:
        self._expect(open_text)
        items: list[str] = []
        depth = 0
        while not self._is(close_text):
            item, item_depth = self._conditional()
            items.append(item)
            depth = max(depth, item_depth)
            if not self._is(","):
                break
            self.index += 1
        self._expect(close_text)
        return items, depth


def _binary_cel(operator: str, left: str, right: str) -> str:
    if operator in ("or", "||"):
        return f"({left} || {right})"
    if operator in ("and", "&&"):
        return f"({left} && {right})"
    if operator == "contains":
        return f"x_contains({left}, {right})"
    if operator == "??":
        return f"x_coalesce({left}, {right})"
    if operator in ("startsWith", "endsWith", "matches"):
        return f"({left}).{operator}({right})"
    return f"({left} {operator} {right})"


def _nest(text: str, *depths: int) -> tuple[str, int]:
    depth = max(depths, default=0) + 1
    if depth > MAX_DEPTH:
        raise TranslationError(f"expression is nested too deeply (more than {MAX_DEPTH} levels)")
    return text, depth

