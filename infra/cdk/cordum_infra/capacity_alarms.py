"""The alarms of a stack at scale: limits that bind before anything fails.

AWS stacks only (the local stack runs none of what they watch). The alarms of
cordum_infra.observability say a part failed (an error, a dead letter, a lost
bridge); these say one is running out: the API turning callers away, Lambda
out of concurrency, queues falling behind, the safety kernel short of tasks,
Redis short of connections, CPU credits or replica freshness.

API Gateway (REST, v1) publishes ``4XXError`` and ``5XXError`` per stage, and
no count of 429s: ``4XXError`` mixes a throttled request with a bad key (401,
403), a wrong path (404), a bad body (400, 413). So:

- ``Api5xx``: the stage's ``5XXError`` against its ``Count``. It catches what
  the caller sees as the service failing: the gateway function answering 500 or
  503 (Redis or NATS out of reach: handled, so the function's ``Errors`` stay
  0), its crashes and timeouts (502, 504) and Lambda refusing the invoke.
- ``ApiThrottled``: the 429 lines of the stage's JSON access log, counted by a
  metric filter (API_THROTTLED in the stack's namespace). It catches the
  stage's throttle (500 requests/s, burst 1000) and the gateway's per-key
  limit alike: both are callers turned away. A WAF rule's blocks answer 403,
  WAF's own metrics count them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aws_cdk import Duration
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cordum_infra.alarms import AlarmFactory
from cordum_infra.metrics import API_THROTTLED, redis_nodes
from cordum_infra.queues import BATCH_SIZE
from cordum_infra.settings import ContextError

if TYPE_CHECKING:
    from constructs import Node

PERIOD = Duration.minutes(5)
MINUTE = Duration.minutes(1)

API_5XX_PERCENT = 1
"""Share of the stage's requests answered 5xx, in percent, that is an incident."""
API_5XX_MIN_COUNT = 5
"""...once there are this many in 5 minutes: 1 error in 3 requests of a quiet
hour is no outage, 1 % of 500 requests a second (1,500 in 5 minutes) is."""

API_THROTTLED_METRIC = API_THROTTLED
API_THROTTLED_THRESHOLD = 50
"""429 answers per 5 minutes. One client bursting past its key's limit for a few
seconds is the limit working; 50 in each of API_THROTTLED_PERIODS periods is
demand the limits keep refusing (raise them, or find the caller)."""
API_THROTTLED_PERIODS = 2

FUNCTION_THROTTLES_THRESHOLD = 10
"""Throttled invocations of one function per 5 minutes. A few are one burst
absorbed by retries (SQS delivers the batch again, EventBridge retries a tick);
10 in 5 minutes is a concurrency limit (reserved, or the account's) that binds."""

ACCOUNT_CONCURRENCY_CONTEXT = "accountConcurrencyLimit"
"""Context key: the account's Lambda concurrency quota in the region."""
DEFAULT_ACCOUNT_CONCURRENCY = 1000
"""Lambda's default quota per region; new accounts may start lower (check
``aws lambda get-account-settings``: AccountLimit.ConcurrentExecutions)."""
ACCOUNT_CONCURRENCY_PERCENT = 80
"""ConcurrentExecutions (all functions of the region, Maximum per minute) at
this share of the quota: further bursts will be throttled, every function of
the account competing for the rest."""
ACCOUNT_CONCURRENCY_MINUTES = 3
"""Minutes in a row: one minute's peak is a burst the quota absorbed."""

QUEUE_AGE_THRESHOLD = Duration.minutes(10)
"""Age of the oldest message on the submit or result queue. Healthy, it is under
a second. A record whose handler failed comes back after the visibility timeout
(6 x 30 s = 3 minutes), a retried one after at most 30 s of backoff; a job with
no worker for its topic is retried up to 50 times, 30 s apart at most (about
25 minutes), so 10 minutes is a consumer that cannot keep up, records failing
over and over, or a topic without workers."""

KERNEL_HOSTS_MINUTES = 5
"""Minutes in a row with fewer healthy kernel tasks than the service runs. ECS
replaces a failed task in 1 to 2 minutes (start, two health checks 10 s apart,
the 30 s grace); a deploy swaps tasks one at a time the same way."""

