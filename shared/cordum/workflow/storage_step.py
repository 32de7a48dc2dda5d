"""The ``storage`` step: a read, write or delete of a dot path in the run context
(docs/workflows.md, "How the step kinds behave"), done at once, with no job."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cordum.workflow.model import StepStatus
from cordum.workflow.steps import complete, copy_value, fail

if TYPE_CHECKING:
    from cordum.workflow.definition import Step
    from cordum.workflow.model import StepRun
    from cordum.workflow.steps import Advance

STORAGE_OPERATIONS = ("read", "write", "delete")
ENGINE_CONTEXT_KEY = "steps"
"""The part of the run context the engine writes (step outputs): storage steps keep off."""


def storage_step(a: Advance, step: Step, sr: StepRun, payload: Any) -> None:
    """``operation`` read | write | delete of the dot path ``key`` in the run context
    (``value`` for a write). The output is the value at the key: as read, as written,
    or as it was before the delete (nil when there was none)."""
    spec = payload if isinstance(payload, dict) else {}
    operation = str(spec.get("operation", "")).strip().lower()
    path = [part for part in str(spec.get("key", "")).split(".") if part]
    problem = ""
    if operation not in STORAGE_OPERATIONS:
        problem = f"operation must be one of {', '.join(STORAGE_OPERATIONS)}"
    elif not path:
        problem = "key must be a dot path such as 'order.total'"
    elif path[0] == ENGINE_CONTEXT_KEY:
        problem = f"key {spec.get('key')!r} is the engine's own ({ENGINE_CONTEXT_KEY}.*)"
    if problem:
        fail(a, step, sr, StepStatus.FAILED, {"code": "storage_invalid", "message": problem})
        return
    parent: Any = a.run.context
    for part in path[:-1]:
        child = parent.get(part) if isinstance(parent, dict) else None
        if not isinstance(child, dict):
            if operation != "write":
                complete(a, step, sr, None)
                return
            child = parent[part] = {}
        parent = child
    leaf = path[-1]
    if operation == "read":
        value = copy_value(parent.get(leaf))
    elif operation == "write":
        parent[leaf] = copy_value(spec.get("value"))
        value = copy_value(spec.get("value"))
    else:
        value = parent.pop(leaf, None)
    complete(a, step, sr, value)
