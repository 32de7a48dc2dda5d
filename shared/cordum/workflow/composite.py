"""Steps made of child steps: ``for_each`` fan-out and ``loop`` (docs/workflows.md, "How
the step kinds behave").

A for_each step runs one child per item and a loop one child per iteration; children
are ``<step>[i]`` under the parent's ``children``, their jobs ``<run>:<step>[i]@<n>``.
A loop's ``body_step`` leaves top-level scheduling: the loop runs it. (A parallel
step, whose children are steps of the definition, is :mod:`cordum.workflow.parallel`.)

``begin_*`` starts a parent; :func:`drive` moves a running parent on once its children
changed (the engine calls it on every settle) and returns whether it changed anything.
"""

from __future__ import annotations

import json
import re
from functools import partial
from typing import TYPE_CHECKING, Any

from cordum.workflow import expressions
from cordum.workflow.model import StepRun, StepStatus, parse_time
from cordum.workflow.status import (
    DONE,
    RECOVERABLE,
    body_id,
    kind_of,
)
from cordum.workflow.steps import complete, fail

if TYPE_CHECKING:
    from collections.abc import Callable

    from cordum.workflow.definition import Step, Workflow
    from cordum.workflow.steps import Advance

    Begin = Callable[[Advance, Step, StepRun], None]

MAX_ITEMS = 1000
"""More for_each items than this fail the step (Cordum's fan-out limit)."""
LOOP_MAX_ITERATIONS = 100
"""A loop's ``max_iterations`` when it names none (Cordum's default)."""
LOOP_ITERATIONS_CAP = MAX_ITEMS
"""The most a loop may ask for: every iteration stays in the run document, as an item
does."""
ACTIVE = frozenset({StepStatus.RUNNING, StepStatus.WAITING})
_CHILD = re.compile(r"^(?P<parent>.+)\[(?P<index>\d+)\]$")


def child_path(step_id: str, index: int) -> str:
    return f"{step_id}[{index}]"


def parent_of(path: str) -> tuple[str, int] | None:
    """``step[3]`` -> ``("step", 3)``; None for a top-level step's path."""
    m = _CHILD.match(path)
    return (m["parent"], int(m["index"])) if m else None


def is_composite(step: Step) -> bool:
    return bool(step.for_each) or kind_of(step) in ("loop", "parallel")


def body_of(wf: Workflow, parent: Step) -> Step:
    """The definition a child of ``parent`` runs: the parent itself for for_each, its
    ``body_step`` for a loop (the loop step itself when it names none, as Cordum)."""
    if kind_of(parent) == "loop":
        body = body_id(parent)
        return wf.steps.get(body, parent) if body else parent
    return parent


def ordered_children(sr: StepRun) -> list[tuple[int, StepRun]]:
    out: list[tuple[int, StepRun]] = []
    for path, child in (sr.children or {}).items():
        found = parent_of(path)
        if found is not None:
            out.append((found[1], child))
    return sorted(out, key=lambda pair: pair[0])


def drive(a: Advance, step: Step, sr: StepRun, begin: Begin) -> bool:
    """Moves a running for_each or loop step on (a parallel step is
    :func:`cordum.workflow.parallel.drive_parallel`)."""
    if sr.status != StepStatus.RUNNING:
        return False
    if step.for_each:
        return _drive_for_each(a, step, sr, begin)
    return _drive_loop(a, step, sr, begin)


# ---------------------------------------------------------------- for_each

def begin_for_each(a: Advance, step: Step, sr: StepRun, begin: Begin) -> None:
    """Evaluates the items once (kept in ``resolved_items``) and starts the first children."""
    if sr.resolved_items is None:
        try:
            items = expressions.evaluate(step.for_each, a.scope())
        except expressions.ExpressionError as exc:
            _fail_fan_out(a, step, sr, "for_each_invalid", str(exc))
            return
        if items is None:
            items = []
        if not isinstance(items, list):
            _fail_fan_out(a, step, sr, "for_each_invalid",
                          f"for_each must give a list, got {type(items).__name__}")
            return
        if len(items) > MAX_ITEMS:
            _fail_fan_out(a, step, sr, "for_each_too_many",
                          f"for_each fan-out exceeds limit ({len(items)} > {MAX_ITEMS})",
                          count=len(items))
            return
        sr.resolved_items = items
    items = sr.resolved_items
    sr.children = {child_path(step.id, i): StepRun(step_id=child_path(step.id, i), item=item)
                   for i, item in enumerate(items)}
    if not items:
        complete(a, step, sr, [], message="no items")
        return
    sr.status = StepStatus.RUNNING
    a.note("step_foreach_started", step.id, status=sr.status,
           data={"items": len(items), "max_parallel": step.max_parallel})
    _drive_for_each(a, step, sr, begin)


