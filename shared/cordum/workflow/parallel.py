"""The ``parallel`` step (docs/workflows.md, "How the step kinds behave"): it starts
the steps named in ``input.steps`` (which leave top-level scheduling), at most
``max_parallel`` at a time, and ends when its strategy is decided: ``all`` of them,
``any`` one, or ``n_of_m`` (``required``) succeeded, or that can no longer happen. The
children still open then are cancelled as not needed (complete, like a switch's branch
not taken); the output maps each succeeded child's id to its output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cordum.workflow.composite import ACTIVE, cancel_open, due
from cordum.workflow.model import StepStatus
from cordum.workflow.status import DONE, owned_steps, parallel_ids
from cordum.workflow.steps import complete, fail

if TYPE_CHECKING:
    from cordum.workflow.composite import Begin
    from cordum.workflow.definition import Step
    from cordum.workflow.model import StepRun
    from cordum.workflow.steps import Advance

STRATEGIES = ("all", "any", "n_of_m")
PARALLEL_NOT_NEEDED = "parallel_branch_not_needed"
"""The reason of a parallel child cancelled once its parent's strategy was decided."""


def _parallel_config(a: Advance, step: Step) -> tuple[list[str], str, int]:
    ids, problem = parallel_ids(step)
    if problem:
        raise ValueError(problem)
    spec = step.input or {}
    strategy = str(spec.get("strategy") or "all").strip().lower()
    if strategy not in STRATEGIES:
        raise ValueError(f"parallel strategy must be one of {', '.join(STRATEGIES)}")
    required = {"all": len(ids), "any": 1}.get(strategy, 0)
    if strategy == "n_of_m":
        raw = spec.get("required")
        if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= len(ids):
            raise ValueError(f"parallel n_of_m needs input.required between 1 and {len(ids)}")
        required = raw
    owners = owned_steps(a.wf)
    for child in ids:
        if child not in a.wf.steps:
            raise ValueError(f"parallel child step {child!r} not found")
        if child == step.id or owners.get(child) != step.id:
            raise ValueError(f"parallel child step {child!r} is reserved by "
                             f"{owners.get(child) or 'itself'!r}")
    return ids, strategy, required


def begin_parallel(a: Advance, step: Step, sr: StepRun, begin: Begin) -> None:
    try:
        ids, strategy, required = _parallel_config(a, step)
    except ValueError as exc:
        a.note("step_parallel_completed", step.id, status=StepStatus.FAILED, message=str(exc))
        fail(a, step, sr, StepStatus.FAILED, {"code": "parallel_invalid", "message": str(exc)},
             event="")
        return
    if not ids:
        complete(a, step, sr, {}, event="step_parallel_completed", message="no steps")
        return
    sr.status = StepStatus.RUNNING
    a.note("step_parallel_started", step.id, status=sr.status,
           data={"strategy": strategy, "required": required, "total": len(ids)})
    drive_parallel(a, step, sr, begin)


def drive_parallel(a: Advance, step: Step, sr: StepRun, begin: Begin) -> bool:
    ids, strategy, required = _parallel_config(a, step)
    runs = [a.run.steps[i] for i in ids]
    succeeded = sum(1 for c in runs if c.status == StepStatus.SUCCEEDED)
    failed = sum(1 for c in runs if c.status in DONE and c.status != StepStatus.SUCCEEDED)
    won = succeeded >= required
    lost = len(ids) - failed < required
    if won or lost:
        losers = _cancel_losers(a, runs)
        data = {"strategy": strategy, "required": required, "succeeded": succeeded,
                "failed": failed, "cancelled": losers}
        if won:
            steps = a.scope()["steps"]
            output = {c.step_id: (steps.get(c.step_id) or {}).get("output")
                      for c in runs if c.status == StepStatus.SUCCEEDED}
            a.note("step_parallel_completed", step.id, status=StepStatus.SUCCEEDED, data=data)
            complete(a, step, sr, output, event="")
        else:
            message = f"parallel {strategy}: {failed} of {len(ids)} failed, needed {required}"
            a.note("step_parallel_completed", step.id, status=StepStatus.FAILED,
                   message=message, data=data)
            fail(a, step, sr, StepStatus.FAILED, {"code": "parallel_failed",
                                                  "message": message}, event="")
        return True
    limit = step.max_parallel or int((step.input or {}).get("max_parallel") or 0)
    active = sum(1 for c in runs if c.status in ACTIVE)
    changed = False
    for child_id, child in zip(ids, runs, strict=True):
        if limit and active >= limit:
            break
        if child.status != StepStatus.PENDING or not due(a, child):
            continue
        begin(a, a.wf.steps[child_id], child)
        changed = True
        active += child.status in ACTIVE
    return changed


def _cancel_losers(a: Advance, runs: list[StepRun]) -> int:
    error = {"reason": PARALLEL_NOT_NEEDED, "code": PARALLEL_NOT_NEEDED,
             "message": "cancelled: the parallel step was already decided"}
    return cancel_open(a, runs, error, "step_cancelled")
