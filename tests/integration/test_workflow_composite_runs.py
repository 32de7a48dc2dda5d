"""Steps made of steps, end to end in one process: for_each, parallel, loop, subworkflow,
policy gates and output checks, through the runner, the scheduler's request and result
paths, a worker and the safety kernel, on the real Redis and NATS."""

from __future__ import annotations

from typing import Any

from cordum.store.jobs import meta_key
from cordum.workflow import subworkflow
from tests.integration.test_workflow_runs import approvals, finished, start, who
from tests.workflow_harness import WorkflowStack


async def state(s: WorkflowStack, job_id: str) -> str:
    raw = await s.redis.hget(meta_key(job_id), "state")
    return raw.decode() if raw else ""


async def held_count(s: WorkflowStack, n: int) -> None:
    async def enough() -> bool:
        return len(s.worker.held) >= n

    await s.pump(enough)


FAN_OUT = {"steps": {
    "fan": {"topic": "job.echo", "for_each": "input.items", "max_parallel": 2,
            "input": {"sku": "${item}", "order": "${input.order}"}},
    "sum": {"type": "transform", "depends_on": ["fan"],
            "input": {"count": "${length(steps.fan.output)}"}},
}}


def test_for_each_holds_max_parallel_at_the_worker_and_keeps_item_order(stack):
    loop, s = stack
    s.worker.script["job.echo"] = ["hold"]

    async def scenario() -> tuple[str, Any, list[list[str]]]:
        run_id = await start(s, FAN_OUT, {"items": ["a", "b", "c", "d", "e"], "order": 7})
        seen: list[list[str]] = []
        await held_count(s, 2)
        await s.settle(0.8)
        seen.append(list(s.worker.held))  # two out, three waiting for a slot
        for expected in (3, 4, 5):
            await s.answer(s.worker.held[expected - 3])
            await held_count(s, expected)
            await s.settle(0.3)
            seen.append(list(s.worker.held))
        for job_id in s.worker.held[3:]:
            await s.answer(job_id)
        return run_id, await finished(s, run_id), seen

    run_id, run, seen = loop.run_until_complete(scenario())
    assert [len(x) for x in seen] == [2, 3, 4, 5]  # never more than two at a time
    assert seen[0] == [f"{run_id}:fan[0]@1", f"{run_id}:fan[1]@1"]
    fan = run.steps["fan"]
    assert [o["echo"]["sku"] for o in fan.output] == ["a", "b", "c", "d", "e"]
    assert fan.output[0]["echo"]["item"] == "a" and fan.output[0]["echo"]["order"] == 7
    assert run.steps["sum"].output == {"count": 5}
    assert sorted((fan.children or {}).keys()) == [f"fan[{i}]" for i in range(5)]


def test_more_than_a_thousand_items_fail_the_step_without_a_job(stack):
    loop, s = stack

    async def scenario() -> Any:
        run_id = await start(s, FAN_OUT, {"items": list(range(1001)), "order": 1})
        return await finished(s, run_id, "failed")

    run = loop.run_until_complete(scenario())
    assert run.steps["fan"].error["code"] == "for_each_too_many"
    assert run.steps["sum"].status == "skipped"
    assert s.worker.received == []


def test_a_failed_item_cancels_its_running_siblings(stack):
    loop, s = stack
    s.worker.script["job.echo"] = ["hold", "hold", "FAILED"]

    async def scenario() -> tuple[str, Any, list[str]]:
        body = {"items": ["x", "y", "z"], "order": 2}
        run_id = await start(s, {"steps": {"fan": {**FAN_OUT["steps"]["fan"],
                                                   "max_parallel": 0}}}, body)
        run = await finished(s, run_id, "failed")
        held = list(s.worker.held)

        async def cancelled() -> bool:
            return [await state(s, j) for j in held] == ["CANCELLED"] * len(held)

        await s.pump(cancelled)
        return run_id, run, held

    run_id, run, held = loop.run_until_complete(scenario())
    assert len(held) == 2
    children = run.steps["fan"].children
    assert sorted(c.status for c in children.values()) == ["cancelled", "cancelled", "failed"]
    assert run.steps["fan"].error["code"] == "foreach_child_failed"


