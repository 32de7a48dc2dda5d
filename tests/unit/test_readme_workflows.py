"""The workflow examples of docs/workflows.md ("Step kinds, by example") are true: each
```json block there parses as a definition and, run through the engine with no I/O,
gives the outputs the page states after it (kept in ``CASES`` below, keyed by the example's id).

Job steps are answered as the echo worker answers (``{"echo": <payload>, "worker_id",
"job_id"}``), approval gates as the scheduler completes an approved gate (no result),
delays by their timer, subworkflow steps by running the child definition the same way.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cordum.workflow import engine, subworkflow
from cordum.workflow.definition import Workflow, parse_workflow
from cordum.workflow.gates import GateRecord
from cordum.workflow.model import TERMINAL_RUN, RunStatus, StepStatus, WorkflowRun, format_time
from cordum.workflow.step_kinds import APPROVAL_GATE_TOPIC

APPROVED_GATE = GateRecord("job.cordum.approval-gate", "APPROVED", "approver", "h", "h")
"""A gate job's approval as the approve endpoint records it (not the starter's)."""

if TYPE_CHECKING:
    from cordum.workflow.steps import StepJob

README = Path(__file__).resolve().parents[2] / "docs" / "workflows.md"
SECTION = "## Step kinds, by example"
NOW = datetime(2026, 11, 26, 8, 0, tzinfo=UTC)
RUN = "run-1"
TENANT = "acme"
WORKER_ID = "echo-1"
MAX_EVENTS = 200
"""Engine calls one run may take before the driver gives up on it."""


def answer(path: str, payload: Any, attempt: int = 1) -> dict[str, Any]:
    """What the echo worker stores for the job of step ``path``."""
    return {"echo": payload, "worker_id": WORKER_ID, "job_id": f"{RUN}:{path}@{attempt}"}


def dry(path: str, topic: str, payload: Any, attempt: int = 1) -> dict[str, Any]:
    """A job step's output in a dry run: the job it would have sent."""
    return {"dry_run": True, "job_id": f"{RUN}:{path}@{attempt}", "topic": topic,
            "input": payload}


@dataclass(frozen=True)
class Case:
    """One run of an example and what the README says it gives."""

    input: Any
    outputs: dict[str, Any]
    """Step id -> its output."""
    status: RunStatus = RunStatus.SUCCEEDED
    steps: dict[str, StepStatus] = field(default_factory=dict)
    """Step id -> its status, where the README names one."""
    errors: dict[str, str] = field(default_factory=dict)
    """Step id -> its error's ``code``."""
    jobs: list[tuple[str, str]] | None = None
    """(job id, topic) of every job dispatched, in order."""
    max_open: int | None = None
    """Most jobs out at the same time."""
    context: dict[str, Any] = field(default_factory=dict)
    """Run context keys (besides ``steps``) -> value."""
    child: dict[str, Any] | None = None
    """The subworkflow child run: its workflow id, input, output and metadata."""
    gate: dict[str, Any] | None = None
    """The ``decision`` of the run's approval gate job (the run waits on it)."""
    waited_s: float = 0
    """How far the clock moved for the run's timers."""
    dry_run: bool = False


CHILD = subworkflow.child_run_id(RUN, "pack", 1)
ECHO = "job.echo"
FETCH = {"order_id": "A-1001"}
INVOICE = {"invoice_id": "INV-9", "amount": 80}
LOOKUP = {"invoice": {"id": "INV-10", "total": 120}}