REDIS_CONNECTIONS_PER_CONTAINER = BATCH_SIZE
"""A function container handles its batch's records concurrently, a command at a
time each: it opens up to one connection per record (its pool allows 20, which
one invocation never fills)."""
REDIS_OTHER_CLIENTS = 1000
"""Connections for the bridge and kernel tasks' pools, the workers and operators."""
REDIS_MAXCLIENTS = 65_000
"""ElastiCache's fixed maxclients."""
REDIS_CONNECTIONS_CEILING = int(REDIS_MAXCLIENTS * 0.8)
"""The bound never goes past 80 % of maxclients: beyond it, connects are refused."""
REDIS_CPU_CREDITS_THRESHOLD = 50
"""CPU credits left on the emptiest burstable node. A cache.t4g.small earns 24 an
hour and banks at most 576; both vCPUs busy spend 120 an hour, so 50 is about half
an hour before the node is held to its 20 % baseline."""
REDIS_REPLICATION_LAG = Duration.seconds(10)
"""Seconds the replica is behind the primary: what a failover would lose. It
stays well under a second; a replica catching up after a restart or a failover
is over within the REDIS_EVALUATION_PERIODS."""
REDIS_EVALUATION_PERIODS = 3
"""Three 5-minute periods, as the memory and CPU alarms: a snapshot or a
failover spike is not a trend."""


def account_concurrency_limit(node: Node) -> int:
    """The ``accountConcurrencyLimit`` context value (default 1000)."""
    value = node.try_get_context(ACCOUNT_CONCURRENCY_CONTEXT)
    if value is None or str(value).strip() == "":
        return DEFAULT_ACCOUNT_CONCURRENCY
    text = str(value).strip()
    if not text.isdigit() or int(text) < 1:
        raise ContextError(
            f"context {ACCOUNT_CONCURRENCY_CONTEXT} must be the account's Lambda concurrency "
            "quota in the region, a positive integer (aws lambda get-account-settings: "
            f"AccountLimit.ConcurrentExecutions): {value}"
        )
    return int(text)


def redis_connections_threshold(concurrency_limit: int) -> int:
    """Connections the stack's clients can hold at most, capped below maxclients."""
    bound = concurrency_limit * REDIS_CONNECTIONS_PER_CONTAINER + REDIS_OTHER_CLIENTS
    return min(bound, REDIS_CONNECTIONS_CEILING)


def burstable(node_type: object) -> bool:
    """A t-class node (``cache.t3.*``, ``cache.t4g.*``), which runs on CPU credits."""
    return isinstance(node_type, str) and node_type.startswith("cache.t")


@dataclass(frozen=True)
class CapacityTargets:
    """What the capacity alarms watch (all of an AWS stack)."""

    functions: Mapping[str, lambda_.IFunction]
    """Display name -> function."""
    queues: Mapping[str, sqs.IQueue]
    """Display name -> a work queue whose oldest message is watched."""
    stage: apigateway.Stage
    access_logs: logs.ILogGroup
    """The stage's JSON access log group (a ``status`` field per request)."""
    replication_group: elasticache.CfnReplicationGroup
    kernel_target_group: elbv2.NetworkTargetGroup | None = None
    """The kernel's target group; None when the stack is given an outside kernel."""
    kernel_tasks: int = 2
    """Tasks the kernel service runs."""


def add_capacity_alarms(
    scope: Construct, factory: AlarmFactory, targets: CapacityTargets, *, namespace: str
) -> None:
    """Add the capacity alarms to `factory`; `scope` holds the API metric filter."""
    _api(scope, factory, targets, namespace)
    _lambda(factory, targets, account_concurrency_limit(scope.node))
    for name, queue in targets.queues.items():
        factory.alarm(
            f"{name}QueueAge",
            queue.metric_approximate_age_of_oldest_message(
                period=PERIOD, statistic=cloudwatch.Stats.MAXIMUM
            ),
            threshold=QUEUE_AGE_THRESHOLD.to_seconds(),
            description=(
                f"A message has waited over {QUEUE_AGE_THRESHOLD.to_minutes()} minutes on "
                f"the {name} queue: its function is not keeping up or keeps failing it"
            ),
        )
    if targets.kernel_target_group is not None:
        factory.alarm(
            "SafetyKernelHosts",
            targets.kernel_target_group.metrics.healthy_host_count(
                period=MINUTE, statistic=cloudwatch.Stats.MINIMUM
            ),
            threshold=targets.kernel_tasks,
            below=True,
            evaluation_periods=KERNEL_HOSTS_MINUTES,
            description=(
                f"Fewer than {targets.kernel_tasks} healthy safety kernel tasks behind its "
                f"load balancer for {KERNEL_HOSTS_MINUTES} minutes: ECS is not replacing "
                "them (see the service's events); with none, every check fails closed"
            ),
        )
    _redis(factory, targets.replication_group, account_concurrency_limit(scope.node))


