"""Workflow gates nobody can forge, approvals that bind, runs that show what the API serves.

Each test is an exploit that worked against the workflow engine, kept as a test. The
engine runs as the stack wires it (tests/workflow_harness.py): the runner, the
scheduler's request and result paths, a worker and the safety kernel, on the real
Redis and NATS.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from cordum import protocol
from cordum.gateway.approvals.models import ApprovalDecisionRequest
from cordum.gateway.core.auth import Principal
from cordum.gateway.workflows.service import WorkflowService
from cordum.protocol import result_key
from cordum.store.jobs import meta_key
from cordum.store.results import redacted_key, redacted_pointer
from cordum.workflow.errors import InvalidDefinition, RerunNotRunnable
from tests.workflow_harness import WorkflowStack


def starter(s: WorkflowStack) -> Principal:
    return Principal(tenant=s.tenant, role="user", principal_id=f"starter-{s.unique}")


def approver(s: WorkflowStack) -> Principal:
    return Principal(tenant=s.tenant, role="admin", principal_id=f"approver-{s.unique}")


def service(s: WorkflowStack) -> WorkflowService:
    return WorkflowService(s.definitions, s.store, s.runner)


async def start(s: WorkflowStack, steps: dict[str, Any], body: Any, *,
                dry_run: bool = False) -> str:
    definition = {"id": f"wf-{s.unique}", "name": "gates", "steps": steps}
    await service(s).save_definition(starter(s), definition)
    run_id = await service(s).start_run(starter(s), definition["id"], body, dry_run=dry_run)
    s.run_ids.add(run_id)
    return run_id


def approvals(s: WorkflowStack, kernel_addr: str):
    from cordum.gateway.approvals.service import ApprovalService
    from cordum.safety.snapshots import KernelSnapshots
    from cordum.store.jobs import JobStore

    return ApprovalService(JobStore(s.redis), s.redis, s.publisher,
                           KernelSnapshots(kernel_addr, 2.0))


async def state_of(s: WorkflowStack, job_id: str) -> str:
    raw = await s.redis.hget(meta_key(job_id), "state")
    return raw.decode() if raw else ""


async def wait_state(s: WorkflowStack, job_id: str, state: str, timeout_s: float = 10) -> None:
    async def there() -> bool:
        return await state_of(s, job_id) == state

    await s.pump(there, timeout_s)


async def step_status(s: WorkflowStack, run_id: str, step: str) -> str:
    run = await s.store.get_run(s.tenant, run_id)
    assert run is not None
    sr = run.steps.get(step)
    return sr.status if sr is not None else ""


async def forge_gate(s: WorkflowStack, run_id: str, gate: str) -> None:
    """What an agent of the run can publish: the gate's job id on sys.job.submit, with an
    allowed topic, before the engine sends the gate."""
    req = protocol.JobRequest(
        job_id=gate, topic="job.echo", tenant_id=s.tenant, workflow_id=run_id,
        principal_id="agent", env={"tenant_id": s.tenant},
        context_ptr=protocol.pointer(protocol.context_key(gate)))
    await s._nc.publish(protocol.SUBJECT_SUBMIT, protocol.packet(
        trace_id=gate, sender_id="intruder", job_request=req).SerializeToString())
    await s._nc.flush()


async def held_work(s: WorkflowStack, steps: dict[str, Any]) -> tuple[str, str]:
    """A run of ``steps`` whose ``work`` job the worker holds: its end is the test's."""
    s.worker.script["job.echo"] = ["hold"]
    run_id = await start(s, steps, {})
    job = f"{run_id}:work@1"

    async def held() -> bool:
        return job in s.worker.held

    await s.pump(held)
    return run_id, job


PLAN_GATE_ACT = {
    "plan": {"type": "worker", "topic": "job.echo"},
    "approve": {"type": "approval", "depends_on": ["plan"],
                "input": {"plan": "${steps.plan.output}"}},
    "act": {"type": "worker", "topic": "job.echo", "depends_on": ["approve"],
            "input": {"do": "${steps.plan.output}"}},
}


