"""The definitions a run pins for its subworkflow steps when it is created.

A subworkflow step names another definition, which may name more. When a run is
created (a start, a rerun, a child run) it keeps a copy of every definition it may
start that way, at any depth: the ``workflow_id`` of each subworkflow step as it is
written, then theirs, and so on (``WorkflowRun.child_definitions``). A child run is
made from that copy and keeps the part below it. A definition saved again or deleted
after the start therefore changes no run already started, nor any of its children,
even one made days later behind an approval.

A templated ``workflow_id`` names no definition until the run renders it: it may
resolve only to a definition the run pinned (``subworkflow_not_pinned`` otherwise). A
name with no definition is left out; its step fails when reached, as before
(``subworkflow_not_started``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cordum.workflow import expressions
from cordum.workflow.definition import check_step_count
from cordum.workflow.definition_store import stored_definition
from cordum.workflow.errors import InvalidDefinition
from cordum.workflow.redis_io import dumps
from cordum.workflow.status import kind_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from cordum.workflow.definition import Workflow
    from cordum.workflow.limits import RunLimits

    Lookup = Callable[[str], Awaitable["Workflow | None"]]
    """A definition by workflow id (None when there is none)."""


def named(wf: Workflow) -> list[str]:
    """The ``workflow_id`` of each subworkflow step of ``wf`` written as it is (not a
    template), in step order, once each."""
    out: list[str] = []
    for step in wf.steps.values():
        target = (step.input or {}).get("workflow_id") if kind_of(step) == "subworkflow" else None
        if isinstance(target, str) and target.strip() and not expressions.has_template(target):
            out.append(target.strip())
    return list(dict.fromkeys(out))


def has_subworkflow(wf: Workflow) -> bool:
    return any(kind_of(step) == "subworkflow" for step in wf.steps.values())


async def pin(wf: Workflow, lookup: Lookup, *, limits: RunLimits | None = None,
              ) -> dict[str, Any] | None:
    """The definitions a run of ``wf`` may start as children, at any depth, read with
    ``lookup``: workflow id -> definition JSON; None when ``wf`` has no subworkflow
    step. With ``limits``, more than ``max_pinned_definitions`` of them, or one with
    more than ``max_steps_per_definition`` steps, is :class:`InvalidDefinition`."""
    if not has_subworkflow(wf):
        return None
    pinned: dict[str, Workflow] = {}
    todo = named(wf)
    while todo:
        target = todo.pop(0)
        if target in pinned or target == wf.id:  # wf.id: a cycle, refused when reached
            continue
        found = await lookup(target)
        if found is None:
            continue
        pinned[target] = found
        if limits is not None:
            if len(pinned) > limits.max_pinned_definitions:
                raise InvalidDefinition(
                    f"workflow {wf.id} starts {len(pinned)} or more workflows through its "
                    f"subworkflow steps; a run may pin at most "
                    f"{limits.max_pinned_definitions} (max_pinned_definitions)")
            check_step_count(found, limits.max_steps_per_definition)
        todo += named(found)
    return {workflow_id: found.to_json() for workflow_id, found in pinned.items()}


def pinned_lookup(pins: Mapping[str, Any]) -> Lookup:
    """A lookup in a run's pinned definitions (a child pins the part below it)."""
    async def lookup(workflow_id: str) -> Workflow | None:
        return pinned_definition(pins, workflow_id)

    return lookup


def pinned_definition(pins: Mapping[str, Any], workflow_id: str) -> Workflow | None:
    """The definition the run pinned under ``workflow_id`` (None when it pinned none);
    each copy is parsed once per process."""
    doc = pins.get(workflow_id)
    return None if doc is None else stored_definition(dumps(doc).encode(), workflow_id)
