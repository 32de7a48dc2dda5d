"""Step jobs the job store never saw, found by the reconciler and sent again (§8).

A step job's request travels over the bus to the submit path, which stores the job on
first sight. If that message is lost (a Redis outage long enough for the submit
queue's redrive to park it in its DLQ, say), the step would wait for ever on a job
nobody has. The reconciler sees such a step (running or waiting, its job id unknown to
the store) and, once ``LOST_JOB_S`` per send has passed, sends the same job again: the
same job id, so a send that was only late is dispatched once all the same. After
``LOST_JOB_TRIES`` sends the step fails with ``step_job_lost``.

Top-level approval steps keep their own rule (:func:`cordum.workflow.steps.reset_lost_gates`:
a new gate after 30 s, three tries); a step waiting on its policy gate is left to that
gate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cordum.workflow import composite, step_kinds
from cordum.workflow.model import GATE_WAITING, StepStatus, parse_time
from cordum.workflow.status import NO_JOB_KINDS, kind_of
from cordum.workflow.steps import fail

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cordum.workflow.definition import Step
    from cordum.workflow.model import StepRun
    from cordum.workflow.steps import Advance

LOST_JOB_S = 30.0
"""A job not stored this long after its step started (per send) is sent again."""
LOST_JOB_TRIES = 10
"""Sends after the first before the step fails with ``step_job_lost``."""


def resend_lost_jobs(a: Advance, jobs: Mapping[str, str]) -> None:
    """``jobs`` maps the open steps' job ids to their stored state ('' = not stored)."""
    for step_id, step in a.wf.steps.items():
        sr = a.run.steps[step_id]
        if kind_of(step) != "approval":
            _check(a, step, sr, jobs, {})
        for index, child in composite.ordered_children(sr):
            scope = composite.child_scope(a, step, sr, index)
            _check(a, composite.body_of(a.wf, step), child, jobs, scope)


def _check(a: Advance, step: Step, sr: StepRun, jobs: Mapping[str, str],
           scope: dict[str, object]) -> None:
    if (sr.status not in (StepStatus.RUNNING, StepStatus.WAITING) or not sr.job_id
            or jobs.get(sr.job_id, "-") != "" or kind_of(step) in NO_JOB_KINDS
            or sr.gate == GATE_WAITING or not sr.started_at):
        return
    waited = (a.now - parse_time(sr.started_at)).total_seconds()
    if waited < LOST_JOB_S * (sr.resends + 1):
        return
    if sr.resends >= LOST_JOB_TRIES:
        fail(a, step, sr, StepStatus.FAILED, {
            "code": "step_job_lost", "job_id": sr.job_id,
            "message": f"the step's job was never stored after {sr.resends + 1} sends"})
        return
    sr.resends += 1
    a.note("step_job_resent", sr.step_id, job_id=sr.job_id, status=sr.status,
           message=f"job not stored after {waited:.0f}s; sent again ({sr.resends})")
    composite.with_scope(a, scope, lambda: step_kinds.resend(a, step, sr))