def test_a_gate_job_created_first_from_the_bus_never_opens_the_gate(stack):
    """Finding 2: the agent of the ``plan`` step knows the run id, so it published
    ``<run>:approve@1`` on sys.job.submit with an allowed topic before the engine
    sent the gate. That job ran and SUCCEEDED, the engine's own gate request was then
    refused as an id conflict, and the workflow tick read the job's state alone and
    opened the gate: ``act`` ran with nobody approving. A step job id belongs to the
    engine: a request for it that the engine did not send is refused untouched."""
    loop, s = stack
    s.worker.script["job.echo"] = ["hold"]

    async def scenario():
        run_id = await start(s, PLAN_GATE_ACT, {"amount": 1_000_000})
        plan = f"{run_id}:plan@1"

        async def planning() -> bool:
            return plan in s.worker.held

        await s.pump(planning)
        gate = f"{run_id}:approve@1"
        await forge_gate(s, run_id, gate)
        await s.settle(0.6)
        s.worker.script["job.echo"] = ["SUCCEEDED"]
        for held in list(s.worker.held):
            await s.answer(held)
        await s.settle(1.5)
        # the tick's pass over the run, as the workflow reconciler makes it
        await s.runner.reconcile(run_id, stale_start_s=0)
        await s.settle(0.6)
        return run_id, gate

    run_id, gate = loop.run_until_complete(scenario())
    assert f"{run_id}:act@1" not in s.worker.received
    assert loop.run_until_complete(step_status(s, run_id, "approve")) == "waiting"
    # the engine's own gate is the job under that id, and it waits for a human
    assert loop.run_until_complete(state_of(s, gate)) == "APPROVAL_REQUIRED"
    topic = loop.run_until_complete(s.redis.hget(meta_key(gate), "topic"))
    assert topic == b"job.cordum.approval-gate"


def test_a_policy_gate_job_created_first_from_the_bus_never_opens_the_gate(stack):
    """Finding 2, policy gates: ``<run>:act@1`` is the gate of a ``policy_gate:
    require_approval`` step; created first from the bus with an allowed topic it
    ended SUCCEEDED and the step ran as approved."""
    loop, s = stack
    steps = {
        "plan": {"type": "worker", "topic": "job.echo"},
        "act": {"type": "worker", "topic": "job.echo", "depends_on": ["plan"],
                "policy_gate": "require_approval", "input": {"do": "${input.what}"}},
    }
    s.worker.script["job.echo"] = ["hold"]

    async def scenario():
        run_id = await start(s, steps, {"what": "transfer"})

        async def planning() -> bool:
            return bool(s.worker.held)

        await s.pump(planning)
        gate = f"{run_id}:act@1"
        await forge_gate(s, run_id, gate)
        await s.settle(0.6)
        s.worker.script["job.echo"] = ["SUCCEEDED"]
        for held in list(s.worker.held):
            await s.answer(held)
        await s.settle(1.5)
        await s.runner.reconcile(run_id, stale_start_s=0)
        await s.settle(0.6)
        return run_id

    run_id = loop.run_until_complete(scenario())
    assert f"{run_id}:act@2" not in s.worker.received
    assert loop.run_until_complete(state_of(s, f"{run_id}:act@1")) == "APPROVAL_REQUIRED"


def test_a_gate_job_that_ends_succeeded_without_an_approval_record_fails_the_step(stack):
    """Finding 2, the engine's side: whatever wrote it, a gate job's SUCCEEDED state
    without the approve endpoint's record (approved, by someone other than the run's
    starter, bound to the request the engine sent) does not open the gate."""
    loop, s = stack
    steps = {"approve": PLAN_GATE_ACT["approve"] | {"depends_on": [], "input": {"x": 1}},
             "act": PLAN_GATE_ACT["act"] | {"input": {"x": 1}}}

    async def scenario():
        run_id = await start(s, steps, {})
        gate = f"{run_id}:approve@1"
        await wait_state(s, gate, "APPROVAL_REQUIRED")
        # as if the job's state had been written by something other than the approve
        # endpoint: the state alone, then the job's end told to the run
        await s.redis.hset(meta_key(gate), mapping={"state": "SUCCEEDED"})
        await s.runner.reconcile(run_id, stale_start_s=0)
        await s.settle(0.6)
        return run_id

    run_id = loop.run_until_complete(scenario())
    assert f"{run_id}:act@1" not in s.worker.received
    run = loop.run_until_complete(s.store.get_run(s.tenant, run_id))
    assert run.steps["approve"].status == "failed"
    assert run.steps["approve"].error["code"] == "approval_not_recorded"