CASES: dict[str, list[Case]] = {
    "orders-fetch": [Case(
        input=FETCH, outputs={"fetch": answer("fetch", FETCH)},
        jobs=[(f"{RUN}:fetch@1", ECHO)])],
    "invoices-approve": [Case(
        input={"invoice_id": "INV-7", "total": 1200},
        outputs={"approve": None, "pay": answer("pay", {"invoice_id": "INV-7"})},
        jobs=[(f"{RUN}:approve@1", APPROVAL_GATE_TOPIC), (f"{RUN}:pay@1", ECHO)],
        gate={"invoice_id": "INV-7", "total": 1200})],
    "orders-review-large": [
        Case(input={"order_id": "A-1002", "total": 1500},
             outputs={"large": True,
                      "review": {"order_id": "A-1002", "reason": "total over 1000"}}),
        Case(input={"order_id": "A-1003", "total": 200},
             outputs={"large": False, "review": None},
             steps={"review": StepStatus.SUCCEEDED}),
    ],
    "tickets-follow-up": [Case(
        input={"ticket_id": "T-42"},
        outputs={"wait": None,
                 "remind": answer("remind", {"ticket_id": "T-42",
                                             "note": "no answer in 15 minutes"})},
        waited_s=900)],
    "tickets-escalated": [Case(
        input={"ticket_id": "T-42", "priority": 1},
        outputs={"alert": {"message": "ticket T-42 escalated", "severity": 2,
                           "source_component": "workflow-engine",
                           "details": {"ticket_id": "T-42", "priority": "1"},
                           "trace_id": RUN}},
        jobs=[])],
    "invoices-summary": [Case(
        input={"invoice_id": "INV-8", "lines": [{"sku": "SKU-1"}, {"sku": "SKU-2"}],
               "total": 300},
        outputs={"summary": {"invoice_id": "INV-8", "lines": 2, "large": False,
                             "title": "Invoice INV-8"}},
        jobs=[])],
    "orders-status": [Case(
        input={"status": "packed"}, outputs={"save": "packed", "read": "packed"},
        context={"order": {"status": "packed"}})],
    "tickets-route": [Case(
        input={"severity": "high"},
        outputs={"route": {"matched_case": 1, "matched_value": "high",
                           "target_step": "queue"},
                 "queue": {"action": "queue for today"}},
        steps={"page": StepStatus.CANCELLED, "backlog": StepStatus.CANCELLED},
        errors={"page": "switch_branch_not_taken", "backlog": "switch_branch_not_taken"})],
    "orders-checks": [Case(
        input={"order_id": "A-1004", "sku": "SKU-9"},
        outputs={"checks": {"stock": answer("stock", {"check": "stock", "sku": "SKU-9"}),
                            "fraud": answer("fraud", {"check": "fraud",
                                                      "order_id": "A-1004"})},
                 "ship": {"order_id": "A-1004", "checks": 2}},
        max_open=2)],
    "invoices-poll-payment": [Case(
        input={"invoice_id": "INV-12"},
        outputs={"poll": {"iterations": 3, "last_output": answer("poll[2]", {
            "invoice_id": "INV-12", "attempt": 3,
            "loop": {"index": 2, "iteration": 3}})}},
        steps={"check": StepStatus.SKIPPED},
        jobs=[(f"{RUN}:poll[{i}]@1", ECHO) for i in range(3)], max_open=1)],
    "orders-pack": [Case(
        input={"order_id": "A-1005", "sku": "SKU-9", "quantity": 2},
        outputs={"label": {"text": "order A-1005: 2 x SKU-9"}})],
    "orders-fulfil": [Case(
        input={"order_id": "A-1005", "sku": "SKU-9", "quantity": 2},
        outputs={"pack": {"label": "order A-1005: 2 x SKU-9", "packed_by": CHILD}},
        child={"id": CHILD, "workflow_id": "orders-pack",
               "input": {"order_id": "A-1005", "sku": "SKU-9", "quantity": 2},
               "output": {"label": {"text": "order A-1005: 2 x SKU-9"}},
               "metadata": {"call_stack": "orders-fulfil", "parent_run_id": RUN,
                            "parent_step_id": "pack", "root_run_id": RUN}})],
    "invoices-send": [Case(
        input={"invoice_ids": ["INV-1", "INV-2", "INV-3"]},
        outputs={"send": [answer(f"send[{i}]", {"item": f"INV-{i + 1}",
                                                "invoice_id": f"INV-{i + 1}",
                                                "channel": "email"}) for i in range(3)]},
        jobs=[(f"{RUN}:send[{i}]@1", ECHO) for i in range(3)], max_open=2)],
    "invoices-refund": [Case(
        input=INVOICE, outputs={"refund": answer("refund", INVOICE, attempt=2)},
        jobs=[(f"{RUN}:refund@1", APPROVAL_GATE_TOPIC), (f"{RUN}:refund@2", ECHO)],
        gate={"policy_gate": "require_approval", "step_type": "worker", "input": INVOICE})],
    "invoices-lookup": [
        Case(input={"invoice_id": "INV-10", "total": 120},
             outputs={"lookup": {"id": "INV-10", "total": 120}},
             context={"invoice": {"id": "INV-10", "total": 120}}),
        Case(input={"invoice_id": "INV-11", "total": "unknown"}, outputs={},
             status=RunStatus.FAILED, steps={"lookup": StepStatus.FAILED},
             errors={"lookup": "step_output_invalid"}),
    ],
}

