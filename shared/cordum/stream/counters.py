"""What the stream service counts, and its EMF lines (``cordum.metrics``).

Every METRICS_INTERVAL_S, when STREAM_EMF_METRICS is on, one line, service
``cordum-stream``: StreamConnections (streams open now, a gauge), and since the last
line StreamFramesSent, StreamSlowClientsClosed (clients closed because their buffer
filled), StreamEventsDropped (bus messages the writer had no room for) and
StreamEventsWritten (events this replica's writer sent out). Like the
bridge's: the container's log driver ships stdout, CloudWatch extracts the metrics.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass

from cordum.metrics import Metrics

SERVICE = "cordum-stream"
METRICS_INTERVAL_S = 60.0
CONNECTIONS_METRIC = "StreamConnections"
SLOW_CLOSED_METRIC = "StreamSlowClientsClosed"
FRAMES_SENT_METRIC = "StreamFramesSent"
DROPPED_METRIC = "StreamEventsDropped"
WRITTEN_METRIC = "StreamEventsWritten"


@dataclass(slots=True)
class StreamCounters:
    """Totals since the process started (connections: open now)."""

    connections: int = 0
    frames_sent: int = 0
    slow_closed: int = 0
    events_dropped: int = 0
    events_written: int = 0
    """Events this replica's writer sent out (logged or live)."""


class MetricsReporter:
    """Writes the counters as EMF every ``interval_s`` until stopped."""

    def __init__(self, counters: StreamCounters, metrics: Metrics | None = None,
                 interval_s: float = METRICS_INTERVAL_S) -> None:
        self._counters = counters
        self._metrics = metrics or Metrics(service=SERVICE)
        self._interval_s = interval_s
        self._last = StreamCounters()

    def report(self) -> None:
        now, last = self._counters, self._last
        self._metrics.count(CONNECTIONS_METRIC, now.connections)
        self._metrics.count(FRAMES_SENT_METRIC, now.frames_sent - last.frames_sent)
        self._metrics.count(SLOW_CLOSED_METRIC, now.slow_closed - last.slow_closed)
        self._metrics.count(DROPPED_METRIC, now.events_dropped - last.events_dropped)
        self._metrics.count(WRITTEN_METRIC, now.events_written - last.events_written)
        self._metrics.flush()
        self._last = dataclasses.replace(now)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            self.report()
