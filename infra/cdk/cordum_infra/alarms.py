"""Where the alarms go, and the one shape every alarm of the stack is built with.

An alarm nobody hears is a graph. On AWS the stack creates an SNS topic for
its alarms unless context ``alarmTopicArn`` names one; every alarm notifies
the topic on ALARM and on OK (the OK tells whoever was paged that it is over),
and the stack outputs the topic's ARN (``AlarmTopicArn``) to subscribe to:
``aws sns subscribe --topic-arn <arn> --protocol email --notification-endpoint
<address>``. A local stack (LocalStack) creates no topic: its alarms notify
``alarmTopicArn`` when given, nothing otherwise, as before.

The topic is encrypted with a key of the stack's own: CloudWatch cannot publish
to a topic under the AWS managed key (``alias/aws/sns``), whose policy admits
no service principal. The key costs $1 a month; CloudWatch asks it for a data
key per message, a few requests a day at $0.03 per 10,000.

The live event stream's alarms (an AWS stack that runs it: cordum_infra.stream)
are here too, :func:`add_stream_alarms`: its load balancer answering 5xx, a task
its load balancer finds unhealthy, no task running, and clients too slow for
their events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from cordum_infra.settings import ContextError
from cordum_infra.stream import STREAM_SLOW_CLIENTS_CLOSED, StreamTargets

if TYPE_CHECKING:
    from constructs import Node

ALARM_TOPIC_CONTEXT = "alarmTopicArn"
"""Context key: SNS topic ARN every alarm notifies; absent on AWS, the stack
creates one."""

TOPIC_DISPLAY_NAME = "Cordum alarms"

KEY_PENDING_WINDOW = Duration.days(7)
"""The key goes with the stack (``cdk destroy``) after the shortest wait KMS
allows: it protects alarm notifications in flight, nothing that outlives them."""

CLOUDWATCH = iam.ServicePrincipal("cloudwatch.amazonaws.com")


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


def create_alarm_topic(scope: Construct) -> sns.Topic:
    """An SNS topic CloudWatch alarms of this account may publish to: encrypted with
    its own rotating key, TLS only."""
    stack = Stack.of(scope)
    key = kms.Key(
        scope,
        "AlarmTopicKey",
        description="Encrypts the Cordum alarm topic (CloudWatch may use it)",
        enable_key_rotation=True,
        pending_window=KEY_PENDING_WINDOW,
        removal_policy=RemovalPolicy.DESTROY,
    )
    # CloudWatch encrypts each notification with a data key from this key.
    key.add_to_resource_policy(
        iam.PolicyStatement(
            principals=[CLOUDWATCH],
            actions=["kms:Decrypt", "kms:GenerateDataKey*"],
            resources=["*"],
            conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
        )
    )
    topic = sns.Topic(
        scope,
        "AlarmTopic",
        display_name=TOPIC_DISPLAY_NAME,
        master_key=key,
        enforce_ssl=True,
    )
    # The stack's topic policy replaces the default one (owner account may publish):
    # CloudWatch, a service principal, needs its own statement.
    topic.add_to_resource_policy(
        iam.PolicyStatement(
            principals=[CLOUDWATCH],
            actions=["sns:Publish"],
            resources=[topic.topic_arn],
            conditions={
                "StringEquals": {"aws:SourceAccount": stack.account},
                "ArnLike": {
                    "aws:SourceArn": stack.format_arn(
                        service="cloudwatch", resource="alarm", resource_name="*",
                        # arn:<partition>:cloudwatch:<region>:<account>:alarm:*
                        arn_format=ArnFormat.COLON_RESOURCE_NAME,
                    )
                },
            },
        )
    )
    return topic


class AlarmFactory:
    """Builds the stack's alarms in `scope` (their logical ids depend on it), each
    notifying `topic` (when there is one) on ALARM and on OK."""

    def __init__(self, scope: Construct, topic: sns.ITopic | None) -> None:
        self.scope = scope
        self.topic = topic
        self.alarms: dict[str, cloudwatch.Alarm] = {}

    def alarm(
        self,
        name: str,
        metric: cloudwatch.IMetric,
        *,
        threshold: float,
        description: str,
        evaluation_periods: int = 1,
        treat_missing_data: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
        below: bool = False,
    ) -> cloudwatch.Alarm:
        """Fires at `threshold` or above (`below`: under it) in `evaluation_periods`
        periods in a row. By default no data is no trouble: a quiet stack emits no
        job metrics."""
        alarm = cloudwatch.Alarm(
            self.scope,
            f"{name}Alarm",
            metric=metric,
            threshold=threshold,
            comparison_operator=(
                cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD
                if below
                else cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
            ),
            evaluation_periods=evaluation_periods,
            datapoints_to_alarm=evaluation_periods,
            treat_missing_data=treat_missing_data,
            alarm_description=f"Cordum: {description}",
        )
        if self.topic is not None:
            action = cw_actions.SnsAction(self.topic)
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
        self.alarms[name] = alarm
        return alarm


STREAM_PERIOD = Duration.minutes(5)
STREAM_MINUTE = Duration.minutes(1)
STREAM_5XX_THRESHOLD = 10
"""5xx answers of the stream's load balancer in 5 minutes, its own (502, 503: no
task to send to, 504) and the tasks'. A client makes one request per connection,
so 10 is ten connections refused, not one hiccup among thousands of requests."""
STREAM_UNHEALTHY_MINUTES = 5
"""Minutes in a row with a task the load balancer finds unhealthy: ECS replaces one
in 1 to 2 minutes (a deploy swaps them the same way), so five is a task that keeps
failing /health (NATS or Redis out of its reach) or keeps being replaced."""
STREAM_TASKS_MINUTES = 3
"""Minutes in a row with no stream task running (or none reported: the service's
Container Insights metric stops with its last task): every client is cut off."""
STREAM_SLOW_CLIENTS_THRESHOLD = 100
"""Connections closed in 5 minutes because their clients read too slowly: more is
tasks short of CPU or bandwidth, or clients on poor links."""
CONTAINER_INSIGHTS = "ECS/ContainerInsights"


def add_stream_alarms(
    factory: AlarmFactory, targets: StreamTargets, *, namespace: str
) -> None:
    """The four alarms of the live event stream, built by `factory` (its topic)."""
    metrics = targets.load_balancer.metrics
    factory.alarm(
        "Stream5xx",
        cloudwatch.MathExpression(
            expression="FILL(elb, 0) + FILL(tasks, 0)",
            using_metrics={
                "elb": metrics.http_code_elb(
                    elbv2.HttpCodeElb.ELB_5XX_COUNT, period=STREAM_PERIOD,
                    statistic=cloudwatch.Stats.SUM,
                ),
                "tasks": metrics.http_code_target(
                    elbv2.HttpCodeTarget.TARGET_5XX_COUNT, period=STREAM_PERIOD,
                    statistic=cloudwatch.Stats.SUM,
                ),
            },
            label="stream 5xx answers",
            period=STREAM_PERIOD,
        ),
        threshold=STREAM_5XX_THRESHOLD,
        description=(
            f"{STREAM_5XX_THRESHOLD} or more stream connections answered 5xx in 5 minutes "
            "(the load balancer's own: no healthy task; or the tasks')"
        ),
    )
    factory.alarm(
        "StreamUnhealthyHosts",
        targets.target_group.metrics.unhealthy_host_count(
            period=STREAM_MINUTE, statistic=cloudwatch.Stats.MAXIMUM
        ),
        threshold=1,
        evaluation_periods=STREAM_UNHEALTHY_MINUTES,
        description=(
            "A stream task failed its load balancer's /health checks in each of "
            f"{STREAM_UNHEALTHY_MINUTES} minutes: it cannot reach NATS or Redis, or keeps "
            "being replaced (see the service's events)"
        ),
    )
    factory.alarm(
        "StreamTasksRunning",
        cloudwatch.Metric(
            namespace=CONTAINER_INSIGHTS,
            metric_name="RunningTaskCount",
            dimensions_map={
                "ClusterName": targets.cluster_name,
                "ServiceName": targets.service_name,
            },
            statistic=cloudwatch.Stats.MINIMUM,
            period=STREAM_MINUTE,
        ),
        threshold=1,
        below=True,
        evaluation_periods=STREAM_TASKS_MINUTES,
        treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
        description=(
            f"No stream task running for {STREAM_TASKS_MINUTES} minutes: every live "
            "client is cut off (clients fall back to polling)"
        ),
    )
    factory.alarm(
        "StreamSlowClients",
        cloudwatch.Metric(
            namespace=namespace,
            metric_name=STREAM_SLOW_CLIENTS_CLOSED,
            statistic=cloudwatch.Stats.SUM,
            period=STREAM_PERIOD,
        ),
        # Counts: at or above 101 is more than 100.
        threshold=STREAM_SLOW_CLIENTS_THRESHOLD + 1,
        description=(
            f"More than {STREAM_SLOW_CLIENTS_THRESHOLD} stream clients closed in 5 minutes "
            "for reading too slowly: tasks short of CPU, or clients on poor links"
        ),
    )
