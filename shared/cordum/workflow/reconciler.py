"""The workflow reconciler (Cordum's, under its TTL-hold lock): what no event said.

Each tick, bounded by its deadline:

1. timers that are due (``cordum:wf:delay:timers``) fire now: their queued message
   was lost, or they were further out than SQS's 15-minute delay;
2. timers due before the next tick are queued with their exact delay (the far ones
   thus fire on time; a near one may get a second message, which finds nothing due);
3. open runs, least recently updated first, are looked over under their run lock: a
   step whose job ended without its event reaching the run (a lost result), a run
   whose start event was lost, a due timer, the workflow timeout.

Cordum ticks every 5 s; EventBridge fires once a minute, so one invocation ticks
every ``interval_s`` (default 10 s) while its time allows. An idle stack costs one
short invocation a minute: no open run, no timer, nothing read but two keys.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cordum.bus.workflow_events import RunEvent
from cordum.scheduler.errors import RetryAfter
from cordum.scheduler.reconciler import past
from cordum.scheduler.ticks import TickPolicy, run_ticks
from cordum.store.errors import LockBusy, StoreError

if TYPE_CHECKING:
    from collections.abc import Callable

    from cordum.workflow.runner import WorkflowRunner

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReconcilerPolicy:
    interval_s: float = 10.0
    """Between two ticks of one invocation (WORKFLOW_TICK_INTERVAL_S)."""
    runs_per_tick: int = 200
    """Open runs looked over per tick, least recently updated first (Cordum: 200)."""
    timers_per_tick: int = 500
    """Due timers fired per tick."""
    stale_start_s: float = 10.0
    """A run still pending this long after it was created lost its start event."""

    @classmethod
    def from_env(cls) -> ReconcilerPolicy:
        value = os.environ.get("WORKFLOW_TICK_INTERVAL_S", "")
        return cls(interval_s=float(value)) if value else cls()


@dataclass(slots=True)
class TickReport:
    timers_fired: int = 0
    timers_queued: int = 0
    runs_checked: int = 0
    runs_changed: int = 0
    errors: list[str] = field(default_factory=list)


class WorkflowReconciler:
    def __init__(self, runner: WorkflowRunner, policy: ReconcilerPolicy | None = None,
                 *, events: Any = None) -> None:
        self._runner = runner
        self._store = runner.store
        self._events = events
        self.policy = policy or ReconcilerPolicy()

    async def tick(self, deadline: float | None = None) -> TickReport:
        report = TickReport()
        now = time.time()
        for _workflow_id, run_id, due in await self._store.due_timers(
                now + self.policy.interval_s, self.policy.timers_per_tick):
            if past(deadline):
                return report
            if due <= now:
                await self._fire(run_id, due, report)
            elif self._events is not None:
                try:
                    await self._events.send_timer(RunEvent("timer", run_id, due=due), due - now)
                    report.timers_queued += 1
                except Exception as exc:
                    report.errors.append(f"timer {run_id}: {exc}")
        for run_id in await self._store.open_runs(self.policy.runs_per_tick):
            if past(deadline):
                break
            report.runs_checked += 1
            try:
                if await self._runner.reconcile(run_id, stale_start_s=self.policy.stale_start_s):
                    report.runs_changed += 1
            except LockBusy:
                continue  # an event is being applied to it right now
            except (RetryAfter, StoreError) as exc:
                report.errors.append(f"run {run_id}: {exc}")
        return report

    async def _fire(self, run_id: str, due: float, report: TickReport) -> None:
        try:
            await self._runner.apply(RunEvent("timer", run_id, due=due))
            report.timers_fired += 1
        except (RetryAfter, StoreError) as exc:
            report.errors.append(f"timer {run_id}: {exc}")


async def tick_invocation(remaining_ms: Callable[[], int]) -> dict[str, Any]:
    """One scheduled invocation: ticks under the reconciler lock while time allows."""
    from cordum.bus.workflow_events import sqs_run_events
    from cordum.config import settings
    from cordum.workflow.wiring import default_runner

    cfg = settings()
    runner = default_runner()
    policy = ReconcilerPolicy.from_env()
    reconciler = WorkflowReconciler(
        runner, policy,
        events=sqs_run_events(cfg.workflow_queue_url, cfg.workflow_timer_queue_url))
    lock = runner.store.reconciler_lock()
    run = await run_ticks(reconciler.tick, lock, remaining_ms, policy.interval_s,
                          policy=TickPolicy(min_tick_s=2.0, max_ticks=60))
    return {"ticks": run.ticks, "failed_ticks": run.failed, "stopped": run.stopped,
            "timers_fired": sum(r.timers_fired for r in run.results),
            "timers_queued": sum(r.timers_queued for r in run.results),
            "runs_changed": sum(r.runs_changed for r in run.results),
            "errors": sum(len(r.errors) for r in run.results)}
