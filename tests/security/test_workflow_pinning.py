"""A run starts the child definitions it pinned when it was created, never later ones.

A subworkflow step names another definition. Read when the parent reached the step, it
could be replaced after the parent was started (and after its approval gate was
granted): the run then did what nobody approved. Each test is such an exploit.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from cordum.gateway.workflows.service import WorkflowService
from cordum.workflow import keys
from cordum.workflow.errors import InvalidDefinition
from tests.integration.test_workflow_composite_runs import held_count, save
from tests.integration.test_workflow_runs import finished, start, who
from tests.workflow_harness import WorkflowStack


def child(s: WorkflowStack, topic: str = "job.echo") -> dict[str, Any]:
    return {"id": f"child-{s.unique}", "name": "child",
            "steps": {"work": {"topic": topic, "input": {"n": "${input.n}"}}}}


def parent(target: str) -> dict[str, Any]:
    """A first step that holds the run (a human's approval, say), then the child run."""
    return {"steps": {
        "first": {"topic": "job.default", "input": {"n": 1}},
        "sub": {"type": "subworkflow", "depends_on": ["first"],
                "input": {"workflow_id": target, "input_mapping": {"n": "${input.n}"}}}}}


async def snapshot_topic(s: WorkflowStack, run_id: str) -> str:
    doc = json.loads(await s.redis.get(keys.run_definition_key(run_id)))
    return str(doc["steps"]["work"]["topic"])


def test_a_child_definition_replaced_after_the_start_does_not_change_the_run(stack):
    """Exploit: the parent was started (its first step approved) with a child that sends
    to job.echo; the child definition was then saved again sending to another topic,
    and the parent's subworkflow step ran the new one."""
    loop, s = stack
    s.worker.script["job.default"] = ["hold"]

    async def scenario() -> tuple[Any, Any, str]:
        await save(s, child(s))
        run_id = await start(s, parent(f"child-{s.unique}"), {"n": 5})
        await held_count(s, 1)
        await save(s, child(s, topic="job.elsewhere"))  # replaced while the run waits
        await s.answer(s.worker.held[0])
        run = await finished(s, run_id)
        child_id = run.steps["sub"].job_id
        return run, await s.store.get_run(s.tenant, child_id), \
            await snapshot_topic(s, child_id)

    run, child_run, topic = loop.run_until_complete(scenario())
    assert topic == "job.echo"
    assert child_run.status == "succeeded"
    assert f"{child_run.id}:work@1" in s.worker.received
    assert child_run.steps["work"].output["echo"] == {"n": 5}


def test_a_child_definition_deleted_after_the_start_still_runs_as_pinned(stack):
    """Exploit: deleting the child definition while the parent waited changed what the
    approved run did (its subworkflow step failed instead of running the child)."""
    loop, s = stack
    s.worker.script["job.default"] = ["hold"]

    async def scenario() -> Any:
        await save(s, child(s))
        run_id = await start(s, parent(f"child-{s.unique}"), {"n": 2})
        await held_count(s, 1)
        await s.definitions.delete_definition(s.tenant, f"child-{s.unique}")
        await s.answer(s.worker.held[0])
        return await finished(s, run_id)

    run = loop.run_until_complete(scenario())
    assert run.steps["sub"].status == "succeeded"


def test_a_templated_workflow_id_starts_only_a_pinned_definition(stack):
    """Exploit: a templated ``workflow_id`` was resolved against the live store, so the
    run input (or a step output) could start any definition of the tenant, including
    one saved after the run was approved."""
    loop, s = stack
    definition = {"steps": {"sub": {"type": "subworkflow",
                                    "input": {"workflow_id": "${input.target}"}}}}

    async def scenario() -> Any:
        await save(s, child(s))
        run_id = await start(s, definition, {"target": f"child-{s.unique}", "n": 1})
        return await finished(s, run_id, "failed")

    run = loop.run_until_complete(scenario())
    error = run.steps["sub"].error
    assert error["code"] == "subworkflow_not_pinned", error
    assert f"child-{s.unique}" in error["message"]
    assert s.worker.received == []


def test_nested_children_run_the_definitions_their_root_pinned(stack):
    """Exploit: a grandchild definition replaced after the root run started was the one
    its (pinned) child ran."""
    loop, s = stack
    s.worker.script["job.default"] = ["hold"]
    mid = {"id": f"mid-{s.unique}", "name": "mid", "steps": {
        "sub": {"type": "subworkflow",
                "input": {"workflow_id": f"child-{s.unique}",
                          "input_mapping": {"n": "${input.n}"}}}}}

    async def scenario() -> tuple[Any, str]:
        await save(s, child(s))
        await save(s, mid)
        run_id = await start(s, parent(mid["id"]), {"n": 3})
        await held_count(s, 1)
        await save(s, child(s, topic="job.elsewhere"))
        await s.answer(s.worker.held[0])
        run = await finished(s, run_id)
        mid_run = await s.store.get_run(s.tenant, run.steps["sub"].job_id)
        return run, await snapshot_topic(s, mid_run.steps["sub"].job_id)

    run, topic = loop.run_until_complete(scenario())
    assert run.status == "succeeded" and topic == "job.echo"


def test_a_rerun_starts_the_children_its_run_pinned(stack):
    """Exploit: a rerun kept the old run's approved steps but read the child definition
    anew, so a replaced child ran behind an approval given for the old one."""
    loop, s = stack

    async def scenario() -> str:
        await save(s, child(s))
        run_id = await start(s, parent(f"child-{s.unique}"), {"n": 4})
        await finished(s, run_id)
        await save(s, child(s, topic="job.elsewhere"))
        service = WorkflowService(s.definitions, s.store, s.runner)
        rerun_id = await service.rerun(who(s), run_id, from_step="sub", dry_run=False)
        s.run_ids.add(rerun_id)
        rerun = await finished(s, rerun_id)
        return await snapshot_topic(s, rerun.steps["sub"].job_id)

    assert loop.run_until_complete(scenario()) == "job.echo"


def test_more_pinned_definitions_than_the_limit_are_refused_at_start(stack):
    """Exploit: a definition naming many other definitions (each naming more) made one
    start pin, and later run, an unbounded set of definitions."""
    loop, s = stack
    steps = {f"sub{i}": {"type": "subworkflow",
                         "input": {"workflow_id": f"c{i}-{s.unique}"}} for i in range(65)}

    async def scenario() -> InvalidDefinition:
        for i in range(65):
            await save(s, {"id": f"c{i}-{s.unique}", "name": "c",
                           "steps": {"t": {"type": "transform", "input": {}}}})
        with pytest.raises(InvalidDefinition) as caught:
            await start(s, {"steps": steps}, {})
        return caught.value

    refused = loop.run_until_complete(scenario())
    assert refused.status == 400
    assert "65" in refused.message and "64" in refused.message
