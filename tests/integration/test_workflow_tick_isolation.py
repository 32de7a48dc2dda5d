"""The workflow tick over several tenants' runs on the real Redis: one run that always
raises neither stops the others nor stays open for ever, and one tenant with many due
runs does not keep another's from its turn (tests/workflow_tick_world.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cordum.workflow import engine, keys
from cordum.workflow.model import RunStatus
from cordum.workflow.run_errors import MAX_RUN_ERRORS
from tests.workflow_tick_world import FAR, TickWorld, tick_world


@pytest.fixture
def world() -> Iterator[TickWorld]:
    yield from tick_world()


def always_raising_for(monkeypatch: pytest.MonkeyPatch, run_id: str) -> None:
    """The engine's timer and reconcile entry points raise for this run only."""
    for name in ("on_timer", "reconcile"):
        real = getattr(engine, name)

        def raising(run, *args, _real=real, **kw):
            if run.id == run_id:
                raise RuntimeError("engine bug on this run's shape " + "x" * 2000)
            return _real(run, *args, **kw)

        monkeypatch.setattr(engine, name, raising)


def test_a_run_that_always_raises_fails_with_engine_error_while_others_go_on(
        world: TickWorld, monkeypatch: pytest.MonkeyPatch):
    # Given a run the engine always raises on, first in line, and a due run of each of
    # two other tenants behind it
    bad = world.do(world.run_of(world.tenant("mallory"), FAR))
    first = world.do(world.run_of(world.tenant("alice")))
    second = world.do(world.run_of(world.tenant("bob")))
    world.do(world.make_due())
    always_raising_for(monkeypatch, bad)
    reconciler = world.reconciler()

    # When the tick runs once: the other tenants' runs went on, the bad one is still open
    report = world.do(reconciler.tick())
    assert world.do(world.status(first)) == "succeeded"
    assert world.do(world.status(second)) == "succeeded"
    assert world.do(world.status(bad)) == "running"
    assert any(bad in e for e in report.errors)

    # and a new run of alice's made due meanwhile is served by every later tick
    for tick in range(2, MAX_RUN_ERRORS):
        later = world.do(world.run_of(world.tenant("alice")))
        world.do(world.make_due())
        world.do(reconciler.tick())
        assert world.do(world.status(later)) == "succeeded", tick
        assert world.do(world.status(bad)) == "running", tick

    # When the tick runs the bounded number of times over the bad run (another process
    # ticking on the shared Redis may serve it meanwhile and restart its count: later,
    # never sooner)
    for _ in range(3 * MAX_RUN_ERRORS):
        world.do(reconciler.tick())
        if world.do(world.status(bad)) != "running":
            break

    # Then the run ended failed with engine_error, its open step closed, and its
    # timeline says why; it is no longer open nor waiting on a timer
    run = world.do(world.get(bad))
    assert run.status == RunStatus.FAILED
    assert run.error is not None and run.error["code"] == "engine_error"
    assert "RuntimeError" in run.error["message"] and len(run.error["message"]) <= 512
    assert run.steps["wait"].status == "cancelled"
    timeline = world.do(world.store.timeline(run.org_id, bad))
    assert timeline is not None
    assert timeline[-1]["type"] == "run_status" and timeline[-1]["status"] == "failed"
    assert "engine_error" in timeline[-1]["message"]
    assert world.do(world.redis.zscore(keys.OPEN_RUNS_KEY, bad)) is None
    assert world.do(world.redis.zscore(
        keys.TIMERS_KEY, keys.timer_member(run.workflow_id, bad))) is None
    assert not world.do(world.redis.exists(keys.run_errors_key(bad)))


def test_a_run_that_recovers_starts_its_count_again(world: TickWorld,
                                                    monkeypatch: pytest.MonkeyPatch):
    # Given a run that raised on a few ticks, then is served by one
    bad = world.do(world.run_of(world.tenant("mallory"), {
        "wait": {"type": "delay", "delay_sec": 1},
        "wait2": {"type": "delay", "delay_sec": 60, "depends_on": ["wait"]}}))
    world.do(world.make_due())
    with monkeypatch.context() as patch:
        always_raising_for(patch, bad)
        reconciler = world.reconciler()
        for _ in range(MAX_RUN_ERRORS - 1):
            world.do(reconciler.tick())
        counted = int(world.do(world.redis.get(keys.run_errors_key(bad))) or 0)
        assert 0 < counted < MAX_RUN_ERRORS
    world.do(reconciler.tick())

    # Then its count is gone and it went on with its steps
    assert not world.do(world.redis.exists(keys.run_errors_key(bad)))
    run = world.do(world.get(bad))
    assert run.status == "running" and run.steps["wait"].status == "succeeded"