DRY_RUNS: dict[str, Case] = {
    "orders-fetch": Case(input=FETCH, outputs={"fetch": dry("fetch", ECHO, FETCH)},
                         jobs=[], dry_run=True),
    "tickets-follow-up": Case(
        input={"ticket_id": "T-42"},
        outputs={"wait": None, "remind": dry("remind", ECHO, {
            "ticket_id": "T-42", "note": "no answer in 15 minutes"})},
        jobs=[], dry_run=True),
    "invoices-refund": Case(input=INVOICE, outputs={"refund": dry("refund", ECHO, INVOICE)},
                            jobs=[], dry_run=True),
    "invoices-send": Case(
        input={"invoice_ids": ["INV-1", "INV-2"]},
        outputs={"send": [dry(f"send[{i}]", ECHO, {"item": f"INV-{i + 1}",
                                                     "invoice_id": f"INV-{i + 1}",
                                                     "channel": "email"})
                          for i in range(2)]},
        jobs=[], dry_run=True),
    "orders-fulfil": Case(
        input={"order_id": "A-1005", "sku": "SKU-9", "quantity": 2},
        outputs={"pack": {"label": "order A-1005: 2 x SKU-9", "packed_by": CHILD}},
        child={"id": CHILD, "dry_run": True}, jobs=[], dry_run=True),
    # The stand-in answer has no "echo": the loop's until cannot read it.
    "invoices-poll-payment": Case(input={"invoice_id": "INV-12"}, outputs={},
                                  status=RunStatus.FAILED, errors={"poll": "loop_failed"},
                                  jobs=[], dry_run=True),
}

KINDS = {"worker", "approval", "condition", "delay", "notify", "transform", "storage",
         "switch", "parallel", "loop", "subworkflow"}


# ---------------------------------------------------------------- reading the README

def readme_examples() -> dict[str, dict[str, Any]]:
    """The definitions of the README's "Step kinds, by example" part, by id."""
    text = README.read_text(encoding="utf-8")
    assert SECTION in text, f"docs/workflows.md has no {SECTION!r} part"
    part = text.split(SECTION, 1)[1]
    following = re.search(r"^#{2,3} ", part, re.MULTILINE)
    part = part[:following.start()] if following else part
    examples: dict[str, dict[str, Any]] = {}
    for i, block in enumerate(re.findall(r"^```json\n(.*?)^```", part, re.S | re.M)):
        try:
            doc = json.loads(block)
        except ValueError as exc:
            pytest.fail(f"README example #{i + 1} is not JSON: {exc}")
        assert isinstance(doc, dict) and doc.get("id"), f"README example #{i + 1} has no id"
        assert doc["id"] not in examples, f"two README examples are {doc['id']!r}"
        examples[doc["id"]] = doc
    return examples


@pytest.fixture(scope="module")
def definitions() -> dict[str, Workflow]:
    return {wf_id: parse_workflow(doc, tenant=TENANT, principal="alice",
                                  now=format_time(NOW))
            for wf_id, doc in readme_examples().items()}


# ---------------------------------------------------------------- running an example

@dataclass
class Trace:
    jobs: list[StepJob] = field(default_factory=list)
    max_open: int = 0
    children: list[WorkflowRun] = field(default_factory=list)
    statuses: list[RunStatus] = field(default_factory=list)
    """The run's status after each engine call."""
    now: datetime = NOW


def echo_worker(job: StepJob) -> Any:
    """An approved gate ends without a result; any other job as the echo worker answers."""
    if job.kind == "approval":
        return None
    return {"echo": copy.deepcopy(job.input), "worker_id": WORKER_ID, "job_id": job.job_id}


def new_run(wf: Workflow, run_input: Any, *, run_id: str = RUN, dry_run: bool = False,
            metadata: dict[str, str] | None = None) -> WorkflowRun:
    stamp = format_time(NOW)
    return WorkflowRun(id=run_id, workflow_id=wf.id, org_id=TENANT, input=run_input,
                       started_at=stamp, created_at=stamp, updated_at=stamp,
                       triggered_by="alice", dry_run=dry_run, metadata=metadata or {})