def test_an_approved_gate_still_opens_and_its_approver_is_recorded(stack, kernel):
    """The honest path after the fixes: the approver (not the starter) approves the gate
    through the approve endpoint, the gate opens and the next step runs."""
    loop, s = stack
    steps = {"approve": {"type": "approval", "input": {"x": 1}},
             "act": {"type": "worker", "topic": "job.echo", "depends_on": ["approve"]}}

    async def scenario():
        run_id = await start(s, steps, {"x": 1})
        gate = f"{run_id}:approve@1"
        await wait_state(s, gate, "APPROVAL_REQUIRED")
        await approvals(s, kernel).approve(approver(s), gate,
                                           ApprovalDecisionRequest(reason="ok"))

        async def acted() -> bool:
            return await s.run_status(run_id) == "succeeded"

        await s.pump(acted)
        return run_id

    run_id = loop.run_until_complete(scenario())
    assert s.worker.received == [f"{run_id}:act@1"]


def test_a_dry_run_rerun_as_real_copies_no_gate_that_ran_dry(stack):
    """Finding 1: a dry run's approval step succeeds without a human, as a dry run
    should. A real rerun from the step after it copied that step into the real run:
    ``act`` went to the worker with ``amount: 1000000``, no gate job was made and
    nothing showed in the approvals inbox. A real rerun of a dry run is refused."""
    loop, s = stack
    steps = {"approve": {"type": "approval", "input": {"amount": "${input.amount}"}},
             "act": {"type": "worker", "topic": "job.echo", "depends_on": ["approve"]}}

    async def scenario():
        run_id = await start(s, steps, {"amount": 1_000_000}, dry_run=True)

        async def ended() -> bool:
            return await s.run_status(run_id) == "succeeded"

        await s.pump(ended)
        try:
            new_id = await service(s).rerun(starter(s), run_id, from_step="act",
                                            dry_run=False)
        except RerunNotRunnable as exc:
            return run_id, exc
        s.run_ids.add(new_id)
        await s.settle(1.5)
        return run_id, new_id

    run_id, outcome = loop.run_until_complete(scenario())
    assert not [j for j in s.worker.received if j.endswith(":act@1")]
    assert isinstance(outcome, RerunNotRunnable), outcome
    assert "dry run" in str(outcome)


RERUN_STEPS = {
    "pick": {"type": "transform", "input": {"v": "${input.v}"}},
    "note": {"type": "storage", "input": {"operation": "write", "key": "note",
                                          "value": "first"}},
    "approve": {"type": "approval", "depends_on": ["pick", "note"],
                "input": {"note": "${ctx.note}"}},
    "act": {"type": "worker", "topic": "job.echo", "depends_on": ["approve"]},
}


async def approved_run(s: WorkflowStack, kernel: str, steps: dict[str, Any]) -> str:
    run_id = await start(s, steps, {"v": 1})
    gate = f"{run_id}:approve@1"
    await wait_state(s, gate, "APPROVAL_REQUIRED")
    await approvals(s, kernel).approve(approver(s), gate, ApprovalDecisionRequest(reason="ok"))

    async def ended() -> bool:
        return await s.run_status(run_id) == "succeeded"

    await s.pump(ended)
    return run_id


def test_a_rerun_keeps_an_approval_whose_input_is_unchanged_and_says_who_reran(stack, kernel):
    """A rerun from ``act`` keeps the approval: everything its input reads is kept, so
    the approver's decision still binds. The new run records who reran, from which
    step (metadata and a timeline event)."""
    loop, s = stack

    async def scenario():
        run_id = await approved_run(s, kernel, RERUN_STEPS)
        new_id = await service(s).rerun(starter(s), run_id, from_step="act", dry_run=False)
        s.run_ids.add(new_id)

        async def again() -> bool:
            return await s.run_status(new_id) == "succeeded"

        await s.pump(again)
        return run_id, new_id

    run_id, new_id = loop.run_until_complete(scenario())
    new = loop.run_until_complete(s.store.get_run(s.tenant, new_id))
    assert new.steps["approve"].job_id == f"{run_id}:approve@1"
    assert new.metadata.get("rerun_by") == f"starter-{s.unique}"
    assert new.metadata.get("rerun_step") == "act"
    timeline = loop.run_until_complete(s.store.timeline(s.tenant, new_id))
    reran = [e for e in timeline if e["type"] == "run_rerun"]
    assert reran and reran[0]["data"] == {"rerun_of": run_id, "from_step": "act",
                                          "by": f"starter-{s.unique}"}


