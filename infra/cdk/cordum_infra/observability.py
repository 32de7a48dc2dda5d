"""The alarms of the stack, where they notify, and its dashboard.

What the metrics are and how they are queried: cordum_infra.metrics; where
alarms go: cordum_infra.alarms; the dashboard: cordum_infra.dashboard.

Both stack shapes get the same failure alarms and dashboard (LocalStack keeps
the alarms and deploys the dashboard as a placeholder, having no dashboards);
the Redis alarms and widgets exist when the stack owns the cache, the bridge's
when it runs the bridge (on ECS). An AWS stack also gets the capacity alarms
(cordum_infra.capacity_alarms) and, unless context ``alarmTopicArn`` names a
topic, an SNS topic of its own; every alarm notifies the topic on ALARM and on
OK. A local stack creates no topic: its alarms notify ``alarmTopicArn`` when
given.

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

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cordum_infra.alarms import (
    ALARM_TOPIC_CONTEXT,
    AlarmFactory,
    StreamTargets,
    add_stream_alarms,
    alarm_topic_arn_from_context,
    create_alarm_topic,
)
from cordum_infra.capacity_alarms import CapacityTargets, add_capacity_alarms
from cordum_infra.dashboard import (
    DASHBOARD_NAME,
    GRAPH_PERIOD,
    WIDGET_HEIGHT,
    WIDGET_WIDTH,
    build_dashboard,
    graph,
    stream_widgets,
)
from cordum_infra.metrics import (
    BRIDGE_BACKLOG,
    BRIDGE_FORWARDED,
    BRIDGE_OLDEST_AGE,
    SAFETY_UNAVAILABLE,
    STALE_JOBS,
    bridge_metric,
    redis_worst_node,
    total,
)

__all__ = [
    "ALARM_TOPIC_CONTEXT",
    "DASHBOARD_NAME",
    "Observability",
    "alarm_topic_arn_from_context",
]

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

class Observability(Construct):
    """Alarms over the functions, queues, API and cache, their topic, and the
    dashboard (optional)."""

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
        create_topic: bool = False,
        capacity: CapacityTargets | None = None,
        stream: StreamTargets | None = None,
    ) -> None:
        """`functions` and `dead_letter_queues` map a display name to the resource;
        `replication_group` adds the Redis alarms and widgets, `bridge` the
        bridge's (its lag metrics come from a bridge on ECS only), `capacity` the
        capacity alarms, `stream` the live event stream's alarms and dashboard row.
        `alarm_topic_arn` (None: the ``alarmTopicArn`` context)
        receives every alarm; without one, `create_topic` (AWS) makes the stack's."""
        super().__init__(scope, construct_id)
        self.namespace = namespace
        if alarm_topic_arn is None:
            alarm_topic_arn = alarm_topic_arn_from_context(self.node)
        self.alarm_topic: sns.ITopic | None = None
        if alarm_topic_arn:
            self.alarm_topic = sns.Topic.from_topic_arn(self, "AlarmTopic", alarm_topic_arn)
        elif create_topic:
            self.alarm_topic = create_alarm_topic(self)
        self._factory = AlarmFactory(self, self.alarm_topic)
        self.alarms: dict[str, cloudwatch.Alarm] = self._factory.alarms
        alarm = self._factory.alarm

        # Alarm metrics carry no label: CloudWatch would turn a labelled metric into a
        # one-query metric math alarm.
        for name, queue in dead_letter_queues.items():
            alarm(
                f"{name}DlqDepth",
                queue.metric_approximate_number_of_messages_visible(
                    period=ALARM_PERIOD, statistic=cloudwatch.Stats.MAXIMUM
                ),
                threshold=DLQ_DEPTH_THRESHOLD,
                description=f"Messages waiting in the {name} dead-letter queue",
            )
        for name, fn in functions.items():
            alarm(
                f"{name}Errors",
                fn.metric_errors(period=ALARM_PERIOD, statistic=cloudwatch.Stats.SUM),
                threshold=FUNCTION_ERRORS_THRESHOLD,
                description=f"Failed invocations (errors, timeouts) of {name}",
            )
        alarm(
            "SafetyCircuitOpen",
            total(namespace, SAFETY_UNAVAILABLE, period=Duration.minutes(1)),
            threshold=1,
            evaluation_periods=CIRCUIT_OPEN_MINUTES,
            description=(
                f"Safety checks answered unavailable in each of {CIRCUIT_OPEN_MINUTES} minutes: "
                "the safety kernel is down or its circuit is open; jobs wait (fail closed)"
            ),
        )
        alarm(
            "StaleJobs",
            total(namespace, STALE_JOBS, period=ALARM_PERIOD),
            threshold=STALE_JOBS_THRESHOLD,
            description="Jobs the reconciler timed out (taken by a worker, never answered)",
        )

        redis_widgets: list[cloudwatch.IWidget] = []
        if replication_group is not None:
            memory, cpu = redis_worst_node(replication_group, period=ALARM_PERIOD)
            alarm(
                "RedisMemory",
                memory,
                threshold=REDIS_MEMORY_PERCENT,
                evaluation_periods=REDIS_EVALUATION_PERIODS,
                description="Memory use of the fullest Redis node (percent of maxmemory)",
            )
            alarm(
                "RedisCpu",
                cpu,
                threshold=REDIS_CPU_PERCENT,
                evaluation_periods=REDIS_EVALUATION_PERIODS,
                description="Redis engine thread CPU of the busiest node (percent)",
            )
            redis_widgets = [
                graph("Redis memory (% of maxmemory, fullest node)", [memory]),
                graph("Redis engine CPU (%, busiest node)", [cpu]),
            ]

        bridge_widgets = self._bridge_alarm() if bridge else []

        if capacity is not None:
            add_capacity_alarms(self, self._factory, capacity, namespace=namespace)
        if stream is not None:
            add_stream_alarms(self._factory, stream, namespace=namespace)

        self.dashboard: cloudwatch.Dashboard | None = None
        if dashboard:
            self.dashboard = build_dashboard(
                self,
                namespace=namespace,
                functions=functions,
                dead_letter_queues=dead_letter_queues,
                alarms=list(self.alarms.values()),
                extra_widgets=[*bridge_widgets, *redis_widgets],
                rows=[stream_widgets(namespace)] if stream is not None else [],
            )

    def _bridge_alarm(self) -> list[cloudwatch.IWidget]:
        """The BridgeNotForwarding alarm; returns the bridge's dashboard graph."""

        def metric(name: str, statistic: str) -> cloudwatch.Metric:
            return bridge_metric(self.namespace, name, statistic, period=BRIDGE_PERIOD)

        oldest = metric(BRIDGE_OLDEST_AGE, cloudwatch.Stats.MAXIMUM)
        self._factory.alarm(
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
        return [
            cloudwatch.GraphWidget(
                title="Bridge: oldest unforwarded message (ms), backlog, forwarded",
                left=[oldest],
                right=[
                    metric(BRIDGE_BACKLOG, cloudwatch.Stats.MAXIMUM),
                    metric(BRIDGE_FORWARDED, cloudwatch.Stats.SUM),
                ],
                width=WIDGET_WIDTH,
                height=WIDGET_HEIGHT,
                period=GRAPH_PERIOD,
            )
        ]
