"""The metrics Cordum writes, by name, and the CloudWatch queries that read them.

Cordum's scheduler metrics are EMF log lines (``cordum.metrics``) in the
``Cordum`` namespace. Each carries the dimension ``service`` (the function
name) plus those of its call site: ``topic`` (jobs_received, jobs_dispatched,
dispatch_latency, safety_denied, safety_unavailable, safety_fail_open,
output_policy_*), ``topic`` and ``status`` (jobs_completed), ``state``
(stale_jobs), or none (orphan_replayed, job_lock_wait, saga_*). A CloudWatch
metric is identified by all its dimensions, so one topic is one series: the
totals are Metrics Insights queries (``SELECT SUM(x) FROM "Cordum"``), which
sum over every dimension set and, unlike SEARCH, may drive an alarm.
Percentiles are SEARCH expressions (Insights has no percentiles), per topic,
on the dashboard only.

The bridge on ECS writes its forwarding lag (cordum.bus.health) the same way,
with the dimension ``service`` alone: one series per metric, which every
bridge task writes to.
"""

from __future__ import annotations

from aws_cdk import Duration, Fn
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_elasticache as elasticache

# Metric names, as the library emits them (cordum.scheduler.dispatch, .results and
# .output_phase; functions/*_tick.py).
JOBS_RECEIVED = "jobs_received"
JOBS_DISPATCHED = "jobs_dispatched"
JOBS_COMPLETED = "jobs_completed"
DISPATCH_LATENCY = "dispatch_latency"
JOB_LOCK_WAIT = "job_lock_wait"
SAFETY_DENIED = "safety_denied"
SAFETY_UNAVAILABLE = "safety_unavailable"
SAFETY_FAIL_OPEN = "safety_fail_open"
OUTPUT_QUARANTINED = "output_policy_quarantined"
STALE_JOBS = "stale_jobs"
ORPHAN_REPLAYED = "orphan_replayed"

# The bridge's, as cordum.bus.health emits them.
BRIDGE_SERVICE = "cordum-bridge"
"""The ``service`` dimension of the bridge's metrics."""
BRIDGE_OLDEST_AGE = "bridge_oldest_age_ms"
"""Age of the oldest job message no bridge has forwarded yet; 0 when none waits."""
BRIDGE_BACKLOG = "bridge_backlog"
"""Job messages waiting for the bridge (not yet delivered, or not yet acked)."""
BRIDGE_FORWARDED = "bridge_forwarded"
"""Job messages the queues accepted since the task's previous report."""

# Written by CloudWatch Logs, not by Cordum: a metric filter on the REST API
# stage's access log (cordum_infra.capacity_alarms), no dimension.
API_THROTTLED = "api_throttled"
"""Requests answered 429: the stage's throttle or the gateway's per-key limit."""


def total(namespace: str, metric: str, *, period: Duration,
          group_by: str | None = None) -> cloudwatch.MathExpression:
    """Sum of `metric` over every dimension set (every topic, every function); with
    `group_by`, one series per value of that dimension, named by it."""
    query = f'SELECT SUM({metric}) FROM "{namespace}"'
    if group_by:
        query += f" GROUP BY {group_by}"
    # An empty label renders none, so CloudWatch names each group by its value.
    return cloudwatch.MathExpression(
        expression=query, label="" if group_by else metric, period=period
    )


def percentile(namespace: str, metric: str, stat: str, dimensions: str, *,
               period: Duration) -> cloudwatch.SearchExpression:
    """One series per dimension value (a percentile of a sum is meaningless)."""
    return cloudwatch.SearchExpression(
        expression=(
            f"SEARCH('{{{namespace},{dimensions}}} MetricName=\"{metric}\"', "
            f"'{stat}', {int(period.to_seconds())})"
        ),
        label=f"{metric} {stat}",
        period=period,
    )


def bridge_metric(namespace: str, metric: str, statistic: str, *,
                  period: Duration) -> cloudwatch.Metric:
    """One of the bridge's metrics, over every task of it."""
    return cloudwatch.Metric(
        namespace=namespace,
        metric_name=metric,
        dimensions_map={"service": BRIDGE_SERVICE},
        statistic=statistic,
        period=period,
    )


def redis_nodes(
    group: elasticache.CfnReplicationGroup,
    metric: str,
    *,
    period: Duration,
    label: str,
    worst: str = "MAX",
    statistic: str = cloudwatch.Stats.MAXIMUM,
) -> cloudwatch.MathExpression:
    """`metric` of the worst node of `group` (`worst`: ``MAX`` or ``MIN`` over the
    nodes): the primary moves on failover, so every member (``<group id>-001``,
    ``-002``, ...) is watched. A metric only replicas report (ReplicationLag) reads
    the replicas, whichever they are."""
    count = group.num_cache_clusters
    nodes = count if isinstance(count, int) and count > 0 else 2
    using = {
        f"n{i}": cloudwatch.Metric(
            namespace="AWS/ElastiCache",
            metric_name=metric,
            dimensions_map={"CacheClusterId": Fn.join("", [group.ref, f"-{i:03d}"])},
            statistic=statistic,
            period=period,
        )
        for i in range(1, nodes + 1)
    }
    return cloudwatch.MathExpression(
        expression=f"{worst}([{', '.join(using)}])",
        using_metrics=using,
        label=label,
        period=period,
    )


def redis_worst_node(
    group: elasticache.CfnReplicationGroup, *, period: Duration
) -> tuple[cloudwatch.MathExpression, cloudwatch.MathExpression]:
    """Memory and engine CPU of the fullest and of the busiest node."""
    return (
        redis_nodes(group, "DatabaseMemoryUsagePercentage", period=period,
                    label="Redis memory %"),
        redis_nodes(group, "EngineCPUUtilization", period=period,
                    label="Redis engine CPU %"),
    )
