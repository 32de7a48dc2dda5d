"""Held outputs checked again: the content check of each output held because the
kernel could not be reached runs once more, and what it decides is applied.

A tick (the replayer's, under its lock, every 30 s) reads the ``batch_size`` (100)
longest-held jobs of ``cordum:output:held``, oldest first, and for each while its
deadline allows:

- a job no longer waiting for its decision (a redelivered result decided it, or it
  is gone) is released;
- else its content is checked once more. A decision is recorded, or a quarantine
  applied, as the result path does (the API then serves the output as decided); the
  hold is released. Still no answer: the job stays held, unless it has been held
  ``max_hold_s`` or longer, then it is quarantined with ``output_check_unavailable``
  (DLQ entry and audit as any async quarantine). Every job held after it is younger,
  so within the limit: the tick ends there, the kernel being down.

A step job's run is told (``RunEvent.job_ended``) once its job is released, whoever
decided: the run waited on the decision and its earlier event found none.

Cost per tick: one ZRANGE; per job reached one meta read and, while it waits, one
prefetch (request and result head), one CheckContent (bounded by the deadline; an
open circuit answers without the network) and one or two writes. While the kernel is
down a tick checks the jobs past the hold limit and one more.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from cordum.bus.workflow_events import RunEvent
from cordum.config import DEFAULT_OUTPUT_HOLD_MAX_S
from cordum.metrics import METRICS
from cordum.scheduler.transitions import StateWriter
from cordum.store.errors import StoreError
from cordum.store.jobs import now_us

# The output policy's modules (output phase, check, client, prefetch, audit) are
# imported by a re-checker only: the replayer builds none while the policy is off.
if TYPE_CHECKING:
    from collections.abc import Callable

    from cordum.bus.workflow_events import RunEventSink
    from cordum.config import Settings
    from cordum.scheduler.engine import Engine
    from cordum.scheduler.output_phase import OutputPhase
    from cordum.store.held_outputs import HeldOutputs
    from cordum.store.jobs import JobStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HoldPolicy:
    """How long an output may wait for the kernel, and what one tick re-checks."""

    max_hold_s: float = DEFAULT_OUTPUT_HOLD_MAX_S
    """Held this long (from the first failed check), an output whose check still finds
    no kernel is quarantined (``CORDUM_OUTPUT_HOLD_MAX_S``)."""
    batch_size: int = 100
    """Held jobs read per tick, oldest first; each is checked at most once."""
    margin_s: float = 2.0
    """Kept back from a check's time for the writes after it."""
    min_check_s: float = 1.0
    """A check starts only with at least this long for it before the deadline."""

    def __post_init__(self) -> None:
        if self.max_hold_s <= 0 or self.batch_size < 1:
            raise ValueError("max_hold_s must be > 0 and batch_size >= 1")
        if self.margin_s < 0 or self.min_check_s <= 0:
            raise ValueError("margin_s must be >= 0 and min_check_s > 0")

    @classmethod
    def from_settings(cls, cfg: Settings) -> HoldPolicy:
        return cls(max_hold_s=cfg.output_hold_max_s)


@dataclass(slots=True)
class HeldReport:
    """What one tick did, for logs and the handler's answer."""

    listed: int = 0
    decided: int = 0
    """Decisions recorded (the output is served, or redacted, as decided)."""
    quarantined: int = 0
    """Quarantined by the policy, or past the hold limit with no kernel."""
    still_held: int = 0
    released: int = 0
    """No longer waiting when the tick came to them."""
    failed: int = 0
    """Left for the next tick: a store error, a record not written, a run not told."""
    stopped: str = ""
    """Why the tick ended before its list: "kernel unavailable", "deadline" or ""."""

    def as_dict(self) -> dict[str, Any]:
        return {"listed": self.listed, "decided": self.decided,
                "quarantined": self.quarantined, "still_held": self.still_held,
                "released": self.released, "failed": self.failed, "stopped": self.stopped}


