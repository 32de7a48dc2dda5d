"""The CloudWatch dashboard and the alarms of the stack.

What the metrics are and how they are queried: cordum_infra.metrics.

Both stack shapes get the same dashboard and alarms (LocalStack keeps the
alarms and deploys the dashboard as a placeholder, having no dashboards);
the Redis alarms and widgets exist when the stack owns the cache, the bridge's
when it runs the bridge (on ECS). Every alarm notifies the SNS topic of context
``alarmTopicArn`` when one is given (on ALARM and on OK).

A bridge that stops forwarding. Jobs travel gateway -> NATS -> bridge -> SQS ->
functions, and the bridge is the one hop no Lambda metric sees. The submit and
result queues' ``ApproximateAgeOfOldestMessage`` watches the hop after it (a
message sits in SQS, unconsumed); a dead bridge sends nothing, the queues stay
empty and their age reads 0. So the bridge reports its own lag
(cordum.bus.health): four times a minute, the age of the oldest message its
JetStream consumers have not forwarded (0 when none waits). The alarm
``BridgeNotForwarding`` fires when that age stays above BRIDGE_LAG_THRESHOLD, a
bridge that runs but cannot forward (SQS refusing, a permission lost, a stuck
forward), and also when no data comes at all, missing data counting as
breaching: no bridge task runs, or none reaches NATS. A per-forward count with
missing data breaching would fire on every idle stack, and would miss a bridge
that runs but cannot send; the age does neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cordum_infra.metrics import (
    BRIDGE_BACKLOG,
    BRIDGE_FORWARDED,
    BRIDGE_OLDEST_AGE,
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
    bridge_metric,
    percentile,
    redis_worst_node,
    total,
)
from cordum_infra.settings import ContextError

if TYPE_CHECKING:
    from constructs import Node

DASHBOARD_NAME = "cordum"

GRAPH_PERIOD = Duration.minutes(1)
"""Resolution of the dashboard graphs (the ticks run once a minute)."""
ALARM_PERIOD = Duration.minutes(5)
"""Period of the count alarms: DLQ depth, function errors, stale jobs."""

DLQ_DEPTH_THRESHOLD = 1
"""Any dead letter is an incident: a job request, a result, a workflow event or
timer, a tick or a saga rollback was given up on."""
FUNCTION_ERRORS_THRESHOLD = 1
"""Failed invocations (uncaught errors, timeouts) per function in one period. A
record reported as a batch item failure is not one: the handlers raise only on
what they did not expect."""
STALE_JOBS_THRESHOLD = 1
"""Jobs the reconciler timed out in one period: each is a job a worker took and
never answered for."""

BRIDGE_PERIOD = Duration.minutes(1)
"""The bridge reports every 15 s: each minute has data while a bridge runs."""
BRIDGE_LAG_THRESHOLD = Duration.minutes(2)
"""Oldest unforwarded message age that is trouble. A healthy bridge keeps it under
a second; the longest legitimate waits are a message held by a task that died
(redelivered after the forwarder's 60 s ack wait) and the NAK backoff while SQS
refuses for a moment (at most 30 s between tries)."""
BRIDGE_LAG_MINUTES = 3
"""Minutes in a row above the threshold, or without data, before the alarm fires:
a task replaced or a NATS restart is over well within them (one of the two tasks
keeps reporting through a deploy)."""

CIRCUIT_OPEN_MINUTES = 5
"""The safety kernel circuit alarm fires when safety checks failed as unavailable
in each of this many consecutive minutes (an open breaker answers every check
so); a single blip while a kernel task restarts does not page anyone."""

REDIS_MEMORY_PERCENT = 80
"""DatabaseMemoryUsagePercentage of the fullest node: above it, eviction or OOM
errors on writes are near."""
REDIS_CPU_PERCENT = 90
"""EngineCPUUtilization (the Redis thread) of the busiest node."""
REDIS_EVALUATION_PERIODS = 3
"""Redis alarms need three 5-minute periods in a row: a snapshot or a failover
spike is not a trend."""

ALARM_TOPIC_CONTEXT = "alarmTopicArn"
"""Context key: SNS topic ARN every alarm notifies (optional)."""

WIDGET_WIDTH = 12
"""Two graphs per row (the dashboard grid is 24 wide)."""
WIDGET_HEIGHT = 6


def alarm_topic_arn_from_context(node: Node) -> str | None:
    """The ``alarmTopicArn`` context value, checked to be an SNS topic ARN."""
    value = node.try_get_context(ALARM_TOPIC_CONTEXT)
    if value is None or not str(value).strip():
        return None
    arn = str(value).strip()
    parts = arn.split(":")
    if len(parts) != 6 or parts[0] != "arn" or parts[2] != "sns" or not parts[5]:
        raise ContextError(
            f"context {ALARM_TOPIC_CONTEXT} must be an SNS topic ARN "
            f"(arn:aws:sns:<region>:<account>:<name>): {arn}"
        )
    return arn


class Observability(Construct):
    """Dashboard (optional) and alarms over the functions, queues and cache."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        namespace: str,
        functions: Mapping[str, lambda_.IFunction],
        dead_letter_queues: Mapping[str, sqs.IQueue],
        replication_group: elasticache.CfnReplicationGroup | None = None,
        bridge: bool = False,
        dashboard: bool = True,
        alarm_topic_arn: str | None = None,
    ) -> None:
        """`functions` and `dead_letter_queues` map a display name to the resource;
        `replication_group` adds the Redis alarms and widgets, `bridge` the
        bridge's (its lag metrics come from a bridge on ECS only); `alarm_topic_arn`
        (None: the ``alarmTopicArn`` context) receives every alarm."""
        super().__init__(scope, construct_id)
        self.namespace = namespace
        if alarm_topic_arn is None:
            alarm_topic_arn = alarm_topic_arn_from_context(self.node)
        self.alarm_topic: sns.ITopic | None = (
            sns.Topic.from_topic_arn(self, "AlarmTopic", alarm_topic_arn)
            if alarm_topic_arn
            else None
        )
        self.alarms: dict[str, cloudwatch.Alarm] = {}

        # Alarm metrics carry no label: CloudWatch would turn a labelled metric into a
        # one-query metric math alarm.
        dlq_depth = {
            name: queue.metric_approximate_number_of_messages_visible(
                period=ALARM_PERIOD, statistic=cloudwatch.Stats.MAXIMUM
            )
            for name, queue in dead_letter_queues.items()
        }
        for name, metric in dlq_depth.items():
            self._alarm(
                f"{name}DlqDepth",
                metric,
                threshold=DLQ_DEPTH_THRESHOLD,
                description=f"Messages waiting in the {name} dead-letter queue",
            )

        errors = {
            name: fn.metric_errors(period=ALARM_PERIOD, statistic=cloudwatch.Stats.SUM)
            for name, fn in functions.items()
        }
        for name, metric in errors.items():
            self._alarm(
                f"{name}Errors",
                metric,
                threshold=FUNCTION_ERRORS_THRESHOLD,
                description=f"Failed invocations (errors, timeouts) of {name}",
            )

        self._alarm(
            "SafetyCircuitOpen",
            self._total(SAFETY_UNAVAILABLE, period=Duration.minutes(1)),
            threshold=1,
            evaluation_periods=CIRCUIT_OPEN_MINUTES,
            description=(
                f"Safety checks answered unavailable in each of {CIRCUIT_OPEN_MINUTES} minutes: "
                "the safety kernel is down or its circuit is open; jobs wait (fail closed)"
            ),
        )
        self._alarm(
            "StaleJobs",
            self._total(STALE_JOBS, period=ALARM_PERIOD),
            threshold=STALE_JOBS_THRESHOLD,
            description="Jobs the reconciler timed out (taken by a worker, never answered)",
        )

        redis_widgets: list[cloudwatch.IWidget] = []
        if replication_group is not None:
            memory, cpu = redis_worst_node(replication_group, period=ALARM_PERIOD)
            self._alarm(
                "RedisMemory",
                memory,
                threshold=REDIS_MEMORY_PERCENT,
                evaluation_periods=REDIS_EVALUATION_PERIODS,
                description="Memory use of the fullest Redis node (percent of maxmemory)",
            )
            self._alarm(
                "RedisCpu",
                cpu,
                threshold=REDIS_CPU_PERCENT,
                evaluation_periods=REDIS_EVALUATION_PERIODS,
                description="Redis engine thread CPU of the busiest node (percent)",
            )
            redis_widgets = [
                self._graph("Redis memory (% of maxmemory, fullest node)", [memory]),
                self._graph("Redis engine CPU (%, busiest node)", [cpu]),
            ]

        bridge_widgets: list[cloudwatch.IWidget] = []
        if bridge:
            oldest = self._bridge(BRIDGE_OLDEST_AGE, cloudwatch.Stats.MAXIMUM)
            self._alarm(
                "BridgeNotForwarding",
                oldest,
                threshold=BRIDGE_LAG_THRESHOLD.to_milliseconds(),
                evaluation_periods=BRIDGE_LAG_MINUTES,
                treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
                description=(
                    "A job message waited over "
                    f"{BRIDGE_LAG_THRESHOLD.to_minutes()} minutes in JetStream for the bridge "
                    f"in each of {BRIDGE_LAG_MINUTES} minutes, or no bridge reported in "
                    f"{BRIDGE_LAG_MINUTES} minutes: accepted jobs stay PENDING, not forwarded "
                    "to SQS"
                ),
            )
            bridge_widgets = [
                cloudwatch.GraphWidget(
                    title="Bridge: oldest unforwarded message (ms), backlog, forwarded",
                    left=[oldest],
                    right=[
                        self._bridge(BRIDGE_BACKLOG, cloudwatch.Stats.MAXIMUM),
                        self._bridge(BRIDGE_FORWARDED, cloudwatch.Stats.SUM),
                    ],
                    width=WIDGET_WIDTH,
                    height=WIDGET_HEIGHT,
                    period=GRAPH_PERIOD,
                )
            ]

        self.dashboard: cloudwatch.Dashboard | None = None
        if dashboard:
            self.dashboard = cloudwatch.Dashboard(
                self,
                "Dashboard",
                dashboard_name=DASHBOARD_NAME,
                default_interval=Duration.hours(3),
            )
            self._widgets(functions, dead_letter_queues, [*bridge_widgets, *redis_widgets])

    # --- metrics (cordum_infra.metrics, in this stack's namespace) ---------------------------

    def _total(self, metric: str, *, period: Duration = GRAPH_PERIOD,
               group_by: str | None = None) -> cloudwatch.MathExpression:
        return total(self.namespace, metric, period=period, group_by=group_by)

    def _percentile(self, metric: str, stat: str, dimensions: str) -> cloudwatch.SearchExpression:
        return percentile(self.namespace, metric, stat, dimensions, period=GRAPH_PERIOD)

    def _bridge(self, metric: str, statistic: str) -> cloudwatch.Metric:
        return bridge_metric(self.namespace, metric, statistic, period=BRIDGE_PERIOD)

    # --- alarms ----------------------------------------------------------------------------

    def _alarm(
        self,
        name: str,
        metric: cloudwatch.IMetric,
        *,
        threshold: float,
        description: str,
        evaluation_periods: int = 1,
        treat_missing_data: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
    ) -> cloudwatch.Alarm:
        """Fires at `threshold` or above in `evaluation_periods` periods in a row. By
        default no data is no trouble: a quiet stack emits no job metrics."""
        alarm = cloudwatch.Alarm(
            self,
            f"{name}Alarm",
            metric=metric,
            threshold=threshold,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=evaluation_periods,
            datapoints_to_alarm=evaluation_periods,
            treat_missing_data=treat_missing_data,
            alarm_description=f"Cordum: {description}",
        )
        if self.alarm_topic is not None:
            action = cw_actions.SnsAction(self.alarm_topic)
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
        self.alarms[name] = alarm
        return alarm

    # --- dashboard -------------------------------------------------------------------------

    def _graph(self, title: str, left: list[cloudwatch.IMetric], *,
               stacked: bool = False) -> cloudwatch.GraphWidget:
        return cloudwatch.GraphWidget(
            title=title,
            left=left,
            width=WIDGET_WIDTH,
            height=WIDGET_HEIGHT,
            stacked=stacked,
            period=GRAPH_PERIOD,
        )

    def _widgets(
        self,
        functions: Mapping[str, lambda_.IFunction],
        dead_letter_queues: Mapping[str, sqs.IQueue],
        extra_widgets: list[cloudwatch.IWidget],
    ) -> None:
        assert self.dashboard is not None
        jobs = self._graph(
            "Jobs by state (per minute)",
            [
                self._total(JOBS_RECEIVED),
                self._total(JOBS_DISPATCHED),
                self._total(JOBS_COMPLETED, group_by="status"),
            ],
        )
        latency = self._graph(
            "Dispatch latency (ms, per topic)",
            [
                self._percentile(DISPATCH_LATENCY, "p50", "service,topic"),
                self._percentile(DISPATCH_LATENCY, "p99", "service,topic"),
                self._percentile(JOB_LOCK_WAIT, "p99", "service"),
            ],
        )
        dlq = self._graph(
            "Dead-letter queue depth",
            [
                queue.metric_approximate_number_of_messages_visible(
                    period=GRAPH_PERIOD, statistic=cloudwatch.Stats.MAXIMUM, label=name
                )
                for name, queue in dead_letter_queues.items()
            ],
        )
        safety = self._graph(
            "Safety denials (per minute)",
            [
                self._total(SAFETY_DENIED, group_by="topic"),
                self._total(OUTPUT_QUARANTINED),
            ],
        )
        circuit = self._graph(
            "Safety kernel circuit: checks answered unavailable",
            [self._total(SAFETY_UNAVAILABLE), self._total(SAFETY_FAIL_OPEN)],
        )
        stale = self._graph(
            "Stale jobs timed out, orphans replayed",
            [self._total(STALE_JOBS, group_by="state"), self._total(ORPHAN_REPLAYED)],
        )
        errors = self._graph(
            "Lambda errors",
            [
                fn.metric_errors(period=GRAPH_PERIOD, statistic=cloudwatch.Stats.SUM, label=name)
                for name, fn in functions.items()
            ],
        )
        throttles = self._graph(
            "Lambda throttles",
            [
                fn.metric_throttles(period=GRAPH_PERIOD, statistic=cloudwatch.Stats.SUM, label=name)
                for name, fn in functions.items()
            ],
        )
        self.dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(
                title="Alarms", alarms=list(self.alarms.values()), width=24, height=4
            )
        )
        self.dashboard.add_widgets(jobs, latency)
        self.dashboard.add_widgets(dlq, safety)
        self.dashboard.add_widgets(circuit, stale)
        self.dashboard.add_widgets(errors, throttles)
        # Two to a row: the bridge's graph, then the Redis graphs (when present).
        for start in range(0, len(extra_widgets), 2):
            self.dashboard.add_widgets(*extra_widgets[start : start + 2])
