"""A run's outbox as Redis holds it: entries written by an earlier version (the JSON of
``wf:run:outbox:<run id>`` written by hand here, as that version wrote it) are still
carried out by the next event, every kind of them (tests/workflow_harness)."""

from __future__ import annotations

import json
import time
from typing import Any

from cordum import protocol
from cordum.bus.workflow_events import RunEvent
from cordum.gateway.core.auth import Principal
from cordum.gateway.workflows.service import WorkflowService
from cordum.workflow import keys
from tests.workflow_harness import WorkflowStack

WAITING = {"steps": {"wait": {"type": "delay", "delay_sec": 600}}}
"""A run that stays open, and waits on nothing this test does."""


async def started(s: WorkflowStack) -> str:
    who = Principal(tenant=s.tenant, role="admin", principal_id=f"p-{s.unique}")
    service = WorkflowService(s.definitions, s.store, s.runner)
    await service.save_definition(who, {"id": f"wf-{s.unique}", "name": "t", **WAITING})
    run_id = await service.start_run(who, f"wf-{s.unique}", {}, idempotency_key="")
    s.run_ids.add(run_id)
    for event in s.queue.take():
        await s.runner.apply(event)
    s.queue.events.clear()
    s.queue.timers.clear()
    return run_id


def previous_version_outbox(run_id: str, fire_at: float) -> list[dict[str, Any]]:
    """Every kind of entry, each as the previous version wrote it: one key naming the
    kind; a job's fields as ``job_doc`` made them."""
    job = {"job_id": f"{run_id}:work@1", "step_id": "work", "topic": "job.echo",
           "input": {"n": 1}, "env": {"a": "b"}, "labels": {"region": "eu"},
           "priority": "critical", "deadline_ms": 5000, "idempotency_key": "k1",
           "meta": {"capability": "echo", "risk_tags": ["pii"], "requires": ["gpu"]},
           "kind": "job"}
    return [
        {"job": job},
        {"job": {**job, "job_id": f"{run_id}:undo@2", "step_id": "undo", "resend": 3,
                 "meta": None, "compensation": {"topic": "job.undo", "input": {"u": 1}}}},
        {"cancel": f"{run_id}:old@1"},
        {"alert": {"message": "hello", "severity": 3, "source_component": "notify",
                   "details": {"k": "v"}, "trace_id": run_id}},
        {"timer": fire_at},
        {"run": {"run_id": f"child-{run_id}", "workflow_id": "no-such-workflow",
                 "input": {}, "metadata": {}, "dry_run": False}},
        {"cancel_run": f"other-{run_id}"},
        {"parent": f"parent-{run_id}"},
    ]


def test_an_outbox_written_by_the_previous_version_is_carried_out(stack):
    loop, s = stack
    durable: list[tuple[str, Any, str]] = []
    plain: list[tuple[str, Any]] = []

    async def publish_durable(subject: str, packet: Any, *, msg_id: str) -> None:
        durable.append((subject, packet, msg_id))

    async def publish(subject: str, packet: Any) -> None:
        plain.append((subject, packet))

    async def scenario():
        run_id = await started(s)
        s.publisher.publish_durable = publish_durable  # type: ignore[method-assign]
        s.publisher.publish = publish  # type: ignore[method-assign]
        fire_at = time.time() + 30
        await s.redis.set(keys.outbox_key(run_id),
                          json.dumps(previous_version_outbox(run_id, fire_at)))
        # Any event of the run carries its outbox out first: a timer with nothing due.
        await s.runner.apply(RunEvent("timer", run_id, tenant=s.tenant, due=fire_at))
        left = await s.redis.exists(keys.outbox_key(run_id))
        return run_id, fire_at, left

    run_id, fire_at, left = loop.run_until_complete(scenario())
    assert left == 0  # carried out, then removed with the lock's release
    submits = [(p.job_request, m) for sub, p, m in durable if sub == protocol.SUBJECT_SUBMIT]
    assert [m for _, m in submits] == [f"{run_id}:work@1", f"{run_id}:undo@2#resend3"]
    work, undo = (r for r, _ in submits)
    assert (work.topic, work.priority, work.budget.deadline_ms) == ("job.echo", 3, 5000)
    assert work.workflow_id == run_id and work.tenant_id == s.tenant
    assert work.context_ptr == f"redis://ctx:{run_id}:work@1"
    assert dict(work.env) == {"a": "b"} and dict(work.labels) == {"region": "eu"}
    assert work.meta.idempotency_key == "k1" and work.meta.capability == "echo"
    assert list(work.meta.risk_tags) == ["pii"] and list(work.meta.requires) == ["gpu"]
    assert undo.compensation.topic == "job.undo"
    assert undo.compensation.context_ptr == f"redis://ctx:{run_id}:undo@2:undo"
    [(cancel_subject, cancel, cancel_id)] = [d for d in durable
                                             if d[0] != protocol.SUBJECT_SUBMIT]
    assert cancel_subject == protocol.SUBJECT_CANCEL and cancel_id == f"wf-cancel:{run_id}:old@1"
    assert cancel.job_cancel.job_id == f"{run_id}:old@1"
    assert cancel.job_cancel.reason == "workflow run cancelled"
    [(alert_subject, alert)] = plain
    assert alert_subject == protocol.SUBJECT_WORKFLOW_EVENT
    assert (alert.alert.message, alert.alert.severity, alert.alert.source_component,
            dict(alert.alert.details), alert.alert.trace_id) == (
        "hello", 3, "notify", {"k": "v"}, run_id)
    assert [(e.kind, e.run_id, e.due) for _, e in s.queue.timers] == [
        ("timer", run_id, fire_at)]
    # The child run's workflow does not exist: its parent (this run) is told at once.
    assert [(e.kind, e.run_id, e.job_id) for e in s.queue.events] == [
        ("child", run_id, f"child-{run_id}"), ("cancel", f"other-{run_id}", ""),
        ("child", f"parent-{run_id}", run_id)]
