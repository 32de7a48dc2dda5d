"""A workflow run's size and its number of runs are bounded.

Redis runs ``noeviction``: what a run writes stays until its TTL, and the run script
decodes the whole run document on every read. Each test is an exploit that once grew
a run (or the runs under it) without bound; the limits are the ``limits`` section of
``config/timeouts.yaml`` (:class:`cordum.workflow.limits.RunLimits`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cordum import runtime
from cordum.config import ConfigError
from cordum.workflow import keys, limits, subworkflow
from cordum.workflow.definition import Workflow
from cordum.workflow.definition_store import DefinitionStore
from cordum.workflow.runner import WorkflowRunner
from tests.integration.test_workflow_composite_runs import save
from tests.integration.test_workflow_runs import finished, start
from tests.integration.workflow_api import Api, world
from tests.workflow_harness import WorkflowStack


@pytest.fixture
def api(unique: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    yield from world(unique, monkeypatch)


def configured(tmp_path: Path, section: str) -> limits.RunLimits:
    """The run limits a timeouts.yaml with this ``limits`` section gives."""
    (tmp_path / "timeouts.yaml").write_text(f"workflows: {{}}\nlimits:\n{section}")
    return limits.load_run_limits(tmp_path)


def limited_runner(s: WorkflowStack, run_limits: limits.RunLimits,
                   max_active_runs: int = 0) -> None:
    """The stack's runner, as the workflow function builds it, with these limits."""
    s.runner = WorkflowRunner(s.store, s.redis, s.publisher, s.queue, None,
                              max_active_runs=max_active_runs, run_limits=run_limits)


async def forget_children(s: WorkflowStack, runs: list[Any]) -> None:
    """Delete the child runs of these runs' steps, refused ones too (never started, so
    the stack does not know them)."""
    for run in runs:
        for sr in run.steps.values():
            if sr.job_id and ":" not in sr.job_id:
                await s.store.delete_run(s.tenant, sr.job_id)
        await s.redis.delete(keys.root_runs_key(run.id))


async def stored_bytes(s: WorkflowStack, run_id: str) -> int:
    return int(await s.redis.strlen(keys.run_key(run_id)))


def test_for_each_items_do_not_each_copy_the_run_input(stack):
    """Exploit: a for_each item of a step with no ``input`` got a copy of the whole run
    input as its payload, kept in the item's ``input`` in the run document (and in its
    job's context). A 15 KB start body fanned out over 200 items made a run document of
    megabytes, decoded again on every read of the run."""
    loop, s = stack
    definition = {"steps": {"fan": {"topic": "job.echo", "for_each": "input.items"}}}
    body = {"items": list(range(200)), "padding": "x" * 15_000}

    async def scenario() -> tuple[Any, int]:
        run_id = await start(s, definition, body)
        run = await finished(s, run_id, timeout_s=60)
        return run, await stored_bytes(s, run_id)

    run, size = loop.run_until_complete(scenario())
    children = run.steps["fan"].children
    assert children["fan[7]"].input == {"item": 7}  # what it references, nothing else
    assert run.steps["fan"].output[7]["echo"] == {"item": 7}
    assert size < 200_000, size


def test_a_definition_over_the_step_limit_is_refused_on_save_and_on_start(api):
    """Exploit: a definition had no bound on its steps; a few such definitions nested as
    subworkflows multiplied into runs without end."""
    too_many = {"id": api.wf_id("wide"), "name": "wide",
                "steps": {f"s{i}": {"type": "transform", "input": {}} for i in range(201)}}
    status, body, _ = api.call("POST", "/api/v1/workflows", too_many)
    assert status == 400, body
    assert "201 steps" in body["error"] and "200" in body["error"]
    # Stored before the limit (or under a higher one): a start is refused as well.
    wf = Workflow.model_validate({**too_many, "org_id": api.tenant})
    runtime.run(DefinitionStore(api.redis).put_definition(wf))
    status, body, _ = api.call("POST", f"/api/v1/workflows/{wf.id}/runs", {})
    assert status == 400, body
    assert "201 steps" in body["error"]
    assert api.runner.started == []


def test_a_start_body_over_the_input_limit_is_refused(api):
    """Exploit: a start body as large as the gateway lets through (1 MiB) became the
    run's input, copied into each step that took the run input whole."""
    workflow_id = api.saved()
    status, body, _ = api.call("POST", f"/api/v1/workflows/{workflow_id}/runs",
                               {"blob": "x" * (300 * 1024)})
    assert status == 400, body
    assert body["code"] == "invalid_input" and "262144" in body["error"]
    assert api.runner.started == []
    assert api.start(workflow_id, {"blob": "x" * 1024})  # under the limit: fine


def test_a_subworkflow_child_counts_against_the_tenants_open_run_limit(stack):
    """Exploit: a subworkflow's child run was created with no open-run limit, so runs
    that start children got round the tenant's ``workflow_max_active_runs``."""
    loop, s = stack
    limited_runner(s, limits.RunLimits(), max_active_runs=1)
    child = {"id": f"child-{s.unique}", "name": "child",
             "steps": {"t": {"type": "transform", "input": {"ok": True}}}}
    parent = {"steps": {"sub": {"type": "subworkflow",
                                "input": {"workflow_id": child["id"]}}}}

    async def scenario() -> Any:
        await save(s, child)
        run_id = await start(s, parent, {})  # the tenant's one open run
        run = await finished(s, run_id, "failed")
        await forget_children(s, [run])
        return run

    run = loop.run_until_complete(scenario())
    error = run.steps["sub"].error
    assert error["code"] == "tenant_run_limit", error
    assert "open workflow runs" in error["message"] and "limit 1" in error["message"]