def test_one_tenant_with_many_due_runs_does_not_hold_back_another(world: TickWorld):
    # Given budgets of 8 timers and 8 runs per tick (so at most 2 of each per tenant),
    # twenty due runs of tenant A first in line and one of tenant B after them
    many = [world.do(world.run_of(world.tenant("a"))) for _ in range(20)]
    lone = world.do(world.run_of(world.tenant("b")))
    world.do(world.make_due())
    reconciler = world.reconciler(timers_per_tick=8, runs_per_tick=8)

    # When the tick runs once
    world.do(reconciler.tick())

    # Then B's run was served, and A's served runs stayed within its share
    assert world.do(world.status(lone)) == "succeeded"
    done = [r for r in many if world.do(world.status(r)) == "succeeded"]
    assert 0 < len(done) <= 4

    # And A's runs left for later are not lost: later ticks serve them all
    for _ in range(5):
        world.do(reconciler.tick())
    assert [world.do(world.status(r)) for r in many] == ["succeeded"] * 20


def test_a_run_that_cannot_even_be_failed_is_dropped_from_the_tick(
        world: TickWorld, monkeypatch: pytest.MonkeyPatch):
    # Given a run the engine always raises on, whose failing raises too
    bad = world.do(world.run_of(world.tenant("mallory"), FAR))
    world.do(world.make_due())
    always_raising_for(monkeypatch, bad)

    def raising_fail_run(run, *args, **kw):
        raise RuntimeError("cannot close this run either")

    monkeypatch.setattr(engine, "fail_run", raising_fail_run)
    reconciler = world.reconciler()

    # When the tick has run over it the bounded number of times
    for _ in range(3 * MAX_RUN_ERRORS):
        world.do(reconciler.tick())
        if world.do(world.redis.zscore(keys.OPEN_RUNS_KEY, bad)) is None:
            break

    # Then it is out of the open runs, the timers and its tenant's active runs, its
    # document is as it was, and its timeline says it was dropped
    run = world.do(world.get(bad))
    assert run.status == "running"
    assert world.do(world.redis.zscore(keys.OPEN_RUNS_KEY, bad)) is None
    assert world.do(world.redis.zscore(
        keys.TIMERS_KEY, keys.timer_member(run.workflow_id, bad))) is None
    assert not world.do(world.redis.sismember(keys.active_runs_key(run.org_id), bad))
    timeline = world.do(world.store.timeline(run.org_id, bad))
    assert timeline is not None and timeline[-1]["type"] == "run_dropped"
    assert "engine_error" in timeline[-1]["message"]


def test_open_runs_a_tick_passes_over_are_looked_over_by_the_next_ones(
        world: TickWorld, monkeypatch: pytest.MonkeyPatch):
    # Given six open runs of tenant A that no tick changes, one of tenant B, and one run
    # per tenant per tick (in a budget that leaves room for other tests' tenants)
    many = [world.do(world.run_of(world.tenant("a"), FAR)) for _ in range(6)]
    lone = world.do(world.run_of(world.tenant("b"), FAR))
    world.do(world.make_due())
    looked: list[list[str]] = []
    reconcile = world.runner.reconcile

    async def counted(run_id: str, **kw):
        looked[-1].append(run_id)
        return await reconcile(run_id, **kw)

    monkeypatch.setattr(world.runner, "reconcile", counted)
    reconciler = world.reconciler(runs_per_tick=40, tenant_share=40)

    # When the tick runs as many times as A has runs (and a few more: another process
    # ticking on the shared Redis may move a run back too)
    for _ in range(len(many) + 3):
        looked.append([])
        world.do(reconciler.tick())

    # Then B's run was looked over by every tick, one of A's per tick, each of A's in turn
    ours = [[r for r in tick if r in {*many, lone}] for tick in looked]
    assert all(lone in tick for tick in ours)
    assert all(len([r for r in tick if r in many]) == 1 for tick in ours)
    assert {r for tick in ours for r in tick if r in many} == set(many)


def test_a_runs_tenant_is_read_from_its_head_or_else_from_the_whole_document(world: TickWorld):
    import contextlib
    import json
    import uuid

    from cordum.workflow.fairness import RUN_HEAD_BYTES, owners_of
    from cordum.workflow.model import WorkflowRun

    # Given a run whose input's characters are cut in two at the head's end, and one
    # stored with its fields in another order
    for workflow_id in ("wf-cut", "wf-cutx"):  # one of the two ends the head mid-character
        cut = WorkflowRun(id=str(uuid.uuid4()), workflow_id=workflow_id,
                          org_id=world.tenant("a"), input={"text": "é" * RUN_HEAD_BYTES})
        raw = json.dumps(cut.to_json(), separators=(",", ":"), ensure_ascii=False).encode()
        with contextlib.suppress(UnicodeDecodeError):
            raw[:RUN_HEAD_BYTES].decode()
            continue
        break
    other = str(uuid.uuid4())
    reordered = {"org_id": world.tenant("b"), "id": other, "workflow_id": "wf-b"}
    gone = str(uuid.uuid4())
    stored = {keys.run_key(cut.id): raw, keys.run_key(other): json.dumps(reordered)}
    world.do(world.redis.mset(stored))
    try:
        # When the tick reads their tenants
        owners = world.do(owners_of(world.redis, [cut.id, other, gone]))
    finally:
        world.do(world.redis.delete(*stored))

    # Then each is its own, and a run that is gone has none
    assert owners == {cut.id: (world.tenant("a"), cut.workflow_id),
                      other: (world.tenant("b"), "wf-b"), gone: ("", "")}