def _fail_fan_out(a: Advance, step: Step, sr: StepRun, code: str, message: str,
                  **data: Any) -> None:
    a.note("step_foreach_failed", step.id, status=StepStatus.FAILED, message=message,
           data=data or None)
    fail(a, step, sr, StepStatus.FAILED, {"code": code, "message": message}, event="")


def _drive_for_each(a: Advance, step: Step, sr: StepRun, begin: Begin) -> bool:
    children = ordered_children(sr)
    failed = next((c for _, c in children if c.status in DONE
                   and c.status != StepStatus.SUCCEEDED), None)
    if failed is not None:
        cancelled = _cancel_children(a, sr, "forEach sibling failed")
        status = failed.status if failed.status in RECOVERABLE else StepStatus.FAILED
        error = {**(failed.error or {}), "code": "foreach_child_failed",
                 "child": failed.step_id, "cancelled": cancelled}
        error.setdefault("message", f"item {failed.step_id} {failed.status}")
        fail(a, step, sr, status, error)
        return True
    if all(c.status == StepStatus.SUCCEEDED for _, c in children):
        complete(a, step, sr, [c.output for _, c in children],
                 message=f"{len(children)} items")
        return True
    return _start_children(a, step, children, begin)


def _start_children(a: Advance, step: Step, children: list[tuple[int, StepRun]],
                    begin: Begin) -> bool:
    """Pending children whose backoff is over start while fewer than ``max_parallel`` run."""
    limit = step.max_parallel
    active = sum(1 for _, c in children if c.status in ACTIVE)
    changed = False
    for _, child in children:
        if limit and active >= limit:
            break
        if child.status != StepStatus.PENDING or not due(a, child):
            continue
        with_scope(a, {"item": child.item}, partial(begin, a, step, child))
        changed = True
        active += child.status in ACTIVE
    return changed


def _cancel_children(a: Advance, sr: StepRun, reason: str) -> int:
    """Open children become cancelled (their jobs with them); returns how many."""
    error = {"code": "cancelled", "message": f"cancelled: {reason}"}
    return cancel_open(a, [c for _, c in ordered_children(sr)], error,
                       "step_foreach_orphan_cancelled")


def cancel_open(a: Advance, runs: list[StepRun], error: dict[str, Any], event: str) -> int:
    """The open ones of ``runs`` become cancelled with ``error``, their jobs with them;
    returns how many."""
    count = 0
    for child in runs:
        if child.status not in (StepStatus.PENDING, *ACTIVE):
            continue
        if child.job_id and child.status in ACTIVE:
            a.cancels.append(child.job_id)
        child.status = StepStatus.CANCELLED
        child.completed_at = a.stamp
        child.next_attempt_at = None
        child.error = dict(error)
        a.note(event, child.step_id, job_id=child.job_id, status=child.status,
               message=error["message"], data={"error": child.error})
        count += 1
    return count


def close_children(sr: StepRun, status: StepStatus, stamp: str, cancels: list[str]) -> None:
    """The run ended: every open child takes ``status``; jobs still out are cancelled."""
    for child in (sr.children or {}).values():
        if child.status in DONE:
            continue
        if child.job_id and child.status in ACTIVE:
            cancels.append(child.job_id)
        child.status = status
        child.next_attempt_at = None
        child.completed_at = stamp


def child_scope(a: Advance, parent: Step, sr: StepRun, index: int) -> dict[str, Any]:
    """What child ``index`` of ``parent`` sees besides the run (its item, or its loop)."""
    if parent.for_each:
        child = (sr.children or {}).get(child_path(parent.id, index))
        return {"item": child.item if child is not None else None}
    return {"loop": _loop_scope(index, ordered_children(sr))}


def with_scope(a: Advance, names: dict[str, Any], action: Callable[[], None]) -> None:
    """Runs ``action`` with ``names`` (``item``, ``loop``) in the expression scope."""
    saved = dict(a.extra)
    a.extra.update(names)
    try:
        action()
    finally:
        a.extra.clear()
        a.extra.update(saved)


def due(a: Advance, sr: StepRun) -> bool:
    return not sr.next_attempt_at or parse_time(sr.next_attempt_at) <= a.now


# ---------------------------------------------------------------- loop

