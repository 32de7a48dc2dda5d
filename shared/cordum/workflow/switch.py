"""The ``switch`` step (docs/workflows.md, "How the step kinds behave"): ``condition``
is the value, ``input.cases`` the branches, ``input.default`` the fallback; the
branches not taken are cancelled as complete (``switch_branch_not_taken``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from cordum.workflow import expressions
from cordum.workflow.model import StepStatus
from cordum.workflow.status import BRANCH_NOT_TAKEN
from cordum.workflow.steps import complete, fail

if TYPE_CHECKING:
    from cordum.workflow.definition import Step
    from cordum.workflow.model import StepRun
    from cordum.workflow.steps import Advance


def switch_step(a: Advance, step: Step, sr: StepRun) -> None:
    """``condition`` is the value; ``input.cases`` a list of ``{when|match|value: literal,
    next|step|target: step id}`` or a map literal -> step id; ``input.default`` (or
    ``default_step``) the fallback. The chosen step runs on; every other case target
    is cancelled as a branch not taken, which counts as complete."""
    spec = step.input or {}
    try:
        value = expressions.evaluate(step.condition, a.scope()) if step.condition else None
    except expressions.ExpressionError as exc:
        fail(a, step, sr, StepStatus.FAILED, {"code": "switch_invalid", "message": str(exc)})
        return
    cases = _switch_cases(spec.get("cases"))
    default = str(spec.get("default") or spec.get("default_step") or "")
    matched = next((i for i, (when, _) in enumerate(cases) if _same_value(when, value)), None)
    target = cases[matched][1] if matched is not None else default
    targets = {t for _, t in cases} | ({default} if default else set())
    unknown = sorted(t for t in targets if t not in a.wf.steps)
    if unknown:
        fail(a, step, sr, StepStatus.FAILED,
             {"code": "switch_invalid", "message": f"unknown target step(s): {unknown}"})
        return
    a.note("step_switch_evaluated", step.id, status=StepStatus.SUCCEEDED,
           message=f"target {target or 'none'}",
           data={"value": value, "target_step": target})
    for other in sorted(targets - {target}):
        branch = a.run.steps.get(other)
        if branch is not None and branch.status == StepStatus.PENDING:
            branch.status = StepStatus.CANCELLED
            branch.completed_at = a.stamp
            branch.error = {"reason": BRANCH_NOT_TAKEN, "code": BRANCH_NOT_TAKEN,
                            "message": f"switch {step.id} chose {target or 'no branch'}"}
            a.note("step_cancelled", other, status=StepStatus.CANCELLED,
                   message=branch.error["message"], data={"error": branch.error})
    complete(a, step, sr, {"matched_case": matched, "matched_value": value,
                           "target_step": target})


def _switch_cases(raw: Any) -> list[tuple[Any, str]]:
    if isinstance(raw, dict):
        return [(when, str(target)) for when, target in raw.items()]
    out: list[tuple[Any, str]] = []
    for case in raw if isinstance(raw, list) else []:
        if not isinstance(case, dict):
            continue
        when = next((case[k] for k in ("when", "match", "value") if k in case), None)
        target = next((case[k] for k in ("next", "step", "target") if k in case), "")
        if target:
            out.append((when, str(target)))
    return out


def _same_value(when: Any, value: Any) -> bool:
    """A case's literal against the switch value (a map's keys are text: compared as text)."""
    if when == value and type(when) is type(value):
        return True
    if isinstance(when, str) and not isinstance(value, str) and value is not None:
        text = json.dumps(value) if not isinstance(value, bool) else str(value).lower()
        return when == text
    return False
