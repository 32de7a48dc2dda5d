"""Scheduler metrics as CloudWatch Embedded Metric Format (EMF) log lines.

Counters and timings are gathered in memory during an invocation and written
as one JSON line per dimension set when the handler flushes; CloudWatch turns
those lines into metrics. Plain ``json`` + ``print``: no client, no network
call and no import cost at cold start. Names are Cordum's (jobs_received,
jobs_dispatched, jobs_completed, safety_denied, safety_unavailable,
dispatch_latency, job_lock_wait, stale_jobs, orphan_replayed, saga_*, ...).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from typing import IO

NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Cordum")

COUNT = "Count"
MILLISECONDS = "Milliseconds"


class Metrics:
    def __init__(self, namespace: str = NAMESPACE, service: str | None = None) -> None:
        self.namespace = namespace
        self.service = service or os.environ.get("POWERTOOLS_SERVICE_NAME", "cordum")
        # (dimension items) -> metric name -> (unit, values)
        self._data: dict[tuple[tuple[str, str], ...], dict[str, tuple[str, list[float]]]] = \
            defaultdict(dict)

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        self._add(name, COUNT, value, dimensions, accumulate=True)

    def observe_ms(self, name: str, value_ms: float, **dimensions: str) -> None:
        self._add(name, MILLISECONDS, value_ms, dimensions, accumulate=False)

    def _add(self, name: str, unit: str, value: float, dimensions: dict[str, str],
             *, accumulate: bool) -> None:
        key = tuple(sorted({k: str(v)[:255] for k, v in dimensions.items() if v}.items()))
        metrics = self._data[key]
        _, values = metrics.setdefault(name, (unit, []))
        if accumulate and values:
            values[0] += value
        else:
            values.append(value)

    def flush(self, out: IO[str] | None = None) -> int:
        """Write one EMF line per dimension set; returns the number of lines."""
        out = out or sys.stdout
        lines = 0
        now_ms = int(time.time() * 1000)
        for key, metrics in self._data.items():
            dims = dict(key)
            doc: dict[str, object] = {
                "_aws": {
                    "Timestamp": now_ms,
                    "CloudWatchMetrics": [{
                        "Namespace": self.namespace,
                        "Dimensions": [["service", *dims]],
                        "Metrics": [{"Name": n, "Unit": u} for n, (u, _) in metrics.items()],
                    }],
                },
                "service": self.service,
                **dims,
            }
            for name, (_, values) in metrics.items():
                doc[name] = values[0] if len(values) == 1 else values
            out.write(json.dumps(doc, separators=(",", ":")) + "\n")
            lines += 1
        out.flush()
        self._data.clear()
        return lines


METRICS = Metrics()
"""The process's metrics; handlers flush it at the end of each invocation."""
