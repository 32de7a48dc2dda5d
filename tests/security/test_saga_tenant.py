"""A saga belongs to one tenant: another tenant can neither roll it back nor join it.

Finding: the saga keys were ``saga:<workflow_id>:...`` with no tenant, and the
workflow id came from the request's ``workflow_id`` or, failing that, a client
label. A fatal failure of a job of tenant B that named tenant A's workflow ran
A's compensations; a compensation could also name another tenant and be
dispatched as that tenant's job.

Jobs arrive as bus packets and finish with worker results, through the engine
the submit and result functions run, with the rollback awaited in process.
"""

from __future__ import annotations

import importlib

import pytest

from cordum import protocol, runtime
from cordum.scheduler.packets import tenant_of
from tests.security.scheduler_stack import TOPIC, Scheduler, Submitted

SUCCEEDED = protocol.JobStatus.JOB_STATUS_SUCCEEDED
FAILED_FATAL = protocol.JobStatus.JOB_STATUS_FAILED_FATAL


@pytest.fixture
def stack(gateway, kernel):
    s = Scheduler(kernel)
    watch = runtime.run(Submitted().start())
    runtime.run(s.add_worker())
    yield s, watch
    runtime.run(watch.close(s.job_ids, [wf(s), f"wf-b-{s.unique}"]))
    runtime.run(s.cleanup(f"saga:*{s.unique}*"))


def wf(s: Scheduler) -> str:
    return f"wf-x-{s.unique}"


def tenant_a(s: Scheduler) -> str:
    return f"ta-{s.unique}"


def tenant_b(s: Scheduler) -> str:
    return f"tb-{s.unique}"


def step(s: Scheduler, name: str, tenant: str, *, workflow_id: str = "",
         labels: dict[str, str] | None = None, undo: bool = True) -> protocol.JobRequest:
    req = protocol.JobRequest(job_id=f"{name}-{s.unique}", topic=TOPIC, tenant_id=tenant,
                              workflow_id=workflow_id)
    req.labels.update(labels or {})
    if undo:
        req.compensation.topic = f"job.saga-sec.{s.unique}.undo-{name}"
    return req


async def run_step(s: Scheduler, req: protocol.JobRequest, status: int) -> None:
    """The request from the bus, dispatched, then the worker's result."""
    outcome = await s.engine.handle_request(s.request_packet(req))
    assert outcome.action == "dispatched", outcome
    await s.engine.handle_result(s.result_packet(req.job_id, status))


async def a_records_a_compensation(s: Scheduler) -> dict[str, list[bytes]]:
    await run_step(s, step(s, "a1", tenant_a(s), workflow_id=wf(s)), SUCCEEDED)
    stacks = await s.saga_keys(wf(s))
    assert [len(entries) for entries in stacks.values()] == [1], stacks
    return stacks


async def a_fails_fatally(s: Scheduler, watch: Submitted) -> list[protocol.JobRequest]:
    """A's own fatal failure: the check that the watch sees a rollback when one runs."""
    await run_step(s, step(s, "a2", tenant_a(s), workflow_id=wf(s), undo=False), FAILED_FATAL)
    return await watch.compensations(wf(s))


def test_a_label_naming_another_tenants_workflow_does_not_roll_it_back(stack):
    s, watch = stack

    async def scenario():
        # Given tenant A's step of wf-x succeeded, its compensation stacked
        before = await a_records_a_compensation(s)
        # When a job of tenant B labelled workflow_id=wf-x fails fatally
        b1 = step(s, "b1", tenant_b(s), labels={"workflow_id": wf(s)}, undo=False)
        await run_step(s, b1, FAILED_FATAL)
        return before, await s.saga_keys(wf(s)), await watch.compensations(wf(s))

    before, after, published = runtime.run(scenario())
    # Then A's stack is untouched and A's compensation was not published
    assert after == before
    assert published == []
    # And A's own fatal failure still runs it, as tenant A's job
    comps = runtime.run(a_fails_fatally(s, watch))
    assert [(c.topic, tenant_of(c)) for c in comps] == [
        (f"job.saga-sec.{s.unique}.undo-a1", tenant_a(s))]


def test_another_tenants_job_in_a_workflow_of_the_same_id_rolls_back_only_its_own(stack):
    s, watch = stack

    async def scenario():
        # Given tenant A's step of wf-x succeeded, its compensation stacked
        before = await a_records_a_compensation(s)
        # When tenant B's own step of a workflow also called wf-x fails fatally
        await run_step(s, step(s, "b1", tenant_b(s), workflow_id=wf(s), undo=False),
                       FAILED_FATAL)
        return before, await s.saga_keys(wf(s)), await watch.compensations(wf(s))

    before, after, published = runtime.run(scenario())
    # Then the rollback of (B, wf-x) found nothing of A's
    assert after == before
    assert published == []
    assert len(runtime.run(a_fails_fatally(s, watch))) == 1


class Context:
    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def test_the_rollback_function_for_tenant_b_never_publishes_a_compensation_of_a(
        stack, monkeypatch):
    s, watch = stack
    module = importlib.import_module("functions.saga_rollback")
    monkeypatch.setattr(module, "default_saga", lambda: s.saga)
    before = runtime.run(a_records_a_compensation(s))

    # When the saga-rollback function is invoked for tenant B's wf-x
    module.handler({"tenant": tenant_b(s), "workflow_id": wf(s)}, Context())

    # Then A's stack is untouched and nothing of A's was published
    assert runtime.run(s.saga_keys(wf(s))) == before
    assert runtime.run(watch.compensations(wf(s))) == []
    # And invoked for tenant A, it runs A's compensation
    module.handler({"tenant": tenant_a(s), "workflow_id": wf(s)}, Context())
    comps = runtime.run(watch.compensations(wf(s)))
    assert [tenant_of(c) for c in comps] == [tenant_a(s)]


def test_a_compensation_cannot_name_another_tenant(stack):
    s, watch = stack
    wf_b = f"wf-b-{s.unique}"

    async def scenario():
        # Given tenant B's step whose compensation claims to be tenant A's job
        b1 = step(s, "b1", tenant_b(s), workflow_id=wf_b)
        b1.compensation.tenant_id = tenant_a(s)
        await run_step(s, b1, SUCCEEDED)
        # When B's workflow fails fatally
        await run_step(s, step(s, "b2", tenant_b(s), workflow_id=wf_b, undo=False),
                       FAILED_FATAL)
        return await watch.compensations(wf_b)

    published = runtime.run(scenario())
    # Then no job of tenant A was submitted on B's behalf
    assert [tenant_of(c) for c in published if tenant_of(c) != tenant_b(s)] == []