def _api(scope: Construct, factory: AlarmFactory, targets: CapacityTargets,
         namespace: str) -> None:
    errors = targets.stage.metric_server_error(period=PERIOD, statistic=cloudwatch.Stats.SUM)
    requests = targets.stage.metric_count(period=PERIOD, statistic=cloudwatch.Stats.SUM)
    factory.alarm(
        "Api5xx",
        cloudwatch.MathExpression(
            expression=f"IF(errors >= {API_5XX_MIN_COUNT}, 100 * errors / requests, 0)",
            using_metrics={"errors": errors, "requests": requests},
            label="5xx % of requests",
            period=PERIOD,
        ),
        threshold=API_5XX_PERCENT,
        description=(
            f"At least {API_5XX_PERCENT} % of API requests answered 5xx in 5 minutes (and "
            f"{API_5XX_MIN_COUNT} or more): the gateway cannot reach Redis or NATS, crashes "
            "or times out"
        ),
    )
    logs.MetricFilter(
        scope,
        "ApiThrottledFilter",
        log_group=targets.access_logs,
        filter_pattern=logs.FilterPattern.string_value("$.status", "=", "429"),
        metric_namespace=namespace,
        metric_name=API_THROTTLED,
        metric_value="1",
    )
    factory.alarm(
        "ApiThrottled",
        cloudwatch.Metric(
            namespace=namespace,
            metric_name=API_THROTTLED,
            statistic=cloudwatch.Stats.SUM,
            period=PERIOD,
        ),
        threshold=API_THROTTLED_THRESHOLD,
        evaluation_periods=API_THROTTLED_PERIODS,
        description=(
            f"{API_THROTTLED_THRESHOLD} or more API requests answered 429 in each of "
            f"{API_THROTTLED_PERIODS} 5-minute periods: the stage throttle or a key's limit "
            "keeps turning callers away"
        ),
    )


def _lambda(factory: AlarmFactory, targets: CapacityTargets, limit: int) -> None:
    for name, fn in targets.functions.items():
        factory.alarm(
            f"{name}Throttles",
            fn.metric_throttles(period=PERIOD, statistic=cloudwatch.Stats.SUM),
            threshold=FUNCTION_THROTTLES_THRESHOLD,
            description=(
                f"{FUNCTION_THROTTLES_THRESHOLD} or more throttled invocations of {name} in "
                "5 minutes: its reserved concurrency or the account's is exhausted"
            ),
        )
    threshold = math.ceil(limit * ACCOUNT_CONCURRENCY_PERCENT / 100)
    factory.alarm(
        "AccountConcurrency",
        lambda_.Function.metric_all_concurrent_executions(
            period=MINUTE, statistic=cloudwatch.Stats.MAXIMUM
        ),
        threshold=threshold,
        evaluation_periods=ACCOUNT_CONCURRENCY_MINUTES,
        description=(
            f"Lambda ran {threshold} or more functions at once ({ACCOUNT_CONCURRENCY_PERCENT} % "
            f"of the {limit} of context {ACCOUNT_CONCURRENCY_CONTEXT}) for "
            f"{ACCOUNT_CONCURRENCY_MINUTES} minutes: raise the quota before it throttles"
        ),
    )


def _redis(factory: AlarmFactory, group: elasticache.CfnReplicationGroup, limit: int) -> None:
    connections = redis_connections_threshold(limit)
    factory.alarm(
        "RedisConnections",
        redis_nodes(group, "CurrConnections", period=PERIOD, label="Redis connections"),
        threshold=connections,
        evaluation_periods=REDIS_EVALUATION_PERIODS,
        description=(
            f"{connections} or more client connections on a Redis node: more than the "
            "stack's functions and services can hold (a leak, or clients outside it)"
        ),
    )
    if burstable(group.cache_node_type):
        factory.alarm(
            "RedisCpuCredits",
            redis_nodes(group, "CPUCreditBalance", period=PERIOD, label="Redis CPU credits",
                        worst="MIN", statistic=cloudwatch.Stats.MINIMUM),
            threshold=REDIS_CPU_CREDITS_THRESHOLD,
            below=True,
            description=(
                f"Under {REDIS_CPU_CREDITS_THRESHOLD} CPU credits left on a burstable Redis "
                "node: it will soon be held to its baseline CPU (resize the node type)"
            ),
        )
    factory.alarm(
        "RedisReplicationLag",
        redis_nodes(group, "ReplicationLag", period=PERIOD, label="Redis replication lag (s)"),
        threshold=REDIS_REPLICATION_LAG.to_seconds(),
        evaluation_periods=REDIS_EVALUATION_PERIODS,
        description=(
            f"The Redis replica is {REDIS_REPLICATION_LAG.to_seconds()} s or more behind the "
            "primary: a failover now would lose those writes"
        ),
    )