def test_a_rerun_asks_an_approval_again_when_its_input_changed(stack, kernel):
    """Finding 1, approvals on rerun: the approver approved ``{"note": "first"}``,
    written by a step outside the approval's dependencies. A rerun from ``act`` runs
    that step again, so what the approval read is not the rerun's: the copy of the
    approval was a decision about other data. It is asked again."""
    loop, s = stack
    steps = {**RERUN_STEPS, "approve": {**RERUN_STEPS["approve"], "depends_on": ["pick"]}}

    async def scenario():
        run_id = await approved_run(s, kernel, steps)
        new_id = await service(s).rerun(starter(s), run_id, from_step="act", dry_run=False)
        s.run_ids.add(new_id)
        await s.settle(1.5)
        return run_id, new_id

    run_id, new_id = loop.run_until_complete(scenario())
    assert f"{new_id}:act@1" not in s.worker.received
    assert loop.run_until_complete(state_of(s, f"{new_id}:approve@1")) == "APPROVAL_REQUIRED"


def test_an_approved_policy_gate_runs_the_input_the_approver_saw(stack, kernel):
    """Finding 7: a policy gate rendered its step's input again after the approval. The
    approver saw ``{"x": "safe"}``; meanwhile a parallel branch rewrote ``ctx.value``
    and the job carried ``{"x": "evil"}``. What the approver saw is what runs."""
    loop, s = stack
    steps = {
        "init": {"type": "storage", "input": {"operation": "write", "key": "value",
                                              "value": "safe"}},
        "act": {"type": "worker", "topic": "job.echo", "depends_on": ["init"],
                "policy_gate": "require_approval", "input": {"x": "${ctx.value}"}},
        "other": {"type": "approval", "depends_on": ["init"], "input": {"y": 1}},
        "swap": {"type": "storage", "depends_on": ["other"],
                 "input": {"operation": "write", "key": "value", "value": "evil"}},
    }

    async def scenario():
        run_id = await start(s, steps, {})
        gate, other = f"{run_id}:act@1", f"{run_id}:other@1"
        await wait_state(s, gate, "APPROVAL_REQUIRED")
        await wait_state(s, other, "APPROVAL_REQUIRED")
        seen = json.loads(await s.redis.get(protocol.context_key(gate)))
        service_ = approvals(s, kernel)
        await service_.approve(approver(s), other, ApprovalDecisionRequest(reason="ok"))

        async def swapped() -> bool:
            return await step_status(s, run_id, "swap") == "succeeded"

        await s.pump(swapped)
        await service_.approve(approver(s), gate, ApprovalDecisionRequest(reason="ok"))

        async def ended() -> bool:
            return await s.run_status(run_id) == "succeeded"

        await s.pump(ended)
        ran = json.loads(await s.redis.get(protocol.context_key(f"{run_id}:act@2")))
        return seen, ran

    seen, ran = loop.run_until_complete(scenario())
    assert seen["decision"]["input"] == {"x": "safe"}
    assert ran == {"x": "safe"}


