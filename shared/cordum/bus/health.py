"""How well the bridge forwards: a liveness file for the container's health check,
and the forwarding lag as a metric.

Every REPORT_INTERVAL_S the bridge asks JetStream about each of its durable
consumers: how many messages wait (not yet delivered, or delivered and not yet
acked) and how old the oldest of them is (the first message on the consumer's
subject past its ack floor; everything at or below the floor is forwarded).
One answer serves two readers:

- ECS. When every consumer answered, the liveness file is touched. The
  container's health check (``python -m cordum.bus.health``) passes while the
  file is younger than HEALTH_MAX_AGE_S. A bridge that lost NATS, whose
  consumers are gone, or whose event loop is stuck stops touching it, and ECS
  replaces the task: what a restart can fix, a restart fixes.
- CloudWatch. One EMF line (``cordum.metrics``) per report, service
  ``cordum-bridge``: OLDEST_AGE_METRIC, the oldest waiting message's age (0
  when nothing waits), BACKLOG_METRIC, the messages waiting, and
  FORWARDED_METRIC, the messages the queues accepted since the last line. The
  container's log driver ships the line; CloudWatch Logs extracts the metrics.

Why the oldest message's age, and not SQS's ``ApproximateAgeOfOldestMessage``
of the submit and result queues: that one measures the functions that consume
those queues. A bridge that stopped forwarding sends nothing, so the queues stay
empty and look healthy. A count of forwards per minute cannot tell an idle stack
from a dead bridge, nor a bridge that runs but cannot send (SQS refusing, a lost
permission) from one with nothing to send. The oldest waiting message's age
does: a bridge that keeps up holds it near zero at any load, it climbs whatever
stops the forwarding while the bridge runs, and it is missing altogether when no
bridge reports (every task gone, or none reaching NATS). The alarm
(cordum_infra.observability) fires on either: the age above a bound, or no data.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cordum.config import ConfigError
from cordum.metrics import Metrics

if TYPE_CHECKING:
    import nats.js

    from cordum.bus.forward_policy import Route

log = logging.getLogger(__name__)

BRIDGE_SERVICE = "cordum-bridge"
"""The ``service`` dimension of the bridge's metrics."""
OLDEST_AGE_METRIC = "bridge_oldest_age_ms"
BACKLOG_METRIC = "bridge_backlog"
FORWARDED_METRIC = "bridge_forwarded"

REPORT_INTERVAL_S = 15.0
"""Four reports a minute: each one-minute metric period gets data even when one
report is late, and the liveness file is refreshed well within its bound."""
PROBE_TIMEOUT_S = 5.0
"""Longest one report may wait for JetStream (a few small API requests)."""
HEALTH_MAX_AGE_S = 60.0
"""The health check fails once the liveness file is older than this: four missed
reports in a row, so one slow answer or a short NATS reconnect is no failure."""
STARTUP_GRACE_S = 600.0
"""Before its first answered probe, a bridge that started less than this ago is
waiting for NATS, not dead: the health check passes. A stack created with its own
NATS cluster starts the bridge once the three nodes run, but JetStream still has
to elect a meta leader and the bridge to create its stream and consumers; a node
replaced at the same time (about 2 min: image pull, EFS mount, recovery) must not
cost the bridge too. Ten minutes covers that several times over; a bridge still
without an answer after it is replaced, and the deployment circuit breaker counts
it."""
STARTING_SUFFIX = ".starting"
"""``<health file>.starting``, written when the bridge starts: its time is the start."""


@dataclass(frozen=True, slots=True)
class ConsumerLag:
    """What one durable consumer has not forwarded yet."""

    durable: str
    waiting: int
    """Messages not yet delivered plus those delivered and not yet acked."""
    oldest_age_s: float
    """Age of the oldest of them; 0 when none waits."""


