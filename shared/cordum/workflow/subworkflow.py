"""The ``subworkflow`` step: a child run of another definition (docs/workflows.md,
"How the step kinds behave").

The step asks for a child run (an effect the runner carries out: it stores the run and
queues its start); the child's id is kept in the step's ``job_id``. When the child run
ends, the runner hands its end to the parent (a ``child`` event, and the reconciler
when that is lost), and :func:`child_ended` finishes the step. A ``call_stack`` in the
child's metadata (the workflow ids above it) refuses cycles; cancelling the parent
cancels the child.

A child is made from the definition its run pinned when it was created (see
:mod:`cordum.workflow.pinning`): a ``workflow_id`` the run did not pin fails the step at
once. The runner may refuse to make the child (the tenant's open runs, the runs under
the root run, the size of its input): it stores the child ``failed`` with the reason,
marked ``refused``, and the step fails with that reason's code.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from cordum.workflow import expressions
from cordum.workflow.input_refs import kept
from cordum.workflow.model import RunStatus, StepStatus
from cordum.workflow.status import kind_of
from cordum.workflow.steps import complete, copy_value, fail

if TYPE_CHECKING:
    from cordum.workflow.definition import Step, Workflow
    from cordum.workflow.model import StepRun, WorkflowRun
    from cordum.workflow.steps import Advance

CALL_STACK = "call_stack"
"""Run metadata: the workflow ids of the runs above this one, comma-separated."""
PARENT_RUN = "parent_run_id"
PARENT_STEP = "parent_step_id"
ROOT_RUN = "root_run_id"
"""Run metadata: the run at the top of the tree (its runs are counted against
``limits.max_runs_per_root``)."""
REFUSED = "refused"
"""Run metadata ``"true"``: a child run the runner did not make; its ``error`` says why."""
TENANT_RUN_LIMIT = "tenant_run_limit"
RUN_LIMIT_EXCEEDED = "run_limit_exceeded"
INPUT_TOO_LARGE = "run_input_too_large"
NOT_PINNED = "subworkflow_not_pinned"
NOT_STARTED = "subworkflow_not_started"
MAX_DEPTH = 16
"""Nesting deeper than this is refused as if it were a cycle."""
_NAMESPACE = uuid.UUID("6f1d3c1e-5b1a-4c3e-9a57-0c2f4e1d9b10")

CHILD_STATUS = {
    RunStatus.FAILED: StepStatus.FAILED,
    RunStatus.DENIED: StepStatus.DENIED,
    RunStatus.TIMED_OUT: StepStatus.TIMED_OUT,
    RunStatus.CANCELLED: StepStatus.CANCELLED,
}


def child_run_id(run_id: str, step_id: str, attempt: int) -> str:
    """The child run's id: the same for the same step attempt, so creating it again (a
    repeated outbox) finds the run it made."""
    return str(uuid.uuid5(_NAMESPACE, f"{run_id}:{step_id}@{attempt}"))


def call_stack(run: WorkflowRun) -> list[str]:
    raw = str((run.metadata or {}).get(CALL_STACK) or "")
    return [part for part in raw.split(",") if part]


def begin_subworkflow(a: Advance, step: Step, sr: StepRun) -> None:
    spec = step.input or {}
    try:
        target = expressions.render(spec.get("workflow_id"), a.scope())
        mapping = spec.get("input_mapping")
        child_input = (expressions.render(mapping, a.scope()) if mapping is not None
                       else copy_value(a.run.input))
    except expressions.ExpressionError as exc:
        _failed(a, step, sr, "subworkflow_invalid", str(exc))
        return
    if not isinstance(target, str) or not target.strip():
        _failed(a, step, sr, "subworkflow_invalid", "subworkflow input.workflow_id is required")
        return
    target = target.strip()
    stack = [*call_stack(a.run), a.run.workflow_id]
    if target in stack or len(stack) >= MAX_DEPTH:
        chain = " -> ".join([*stack, target])
        _failed(a, step, sr, "subworkflow_cycle", f"subworkflow cycle refused: {chain}")
        return
    pinned = a.run.child_definitions
    if pinned is not None and target not in pinned:
        if not expressions.has_template(spec.get("workflow_id")):  # it did not exist
            _failed(a, step, sr, NOT_STARTED, f"workflow {target} was not defined when "
                    "the run started")
        else:
            _failed(a, step, sr, NOT_PINNED, f"workflow {target} was not pinned when the "
                    "run started: a templated workflow_id may only name a workflow that "
                    "a subworkflow step names literally")
        return
    child_id = child_run_id(a.run.id, step.id, sr.attempts)
    root = str((a.run.metadata or {}).get(ROOT_RUN) or a.run.id)
    a.runs.append({"run_id": child_id, "workflow_id": target, "input": child_input,
                   "metadata": {CALL_STACK: ",".join(stack), PARENT_RUN: a.run.id,
                                PARENT_STEP: step.id, ROOT_RUN: root},
                   "dry_run": a.run.dry_run})
    sr.job_id = child_id
    sr.input = kept(child_input, f"run:{child_id}")  # the child run holds it whole
    sr.status = StepStatus.RUNNING
    a.note("step_subworkflow_started", step.id, job_id=child_id, status=sr.status,
           data={"child_run_id": child_id, "workflow_id": target})


def child_ended(a: Advance, step: Step, sr: StepRun, child: WorkflowRun | None) -> None:
    """The child run ``sr.job_id`` ended (None: it was never stored, its definition
    missing). Its output, through ``output_mapping`` (``child.*`` in scope), is the
    step's; a child that did not succeed ends the step the same way."""
    if child is None:
        _failed(a, step, sr, NOT_STARTED,
                f"child run {sr.job_id} was not created (is the workflow defined?)")
        return
    if (child.metadata or {}).get(REFUSED) == "true" and child.error:
        _failed(a, step, sr, str(child.error.get("code") or NOT_STARTED),
                str(child.error.get("message") or ""))
        return
    if child.status == RunStatus.SUCCEEDED:
        mapping = (step.input or {}).get("output_mapping")
        output: Any = child.output
        if mapping is not None:
            names = {**a.scope(), "child": {"output": child.output, "context": child.context,
                                            "status": str(child.status), "run_id": child.id}}
            try:
                output = expressions.render(mapping, names)
            except expressions.ExpressionError as exc:
                _failed(a, step, sr, "subworkflow_output_invalid", str(exc))
                return
        a.note("step_subworkflow_completed", step.id, job_id=child.id,
               status=StepStatus.SUCCEEDED)
        complete(a, step, sr, output, event="")
        return
    status = CHILD_STATUS.get(child.status, StepStatus.FAILED)
    error = {**(child.error or {}), "code": "subworkflow_failed", "child_run_id": child.id,
             "child_status": str(child.status)}
    error["message"] = f"child run {child.id} {child.status}"
    a.note("step_subworkflow_completed", step.id, job_id=child.id, status=status,
           message=error["message"])
    fail(a, step, sr, status, error, event="step_failed")


def _failed(a: Advance, step: Step, sr: StepRun, code: str, message: str) -> None:
    a.note("step_subworkflow_completed", step.id, job_id=sr.job_id,
           status=StepStatus.FAILED, message=message)
    fail(a, step, sr, StepStatus.FAILED, {"code": code, "message": message}, event="")



def child_runs(run: WorkflowRun, wf: Workflow, *, open_only: bool) -> list[str]:
    """The child runs of the run's subworkflow steps (only those still running)."""
    out = []
    for step_id, step in wf.steps.items():
        sr = run.steps.get(step_id)
        if (sr is not None and sr.job_id and kind_of(step) == "subworkflow"
                and (sr.status == StepStatus.RUNNING or not open_only)):
            out.append(sr.job_id)
    return out