PARALLEL = {"steps": {
    "race": {"type": "parallel", "input": {"steps": "fast,slow,broken", "strategy": "n_of_m",
                                            "required": 1}},
    "fast": {"topic": "job.echo", "input": {"who": "fast"}},
    "slow": {"topic": "job.default", "input": {"who": "slow"}},
    "broken": {"topic": "job.broken", "input": {"who": "broken"}},
    "after": {"type": "transform", "depends_on": ["race"],
              "input": {"winner": "${steps.race.output.fast.echo.who}"}},
}}


def test_parallel_n_of_m_takes_the_first_winner_and_cancels_the_losers(stack):
    loop, s = stack
    s.worker.script["job.default"] = ["hold"]

    async def scenario() -> tuple[str, Any]:
        run_id = await start(s, PARALLEL, {})
        run = await finished(s, run_id)

        async def cancelled() -> bool:
            return await state(s, f"{run_id}:slow@1") == "CANCELLED"

        await s.pump(cancelled)
        return run_id, run

    run_id, run = loop.run_until_complete(scenario())
    assert run.steps["after"].output == {"winner": "fast"}
    assert run.steps["slow"].status == "cancelled"
    assert run.steps["slow"].error["reason"] == "parallel_branch_not_needed"
    # job.broken has no pool: its job is refused, which only loses a branch.
    assert run.steps["broken"].status in ("failed", "cancelled")


LOOP = {"steps": {
    "poll": {"type": "loop", "input": {"body_step": "check", "max_iterations": 5,
                                       "until": "loop.previous_output.echo.n >= 3"}},
    "check": {"topic": "job.echo", "input": {"n": "${loop.iteration}"}},
}}


def test_a_loop_runs_its_body_as_jobs_until_its_condition(stack):
    loop, s = stack

    async def scenario() -> tuple[str, Any]:
        run_id = await start(s, LOOP, {})
        return run_id, await finished(s, run_id)

    run_id, run = loop.run_until_complete(scenario())
    assert s.worker.received == [f"{run_id}:poll[{i}]@1" for i in range(3)]
    assert run.steps["poll"].output["iterations"] == 3
    assert run.steps["poll"].output["last_output"]["echo"]["n"] == 3
    assert run.steps["check"].status == "skipped"


def child_definition(s: WorkflowStack) -> dict[str, Any]:
    return {"id": f"child-{s.unique}", "name": "child", "steps": {
        "twice": {"type": "transform", "input": {"d": "${input.n * 2}"}},
        "echo": {"topic": "job.echo", "depends_on": ["twice"],
                 "input": {"d": "${steps.twice.output.d}"}}}}


def parent_definition(s: WorkflowStack, target: str) -> dict[str, Any]:
    return {"steps": {"sub": {"type": "subworkflow", "input": {
        "workflow_id": target, "input_mapping": {"n": "${input.n}"},
        "output_mapping": {"d": "${child.output.echo.echo.d}"}}}}}


async def save(s: WorkflowStack, definition: dict[str, Any]) -> None:
    from cordum.gateway.workflows.service import WorkflowService

    await WorkflowService(s.definitions, s.store, s.runner).save_definition(who(s), definition)


def test_a_subworkflow_runs_a_child_run_and_maps_its_output(stack):
    loop, s = stack

    async def scenario() -> tuple[Any, Any]:
        await save(s, child_definition(s))
        run_id = await start(s, parent_definition(s, f"child-{s.unique}"), {"n": 21})
        run = await finished(s, run_id)
        child = await s.store.get_run(s.tenant, run.steps["sub"].job_id)
        return run, child

    run, child = loop.run_until_complete(scenario())
    assert run.steps["sub"].output == {"d": 42}
    assert child.status == "succeeded" and child.input == {"n": 21}
    assert child.metadata[subworkflow.PARENT_RUN] == run.id
    assert child.metadata[subworkflow.CALL_STACK] == run.workflow_id


def test_a_subworkflow_cycle_is_refused_through_the_call_stack(stack):
    loop, s = stack

    async def scenario() -> tuple[Any, Any]:
        top = f"wf-{s.unique}"
        middle = {"id": f"mid-{s.unique}", "name": "middle",
                  "steps": parent_definition(s, top)["steps"]}
        await save(s, middle)
        run_id = await start(s, parent_definition(s, middle["id"]), {"n": 1})
        run = await finished(s, run_id, "failed")
        child = await s.store.get_run(s.tenant, run.steps["sub"].job_id)
        return run, child

    run, child = loop.run_until_complete(scenario())
    assert child.status == "failed"
    assert child.steps["sub"].error["code"] == "subworkflow_cycle"
    assert run.steps["sub"].error["code"] == "subworkflow_failed"
    assert s.worker.received == []


