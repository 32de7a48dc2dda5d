"""One tenant's run must not stop the workflow tick for every tenant.

The exploit: a tenant saves a definition whose step has an ``input_schema`` with a
``$ref`` pointing nowhere, and starts a run of it that waits on a timer. Once the timer
is due, building that step's input raised in the validator; the tick caught only lock,
retry and store errors, so it aborted there, and the run, first in line, aborted every
later tick too: no other tenant's timer, lost result or timeout was handled again.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cordum.workflow import engine
from tests.workflow_tick_world import BAD_SCHEMA, FAR, TickWorld, tick_world


@pytest.fixture
def world() -> Iterator[TickWorld]:
    yield from tick_world()


def test_a_run_whose_step_schema_raises_does_not_stop_another_tenants_timer(world: TickWorld):
    # Given a run of tenant "mallory" (of a definition stored before saves checked its
    # schemas) whose due timer leads to a schema that raised, first in line, and a run
    # of tenant "alice" whose due timer comes after it
    bad = world.do(world.run_of(world.tenant("mallory"), BAD_SCHEMA, checked=False))
    good = world.do(world.run_of(world.tenant("alice")))
    world.do(world.make_due())

    # When the workflow tick runs once
    report = world.do(world.reconciler().tick())

    # Then alice's timer fired and her run went on to its end
    assert world.do(world.status(good)) == "succeeded"
    assert report.timers_fired >= 1
    # and mallory's run is not left blocking the line unnoticed: it raised and was
    # reported (or, with a validator that never raises, its step failed)
    bad_run = world.do(world.get(bad))
    assert any(bad in e for e in report.errors) or bad_run.steps["bad"].status == "failed"


def test_a_run_the_engine_raises_on_does_not_stop_another_tenants_timer(
        world: TickWorld, monkeypatch: pytest.MonkeyPatch):
    # Given a run of tenant "mallory" on which the engine's timer and reconcile entry
    # points always raise, first in line, and a due run of tenant "alice" after it
    bad = world.do(world.run_of(world.tenant("mallory"), FAR))
    good = world.do(world.run_of(world.tenant("alice")))
    world.do(world.make_due())
    on_timer, reconcile = engine.on_timer, engine.reconcile

    def raising_on_timer(run, *args, **kw):
        if run.id == bad:
            raise RuntimeError("engine bug on this run's shape")
        return on_timer(run, *args, **kw)

    def raising_reconcile(run, *args, **kw):
        if run.id == bad:
            raise RuntimeError("engine bug on this run's shape")
        return reconcile(run, *args, **kw)

    monkeypatch.setattr(engine, "on_timer", raising_on_timer)
    monkeypatch.setattr(engine, "reconcile", raising_reconcile)

    # When the workflow tick runs once
    report = world.do(world.reconciler().tick())

    # Then alice's run went on, and mallory's failure is in the report with its run id
    assert world.do(world.status(good)) == "succeeded"
    assert world.do(world.status(bad)) == "running"
    assert any(bad in e and "RuntimeError" in e for e in report.errors)
