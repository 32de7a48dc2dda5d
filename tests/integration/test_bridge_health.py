"""The bridge's forwarding monitor on a real JetStream stream (cordum.bus.health).

Each test runs the forwarder of tests/integration/test_bridge.py (its own
stream, consumers and Redis keys, an in-memory queue) and asks the monitor what
a bridge task would report: how many messages wait, how old the oldest is, and
whether the liveness file the container's health check reads was touched.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import nats
import pytest

from cordum.bus.health import (
    BACKLOG_METRIC,
    BRIDGE_SERVICE,
    FORWARDED_METRIC,
    OLDEST_AGE_METRIC,
    ForwardingMonitor,
    liveness_age,
)
from cordum.metrics import Metrics
from tests.helpers import eventually, run
from tests.integration.test_bridge import (
    SETTINGS,
    MemorySink,
    StreamEnv,
    forwarding,
    job_packet,
)


def _monitor(env: StreamEnv, sink: MemorySink, health_file: Path) -> ForwardingMonitor:
    """The monitor a bridge task builds, on the test's stream and consumers."""
    return ForwardingMonitor.for_bridge(
        env.js,
        env.stream,
        env.routes(sink, sink),
        env.forwarder.counters,
        health_file=health_file,
        emf_metrics=True,
    )


def _emf_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_a_bridge_that_keeps_up_reports_nothing_waiting_and_counts_its_forwards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def scenario() -> None:
        submit = MemorySink()
        async with forwarding(submit) as env:
            monitor = _monitor(env, submit, tmp_path / "alive")
            # Given three job requests the forwarder took to the queue
            for i in range(3):
                await env.js.publish(env.submit, job_packet(f"job-{i}"))
            await eventually(lambda: len(submit.accepted) == 3)
            await eventually(lambda: env.forwarder.counters["forwarded"] == 3)
            await asyncio.sleep(0.1)  # the acks reach the server

            # When the monitor reports
            lags = await monitor.report()

            # Then no consumer has anything waiting
            assert lags is not None
            assert [(lag.waiting, lag.oldest_age_s) for lag in lags] == [(0, 0.0)] * 3

    capsys.readouterr()
    run(scenario())
    # And one EMF line says so, with the three forwards, in the bridge's one series
    (line,) = _emf_lines(capsys.readouterr().out)
    (directive,) = line["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "Cordum"
    assert directive["Dimensions"] == [["service"]]
    assert line["service"] == BRIDGE_SERVICE
    assert (line[OLDEST_AGE_METRIC], line[BACKLOG_METRIC], line[FORWARDED_METRIC]) == (0, 0, 3)
    # And the liveness file was touched just now
    age = liveness_age(tmp_path / "alive")
    assert age is not None and age < 5


def test_messages_nobody_forwards_show_as_waiting_with_the_oldest_ones_age(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        submit, result = MemorySink(), MemorySink()
        # Given consumers that exist but no forwarder pulling from them (a dead bridge)
        async with forwarding(submit, result, autostart=False) as env:
            await env.forwarder.start()
            monitor = _monitor(env, submit, tmp_path / "alive")
            await env.js.publish(env.submit, job_packet("old"))
            await asyncio.sleep(1.2)
            await env.js.publish(env.submit, job_packet("new"))
            await env.js.publish(env.result, b"result")

            # When the monitor reports
            lags = {lag.durable: lag for lag in await monitor.report() or []}

            # Then the submit consumer has two waiting, the oldest a second old or more
            submit_lag = lags[f"{env.prefix}-submit"]
            assert submit_lag.waiting == 2
            assert 1.2 <= submit_lag.oldest_age_s < 10
            # and the result consumer one, just published
            result_lag = lags[f"{env.prefix}-result"]
            assert result_lag.waiting == 1 and result_lag.oldest_age_s < 1.0
            assert lags[f"{env.prefix}-cancel"].waiting == 0

            # And once a forwarder runs again, nothing waits any more
            env.task = await env.launch(env.forwarder)
            await eventually(lambda: len(submit.accepted) == 2 and len(result.accepted) == 1)

            async def drained() -> bool:
                after = await monitor.report() or []
                return bool(after) and all(lag.waiting == 0 for lag in after)

            await eventually(drained)

    run(scenario())


def test_a_message_the_queue_keeps_refusing_ages_while_the_bridge_runs(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        # Given a forwarder whose queue is unreachable for a long while
        submit = MemorySink(unreachable_calls=1000)
        async with forwarding(submit) as env:
            monitor = _monitor(env, submit, tmp_path / "alive")
            await env.js.publish(env.submit, job_packet("stuck"))
            await eventually(lambda: len(submit.calls) >= 2)
            await asyncio.sleep(1.0)

            # When the monitor reports
            lags = {lag.durable: lag for lag in await monitor.report() or []}

            # Then the message waits (NAKed, redelivered, never acked) and ages
            stuck = lags[f"{env.prefix}-submit"]
            assert stuck.waiting == 1
            assert stuck.oldest_age_s >= 1.0
            assert not submit.accepted

    run(scenario())


def test_no_answer_from_jetstream_leaves_the_liveness_file_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def scenario() -> None:
        submit = MemorySink()
        async with forwarding(submit) as env:
            alive = tmp_path / "alive"
            alive.touch()
            stale = time.time() - 600
            os.utime(alive, (stale, stale))
            # Given a monitor whose connection no longer reaches NATS
            nc = await nats.connect(SETTINGS.nats_url)
            monitor = ForwardingMonitor(
                nc.jetstream(),
                env.stream,
                env.routes(submit, submit),
                forwarded=lambda: 0,
                health_file=alive,
                metrics=Metrics(service=BRIDGE_SERVICE),
            )
            await nc.close()

            # When it reports, then it says nothing was answered
            assert await monitor.report() is None
            # And the file keeps its old time, so the health check will fail
            assert alive.stat().st_mtime == pytest.approx(stale)

    capsys.readouterr()
    run(scenario())
    # And no metric line was written: missing data is what the alarm reads as trouble
    assert _emf_lines(capsys.readouterr().out) == []