@dataclass(slots=True)
class HeldOutputRechecker:
    """Checks held outputs again (see the module docstring)."""

    phase: OutputPhase
    store: JobStore
    held: HeldOutputs
    runs: RunEventSink | None
    policy: HoldPolicy = field(default_factory=HoldPolicy)
    clock_us: Callable[[], int] = now_us

    @classmethod
    def of_engine(cls, engine: Engine, policy: HoldPolicy | None = None, *,
                  held: HeldOutputs | None = None,
                  clock_us: Callable[[], int] = now_us) -> HeldOutputRechecker | None:
        """The re-checker over ``engine``'s ports; None when its output policy is off."""
        ports = engine.ports
        if ports.output is None:
            return None
        from cordum.scheduler.output_phase import OutputPhase
        from cordum.store.held_outputs import HeldOutputs

        redis: Any = ports.output.store
        held = held or HeldOutputs(redis)
        phase = OutputPhase(ports.output, ports, StateWriter(ports, engine.policy),
                            engine.policy, held)
        return cls(phase, ports.store, held, ports.runs, policy or HoldPolicy(), clock_us)

    async def tick(self, deadline: float | None = None) -> HeldReport:
        """One pass over the oldest held jobs; ``deadline`` (a ``time.monotonic()``
        instant) ends it early."""
        from cordum.safety.output_client import CONTENT_TIMEOUT_S

        report = HeldReport()
        try:
            entries = await self.held.oldest(self.policy.batch_size)
        except StoreError as exc:
            log.error("held outputs: listing failed: %s", exc)
            return report
        report.listed = len(entries)
        for job_id, since_us in entries:
            left = (CONTENT_TIMEOUT_S if deadline is None
                    else deadline - time.monotonic() - self.policy.margin_s)
            if left < self.policy.min_check_s:
                report.stopped = "deadline"
                break
            if not await self._one(job_id, since_us, min(CONTENT_TIMEOUT_S, left), report):
                report.stopped = "kernel unavailable"
                break
        if report.listed:
            log.info("held outputs tick: %s", report.as_dict())
            METRICS.count("output_held_decided", report.decided + report.quarantined)
        return report

    async def _one(self, job_id: str, since_us: int, timeout_s: float,
                   report: HeldReport) -> bool:
        """Check one held job; False when the kernel still gave no answer."""
        from cordum.scheduler.output_phase import ContentOutcome
        from cordum.store.results import output_pending

        try:
            meta = await self.store.get(job_id)
        except StoreError as exc:
            log.warning("held outputs: reading %s failed: %s", job_id, exc)
            report.failed += 1
            return True
        if not output_pending(meta, output_policy=True):
            report.released += 1
        else:
            held_s = (self.clock_us() - since_us) / 1_000_000
            try:
                outcome = await self.phase.recheck(
                    job_id, meta["result_ptr"], timeout_s,
                    give_up_s=held_s if held_s >= self.policy.max_hold_s else None)
            except Exception:
                log.exception("held outputs: re-checking %s failed", job_id)
                report.failed += 1
                return True
            if outcome is ContentOutcome.HELD:
                report.still_held += 1
                return False
            if outcome is ContentOutcome.UNRECORDED:
                report.failed += 1
                return True
            if outcome is ContentOutcome.DECIDED:
                report.decided += 1
            else:
                report.quarantined += 1
        if await self._tell_run(job_id, meta.get("workflow_id", "")):
            try:
                await self.held.release(job_id)
            except StoreError as exc:  # released by the next tick, as decided
                log.warning("held outputs: %s", exc)
        else:
            report.failed += 1
        return True

    async def _tell_run(self, job_id: str, run_id: str) -> bool:
        """Hand a step job's end on to its run (``workflow_id`` is the run's id on step
        jobs); False when the send failed."""
        if not run_id or self.runs is None:
            return True
        # The queue is FIFO: it drops an event whose id it saw in the last 5 minutes,
        # and this job's end was sent already, when its output was held. The decision's
        # time as ``due`` (which a job event is not read for) makes this one new.
        event = replace(RunEvent.job_ended(job_id, run_id), due=self.clock_us() / 1_000_000)
        try:
            await self.runs.send(event)
        except Exception as exc:
            log.warning("held outputs: workflow event for %s not sent: %s", job_id, exc)
            return False
        return True