def drive(run: WorkflowRun, wf: Workflow, definitions: dict[str, Workflow],
          trace: Trace) -> None:
    """Runs ``run`` to its end: jobs answered one at a time in the order they went out,
    child runs run to their end, timers fired when nothing else is left."""
    now = NOW
    effects = engine.start(run, wf, now)
    out: list[StepJob] = []
    spawned: list[dict[str, Any]] = []
    for _ in range(MAX_EVENTS):
        out = [job for job in out if job.job_id not in effects.cancels]
        out += effects.jobs
        trace.jobs += effects.jobs
        trace.max_open = max(trace.max_open, len(out))
        spawned += effects.runs
        trace.statuses.append(run.status)
        trace.now = now
        if run.status in TERMINAL_RUN:
            return
        if out:
            job = out.pop(0)
            effects = engine.on_job(run, wf, job.step_id, job.job_id, "SUCCEEDED",
                                    output=echo_worker(job), result_ptr="", error=None,
                                    now=now, gate=APPROVED_GATE)
        elif spawned:
            spec = spawned.pop(0)
            child = run_child(spec, definitions, trace)
            effects = engine.on_child(run, wf, spec["run_id"], child, now)
        elif effects.timer_at is not None:
            now = datetime.fromtimestamp(effects.timer_at, UTC)
            effects = engine.on_timer(run, wf, now)
        else:
            pytest.fail(f"run of {wf.id} is {run.status} with nothing left to wait for")
    pytest.fail(f"run of {wf.id} did not end after {MAX_EVENTS} events")


def run_child(spec: dict[str, Any], definitions: dict[str, Workflow],
              trace: Trace) -> WorkflowRun | None:
    """A subworkflow step's child run, as the runner stores and starts it."""
    wf = definitions.get(spec["workflow_id"])
    if wf is None:
        return None
    child = new_run(wf, spec["input"], run_id=spec["run_id"], dry_run=spec["dry_run"],
                    metadata=spec["metadata"])
    drive(child, wf, definitions, Trace())
    trace.children.append(child)
    return child


def check(case: Case, wf_id: str, definitions: dict[str, Workflow]) -> None:
    assert wf_id in definitions, f"README has no example {wf_id!r}"
    wf = definitions[wf_id]
    run = new_run(wf, copy.deepcopy(case.input), dry_run=case.dry_run)
    trace = Trace()
    drive(run, wf, definitions, trace)

    assert run.status == case.status, (run.status, run.error)
    for step_id, output in case.outputs.items():
        sr = run.steps[step_id]
        assert sr.status == StepStatus.SUCCEEDED, (step_id, sr.status, sr.error)
        assert sr.output == output, step_id
        assert run.context["steps"][step_id]["output"] == output, step_id
    for step_id, status in case.steps.items():
        assert run.steps[step_id].status == status, step_id
    for step_id, code in case.errors.items():
        assert (run.steps[step_id].error or {}).get("code") == code, run.steps[step_id].error
    if case.jobs is not None:
        assert [(j.job_id, j.topic) for j in trace.jobs] == case.jobs
    if case.max_open is not None:
        assert trace.max_open == case.max_open
    assert (trace.now - NOW).total_seconds() == case.waited_s
    gates = [j.input for j in trace.jobs if j.kind == "approval"]
    if case.gate is not None:
        assert [g["decision"] for g in gates] == [case.gate]
        assert gates[0]["kind"] == "workflow_approval_context"
        assert RunStatus.WAITING in trace.statuses
    else:
        assert gates == []
    for key, value in case.context.items():
        assert run.context[key] == value, key
    if case.child is not None:
        [child] = trace.children
        assert child.status == RunStatus.SUCCEEDED
        assert run.steps["pack"].job_id == child.id
        got = {"id": child.id, "workflow_id": child.workflow_id, "input": child.input,
               "output": child.output, "metadata": child.metadata, "dry_run": child.dry_run}
        assert {k: got[k] for k in case.child} == case.child
    if run.status == RunStatus.SUCCEEDED:
        assert run.output == {sid: e["output"] for sid, e in run.context["steps"].items()}


# ---------------------------------------------------------------- the tests

def test_every_readme_example_has_its_expected_outputs_here():
    assert sorted(readme_examples()) == sorted(CASES)


def test_the_readme_examples_show_every_step_kind_and_step_option(definitions):
    steps = [step for wf in definitions.values() for step in wf.steps.values()]
    assert {step.type for step in steps} >= KINDS
    assert any(step.for_each and step.max_parallel for step in steps)
    assert any(step.policy_gate == "require_approval" for step in steps)
    assert any(step.result_data_path and step.output_schema and step.output_path
               for step in steps)


@pytest.mark.parametrize(("wf_id", "index"),
                         [(wf_id, i) for wf_id, cases in CASES.items()
                          for i in range(len(cases))])
def test_a_readme_example_runs_as_the_readme_says(wf_id: str, index: int, definitions):
    check(CASES[wf_id][index], wf_id, definitions)


@pytest.mark.parametrize("wf_id", list(DRY_RUNS))
def test_a_readme_example_as_a_dry_run_dispatches_nothing(wf_id: str, definitions):
    check(DRY_RUNS[wf_id], wf_id, definitions)
