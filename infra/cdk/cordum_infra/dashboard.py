"""The CloudWatch dashboard ``cordum``: the alarms' states, then the graphs.

What the metrics are and how they are queried: cordum_infra.metrics. LocalStack
has no dashboards and deploys this one as a placeholder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cordum_infra.metrics import (
    DISPATCH_LATENCY,
    JOB_LOCK_WAIT,
    JOBS_COMPLETED,
    JOBS_DISPATCHED,
    JOBS_RECEIVED,
    ORPHAN_REPLAYED,
    OUTPUT_QUARANTINED,
    SAFETY_DENIED,
    SAFETY_FAIL_OPEN,
    SAFETY_UNAVAILABLE,
    STALE_JOBS,
    percentile,
    total,
)
from cordum_infra.stream import (
    STREAM_CONNECTIONS,
    STREAM_FRAMES_SENT,
    STREAM_SLOW_CLIENTS_CLOSED,
)

DASHBOARD_NAME = "cordum"

GRAPH_PERIOD = Duration.minutes(1)
"""Resolution of the dashboard graphs (the ticks run once a minute)."""

WIDGET_WIDTH = 12
"""Two graphs per row (the dashboard grid is 24 wide)."""
WIDGET_HEIGHT = 6


def graph(title: str, left: list[cloudwatch.IMetric], *,
          stacked: bool = False) -> cloudwatch.GraphWidget:
    """One half-width graph at the dashboard's resolution."""
    return cloudwatch.GraphWidget(
        title=title,
        left=left,
        width=WIDGET_WIDTH,
        height=WIDGET_HEIGHT,
        stacked=stacked,
        period=GRAPH_PERIOD,
    )


def build_dashboard(
    scope: Construct,
    *,
    namespace: str,
    functions: Mapping[str, lambda_.IFunction],
    dead_letter_queues: Mapping[str, sqs.IQueue],
    alarms: Sequence[cloudwatch.IAlarm],
    extra_widgets: list[cloudwatch.IWidget],
    rows: Sequence[Sequence[cloudwatch.IWidget]] = (),
) -> cloudwatch.Dashboard:
    """The dashboard, in `scope` as ``Dashboard``; `extra_widgets` (the bridge's and
    Redis' graphs, when the stack has them) go last, two to a row, then `rows` (the
    stream's: :func:`stream_widgets`), each a row of its own."""

    def sums(metric: str, group_by: str | None = None) -> cloudwatch.MathExpression:
        return total(namespace, metric, period=GRAPH_PERIOD, group_by=group_by)

    def pct(metric: str, stat: str, dimensions: str) -> cloudwatch.SearchExpression:
        return percentile(namespace, metric, stat, dimensions, period=GRAPH_PERIOD)

    dashboard = cloudwatch.Dashboard(
        scope,
        "Dashboard",
        dashboard_name=DASHBOARD_NAME,
        default_interval=Duration.hours(3),
    )
    jobs = graph(
        "Jobs by state (per minute)",
        [sums(JOBS_RECEIVED), sums(JOBS_DISPATCHED), sums(JOBS_COMPLETED, group_by="status")],
    )
    latency = graph(
        "Dispatch latency (ms, per topic)",
        [
            pct(DISPATCH_LATENCY, "p50", "service,topic"),
            pct(DISPATCH_LATENCY, "p99", "service,topic"),
            pct(JOB_LOCK_WAIT, "p99", "service"),
        ],
    )
    dlq = graph(
        "Dead-letter queue depth",
        [
            queue.metric_approximate_number_of_messages_visible(
                period=GRAPH_PERIOD, statistic=cloudwatch.Stats.MAXIMUM, label=name
            )
            for name, queue in dead_letter_queues.items()
        ],
    )
    safety = graph(
        "Safety denials (per minute)",
        [sums(SAFETY_DENIED, group_by="topic"), sums(OUTPUT_QUARANTINED)],
    )
    circuit = graph(
        "Safety kernel circuit: checks answered unavailable",
        [sums(SAFETY_UNAVAILABLE), sums(SAFETY_FAIL_OPEN)],
    )
    stale = graph(
        "Stale jobs timed out, orphans replayed",
        [sums(STALE_JOBS, group_by="state"), sums(ORPHAN_REPLAYED)],
    )
    errors = graph(
        "Lambda errors",
        [
            fn.metric_errors(period=GRAPH_PERIOD, statistic=cloudwatch.Stats.SUM, label=name)
            for name, fn in functions.items()
        ],
    )
    throttles = graph(
        "Lambda throttles",
        [
            fn.metric_throttles(period=GRAPH_PERIOD, statistic=cloudwatch.Stats.SUM, label=name)
            for name, fn in functions.items()
        ],
    )
    dashboard.add_widgets(
        cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(alarms), width=24, height=4)
    )
    dashboard.add_widgets(jobs, latency)
    dashboard.add_widgets(dlq, safety)
    dashboard.add_widgets(circuit, stale)
    dashboard.add_widgets(errors, throttles)
    for start in range(0, len(extra_widgets), 2):
        dashboard.add_widgets(*extra_widgets[start : start + 2])
    for row in rows:
        dashboard.add_widgets(*row)
    return dashboard


def stream_widgets(namespace: str) -> list[cloudwatch.IWidget]:
    """The live event stream's row: open connections, and frames sent against clients
    closed for reading too slowly. Its metrics have no dimension, so every task writes
    the same series: the connections gauge reads per task report (average and
    largest), the counts add up."""

    def metric(name: str, statistic: str, label: str) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace=namespace, metric_name=name, statistic=statistic,
            period=GRAPH_PERIOD, label=label,
        )

    return [
        graph(
            "Stream: open connections (per task)",
            [
                metric(STREAM_CONNECTIONS, cloudwatch.Stats.AVERAGE, "average"),
                metric(STREAM_CONNECTIONS, cloudwatch.Stats.MAXIMUM, "largest"),
            ],
        ),
        cloudwatch.GraphWidget(
            title="Stream: frames sent, slow clients closed (per minute)",
            left=[metric(STREAM_FRAMES_SENT, cloudwatch.Stats.SUM, "frames sent")],
            right=[metric(STREAM_SLOW_CLIENTS_CLOSED, cloudwatch.Stats.SUM,
                          "slow clients closed")],
            width=WIDGET_WIDTH,
            height=WIDGET_HEIGHT,
            period=GRAPH_PERIOD,
        ),
    ]
