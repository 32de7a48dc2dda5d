"""A workflow's dry run: what the safety kernel would decide about each step's job, asked
without making any job (``POST /api/v1/workflows/{id}/dry-run``).

Per step, in definition order:

- A step that dispatches a job (``worker``, ``llm``, ``http`` and any other type not
  listed below; a ``for_each`` step of such a type too, whose items all share its
  topic) and an ``approval`` step (its gate job on ``job.cordum.approval-gate``): the
  kernel's ``Simulate`` answer for the JobRequest the engine would publish, built by
  the engine's own code (``cordum.workflow.outbox.job_request``). Its labels are the
  engine's (``workflow_id``, ``step_id``, ``_source=workflow``, ``gate_type`` for a
  gate) over the step's ``route_labels``, rendered against the dry run's ``input`` (a
  label that needs step outputs renders nil and is left out, as the engine leaves out
  a nil label); its meta is the step's (capability, risk tags, requires, pack, actor);
  its env carries ``dry_run=true`` and the request's ``environment``. There is no run,
  so there is no ``run_id`` label and no payload for the kernel to read.
- ``policy_gate: deny``: DENY (rule ``policy_gate``) without asking the kernel;
  ``policy_gate: require_approval``: REQUIRE_APPROVAL unless the kernel denies.
- A step that dispatches nothing (condition, delay, notify, transform, storage,
  switch, parallel, loop, subworkflow): N/A. ``policy_gate`` is a hint about a step's
  job, so it does not apply to these.
- The kernel not configured, unreachable or failing for a step: ERROR with the reason.
  Every step is answered; one step's failure never fails the request.

``Simulate`` counts no velocity and caches nothing, and the kernel is asked through a
client of the request's own, with its own in-process breaker: a preview never moves
the breaker the scheduler's checks go through. Nothing is written to Redis.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cordum.gateway.core.kernel import NO_KERNEL_REASON
from cordum.safety.client import Decision, SafetyVerdict
from cordum.workflow import expressions
from cordum.workflow.model import WorkflowRun
from cordum.workflow.outbox import job_doc, job_request
from cordum.workflow.status import NO_JOB_KINDS
from cordum.workflow.step_kinds import APPROVAL_GATE_TOPIC, SOURCE_LABEL
from cordum.workflow.steps import StepJob

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping
    from contextlib import AbstractAsyncContextManager

    from cordum.protocol import JobRequest
    from cordum.workflow.definition import Step, Workflow

log = logging.getLogger(__name__)

NOT_APPLICABLE = "N/A"
ERROR = "ERROR"
GATE_RULE = "policy_gate"
"""``rule_id`` of a decision a step's ``policy_gate`` made."""
OUT_OF_TIME_REASON = "no time left in the request to ask the safety kernel"
DEADLINE_MARGIN_S = 1.0
"""Time kept at the end of an invocation to answer: a step not asked by then is ERROR."""


class PolicySimulator(Protocol):
    """The safety kernel's side-effect-free decision (``SafetyClient.simulate``)."""

    async def simulate(self, req: JobRequest, tenant: str) -> SafetyVerdict: ...


if TYPE_CHECKING:
    SimulatorFactory = Callable[[], AbstractAsyncContextManager[PolicySimulator | None]]
    """Opens the simulator of one dry run (None when no kernel is configured)."""


@contextlib.asynccontextmanager
async def kernel_simulator(addr: str, timeout_s: float) -> AsyncIterator[PolicySimulator | None]:
    """A kernel client for one dry run (None without an address), closed after it.

    A channel per dry run, as for the approval snapshot check: dry runs are rare, and a
    channel kept across frozen invocations would have to be checked before each use.
    """
    if not addr.strip():
        yield None
        return
    from cordum.safety.client import SafetyClient

    client = SafetyClient(addr.strip(), timeout_s)
    try:
        yield client
    finally:
        await client.aclose()


@contextlib.asynccontextmanager
async def no_kernel() -> AsyncIterator[PolicySimulator | None]:
    """The simulator where no kernel is configured: every job step is ERROR."""
    yield None


@dataclass(frozen=True, slots=True)
class StepDecision:
    step_id: str
    step_name: str
    step_type: str
    decision: str
    """A kernel decision (ALLOW, DENY, REQUIRE_APPROVAL, THROTTLE, ALLOW_WITH_CONSTRAINTS),
    N/A or ERROR."""
    reason: str = ""
    rule_id: str = ""


