"""The workflow reconciler (Cordum's, under its TTL-hold lock): what no event said.

Each tick, bounded by its deadline:

1. timers that are due (``cordum:wf:delay:timers``) fire now: their queued message
   was lost, or they were further out than SQS's 15-minute delay;
2. timers due before the next tick are queued with their exact delay (the far ones
   thus fire on time; a near one may get a second message, which finds nothing due);
3. open runs, least recently updated or looked over first, are looked over under
   their run lock: a step whose job ended without its event reaching the run (a lost
   result), a run whose start event was lost, a due timer, the workflow timeout.

Cordum ticks every 5 s; EventBridge fires once a minute, so one invocation ticks
every ``interval_s`` (default 10 s) while its time allows. An idle stack costs one
short invocation a minute: no open run, no timer, nothing read but two keys.

One run never stops the others. A timer fire or a pass over a run that raises
anything but a lock, retry or store error is logged with the run and its tenant,
counted (``workflow_tick_run_errors``), and the tick goes on with the next run; a run
that raised is not looked at again in the same tick. After ``MAX_RUN_ERRORS`` (5)
ticks in a row in which it raised, the run is failed with ``engine_error``
(:mod:`cordum.workflow.run_errors`).

Fair shares. Each tick reads pages of ``scan_factor`` (4) times its budgets, and
serves the tenants found there in turn, each at most a ``tenant_share`` (1/4) of each
budget: 50 of the 200 open runs and 125 of the 500 due timers per tick, by default.
What a tick leaves is not lost: a due timer stays due, and the open runs a tick went
past (left over, then looked over, in that order) move to the back of the open-run
list, so the next tick starts with the ones it left, and a tenant's thousands of runs
ahead of another's take pages, not the whole list, to get past.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from cordum.bus.workflow_events import RunEvent
from cordum.errors import RetryAfter
from cordum.lambdas.ticks import TickPolicy, past, run_ticks
from cordum.metrics import METRICS
from cordum.store.errors import LockBusy, StoreError
from cordum.workflow.fairness import fair_pick, look_later, owners_of
from cordum.workflow.run_errors import ENGINE_ERROR, MAX_RUN_ERRORS, RunErrors, engine_error

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from cordum.workflow.runner import WorkflowRunner

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ReconcilerPolicy:
    interval_s: float = 10.0
    """Between two ticks of one invocation (WORKFLOW_TICK_INTERVAL_S)."""
    runs_per_tick: int = 200
    """Open runs looked over per tick, least recently updated or looked over first
    (Cordum: 200)."""
    timers_per_tick: int = 500
    """Due timers fired (and near ones queued) per tick."""
    stale_start_s: float = 10.0
    """A run still pending this long after it was created lost its start event."""
    tenant_share: int = 4
    """One tenant is served at most 1/this of each budget per tick (50 open runs and 125
    due timers by default): a full tick serves at least this many tenants."""
    scan_factor: int = 4
    """Pages of open runs and timers read per tick, in budgets: how far behind one
    tenant's runs a tick looks for other tenants' runs."""

    @property
    def runs_per_tenant(self) -> int:
        return max(1, self.runs_per_tick // max(self.tenant_share, 1))

    @property
    def timers_per_tenant(self) -> int:
        return max(1, self.timers_per_tick // max(self.tenant_share, 1))

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
        self._errors = RunErrors(runner.store.redis)
        self.policy = policy or ReconcilerPolicy()

    async def tick(self, deadline: float | None = None) -> TickReport:
        report, turn = TickReport(), _Turn()
        try:
            if await self._timers(deadline, report, turn):
                await self._open_runs(deadline, report, turn)
        finally:
            await self._forget_errors(turn, report)
        return report

    async def _timers(self, deadline: float | None, report: TickReport, turn: _Turn) -> bool:
        """Fires the due timers, tenants in turn; queues the near ones. False when the
        deadline came first."""
        policy, now = self.policy, time.time()
        page = await self._store.due_timers(now + policy.interval_s,
                                            policy.timers_per_tick * policy.scan_factor)
        due = {run_id: when for _, run_id, when in page if when <= now}
        turn.workflows.update((run_id, wf) for wf, run_id, _ in page)
        for run_id in await self._pick(list(due), policy.timers_per_tick,
                                       policy.timers_per_tenant):
            if past(deadline):
                return False
            event = RunEvent("timer", run_id, due=due[run_id])
            if await self._guarded(run_id, "timer", self._runner.apply(event), report, turn):
                report.timers_fired += 1
        if self._events is None:
            return True
        near = [(run_id, when) for _, run_id, when in page if when > now]
        for run_id, when in near[:max(policy.timers_per_tick - len(due), 0)]:
            if past(deadline):
                return False
            try:
                await self._events.send_timer(RunEvent("timer", run_id, due=when), when - now)
                report.timers_queued += 1
            except Exception as exc:
                report.errors.append(f"timer {run_id}: {exc}")
        return True

    async def _open_runs(self, deadline: float | None, report: TickReport,
                         turn: _Turn) -> None:
        """A pass over each open run picked, tenants in turn; then those passed over and
        those looked over go to the back of the list."""
        policy = self.policy
        page = [r for r in await self._store.open_runs(policy.runs_per_tick * policy.scan_factor)
                if r not in turn.failed]
        picked = await self._pick(page, policy.runs_per_tick, policy.runs_per_tenant)
        looked: list[str] = []
        for run_id in picked:
            if past(deadline):
                break
            report.runs_checked += 1
            looked.append(run_id)
            changed = await self._guarded(run_id, "run", self._runner.reconcile(
                run_id, stale_start_s=policy.stale_start_s), report, turn)
            if changed:
                report.runs_changed += 1
        chosen = set(picked)
        try:
            await look_later(self._store.redis, [r for r in page if r not in chosen] + looked)
        except StoreError as exc:
            report.errors.append(f"open runs: {exc}")

    async def _pick(self, run_ids: list[str], limit: int, per_tenant: int) -> list[str]:
        if len(run_ids) <= per_tenant:
            return run_ids[:limit]  # no tenant can have more than its share
        try:
            owners = await owners_of(self._store.redis, run_ids)
        except Exception as exc:  # a share is a courtesy: never a reason to stop the tick
            log.warning("workflow tick: tenants of runs not read (%s); in list order", exc)
            return run_ids[:limit]
        return fair_pick(run_ids, lambda r: owners.get(r, ("", ""))[0], limit=limit,
                         per_tenant=per_tenant)

    async def _guarded(self, run_id: str, what: str, op: Awaitable[T], report: TickReport,
                       turn: _Turn) -> T | None:
        """``op`` on one run: its result, or None when it did not complete. A lock held
        elsewhere is left for the next tick, a retry or store error is reported, and any
        other exception is reported, logged and counted against the run."""
        try:
            result = await op
        except LockBusy:
            return None  # an event is being applied to it right now
        except (RetryAfter, StoreError) as exc:
            report.errors.append(f"{what} {run_id}: {exc}")
            return None
        except Exception as exc:
            turn.failed.add(run_id)
            try:
                await self._raised(run_id, what, exc, report, turn)
            except Exception:
                log.exception("workflow tick: run %s: its failure not counted", run_id)
            return None
        turn.served.add(run_id)
        return result

    async def _raised(self, run_id: str, what: str, exc: Exception, report: TickReport,
                      turn: _Turn) -> None:
        """Reports, logs and counts the run's failure; at the bound, fails the run (or,
        when that raises too, drops it from the tick)."""
        error = engine_error(exc)
        report.errors.append(f"{what} {run_id}: {error['message']}")
        METRICS.count("workflow_tick_run_errors", phase=what)
        tenant, workflow_id = await self._owner(run_id)
        workflow_id = workflow_id or turn.workflows.get(run_id, "")
        log.error("workflow tick: %s of run %s (tenant %s) raised", what, run_id,
                  tenant or "?", exc_info=exc)
        try:
            count = await self._errors.record(run_id)
        except StoreError as err:
            report.errors.append(f"run {run_id}: {err}")
            return
        if count < MAX_RUN_ERRORS:
            return
        try:
            ended = await self._runner.fail(run_id, error)
        except (RetryAfter, StoreError) as err:  # LockBusy too: the next tick tries again
            report.errors.append(f"run {run_id}: not failed yet: {err}")
            return
        except Exception as err:
            log.error("workflow tick: run %s (tenant %s) raised in %d ticks and cannot be "
                      "failed either: dropped from the tick, its document left as it is",
                      run_id, tenant or "?", count, exc_info=err)
            METRICS.count("workflow_tick_runs_dropped")
            await self._quietly(self._errors.drop(run_id, tenant=tenant,
                                                  workflow_id=workflow_id, error=error), report)
            return
        if ended:
            log.error("workflow tick: run %s (tenant %s) failed with %s after %d ticks that "
                      "raised", run_id, tenant or "?", ENGINE_ERROR, count)
            METRICS.count("workflow_runs_engine_error")
        await self._quietly(self._errors.clear([run_id]), report)

    async def _owner(self, run_id: str) -> tuple[str, str]:
        """(tenant, workflow id) of a run, for the log; ("", "") when not readable."""
        try:
            return (await owners_of(self._store.redis, [run_id]))[run_id]
        except Exception:  # only the log loses the tenant
            return "", ""

    async def _forget_errors(self, turn: _Turn, report: TickReport) -> None:
        await self._quietly(self._errors.clear(turn.served - turn.failed), report)

    @staticmethod
    async def _quietly(op: Awaitable[None], report: TickReport) -> None:
        try:
            await op
        except StoreError as exc:
            report.errors.append(str(exc))


@dataclass(slots=True)
class _Turn:
    """The runs one tick went over."""

    served: set[str] = field(default_factory=set)
    """Runs whose timer fire or pass completed."""
    failed: set[str] = field(default_factory=set)
    """Runs whose timer fire or pass raised: not looked at again in this tick."""
    workflows: dict[str, str] = field(default_factory=dict)
    """Run id -> workflow id, as the timers read name them."""


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