def test_a_missing_child_definition_fails_the_step_and_a_cancel_reaches_the_child(stack):
    loop, s = stack
    s.worker.script["job.echo"] = ["hold"]

    async def scenario() -> tuple[Any, Any, Any]:
        missing = await start(s, parent_definition(s, f"nowhere-{s.unique}"), {"n": 1})
        failed = await finished(s, missing, "failed")
        await save(s, child_definition(s))
        service_start = await start(s, parent_definition(s, f"child-{s.unique}"), {"n": 2})
        await held_count(s, 1)
        await s.runner.cancel(s.tenant, service_start)

        async def child_cancelled() -> bool:
            run = await s.store.get_run(s.tenant, service_start)
            child = await s.store.get_run(s.tenant, run.steps["sub"].job_id)
            return child is not None and child.status == "cancelled"

        await s.pump(child_cancelled)
        parent = await s.store.get_run(s.tenant, service_start)
        return failed, parent, await state(s, s.worker.held[0])

    failed, parent, held_state = loop.run_until_complete(scenario())
    assert failed.steps["sub"].error["code"] == "subworkflow_not_started"
    assert parent.status == "cancelled"
    assert held_state in ("CANCELLED", "DISPATCHED", "RUNNING")


def test_an_output_that_breaks_its_schema_fails_the_step(stack):
    loop, s = stack
    definition = {"steps": {"a": {"topic": "job.echo", "result_data_path": "echo",
                                  "output_schema": {"type": "object", "required": ["id"]}}}}

    async def scenario() -> Any:
        run_id = await start(s, definition, {"name": "no id here"})
        return await finished(s, run_id, "failed")

    run = loop.run_until_complete(scenario())
    assert run.steps["a"].error["code"] == "step_output_invalid"
    assert "'id' is a required property" in run.steps["a"].error["message"]


def test_a_policy_gate_requires_an_approval_before_the_step_runs(stack, kernel):
    from cordum.gateway.approvals.models import ApprovalDecisionRequest
    from cordum.gateway.core.auth import Principal

    loop, s = stack
    definition = {"steps": {"pay": {"topic": "job.echo", "policy_gate": "require_approval",
                                    "input": {"amount": "${input.amount}"}}}}

    async def scenario() -> tuple[str, Any, list[str]]:
        run_id = await start(s, definition, {"amount": 9})
        gate = f"{run_id}:pay@1"

        async def gated() -> bool:
            return await state(s, gate) == "APPROVAL_REQUIRED"

        await s.pump(gated)
        before = list(s.worker.received)
        approver = Principal(tenant=s.tenant, role="admin", principal_id=f"ok-{s.unique}")
        await approvals(s, kernel).approve(approver, gate, ApprovalDecisionRequest(reason="ok"))
        return run_id, await finished(s, run_id), before

    run_id, run, before = loop.run_until_complete(scenario())
    assert before == []  # nothing ran while the gate waited
    assert s.worker.received == [f"{run_id}:pay@2"]
    assert run.steps["pay"].output["echo"]["amount"] == 9
    assert run.steps["pay"].gate == "passed"


def test_a_dry_run_run_dispatches_nothing(stack):
    loop, s = stack

    async def scenario() -> Any:
        from cordum.gateway.workflows.service import WorkflowService

        service = WorkflowService(s.definitions, s.store, s.runner)
        definition = {"id": f"wf-{s.unique}", "name": "dry", **FAN_OUT}
        await service.save_definition(who(s), definition)
        run = await s.store.get_run(s.tenant, await _dry_start(s, service, definition["id"]))
        return await finished(s, run.id)

    run = loop.run_until_complete(scenario())
    assert run.dry_run and s.worker.received == []
    assert [o["dry_run"] for o in run.steps["fan"].output] == [True, True]
    assert run.steps["fan"].output[0]["input"] == {"sku": 1, "order": 3, "item": 1}


async def _dry_start(s: WorkflowStack, service: Any, workflow_id: str) -> str:
    """A dry run as the gateway starts one (``?dry_run=true``)."""
    run_id = await service.start_run(who(s), workflow_id, {"items": [1, 2], "order": 3},
                                     dry_run=True)
    s.run_ids.add(run_id)
    return run_id