class ForwardingMonitor:
    """Probes the bridge's consumers every interval; touches the liveness file and
    writes the lag metrics after each answer.

    ``forwarded`` returns the running count of messages the queues accepted
    (``JobForwarder.counters["forwarded"]``). Without ``health_file`` no file is
    kept, without ``metrics`` no metric is written (a local bridge needs neither).
    """

    def __init__(
        self,
        js: nats.js.JetStreamContext,
        stream: str,
        routes: Sequence[Route],
        *,
        forwarded: Callable[[], int],
        health_file: Path | None = None,
        metrics: Metrics | None = None,
        interval_s: float = REPORT_INTERVAL_S,
        probe_timeout_s: float = PROBE_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._js = js
        self._stream = stream
        self._routes = list(routes)
        self._forwarded = forwarded
        self._health_file = health_file
        self._metrics = metrics
        self._interval_s = interval_s
        self._probe_timeout_s = probe_timeout_s
        self._clock = clock
        self._last_forwarded = forwarded()
        self._stopping = asyncio.Event()

    @classmethod
    def for_bridge(
        cls,
        js: nats.js.JetStreamContext,
        stream: str,
        routes: Sequence[Route],
        counters: Mapping[str, int],
        *,
        health_file: Path | None,
        emf_metrics: bool,
    ) -> ForwardingMonitor:
        return cls(
            js,
            stream,
            routes,
            forwarded=lambda: counters["forwarded"],
            health_file=health_file,
            metrics=Metrics(service=BRIDGE_SERVICE) if emf_metrics else None,
        )

    async def probe(self) -> list[ConsumerLag]:
        """One answer per consumer; raises when JetStream does not answer."""
        return [await self._lag(route) for route in self._routes]

    async def _lag(self, route: Route) -> ConsumerLag:
        from nats.js.errors import NotFoundError

        info = await self._js.consumer_info(
            self._stream, route.durable, timeout=self._probe_timeout_s
        )
        waiting = (info.num_pending or 0) + (info.num_ack_pending or 0)
        if not waiting:
            return ConsumerLag(route.durable, 0, 0.0)
        floor = info.ack_floor.stream_seq if info.ack_floor is not None else 0
        try:
            oldest = await self._js.get_msg(
                self._stream, seq=floor + 1, subject=route.subject, next=True
            )
        except NotFoundError:
            # Forwarded (and, on a work-queue stream, removed) since the count.
            return ConsumerLag(route.durable, waiting, 0.0)
        if oldest.time is None:
            return ConsumerLag(route.durable, waiting, 0.0)
        return ConsumerLag(
            route.durable, waiting, max(self._clock() - oldest.time.timestamp(), 0.0)
        )

    async def report(self) -> list[ConsumerLag] | None:
        """Probe, then touch the liveness file and write the metrics; None (and
        neither) when JetStream did not answer in time."""
        try:
            lags = await asyncio.wait_for(self.probe(), timeout=self._probe_timeout_s)
        except Exception as exc:
            log.warning(
                "forwarding probe failed, liveness not refreshed: %s: %s",
                type(exc).__name__,
                exc,
            )
            return None
        if self._health_file is not None:
            try:
                self._health_file.touch()
            except OSError as exc:
                log.error("liveness file %s not touched: %s", self._health_file, exc)
        forwarded = self._forwarded()
        if self._metrics is not None:
            oldest = max((lag.oldest_age_s for lag in lags), default=0.0)
            self._metrics.observe_ms(OLDEST_AGE_METRIC, oldest * 1000.0)
            self._metrics.count(BACKLOG_METRIC, sum(lag.waiting for lag in lags))
            self._metrics.count(FORWARDED_METRIC, forwarded - self._last_forwarded)
            self._metrics.flush()
        self._last_forwarded = forwarded
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "forwarding lag: %s",
                ", ".join(
                    f"{lag.durable} waiting={lag.waiting} oldest={lag.oldest_age_s:.1f}s"
                    for lag in lags
                ),
            )
        return lags

    async def run(self) -> None:
        """Report every interval until ``stop``; a failed report is logged, never raised."""
        while not self._stopping.is_set():
            await self.report()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=self._interval_s)

    def stop(self) -> None:
        self._stopping.set()


def starting_file(health_file: Path) -> Path:
    return health_file.with_name(health_file.name + STARTING_SUFFIX)


def mark_starting(health_file: Path | None) -> None:
    """Note the bridge's start (before it connects to NATS) for the health check's grace."""
    if health_file is None:
        return
    try:
        starting_file(health_file).touch()
    except OSError as exc:
        log.error("start marker %s not written: %s", starting_file(health_file), exc)


def liveness_age(health_file: Path, now: float | None = None) -> float | None:
    """Seconds since the bridge last touched ``health_file``; None when it never did."""
    try:
        touched = health_file.stat().st_mtime
    except FileNotFoundError:
        return None
    return max((time.time() if now is None else now) - touched, 0.0)


def main() -> None:
    """The container health check: exit 0 while the liveness file is fresh, else 1.

    Runs in the bridge's container with the bridge's environment, so it reads
    the same ``BRIDGE_HEALTH_FILE``.
    """
    from cordum.bus.settings import ENV_HEALTH_FILE, load_bridge_settings

    try:
        health_file = load_bridge_settings().health_file
    except ConfigError as exc:
        print(f"cordum-bridge health: bad configuration: {exc}", file=sys.stderr)
        raise SystemExit(1) from exc
    if health_file is None:
        print(f"cordum-bridge health: {ENV_HEALTH_FILE} is not set", file=sys.stderr)
        raise SystemExit(1)
    age = liveness_age(health_file)
    if age is None:
        started = liveness_age(starting_file(health_file))
        if started is not None and started <= STARTUP_GRACE_S:
            print(
                f"cordum-bridge health: waiting for NATS, started {started:.0f} s ago "
                f"(grace {STARTUP_GRACE_S:.0f} s)",
                file=sys.stderr,
            )
            raise SystemExit(0)
        print(f"cordum-bridge health: no probe answered yet ({health_file})", file=sys.stderr)
        raise SystemExit(1)
    if age > HEALTH_MAX_AGE_S:
        print(
            f"cordum-bridge health: last answered probe {age:.0f} s ago "
            f"(bound {HEALTH_MAX_AGE_S:.0f} s)",
            file=sys.stderr,
        )
        raise SystemExit(1)
    raise SystemExit(0)


if __name__ == "__main__":
    main()