def _loop_config(step: Step) -> tuple[int, str, str]:
    """(max_iterations, while, until) from the loop's ``input``; ValueError when bad."""
    spec = step.input or {}
    limit = spec.get("max_iterations", spec.get("maxIterations", LOOP_MAX_ITERATIONS))
    if isinstance(limit, bool) or not isinstance(limit, int | str):
        raise ValueError("loop input.max_iterations must be a positive integer")
    try:
        limit = int(limit)
    except ValueError:
        raise ValueError("loop input.max_iterations must be a positive integer") from None
    if not 0 < limit <= LOOP_ITERATIONS_CAP:
        raise ValueError("loop input.max_iterations must be a positive integer up to "
                         f"{LOOP_ITERATIONS_CAP}")
    texts = []
    for keys in (("condition", "while"), ("until",)):
        value = next((spec[k] for k in keys if k in spec), None)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"loop input.{keys[0]} must be a string")
        texts.append((value or "").strip())
    return limit, texts[0], texts[1]


def begin_loop(a: Advance, step: Step, sr: StepRun, begin: Begin) -> None:
    try:
        _loop_config(step)
    except ValueError as exc:
        _end_loop(a, step, sr, error=str(exc))
        return
    body = body_id(step)
    if body and body not in a.wf.steps:
        _end_loop(a, step, sr, error=f"loop body_step {body!r} not found")
        return
    sr.children = {}
    sr.status = StepStatus.RUNNING
    _drive_loop(a, step, sr, begin)


def _end_loop(a: Advance, step: Step, sr: StepRun, *, error: str = "",
              output: dict[str, Any] | None = None, reason: str = "") -> None:
    if error:
        a.note("step_loop_completed", step.id, status=StepStatus.FAILED, message=error)
        fail(a, step, sr, StepStatus.FAILED, {"code": "loop_failed", "message": error},
             event="")
        return
    complete(a, step, sr, output, event="step_loop_completed", message=reason)


def _drive_loop(a: Advance, step: Step, sr: StepRun, begin: Begin) -> bool:
    limit, while_expr, until_expr = _loop_config(step)
    children = ordered_children(sr)
    failed = next((c for _, c in children if c.status in DONE
                   and c.status != StepStatus.SUCCEEDED), None)
    if failed is not None:
        _end_loop(a, step, sr, error=f"loop iteration {failed.step_id} {failed.status}")
        return True
    pending = [c for _, c in children if c.status == StepStatus.PENDING]
    if any(c.status in ACTIVE for _, c in children) or pending:
        if pending and due(a, pending[0]):
            index = len(children) - 1
            with_scope(a, {"loop": _loop_scope(index, children)},
                       lambda: begin(a, body_of(a.wf, step), pending[0]))
            return True
        return False
    index = len(children)
    scope = _loop_scope(index, children)
    previous = scope["previous_output"]
    if index >= limit:
        if while_expr or until_expr:
            _end_loop(a, step, sr, error=f"loop max_iterations exceeded ({limit})")
        else:
            _end_loop(a, step, sr, output={"iterations": index, "last_output": previous},
                      reason="max_iterations_reached")
        return True
    go_on = True
    try:
        names = {**a.scope(), "loop": scope}
        if while_expr:
            go_on = expressions.truthy(expressions.evaluate(while_expr, names))
        if go_on and until_expr and index > 0:  # until is asked after an iteration
            go_on = not expressions.truthy(expressions.evaluate(until_expr, names))
    except expressions.ExpressionError as exc:
        _end_loop(a, step, sr, error=str(exc))
        return True
    if not go_on:
        _end_loop(a, step, sr, output={"iterations": index, "last_output": previous},
                  reason="condition_stopped")
        return True
    path = child_path(step.id, index)
    child = StepRun(step_id=path)
    assert sr.children is not None
    sr.children[path] = child
    body = body_of(a.wf, step)
    a.note("step_loop_iteration", step.id, status=StepStatus.RUNNING,
           data={"index": index, "iteration": index + 1, "body_step": body.id})
    with_scope(a, {"loop": scope}, lambda: begin(a, body, child))
    return True


def _loop_scope(index: int, children: list[tuple[int, StepRun]]) -> dict[str, Any]:
    previous = next((c.output for i, c in children if i == index - 1), None)
    return {"index": index, "iteration": index + 1, "previous_output": previous}


def item_env(index: int, item: Any) -> dict[str, str]:
    return {"foreach_index": str(index),
            "foreach_item": json.dumps(item, separators=(",", ":"), default=str)}