def test_timeouts_yaml_limits_give_a_run_its_retries_and_its_timeout(stack):
    from cordum.workflow.limits import WorkflowLimits
    from cordum.workflow.runner import WorkflowRunner

    loop, s = stack
    limits = {f"wf-{s.unique}": WorkflowLimits(child_timeout_s=30, total_timeout_s=2,
                                               max_retries=1)}
    s.runner = WorkflowRunner(s.store, s.redis, s.publisher, s.queue, limits)
    s.worker.script["job.echo"] = ["FAILED", "hold"]
    definition = {"steps": {"a": {"topic": "job.echo"}}}  # no retry, no timeout of its own

    async def scenario() -> tuple[str, Any]:
        run_id = await start(s, definition, {})
        return run_id, await finished(s, run_id, "timed_out")

    run_id, run = loop.run_until_complete(scenario())
    # max_retries 1: the failed first attempt was tried again; the second one held
    # until the 2 s total timeout ended the run.
    assert s.worker.received == [f"{run_id}:a@1", f"{run_id}:a@2"]
    assert run.steps["a"].status == "timed_out"
    assert run.error["code"] == "run_timed_out"


def test_the_reconciler_finds_a_lost_child_run_end_and_a_lost_item_result(stack):
    from cordum.workflow.reconciler import WorkflowReconciler

    loop, s = stack
    sent = s.queue.send

    async def lossy(event: Any) -> None:
        # The child's end never reaches its parent, nor the item's end its run.
        if event.kind == "child" or event.job_id.endswith(":fan[0]@1"):
            return
        await sent(event)

    s.queue.send = lossy  # type: ignore[method-assign]

    async def scenario() -> tuple[Any, Any]:
        await save(s, child_definition(s))
        parent_id = await start(s, parent_definition(s, f"child-{s.unique}"), {"n": 5})
        fan_id = await start(s, {"id": f"fan-{s.unique}", **FAN_OUT},
                             {"items": ["p"], "order": 1})

        async def ends() -> bool:
            parent = await s.store.get_run(s.tenant, parent_id)
            child = parent and await s.store.get_run(s.tenant, parent.steps["sub"].job_id)
            item = f"{fan_id}:fan[0]@1"
            return (child is not None and child.status == "succeeded"
                    and await state(s, item) == "SUCCEEDED")

        await s.pump(ends)
        await s.settle(0.3)
        assert [await s.run_status(r) for r in (parent_id, fan_id)] == ["running", "running"]
        reconciler = WorkflowReconciler(s.runner)
        for _ in range(3):
            await reconciler.tick()
        return (await finished(s, parent_id), await finished(s, fan_id))

    parent, fan = loop.run_until_complete(scenario())
    assert parent.steps["sub"].output == {"d": 10}
    assert fan.steps["fan"].output[0]["echo"]["sku"] == "p"


def test_a_step_job_whose_request_was_lost_is_sent_again_and_runs_once(stack, monkeypatch):
    """Found by make chaos: a Redis pause let the submit queue park a step's request in
    its DLQ; the job was never stored and the run waited for ever."""
    from cordum.workflow import lost_jobs
    from cordum.workflow.reconciler import WorkflowReconciler

    loop, s = stack
    monkeypatch.setattr(lost_jobs, "LOST_JOB_S", 0.3)
    definition = {"steps": {"fan": {"topic": "job.echo", "for_each": "input.items"}}}

    async def scenario() -> tuple[str, Any, list[str], list[str]]:
        run_id = await start(s, definition, {"items": ["only"]})
        # The start is still queued: the item's first request will be lost.
        s.lose_submits.add(f"{run_id}:fan[0]@1")
        await s.settle(0.5)
        before = list(s.worker.received)
        reconciler = WorkflowReconciler(s.runner)
        for _ in range(3):
            await reconciler.tick()
            await s.settle(0.5)
        run = await finished(s, run_id)
        timeline = await s.store.timeline(s.tenant, run_id) or []
        return run_id, run, before, [e["type"] for e in timeline]

    run_id, run, before, kinds = loop.run_until_complete(scenario())
    assert before == [] and "step_job_resent" in kinds
    assert s.worker.received == [f"{run_id}:fan[0]@1"]  # sent again, run once
    assert run.steps["fan"].output[0]["echo"]["item"] == "only"
