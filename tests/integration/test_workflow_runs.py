"""Workflow runs end to end in one process: the runner, the scheduler's request and result
paths, a worker and the safety kernel, on the real Redis and NATS (tests/workflow_harness)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from cordum import protocol
from cordum.errors import RetryAfter
from cordum.gateway.core.auth import Principal
from cordum.gateway.workflows.service import WorkflowService
from cordum.store.jobs import meta_key
from cordum.workflow.reconciler import WorkflowReconciler
from tests.workflow_harness import WorkflowStack


def who(s: WorkflowStack) -> Principal:
    return Principal(tenant=s.tenant, role="admin", principal_id=f"p-{s.unique}")


async def start(s: WorkflowStack, definition: dict[str, Any], body: Any,
                idempotency_key: str = "") -> str:
    service = WorkflowService(s.definitions, s.store, s.runner)
    definition = {"id": f"wf-{s.unique}", "name": "test", **definition}
    await service.save_definition(who(s), definition)
    run_id = await service.start_run(who(s), definition["id"], body,
                                     idempotency_key=idempotency_key)
    s.run_ids.add(run_id)
    return run_id


async def finished(s: WorkflowStack, run_id: str, status: str = "succeeded",
                   timeout_s: float = 15.0) -> Any:
    async def done() -> bool:
        return await s.run_status(run_id) not in ("pending", "running", "waiting", "")

    await s.pump(done, timeout_s)
    run = await s.store.get_run(s.tenant, run_id)
    assert run is not None
    assert run.status == status, (run.status, {k: (v.status, v.error) for k, v in
                                               run.steps.items()})
    return run


def types(timeline: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in timeline]


LINEAR = {
    "steps": {
        "shape": {"type": "transform", "input": {"total": "${input.amount * 2}",
                                                  "who": "${input.customer}"}},
        "big": {"type": "condition", "condition": "steps.shape.output.total > 10",
                "depends_on": ["shape"]},
        "work": {"type": "worker", "topic": "job.echo", "depends_on": ["big"],
                 "condition": "steps.big.output == true",
                 "input": {"amount": "${steps.shape.output.total}",
                           "note": "for ${input.customer}"},
                 "route_labels": {"region": "eu"}},
        "tell": {"type": "notify", "depends_on": ["work"],
                 "input": {"message": "done for ${input.customer}", "level": "WARN",
                           "details": {"amount": "${steps.work.output.echo.amount}"}}},
    },
}


def test_a_linear_run_dispatches_its_job_through_the_submit_path_and_succeeds(stack):
    loop, s = stack

    async def scenario():
        run_id = await start(s, LINEAR, {"amount": 21, "customer": "ada"})
        run = await finished(s, run_id)
        meta = await s.redis.hgetall(meta_key(f"{run_id}:work@1"))
        ctx = await s.redis.get(protocol.context_key(f"{run_id}:work@1"))
        return run_id, run, meta, ctx, await s.store.timeline(s.tenant, run_id)

    run_id, run, meta, ctx, timeline = loop.run_until_complete(scenario())
    job_id = f"{run_id}:work@1"
    # The step's job went through the scheduler like any job: stored, checked, routed.
    assert s.worker.received == [job_id]
    meta = {k.decode(): v.decode() for k, v in meta.items()}
    assert meta["state"] == "SUCCEEDED" and meta["tenant"] == s.tenant
    assert meta["safety_decision"] == "ALLOW"
    assert json.loads(ctx) == {"amount": 42, "note": "for ada"}
    assert run.steps["shape"].output == {"total": 42, "who": "ada"}
    assert run.steps["big"].output is True
    assert run.context["steps"]["work"]["output"] == {"echo": {"amount": 42, "note": "for ada"}}
    assert run.steps["work"].job_id == job_id and run.steps["work"].attempts == 1
    assert [a.message for a in s.alerts] == ["done for ada"]
    assert s.alerts[0].details["amount"] == "42" and int(s.alerts[0].severity) == 2
    seen = types(timeline)
    assert "step_dispatched" in seen and "step_completed" in seen
    assert "step_event_emitted" in seen and seen[-1] == "run_status"
    assert all("timestamp" in e and "time" in e for e in timeline)


def test_every_change_of_a_run_is_told_on_the_run_subject(stack):
    loop, s = stack

    async def scenario():
        # Given a listener on sys.workflow.run, where the live stream reads run news
        news: list[dict[str, Any]] = []

        async def heard(msg: Any) -> None:
            doc = json.loads(msg.data)
            if doc.get("runId") in s.run_ids:
                news.append(doc)

        await s._nc.subscribe(protocol.SUBJECT_WORKFLOW_RUN, cb=heard)
        # When a run goes from its start to its end
        run_id = await start(s, LINEAR, {"amount": 21, "customer": "ada"})
        await finished(s, run_id)
        await s._nc.flush()
        await asyncio.sleep(0.2)
        return run_id, news

    run_id, news = loop.run_until_complete(scenario())
    # Then each applied event told its news: the run's id, workflow, tenant and status
    assert news and all(n["type"] == "workflow.run" and n["runId"] == run_id for n in news)
    assert {n["workflowId"] for n in news} == {f"wf-{s.unique}"}
    assert {n["tenantId"] for n in news} == {s.tenant}
    assert news[0]["status"] == "running" and news[-1]["status"] == "succeeded"
    # And together they hold the run's timeline as the API serves it, the end last
    told = [e["type"] for n in news for e in n["events"]]
    assert "step_dispatched" in told and "step_completed" in told
    assert told[-1] == "run_status" and news[-1]["events"][-1]["status"] == "succeeded"
    assert all(n["createdAt"].endswith("Z") for n in news)


def test_a_step_job_carries_the_run_in_its_env_labels_and_idempotency_key(stack):
    loop, s = stack
    definition = {"steps": {"work": {"type": "worker", "topic": "job.echo",
                                     "route_labels": {"region": "${input.region}"},
                                     "timeout_sec": 30}}}

    async def scenario():
        run_id = await start(s, definition, {"region": "eu"})
        await finished(s, run_id)
        raw = await s.redis.get(f"job:req:{run_id}:work@1")
        return run_id, raw

    run_id, raw = loop.run_until_complete(scenario())
    from google.protobuf import json_format

    req = json_format.Parse(raw, protocol.JobRequest()) if raw else None
    assert req is not None, "the submit path stored the step's request"
    assert req.labels["workflow_id"] == f"wf-{s.unique}" and req.labels["run_id"] == run_id
    assert req.labels["step_id"] == "work" and req.labels["_source"] == "workflow"
    assert req.labels["region"] == "eu"
    assert req.env["run_id"] == run_id and req.env["memory_id"] == f"run:{run_id}"
    assert req.env["context_mode"] == "raw" and req.env["tenant_id"] == s.tenant
    assert req.meta.idempotency_key == f"wf:{run_id}:work:1"
    assert req.budget.deadline_ms == 30_000
    assert req.workflow_id == run_id and req.principal_id == f"p-{s.unique}"


def test_a_failed_step_is_retried_with_backoff_as_new_jobs(stack):
    loop, s = stack
    s.worker.script["job.echo"] = ["FAILED", "FAILED", "SUCCEEDED"]
    definition = {"steps": {"work": {"type": "worker", "topic": "job.echo",
                                     "retry": {"max_retries": 2, "initial_backoff_sec": 1,
                                               "multiplier": 1}}}}

    async def scenario():
        run_id = await start(s, definition, {"n": 1})
        return run_id, await finished(s, run_id, timeout_s=20)

    run_id, run = loop.run_until_complete(scenario())
    assert s.worker.received == [f"{run_id}:work@1", f"{run_id}:work@2", f"{run_id}:work@3"]
    assert run.steps["work"].attempts == 3
    # Each backoff was a delayed timer message, not a coroutine left waiting.
    assert sum(1 for e in s.queue.sent if e.kind == "timer") >= 2


def test_a_fatal_failure_skips_dependents_and_fails_the_run_unless_on_error_handles_it(stack):
    loop, s = stack
    s.worker.script["job.echo"] = ["FAILED_FATAL"]
    definition = {"steps": {
        "work": {"type": "worker", "topic": "job.echo",
                 "retry": {"max_retries": 3}},
        "after": {"type": "transform", "depends_on": ["work"], "input": {"x": 1}},
    }}

    async def scenario():
        run_id = await start(s, definition, {})
        return run_id, await finished(s, run_id, "failed")

    run_id, run = loop.run_until_complete(scenario())
    assert s.worker.received == [f"{run_id}:work@1"]  # never retried
    assert run.steps["work"].status == "failed"
    assert run.steps["after"].status == "skipped" and run.steps["after"].skip_reason


def test_on_error_runs_the_handler_with_the_error_and_the_run_succeeds(stack):
    loop, s = stack
    s.worker.script["job.echo"] = ["FAILED_FATAL"]
    definition = {"steps": {
        "work": {"type": "worker", "topic": "job.echo", "on_error": "repair"},
        "repair": {"type": "transform", "input": {"fixed": True}},
    }}

    async def scenario():
        run_id = await start(s, definition, {})
        return await finished(s, run_id, "succeeded")

    run = loop.run_until_complete(scenario())
    assert run.steps["repair"].status == "succeeded"
    # The handler's input carries the failure it handles.
    assert run.steps["repair"].output["fixed"] is True
    assert run.steps["repair"].output["error"]["step_id"] == "work"
    assert run.steps["work"].status == "failed"


def test_a_delay_step_waits_on_a_timer_message(stack):
    loop, s = stack
    definition = {"steps": {"wait": {"type": "delay", "delay_sec": 1},
                            "after": {"type": "transform", "depends_on": ["wait"],
                                      "input": {"ok": True}}}}

    async def scenario():
        run_id = await start(s, definition, {})
        run = await finished(s, run_id)
        return run, await s.store.timeline(s.tenant, run_id)

    run, timeline = loop.run_until_complete(scenario())
    assert run.steps["wait"].status == "succeeded"
    assert "step_delay_started" in types(timeline) and "step_delay_completed" in types(timeline)
    timer = next(e for e in s.queue.sent if e.kind == "timer")
    assert timer.due > 0


def test_cancel_publishes_a_job_cancel_for_the_running_step(stack):
    loop, s = stack
    s.worker.script["job.echo"] = ["hold"]
    definition = {"steps": {"work": {"type": "worker", "topic": "job.echo"}}}

    async def scenario():
        run_id = await start(s, definition, {})

        async def dispatched() -> bool:
            return bool(s.worker.received)

        await s.pump(dispatched)
        assert await s.runner.cancel(s.tenant, run_id) is True
        job_id = f"{run_id}:work@1"

        async def job_cancelled() -> bool:
            return (await s.redis.hget(meta_key(job_id), "state")) == b"CANCELLED"

        await s.pump(job_cancelled)
        again = await s.runner.cancel(s.tenant, run_id)
        return run_id, await s.store.get_run(s.tenant, run_id), again

    run_id, run, again = loop.run_until_complete(scenario())
    assert run.status == "cancelled" and run.steps["work"].status == "cancelled"
    assert again is False  # a terminal run is not cancelled twice


def test_each_event_applied_twice_changes_nothing_the_second_time(stack):
    loop, s = stack
    definition = {"steps": {"work": {"type": "worker", "topic": "job.echo"},
                            "after": {"type": "transform", "depends_on": ["work"],
                                      "input": {"x": 1}}}}

    async def scenario():
        run_id = await start(s, definition, {})
        await finished(s, run_id)
        before = (await s.store.get_run(s.tenant, run_id)).to_json()
        outcomes = [await s.runner.apply(e) for e in list(s.queue.sent)]
        after = (await s.store.get_run(s.tenant, run_id)).to_json()
        return run_id, before, after, outcomes

    run_id, before, after, outcomes = loop.run_until_complete(scenario())
    assert before == after
    assert outcomes and all("changed nothing" in o or o.startswith("ignored") for o in outcomes)
    assert s.worker.received == [f"{run_id}:work@1"]


def test_a_crash_between_saving_the_run_and_publishing_is_carried_out_by_the_next_event(stack):
    loop, s = stack
    definition = {"steps": {"work": {"type": "worker", "topic": "job.echo"}}}
    real = s.publisher.publish_durable
    crashed: list[str] = []

    async def crash_once(subject, msg, *, msg_id):
        if subject == protocol.SUBJECT_SUBMIT and not crashed:
            crashed.append(msg_id)
            raise ConnectionError("killed after the save, before the publish")
        await real(subject, msg, msg_id=msg_id)

    s.publisher.publish_durable = crash_once  # type: ignore[method-assign]

    async def scenario():
        run_id = await start(s, definition, {})
        # The start event failed after the run was saved with its outbox ...
        for event in s.queue.take():
            with pytest.raises(RetryAfter, match="outbox not carried out"):
                await s.runner.apply(event)
        assert await s.redis.exists(f"wf:run:outbox:{run_id}")
        assert not s.worker.received
        # ... and its redelivery carries the outbox out before anything else.
        s.queue.events.append(next(e for e in s.queue.sent if e.kind == "start"))
        return run_id, await finished(s, run_id)

    run_id, run = loop.run_until_complete(scenario())
    assert crashed == [f"{run_id}:work@1"]
    assert s.worker.received == [f"{run_id}:work@1"]
    assert run.steps["work"].attempts == 1


def test_the_reconciler_finds_a_lost_result_and_a_due_timer(stack):
    loop, s = stack
    definition = {"steps": {"work": {"type": "worker", "topic": "job.echo"},
                            "wait": {"type": "delay", "delay_sec": 1, "depends_on": ["work"]}}}

    async def scenario():
        run_id = await start(s, definition, {})
        job_id = f"{run_id}:work@1"

        async def job_done() -> bool:
            return (await s.redis.hget(meta_key(job_id), "state")) == b"SUCCEEDED"

        await s.pump(job_done)
        # The job's end never reaches the run (its event is lost) ...
        s.queue.events = [e for e in s.queue.events if e.job_id != job_id]
        reconciler = WorkflowReconciler(s.runner)
        for _ in range(3):
            await reconciler.tick()
        assert (await s.store.get_run(s.tenant, run_id)).steps["work"].status == "succeeded"
        # ... and the delay's timer message is lost too: the tick fires it when due.
        s.queue.timers.clear()
        await asyncio.sleep(1.2)
        report = await reconciler.tick()
        return run_id, report, await s.store.get_run(s.tenant, run_id)

    run_id, report, run = loop.run_until_complete(scenario())
    assert report.timers_fired == 1
    assert run.status == "succeeded" and run.steps["wait"].status == "succeeded"


def test_a_fatal_failure_rolls_back_the_runs_own_succeeded_steps(stack):
    loop, s = stack
    s.worker.script["job.default"] = ["FAILED_FATAL"]
    definition = {"steps": {
        "book": {"type": "worker", "topic": "job.echo",
                 "compensation": {"topic": "job.echo", "input": {"undo": "book"}}},
        "pay": {"type": "worker", "topic": "job.default", "depends_on": ["book"]},
    }}

    async def scenario():
        run_id = await start(s, definition, {})
        run = await finished(s, run_id, "failed")
        from cordum.store.saga import stack_key

        stacked = await s.redis.lrange(stack_key(s.tenant, run_id), 0, -1)
        undo_ctx = await s.redis.get(protocol.context_key(f"{run_id}:book@1:undo"))
        return run_id, run, stacked, undo_ctx

    run_id, run, stacked, undo_ctx = loop.run_until_complete(scenario())
    assert run.steps["pay"].status == "failed"
    # The succeeded step's undo is on this run's own saga (tenant and run), with its input
    assert len(stacked) == 1
    template = protocol.JobRequest.FromString(stacked[0])
    assert (template.topic, template.workflow_id) == ("job.echo", run_id)
    assert template.context_ptr == protocol.pointer(
        protocol.context_key(f"{run_id}:book@1:undo"))
    assert json.loads(undo_ctx) == {"undo": "book"}
    # and the fatal failure asked the saga-rollback function to undo this run.
    assert s.rollbacks.asked == [(s.tenant, run_id)]


APPROVAL = {"steps": {
    "gate": {"type": "approval", "input": {"amount": "${input.amount}"}},
    "after": {"type": "worker", "topic": "job.echo", "depends_on": ["gate"]},
}}


def approvals(s: WorkflowStack, kernel_addr: str):
    from cordum.gateway.approvals.service import ApprovalService
    from cordum.safety.snapshots import KernelSnapshots
    from cordum.store.jobs import JobStore

    return ApprovalService(JobStore(s.redis), s.redis, s.publisher,
                           KernelSnapshots(kernel_addr, 2.0))


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_an_approval_step_waits_for_a_human_on_its_gate_job(stack, kernel, decision):
    from cordum.gateway.approvals.models import ApprovalDecisionRequest

    loop, s = stack
    approver = Principal(tenant=s.tenant, role="admin", principal_id=f"approver-{s.unique}")

    async def scenario():
        run_id = await start(s, APPROVAL, {"amount": 7})
        gate = f"{run_id}:gate@1"

        async def gated() -> bool:
            return (await s.redis.hget(meta_key(gate), "state")) == b"APPROVAL_REQUIRED"

        await s.pump(gated)
        waiting = await s.store.get_run(s.tenant, run_id)
        assert (waiting.status, waiting.steps["gate"].status) == ("waiting", "waiting")
        service = approvals(s, kernel)
        body = ApprovalDecisionRequest(reason="checked")
        # The run's starter may not decide its own gate; another principal may.
        from cordum.gateway.core.errors import Forbidden

        with pytest.raises(Forbidden):
            await service.approve(who(s), gate, body)
        # What the approver sees: the gate in the list with its run and step, and its
        # context document; another tenant sees neither.
        listed = await service.list(approver, 50, "")
        context = await service.context(approver, gate)
        from cordum.gateway.core.errors import NotFound

        stranger = Principal(tenant=f"other-{s.unique}", role="admin", principal_id="x")
        with pytest.raises(NotFound):
            await service.context(stranger, gate)
        items = [i for i in listed["items"] if i["job"]["id"] == gate]
        assert items and items[0]["workflow"] == {
            "workflow_id": f"wf-{s.unique}", "run_id": run_id, "step_id": "gate"}
        assert context["kind"] == "workflow_approval_context"
        assert context["workflow"]["step_id"] == "gate"
        await getattr(service, decision)(approver, gate, body)
        want = "succeeded" if decision == "approve" else "denied"
        return run_id, await finished(s, run_id, want), json.loads(
            await s.redis.get(protocol.context_key(gate)))

    run_id, run, gate_ctx = loop.run_until_complete(scenario())
    assert gate_ctx["kind"] == "workflow_approval_context"
    assert gate_ctx["workflow"]["run_id"] == run_id and gate_ctx["decision"] == {"amount": 7}
    if decision == "approve":
        assert run.steps["gate"].status == "succeeded"
        assert s.worker.received == [f"{run_id}:after@1"]
    else:
        assert run.steps["gate"].status == "denied"
        assert run.steps["after"].status == "skipped" and not s.worker.received


def test_a_cancel_that_overtakes_its_steps_request_leaves_the_job_cancelled_and_owned(stack):
    import uuid

    loop, s = stack
    job_id = f"{uuid.uuid4()}:work@1"
    cancel = protocol.JobCancel(job_id=job_id, reason="workflow run cancelled",
                                requested_by=protocol.SENDER_WORKFLOW)
    req = protocol.JobRequest(job_id=job_id, topic="job.echo", tenant_id=s.tenant,
                              principal_id="p", workflow_id=job_id.partition(":")[0])

    async def scenario():
        # the engine's record of the step job it sent (saved with its run)
        from cordum.approval import job_hash
        from cordum.store.step_jobs import StepJobRecord, step_job_key

        record = StepJobRecord(s.tenant, job_id.partition(":")[0], "work", job_hash(req))
        await s.redis.set(step_job_key(job_id), record.to_json(), ex=600)
        # The run's cancel reaches the result path before the step's request reaches
        # the submit path (the bridge and the queues carry them apart)
        first = await s.engine.handle_result(protocol.packet(
            trace_id="t", sender_id=protocol.SENDER_WORKFLOW, job_cancel=cancel
        ).SerializeToString())
        late = await s.engine.handle_request(protocol.packet(
            trace_id="t", sender_id=protocol.SENDER_WORKFLOW, job_request=req
        ).SerializeToString())
        meta = await s.redis.hgetall(meta_key(job_id))
        return first, late, {k.decode(): v.decode() for k, v in meta.items()}

    first, late, meta = loop.run_until_complete(scenario())
    loop.run_until_complete(s.redis.delete(f"wf:run:job:{job_id}"))
    assert first.action == "cancelled"
    assert (late.action, late.state) == ("noop", "CANCELLED")
    assert not s.worker.received  # never dispatched
    assert (meta["state"], meta["tenant"], meta["topic"]) == ("CANCELLED", s.tenant, "job.echo")


def test_the_expression_forms_of_cordum_work_in_conditions_and_templates(stack):
    loop, s = stack
    forms = {
        "and_or_not": "${input.total > 10 && (input.vip || !input.blocked)}",
        "equal": "${input.country == 'DE' && input.country != 'FR'}",
        "ternary": "${input.total >= 100 ? 'large' : 'small'}",
        "in": "${'urgent' in input.tags}",
        "contains": "${input.note contains 'rush'}",
        "nil": "${input.missing == nil}",
        "member_index": "${input.items[0].sku}",
        "length": "${length(input.items)}",
        "first": "${first(input.tags)}",
        "mixed": "order of ${input.total} for ${input.country}",
        "dropped": "${input.missing}",
    }
    definition = {"steps": {
        "shape": {"type": "transform", "input": forms},
        "gate": {"type": "condition", "depends_on": ["shape"],
                 "condition": "steps.shape.output.ternary == 'small' && "
                              "length(steps.shape.output.first) > 3"},
        "work": {"type": "worker", "topic": "job.echo", "depends_on": ["gate"],
                 "condition": "steps.gate.output", "input": {"sku": "${input.items[1].sku}"}},
    }}
    body = {"total": 42, "vip": False, "blocked": False, "country": "DE",
            "tags": ["urgent", "b2b"], "note": "a rush order",
            "items": [{"sku": "A-1"}, {"sku": "B-2"}]}

    async def scenario():
        run_id = await start(s, definition, body)
        return run_id, await finished(s, run_id)

    run_id, run = loop.run_until_complete(scenario())
    assert run.steps["shape"].output == {
        "and_or_not": True, "equal": True, "ternary": "small", "in": True, "contains": True,
        "nil": True, "member_index": "A-1", "length": 2, "first": "urgent",
        "mixed": "order of 42 for DE"}  # "dropped": a key whose template is nil is left out
    assert run.steps["gate"].output is True
    assert run.context["steps"]["work"]["output"] == {"echo": {"sku": "B-2"}}


def test_storage_steps_keep_values_in_the_run_context_across_events(stack):
    loop, s = stack
    definition = {"steps": {
        "remember": {"type": "storage",
                     "input": {"operation": "write", "key": "cart.id", "value": "${input.cart}"}},
        "work": {"type": "worker", "topic": "job.echo", "depends_on": ["remember"],
                 "input": {"cart": "${ctx.cart.id}"}},
        "recall": {"type": "storage", "depends_on": ["work"],
                   "input": {"operation": "read", "key": "cart.id"}},
    }}

    async def scenario():
        run_id = await start(s, definition, {"cart": "c-7"})
        return await finished(s, run_id)

    run = loop.run_until_complete(scenario())
    assert run.context["cart"] == {"id": "c-7"}
    assert run.context["steps"]["work"]["output"] == {"echo": {"cart": "c-7"}}
    assert run.steps["recall"].output == "c-7"


def test_a_switch_dispatches_only_the_chosen_branchs_job(stack):
    loop, s = stack
    definition = {"steps": {
        "route": {"type": "switch", "condition": "input.kind",
                  "input": {"cases": [{"when": "refund", "next": "refund"}],
                            "default": "charge"}},
        "refund": {"type": "worker", "topic": "job.echo", "depends_on": ["route"],
                   "input": {"do": "refund"}},
        "charge": {"type": "worker", "topic": "job.echo", "depends_on": ["route"],
                   "input": {"do": "charge"}},
    }}

    async def scenario():
        run_id = await start(s, definition, {"kind": "refund"})
        return run_id, await finished(s, run_id), await s.store.timeline(s.tenant, run_id)

    run_id, run, timeline = loop.run_until_complete(scenario())
    assert s.worker.received == [f"{run_id}:refund@1"]
    assert run.steps["charge"].status == "cancelled"
    assert run.steps["charge"].error["reason"] == "switch_branch_not_taken"
    assert "step_switch_evaluated" in types(timeline)
