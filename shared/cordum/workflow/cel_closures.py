"""Compiled CEL programs as nested Python closures, for the shapes templates take most.

cel-python's interpreter walks the parse tree on every evaluation: an expression as
small as ``steps.a.output.n + 1`` is some seventy visits through its grammar's chain of
one-child nodes (expr, conditionalor, ..., member, primary), each a method lookup and
a list. A run evaluates the same few expressions on each of its events, so the tree
is turned here, once per program, into one closure per node that does work: the
one-child nodes vanish, literals are read once, and each operator calls the function
the interpreter would call (:class:`cordum.workflow.cel_runtime.CelRuntime`'s, which
give expr-lang's answers), with the interpreter's own handling of what it raises.

Covered: identifiers, literals, parentheses, ``[...]`` indexing, the binary operators
(``|| && < <= > >= == != in + - * / %``). Anything else (unary operators, calls,
macros, list and map literals, ``?:``) returns None from :func:`closure`, and the
expression keeps the interpreter. Each closure answers what the interpreter answers
for the same tree and variables, errors included (as ``CELEvalError`` values, with
the interpreter's messages), evaluating both sides of every operator as it does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from celpy import celtypes
from celpy.evaluation import CELEvalError, Evaluator
from lark import Token, Tree

Closure = Callable[[Mapping[str, Any]], Any]
"""Evaluates a program's tree against its variables (CEL name -> value)."""

_PASS = frozenset({"expr", "conditionalor", "conditionaland", "relation", "addition",
                   "multiplication", "unary", "member"})
"""Nodes that hand their one child's value up unchanged."""
_OPS = {
    "relation_lt": "_<_", "relation_le": "_<=_", "relation_ge": "_>=_",
    "relation_gt": "_>_", "relation_eq": "_==_", "relation_ne": "_!=_",
    "relation_in": "_in_", "addition_add": "_+_", "addition_sub": "_-_",
    "multiplication_div": "_/_", "multiplication_mul": "_*_", "multiplication_mod": "_%_",
}
"""The operator node kinds of relation, addition and multiplication: their function."""
_LITERALS = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType,
             celtypes.StringType, celtypes.BoolType)
"""Literal values that cannot change, so one value serves every evaluation."""


class _Unsupported(Exception):  # noqa: N818
    """A node this module leaves to the interpreter."""


def closure(ast: Tree, functions: Mapping[str, Callable[..., Any]], evaluator: Evaluator,
            names: frozenset[str]) -> Closure | None:
    """The program ``ast`` as a closure, or None when it has a node not covered here.
    ``functions``: the operators' functions the program was made with; ``evaluator``:
    one on the same program, used once per literal to read it as the interpreter does;
    ``names``: the variables every evaluation binds (another name keeps the
    interpreter, which answers an unbound one with its own error)."""
    try:
        return _node(ast, _Made(functions, evaluator, names))
    except (_Unsupported, KeyError, RecursionError):
        return None


class _Made:
    """What every node of one program is compiled with."""

    __slots__ = ("evaluator", "functions", "names")

    def __init__(self, functions: Mapping[str, Callable[..., Any]], evaluator: Evaluator,
                 names: frozenset[str]) -> None:
        self.functions, self.evaluator, self.names = functions, evaluator, names


def _node(tree: Any, made: _Made) -> Closure:
    if not isinstance(tree, Tree):
        raise _Unsupported(tree)
    kind, children = tree.data, tree.children
    if kind in _PASS and len(children) == 1:
        return _node(children[0], made)
    if kind in ("conditionalor", "conditionaland") and len(children) == 2:
        name = "_||_" if kind == "conditionalor" else "_&&_"
        return _binary(tree, name, repr(name)[1:-1], _node(children[0], made),
                       _node(children[1], made), made.functions[name], kind)
    if kind in ("relation", "addition", "multiplication") and len(children) == 2:
        left_op = children[0]
        if not isinstance(left_op, Tree) or left_op.data not in _OPS \
                or len(left_op.children) != 1:
            raise _Unsupported(kind)
        name = _OPS[left_op.data]
        return _binary(tree, name, repr(left_op.data),
                       _node(left_op.children[0], made),
                       _node(children[1], made), made.functions[name], kind)
    if kind == "member_index" and len(children) == 2:
        return _index(tree, _node(children[0], made),
                      _node(children[1], made), made.functions["_[_]"])
    if kind == "primary" and len(children) == 1 and isinstance(children[0], Tree):
        return _primary(children[0], made)
    raise _Unsupported(kind)


def _primary(child: Tree, made: _Made) -> Closure:
    if child.data == "paren_expr" and len(child.children) == 1:
        return _node(child.children[0], made)
    if child.data == "ident" and len(child.children) == 1 \
            and isinstance(child.children[0], Token):
        name = str(child.children[0].value)
        if name not in made.names:
            raise _Unsupported(name)

        def ident(variables: Mapping[str, Any]) -> Any:
            return variables[name]  # every name the program reads is bound (a miss raises)
        return ident
    if child.data == "literal":
        value = made.evaluator.literal(child)
        if not isinstance(value, _LITERALS):
            raise _Unsupported(child.data)

        def literal(variables: Mapping[str, Any]) -> Any:
            return value
        return literal
    raise _Unsupported(child.data)


def _binary(tree: Tree, name: str, label: str, left_of: Closure, right_of: Closure,
            func: Callable[[Any, Any], Any], kind: str) -> Closure:
    """An operator node: both sides, then its function, as the interpreter's method of
    ``kind`` does (the same exceptions turned into the same error values)."""
    arithmetic = kind in ("addition", "multiplication")
    divides = kind == "multiplication"

    def apply(variables: Mapping[str, Any]) -> Any:
        left, right = left_of(variables), right_of(variables)
        try:
            return func(left, right)
        except TypeError as ex:
            err = (f"found no matching overload for {label} "
                   f"applied to '({type(left)}, {type(right)})'")
            return _error(err, ex, tree)
        except ZeroDivisionError as ex:
            if not divides:
                raise
            return _error("modulus or divide by zero", ex, tree)
        except (ValueError, OverflowError) as ex:
            if not arithmetic:
                raise
            return _error("return error for overflow", ex, tree)
    return apply


def _index(tree: Tree, member_of: Closure, index_of: Closure,
           func: Callable[[Any, Any], Any]) -> Closure:
    def apply(variables: Mapping[str, Any]) -> Any:
        member, index = member_of(variables), index_of(variables)
        try:
            return func(member, index)
        except TypeError as ex:
            err = (f"found no matching overload for _[_] "
                   f"applied to '({type(member)}, {type(index)})'")
            return _error(err, ex, tree)
        except KeyError as ex:
            return _error("no such key", ex, tree)
        except IndexError as ex:
            return _error("invalid_argument", ex, tree)
    return apply


def _error(message: str, ex: Exception, tree: Tree) -> CELEvalError:
    value = CELEvalError(message, ex.__class__, ex.args, tree=tree)
    value.__cause__ = ex
    return value