def test_runs_under_one_root_run_are_capped(stack, tmp_path):
    """Exploit: each definition a few subworkflow steps wide, nested a few levels, made
    a tree of runs that grew with the product of the widths (millions of runs from
    three small definitions), none of them over any limit on its own."""
    loop, s = stack
    limited_runner(s, configured(tmp_path, "  max_runs_per_root: 3\n"))
    leaf = {"id": f"leaf-{s.unique}", "name": "leaf",
            "steps": {"t": {"type": "transform", "input": {"ok": True}}}}

    def fan(target: str) -> dict[str, Any]:
        return {f"sub{i}": {"type": "subworkflow", "input": {"workflow_id": target}}
                for i in range(2)}

    mid = {"id": f"mid-{s.unique}", "name": "mid", "steps": fan(leaf["id"])}

    async def scenario() -> tuple[Any, list[Any], int]:
        await save(s, leaf)
        await save(s, mid)
        run_id = await start(s, {"steps": fan(mid["id"])}, {})
        run = await finished(s, run_id, "failed")
        runs = [await s.store.get_run(s.tenant, r) for r in sorted(s.run_ids - {run_id})]
        counted = int(await s.redis.get(keys.root_runs_key(run_id)) or 0)
        await s.redis.delete(keys.root_runs_key(run_id))
        made = [r for r in runs if r is not None]
        await forget_children(s, [run, *made])
        return run, made, counted

    run, children, counted = loop.run_until_complete(scenario())
    assert counted == 3  # two mid runs and one leaf run; the fourth child was refused
    made = [c for c in children if c.metadata.get(subworkflow.ROOT_RUN) == run.id]
    assert len(made) <= 3
    codes = [sr.error["code"] for c in made for sr in c.steps.values() if sr.error]
    assert "run_limit_exceeded" in codes, codes


def test_a_run_whose_document_outgrows_the_limit_fails(stack, tmp_path):
    """Exploit: step outputs up to 256 KiB each are kept in the run document; a fan-out
    of such outputs grew one run document without bound."""
    loop, s = stack
    limited_runner(s, configured(tmp_path, "  max_run_document_bytes: 40000\n"))
    definition = {"steps": {"fan": {"topic": "job.echo", "for_each": "input.items",
                                    "input": {"pad": "${input.pad}"}}}}

    async def scenario() -> tuple[Any, int]:
        run_id = await start(s, definition, {"items": list(range(40)), "pad": "p" * 1000})
        run = await finished(s, run_id, "failed")
        return run, await stored_bytes(s, run_id)

    run, size = loop.run_until_complete(scenario())
    assert run.error["code"] == "run_too_large", run.error
    assert "40000" in run.error["message"]
    assert size < 40_000 + 10_000, size


def test_a_large_step_input_is_kept_as_a_pointer_to_its_job_context(stack):
    """Exploit: every step's rendered input was kept whole in the run document, beside
    the copy its job reads from ``ctx:<job_id>``."""
    loop, s = stack
    blob = "b" * (100 * 1024)
    definition = {"steps": {"big": {"topic": "job.echo", "input": {"blob": "${input.blob}"}},
                            "small": {"topic": "job.echo", "input": {"n": 1}}}}

    async def scenario() -> tuple[str, Any, bytes]:
        run_id = await start(s, definition, {"blob": blob})
        run = await finished(s, run_id)
        return run_id, run, await s.redis.get(f"ctx:{run_id}:big@1")

    run_id, run, context = loop.run_until_complete(scenario())
    kept = run.steps["big"].input
    assert kept["input_ptr"] == f"redis://ctx:{run_id}:big@1", kept
    assert kept["input_bytes"] > 100 * 1024 and "blob" not in kept
    assert blob in context.decode()  # the job had its whole input
    assert run.steps["big"].output["echo"]["blob"] == blob
    assert run.steps["small"].input == {"n": 1}


def test_the_shipped_limits_are_the_documented_defaults():
    shipped = limits.load_run_limits(Path("config"))
    assert shipped == limits.RunLimits()
    assert (shipped.max_steps_per_definition, shipped.max_run_input_bytes,
            shipped.max_run_document_bytes, shipped.max_runs_per_root,
            shipped.max_pinned_definitions) == (200, 256 * 1024, 4 * 1024 * 1024, 1000, 64)


def test_a_bad_limits_section_is_a_config_error():
    for bad in ({"limits": []}, {"limits": {"max_runs_per_root": 0}},
                {"limits": {"max_run_input_bytes": "256k"}},
                {"limits": {"max_steps_per_definition": True}},
                {"limits": {"max_runs": 5}}):
        with pytest.raises(ConfigError, match="timeouts.yaml: limits"):
            limits.run_limits_from_mapping(bad)
    assert limits.run_limits_from_mapping({"limits": {"max_runs_per_root": 7}}) == \
        limits.RunLimits(max_runs_per_root=7)