async def dry_run(wf: Workflow, simulator: PolicySimulator | None, *, tenant: str,
                  principal: str, run_input: Mapping[str, Any] | None, environment: str,
                  deadline: float | None = None) -> list[dict[str, Any]]:
    """Each step's decision, in definition order. ``deadline``: the ``time.monotonic()``
    instant after which the kernel is no longer asked (None: no bound)."""
    dry_id = f"dry-run-{uuid.uuid4()}"
    stand_in = WorkflowRun(id=dry_id, workflow_id=wf.id, org_id=tenant, team_id=wf.team_id,
                           triggered_by=principal, dry_run=True)
    scope = {"input": dict(run_input or {}), "ctx": {}, "steps": {}}
    out = []
    for step_id, step in wf.steps.items():
        decided = await _decide(wf, step_id, step, simulator, stand_in, scope, environment,
                                deadline)
        out.append(asdict(decided))
    return out


async def _decide(wf: Workflow, step_id: str, step: Step, simulator: PolicySimulator | None,
                  stand_in: WorkflowRun, scope: Mapping[str, Any], environment: str,
                  deadline: float | None) -> StepDecision:
    kind = (step.type or "worker").strip().lower()

    def answer(decision: str, reason: str = "", rule_id: str = "") -> StepDecision:
        return StepDecision(step_id, step.name, step.type or "worker", decision, reason,
                            rule_id)

    if kind in NO_JOB_KINDS:
        return answer(NOT_APPLICABLE, f"a {kind} step runs no job")
    gate = step.policy_gate.strip().lower()
    if gate == "deny":
        return answer(Decision.DENY.value, "policy_gate deny", GATE_RULE)
    if simulator is None:
        return answer(ERROR, NO_KERNEL_REASON)
    if deadline is not None and time.monotonic() >= deadline:
        return answer(ERROR, OUT_OF_TIME_REASON)
    req = step_request(wf, step_id, step, stand_in, scope, environment)
    try:
        verdict = await simulator.simulate(req, stand_in.org_id)
    except Exception as exc:  # the client reports kernel trouble itself; this is a bug
        log.exception("dry run of %s step %s: simulate failed", wf.id, step_id)
        verdict = SafetyVerdict(Decision.UNAVAILABLE, f"policy check failed: {exc}")
    decision = verdict.decision
    if verdict.approval_required and decision in (Decision.ALLOW,
                                                  Decision.ALLOW_WITH_CONSTRAINTS):
        decision = Decision.REQUIRE_APPROVAL
    if decision is Decision.UNAVAILABLE:
        return answer(ERROR, verdict.reason)
    if gate == "require_approval" and decision not in (Decision.DENY,
                                                       Decision.REQUIRE_APPROVAL):
        return answer(Decision.REQUIRE_APPROVAL.value, "policy_gate require_approval",
                      GATE_RULE)
    return answer(decision.value, verdict.reason, verdict.rule_id)


def step_request(wf: Workflow, step_id: str, step: Step, stand_in: WorkflowRun,
                 scope: Mapping[str, Any], environment: str) -> JobRequest:
    """The JobRequest the engine would publish for the step's first attempt, in a run
    that ``stand_in`` stands for."""
    approval = (step.type or "").strip().lower() == "approval"
    env = {"workflow_id": wf.id, "step_id": step_id, "tenant_id": stand_in.org_id,
           "team_id": wf.team_id or "", "dry_run": "true"}
    if environment:
        env["environment"] = environment
    labels = _route_labels(step, scope)
    labels.update({"workflow_id": wf.id, "step_id": step_id, "_source": SOURCE_LABEL})
    if approval:
        labels["gate_type"] = "workflow_approval"
    job = StepJob(
        job_id=f"{stand_in.id}:{step_id}@1", step_id=step_id,
        topic=APPROVAL_GATE_TOPIC if approval else (step.topic or f"job.workflow.{wf.id}"),
        input=None, env=env, labels=labels,
        priority="interactive" if approval else "batch",
        deadline_ms=max(step.timeout_sec, 0) * 1000, idempotency_key="", meta=step.meta,
        kind="approval" if approval else "job")
    return job_request(stand_in, job_doc(job))


def _route_labels(step: Step, scope: Mapping[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for key, template in (step.route_labels or {}).items():
        try:
            value = expressions.render(template, scope)
        except expressions.ExpressionError:
            continue
        if value is not None:
            labels[str(key)] = value if isinstance(value, str) else json.dumps(
                value, separators=(",", ":"), default=str)
    return labels


def environment_text(environment: str | Mapping[str, Any] | None) -> str:
    """The request's ``environment`` as the job env carries it: a name as it is
    (Cordum's form), an object (cordum-sdk's form) as compact JSON."""
    if environment is None:
        return ""
    if isinstance(environment, str):
        return environment.strip()
    return json.dumps(environment, separators=(",", ":"), sort_keys=True, default=str)
