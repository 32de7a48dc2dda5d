"""A save that releases the run's lock in its own round trip (``WorkflowStore.save(...,
release=True)``): an event whose outbox is one step job (and best-effort news) is saved
and unlocked at once and carried out after; the job's publish is kept until the job's
end drops it, so a publish that fails or never happens is carried out by the next
event, and a job runs once (tests/workflow_harness, real Redis, NATS and kernel)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cordum.bus.workflow_events import RunEvent
from cordum.errors import RetryAfter
from cordum.workflow import keys
from cordum.workflow.outbox import OutboxRunner
from cordum.workflow.outbox_entries import PublishJob, QueueTimer, RunNews, SendAlert
from cordum.workflow.runner import released_outbox
from tests.integration.test_workflow_runs import finished, start
from tests.integration.test_workflow_stored_outbox import started
from tests.workflow_harness import WorkflowStack

TWO_STEPS = {"steps": {
    "a": {"type": "worker", "topic": "job.echo", "input": {"n": "${input.n}"}},
    "b": {"type": "worker", "topic": "job.echo", "depends_on": ["a"],
          "input": {"n": "${steps.a.output.echo.n}"}}}}
FAN_OUT = {"steps": {
    "a": {"type": "worker", "topic": "job.echo", "input": {"n": 1}},
    "b": {"type": "worker", "topic": "job.echo", "input": {"n": 2}}}}


def watch_carry_outs(s: WorkflowStack, monkeypatch: pytest.MonkeyPatch,
                     fail_first: int = 0) -> list[tuple[list[str], bool]]:
    """Per carry-out: its step jobs, and whether the run's lock was held meanwhile; the
    first ``fail_first`` carry-outs fail before publishing anything."""
    seen: list[tuple[list[str], bool]] = []
    perform = OutboxRunner.perform

    async def watched(self: OutboxRunner, run: Any, outbox: Any, **kw: Any) -> None:
        jobs = [e.job_id for e in outbox if isinstance(e, PublishJob)]
        seen.append((jobs, bool(await s.redis.exists(keys.run_lock_key(run.id)))))
        if len(seen) <= fail_first:
            raise ConnectionError("NATS is down")
        await perform(self, run, outbox, **kw)

    monkeypatch.setattr(OutboxRunner, "perform", watched)
    return seen


async def outbox_of(s: WorkflowStack, run_id: str) -> list[dict[str, Any]] | None:
    raw = await s.redis.get(keys.outbox_key(run_id))
    return json.loads(raw) if raw is not None else None


def test_one_step_job_is_published_after_the_save_released_the_lock_and_runs_once(
        stack, monkeypatch):
    loop, s = stack
    seen = watch_carry_outs(s, monkeypatch)

    async def scenario():
        run_id = await start(s, TWO_STEPS, {"n": 7})
        (event,) = s.queue.take()
        await s.runner.apply(event)  # the start: step a's job
        kept = await outbox_of(s, run_id)
        run = await finished(s, run_id)
        return run_id, kept, run, await outbox_of(s, run_id)

    run_id, kept, run, left = loop.run_until_complete(scenario())
    a, b = f"{run_id}:a@1", f"{run_id}:b@1"
    # Each carry-out ran with the lock already released by the save.
    assert [jobs for jobs, _ in seen if jobs] == [[a], [b]]
    assert not any(locked for _, locked in seen)
    # The save kept step a's publish, and nothing else (the news is best effort) ...
    assert [list(entry) for entry in kept or []] == [["job"]]
    assert kept[0]["job"]["job_id"] == a
    # ... and the end of each job dropped its kept publish: nothing is left, nothing ran twice.
    assert left is None
    assert s.worker.received == [a, b]
    assert run.steps["b"].output == {"echo": {"n": 7}}


def test_a_publish_that_failed_after_the_released_save_is_carried_out_by_the_retry(
        stack, monkeypatch):
    loop, s = stack
    watch_carry_outs(s, monkeypatch, fail_first=1)

    async def scenario():
        run_id = await start(s, TWO_STEPS, {"n": 3})
        (event,) = s.queue.take()
        with pytest.raises(RetryAfter):
            await s.runner.apply(event)
        locked = await s.redis.exists(keys.run_lock_key(run_id))
        kept = await outbox_of(s, run_id)
        received = list(s.worker.received)
        await s.runner.apply(event)  # the event delivered again
        return run_id, locked, kept, received, await finished(s, run_id)

    run_id, locked, kept, received, run = loop.run_until_complete(scenario())
    a = f"{run_id}:a@1"
    assert not locked and received == []  # saved and unlocked, nothing sent
    assert kept is not None and kept[0]["job"]["job_id"] == a
    assert s.worker.received == [a, f"{run_id}:b@1"]  # sent by the retry, run once
    assert run.status == "succeeded"


def test_two_step_jobs_are_saved_and_carried_out_under_the_lock(stack, monkeypatch):
    loop, s = stack
    seen = watch_carry_outs(s, monkeypatch)

    async def scenario():
        run_id = await start(s, FAN_OUT, {})
        return run_id, await finished(s, run_id), await outbox_of(s, run_id)

    run_id, run, left = loop.run_until_complete(scenario())
    fan = [(jobs, locked) for jobs, locked in seen if len(jobs) == 2]
    assert fan == [([f"{run_id}:a@1", f"{run_id}:b@1"], True)]
    assert left is None and sorted(s.worker.received) == [f"{run_id}:a@1", f"{run_id}:b@1"]


def test_a_kept_publish_of_a_job_the_store_never_saw_is_carried_out_not_dropped(stack):
    """Only a job the job store holds proves its publish landed: an event naming a job
    that is not stored carries the kept publish out."""
    loop, s = stack
    sent: list[str] = []

    async def publish_durable(subject: str, packet: Any, *, msg_id: str) -> None:
        sent.append(packet.job_request.job_id)

    async def scenario():
        run_id = await started(s)
        job_id = f"{run_id}:wait@1"
        s.publisher.publish_durable = publish_durable  # type: ignore[method-assign]
        await s.redis.set(keys.outbox_key(run_id), json.dumps(
            [{"job": {"job_id": job_id, "step_id": "wait", "topic": "job.echo"}}]))
        await s.runner.apply(RunEvent("job", run_id, tenant=s.tenant, job_id=job_id))
        return job_id, await outbox_of(s, run_id)

    job_id, left = loop.run_until_complete(scenario())
    assert sent == [job_id] and left is None


def test_what_a_released_save_keeps():
    job = PublishJob(job_id="r:a@1", step_id="a", topic="job.echo")
    other = PublishJob(job_id="r:b@1", step_id="b", topic="job.echo")
    news = RunNews(status="running", events=())
    alert = SendAlert(message="m", severity=1, source_component="c", details={},
                      trace_id="r")
    assert released_outbox([job, news, alert]) == [job]
    assert released_outbox([news]) == []
    assert released_outbox([job, other, news]) is None  # two jobs: under the lock
    assert released_outbox([job, QueueTimer(fire_at=1.0)]) is None
