"""EMF lines: one per dimension set, counters summed, timings listed."""

from __future__ import annotations

import io
import json

from cordum.metrics import Metrics


def test_counters_and_timings_become_emf_lines():
    m = Metrics(namespace="Test", service="svc")
    m.count("jobs_received", topic="job.a")
    m.count("jobs_received", topic="job.a")
    m.count("jobs_completed", topic="job.a", status="SUCCEEDED")
    m.observe_ms("dispatch_latency", 12.5, topic="job.a")
    m.observe_ms("dispatch_latency", 7.5, topic="job.a")
    out = io.StringIO()
    assert m.flush(out) == 2
    docs = [json.loads(line) for line in out.getvalue().splitlines()]
    by_status = {d.get("status"): d for d in docs}
    plain = by_status[None]
    assert plain["jobs_received"] == 2 and plain["dispatch_latency"] == [12.5, 7.5]
    cw = plain["_aws"]["CloudWatchMetrics"][0]
    assert cw["Namespace"] == "Test" and cw["Dimensions"] == [["service", "topic"]]
    assert {x["Name"]: x["Unit"] for x in cw["Metrics"]} == {
        "jobs_received": "Count", "dispatch_latency": "Milliseconds"}
    done = by_status["SUCCEEDED"]
    assert done["jobs_completed"] == 1 and done["topic"] == "job.a"
    assert m.flush(io.StringIO()) == 0  # flushed data is gone
