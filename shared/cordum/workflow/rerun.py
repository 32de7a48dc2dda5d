"""Rerun: a new run of an old run's definition and input, resumed at one of its steps
(docs/workflows.md, "Dry runs and reruns"). Pure: the new run is built here; the caller
stores and starts it.

A rerun from step S keeps what S depends on and runs the rest again:

- S's transitive ``depends_on`` closure must have ``succeeded`` in the old run (else
  :class:`RerunNotRunnable`, naming the first step that did not). Their StepRuns are
  copied whole (status, output, attempts, job id, times, children), so an approval
  step that was approved is not asked again: it stays succeeded with its old gate job,
  as long as its input, rendered in the rerun, is the one approved (else it is asked
  again: the old decision was about other data).
- A dry run is never rerun as a real one from a step (:class:`RerunNotRunnable`): its
  steps ran dry, approvals included.
- Of the old context, only what those steps wrote is copied: their
  ``context.steps.<id>`` entries, their ``output_path`` values and the values their
  storage writes left (replayed in the order the steps completed). Anything else in
  the old context was written by steps that run again.
- A copied switch step keeps its choice: the branches it did not take stay cancelled
  as not taken (else they would start, their dependency having succeeded), except S
  itself, which the caller asked to run.
- Every other step starts fresh (pending, no StepRun yet).

Without a step the whole workflow runs again from scratch on the same input. Cordum
does the same: ``RerunFrom`` with an empty step collects no dependencies, so its new
run copies no StepRun and no step output. (Cordum keeps the old context's keys outside
``steps``; here they are dropped too, as every step that wrote them runs again.)

The new run is a run of its own: the caller's principal starts it; its labels are the
old run's (``dry_run`` set from the request, not inherited); its metadata names the
old run and who reran it (``rerun_of``, ``rerun_step``, ``rerun_by``, ``dry_run``) and
nothing else of the old run's bookkeeping (a child run's parent link stays with the
child); its timeline starts with a ``run_rerun`` event saying the same.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from cordum.workflow import expressions
from cordum.workflow.errors import RerunNotRunnable, RerunStepUnknown
from cordum.workflow.gates import input_hash
from cordum.workflow.model import RunStatus, StepRun, StepStatus, WorkflowRun
from cordum.workflow.status import BRANCH_NOT_TAKEN
from cordum.workflow.steps import set_path

if TYPE_CHECKING:
    from cordum.workflow.definition import Step, Workflow

DRY_RUN_LABEL = "dry_run"


def upstream(wf: Workflow, step_id: str) -> list[str]:
    """The transitive ``depends_on`` closure of ``step_id`` (itself excluded), in
    definition order."""
    found: set[str] = set()
    todo = list(wf.steps[step_id].depends_on)
    while todo:
        dep = todo.pop()
        if dep in found or dep not in wf.steps:
            continue
        found.add(dep)
        todo.extend(wf.steps[dep].depends_on)
    return [s for s in wf.steps if s in found]


def build_rerun(old: WorkflowRun, wf: Workflow, from_step: str, *, run_id: str,
                triggered_by: str, now: str, dry_run: bool) -> WorkflowRun:
    """The new pending run (see the module doc). ``wf`` is the definition the old run
    ran (its snapshot); ``now`` an RFC 3339 time. Raises :class:`RerunStepUnknown` and
    :class:`RerunNotRunnable`."""
    from_step = from_step.strip()
    kept: list[str] = []
    if from_step:
        if from_step not in wf.steps:
            raise RerunStepUnknown(
                f"from_step {from_step!r} is not a step of workflow {wf.id!r}")
        kept = upstream(wf, from_step)
        if old.dry_run and not dry_run and kept:
            raise RerunNotRunnable(
                f"cannot rerun dry run {old.id} as a real run from step {from_step!r}: "
                "its steps ran dry (approvals granted without anyone, jobs never sent); "
                "rerun it from scratch, or as a dry run")
        for step_id in kept:
            sr = old.steps.get(step_id)
            status = sr.status if sr is not None else StepStatus.PENDING
            if status != StepStatus.SUCCEEDED:
                raise RerunNotRunnable(
                    f"cannot rerun from step {from_step!r}: its dependency {step_id!r} "
                    f"is {status.value} in run {old.id}, not succeeded")
    steps = {step_id: _copy_step(old.steps[step_id]) for step_id in kept}
    for step_id in _branches_not_taken(old, wf, kept):
        if step_id != from_step and step_id not in steps:
            steps[step_id] = _copy_step(old.steps[step_id])
    context = _kept_context(old, wf, kept)
    for step_id in _approvals_to_ask_again(old, wf, kept, context):
        del steps[step_id]
    labels = {k: v for k, v in old.labels.items() if k != DRY_RUN_LABEL}
    metadata: dict[str, Any] = {"rerun_of": old.id, "rerun_by": triggered_by}
    if from_step:
        metadata["rerun_step"] = from_step
    if dry_run:
        labels[DRY_RUN_LABEL] = metadata["dry_run"] = "true"
    return WorkflowRun(
        id=run_id, workflow_id=old.workflow_id, org_id=old.org_id, team_id=old.team_id,
        input=copy.deepcopy(old.input), context=context,
        status=RunStatus.PENDING, started_at=now, created_at=now, updated_at=now,
        steps=steps, triggered_by=triggered_by, labels=labels, metadata=metadata,
        rerun_of=old.id, rerun_step=from_step, dry_run=dry_run)


def _approvals_to_ask_again(old: WorkflowRun, wf: Workflow, kept: list[str],
                            context: dict[str, Any]) -> list[str]:
    """Kept approval steps whose input, rendered in the rerun, is not what the approver
    approved: the old decision was about other data, so the rerun asks again."""
    scope = {"input": old.input, "ctx": context, "steps": context.get("steps", {})}
    out = []
    for step_id in kept:
        step = wf.steps[step_id]
        if _kind(step) != "approval":
            continue
        try:
            now = (copy.deepcopy(old.input) if step.input is None
                   else expressions.render(step.input, scope))
        except expressions.ExpressionError:
            now = _UNRENDERABLE
        if now is _UNRENDERABLE or input_hash(now) != input_hash(old.steps[step_id].input):
            out.append(step_id)
    return out


_UNRENDERABLE = object()


def _copy_step(sr: StepRun) -> StepRun:
    return StepRun.from_json(copy.deepcopy(sr.to_json()))


def _kept_context(old: WorkflowRun, wf: Workflow, kept: list[str]) -> dict[str, Any]:
    old_steps = old.context.get("steps")
    old_steps = old_steps if isinstance(old_steps, dict) else {}
    context: dict[str, Any] = {"steps": {s: copy.deepcopy(old_steps[s])
                                         for s in kept if s in old_steps}}
    # Later writes win, as they did in the old run.
    order = sorted(kept, key=lambda s: old.steps[s].completed_at or "")
    for step_id in order:
        step, sr = wf.steps[step_id], old.steps[step_id]
        if step.output_path:
            parts = [p.strip() for p in step.output_path.split(".")]
            if all(parts):
                set_path(context, parts, copy.deepcopy(sr.output))
        if _kind(step) == "storage" and isinstance(sr.input, dict):
            _replay_storage(context, sr.input)
    return context


def _replay_storage(context: dict[str, Any], spec: dict[str, Any]) -> None:
    """A storage step's write or delete, from the input it ran with (reads change nothing)."""
    operation = str(spec.get("operation", "")).strip().lower()
    parts = [p for p in str(spec.get("key", "")).split(".") if p]
    if not parts or parts[0] == "steps":
        return
    if operation == "write":
        set_path(context, parts, copy.deepcopy(spec.get("value")))
    elif operation == "delete":
        parent: Any = context
        for part in parts[:-1]:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if isinstance(parent, dict):
            parent.pop(parts[-1], None)


def _branches_not_taken(old: WorkflowRun, wf: Workflow, kept: list[str]) -> list[str]:
    """Steps that a kept switch step cancelled as branches not taken in the old run."""
    out: list[str] = []
    for step_id in kept:
        step = wf.steps[step_id]
        if _kind(step) != "switch":
            continue
        for target in _switch_targets(step):
            sr = old.steps.get(target)
            if target in wf.steps and sr is not None and \
                    (sr.error or {}).get("reason") == BRANCH_NOT_TAKEN:
                out.append(target)
    return out


def _switch_targets(step: Step) -> set[str]:
    """Every step a switch may choose: its cases' targets and its default (§2)."""
    spec = step.input or {}
    cases = spec.get("cases")
    targets: set[str] = set()
    if isinstance(cases, dict):
        targets |= {str(t) for t in cases.values()}
    elif isinstance(cases, list):
        for case in cases:
            if isinstance(case, dict):
                target = next((case[k] for k in ("next", "step", "target") if k in case), "")
                if target:
                    targets.add(str(target))
    default = spec.get("default") or spec.get("default_step")
    if default:
        targets.add(str(default))
    return targets


def _kind(step: Step) -> str:
    return (step.type or "worker").strip().lower()