def test_a_redacted_step_output_reaches_the_run_only_as_its_redacted_copy(stack):
    """Finding 5: the engine read ``res:<job>`` itself. After a REDACT decision the
    original output was in the run document and in every downstream step's input.
    A step's output is what ``GET /api/v1/jobs/{id}`` would serve: the redacted copy."""
    loop, s = stack
    steps = {"work": {"type": "worker", "topic": "job.echo"},
             "next": {"type": "transform", "depends_on": ["work"],
                      "input": {"seen": "${steps.work.output}"}}}

    async def scenario():
        run_id, job = await held_work(s, steps)
        # the job's end as the result path stores it after the output policy's REDACT
        await s.redis.set(result_key(job), json.dumps({"card": "4111 1111 1111 1111"}))
        await s.redis.set(redacted_key(job), json.dumps({"card": "[REDACTED]"}))
        record = {"phase": "async", "decision": "REDACT", "quarantined": False}
        await s.redis.hset(meta_key(job), mapping={
            "state": "SUCCEEDED", "result_status": "SUCCEEDED",
            "result_ptr": redacted_pointer(job), "output_safety": json.dumps(record)})
        await s.runner.reconcile(run_id, stale_start_s=0)
        return run_id

    run_id = loop.run_until_complete(scenario())
    run = loop.run_until_complete(s.store.get_run(s.tenant, run_id))
    assert run.status == "succeeded"
    document = json.dumps(run.to_json())
    assert "4111 1111" not in document  # (the run's uuid may hold "4111" by chance)
    assert run.steps["work"].output == {"card": "[REDACTED]"}


def test_a_succeeded_step_waits_for_its_output_decision(stack, monkeypatch):
    """Finding 5: the tick applied a SUCCEEDED result before the output scan decided.
    With the output policy on, a step ends only once its job's decision is final."""
    monkeypatch.setenv("OUTPUT_POLICY_ENABLED", "true")
    from cordum import config

    config.settings.cache_clear()
    loop, s = stack
    steps = {"work": {"type": "worker", "topic": "job.echo"}}

    async def scenario():
        run_id, job = await held_work(s, steps)
        await s.redis.set(result_key(job), json.dumps({"secret": "unscanned"}))
        await s.redis.hset(meta_key(job), mapping={
            "state": "SUCCEEDED", "result_status": "SUCCEEDED",
            "result_ptr": protocol.pointer(result_key(job))})
        await s.runner.reconcile(run_id, stale_start_s=0)
        before = await s.store.get_run(s.tenant, run_id)
        # the scan's record, written with the decision: now the step ends
        record = {"phase": "async", "decision": "ALLOW", "quarantined": False}
        await s.redis.hset(meta_key(job), "output_safety", json.dumps(record))
        await s.runner.reconcile(run_id, stale_start_s=0)
        after = await s.store.get_run(s.tenant, run_id)
        return before, after

    try:
        before, after = loop.run_until_complete(scenario())
    finally:
        config.settings.cache_clear()
    assert before.steps["work"].status == "running"
    assert "unscanned" not in json.dumps(before.to_json())
    assert after.steps["work"].status == "succeeded"
    assert after.steps["work"].output == {"secret": "unscanned"}


def test_a_quarantined_step_output_never_reaches_the_run(stack):
    """Finding 5: nothing of a quarantined output reaches the run."""
    loop, s = stack
    steps = {"work": {"type": "worker", "topic": "job.echo"}}

    async def scenario():
        run_id, job = await held_work(s, steps)
        # Not hex: a uuid in the run's JSON cannot hold it by chance.
        await s.redis.set(result_key(job), json.dumps({"secret": "quarantined-zq"}))
        record = {"phase": "async", "decision": "QUARANTINE", "quarantined": True}
        await s.redis.hset(meta_key(job), mapping={
            "state": "SUCCEEDED", "result_status": "SUCCEEDED",
            "result_ptr": protocol.pointer(result_key(job)),
            "output_safety": json.dumps(record)})
        await s.runner.reconcile(run_id, stale_start_s=0)
        return await s.store.get_run(s.tenant, run_id)

    run = loop.run_until_complete(scenario())
    assert "quarantined-zq" not in json.dumps(run.to_json())
    assert run.steps["work"].status != "succeeded"


def test_a_step_cannot_set_a_reserved_label_on_its_job(stack):
    """Finding 8: ``route_labels`` set labels the HTTP API refuses (``approval_granted``,
    ``_source``, ``workflow_id``...). A definition with one is refused on save."""
    loop, s = stack
    for name in ("approval_granted", "_source", "run_id", "safety_bypassed"):
        steps = {"work": {"type": "worker", "topic": "job.echo",
                          "route_labels": {name: "true"}}}
        with pytest.raises(InvalidDefinition) as caught:
            loop.run_until_complete(start(s, steps, {}))
        assert name in str(caught.value)
