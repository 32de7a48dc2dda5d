"""Alarms that page someone on AWS, the cdk-nag acknowledgements, and the cost script
(CDK template assertions on the AWS shape; the local shape must stay as it was).

Shapes: the default AWS stack (no redisUrl: it runs the safety kernel and, given
no ``alarmTopicArn``, creates the alarm topic), an AWS stack given a topic and an
outside kernel, and the local stack (redisUrl), which creates no topic.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.infra.test_synth import (
    _context,
    _logical_id,
    _resources,
    _stack,
    inputs,  # noqa: F401  (the module fixture: stand-in layer, handlers, config)
    local,  # noqa: F401  (the local stack fixture)
)

cdk = pytest.importorskip("aws_cdk")
import costs  # noqa: E402  (infra/cdk/costs.py; test_synth puts infra/cdk on the path)
from aws_cdk import aws_iam as iam  # noqa: E402
from aws_cdk import aws_lambda as lambda_  # noqa: E402
from aws_cdk.assertions import Template  # noqa: E402
from cordum_infra import nag  # noqa: E402
from cordum_infra.capacity_alarms import (  # noqa: E402
    ACCOUNT_CONCURRENCY_CONTEXT,
    ACCOUNT_CONCURRENCY_PERCENT,
    API_5XX_MIN_COUNT,
    API_5XX_PERCENT,
    API_THROTTLED_METRIC,
    API_THROTTLED_PERIODS,
    API_THROTTLED_THRESHOLD,
    DEFAULT_ACCOUNT_CONCURRENCY,
    FUNCTION_THROTTLES_THRESHOLD,
    KERNEL_HOSTS_MINUTES,
    QUEUE_AGE_THRESHOLD,
    REDIS_CONNECTIONS_CEILING,
    REDIS_CPU_CREDITS_THRESHOLD,
    REDIS_REPLICATION_LAG,
    account_concurrency_limit,
    burstable,
    redis_connections_threshold,
)
from cordum_infra.fargate import SERVICE_TASKS  # noqa: E402
from cordum_infra.functions import ALL_FUNCTIONS, RUNTIME  # noqa: E402
from cordum_infra.settings import ContextError  # noqa: E402

TOPIC_ARN = "arn:aws:sns:us-east-1:123456789012:cordum-alarms"
KERNEL_ADDR = "10.0.0.11:50051"
AWS_NATS = {
    "natsUrl": "tls://nats.example.internal:4222",
    "natsCredentialsSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:nats-AbCdEf",
}
"""An outside NATS cluster (TLS, credentials): what an AWS stack accepts."""


def _build(inputs: dict[str, Path], tmp: Path, **extra: str) -> dict[str, Any]:  # noqa: F811
    _, stack = _stack(inputs, tmp, _context(inputs, **AWS_NATS, **extra))
    template = Template.from_stack(stack)
    return {"template": template, "json": template.to_json(), "stack": stack}


@pytest.fixture(scope="module")
def aws(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given the default AWS stack: the stack's kernel, no alarm topic named."""
    return _build(inputs, tmp_path_factory.mktemp("alarms-aws"))


@pytest.fixture(scope="module")
def given_topic(
    inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory  # noqa: F811
) -> dict[str, Any]:
    """Given an AWS stack with alarmTopicArn, an outside kernel and a larger account."""
    return _build(
        inputs,
        tmp_path_factory.mktemp("alarms-topic"),
        alarmTopicArn=TOPIC_ARN,
        safetyKernelAddr=KERNEL_ADDR,
        safetyKernelCa=str(inputs["kernel_ca"]),
        accountConcurrencyLimit="3000",
    )


# --- helpers -----------------------------------------------------------------------------


def _alarms(tpl: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: r["Properties"] for k, r in _resources(tpl, "AWS::CloudWatch::Alarm").items()}


def _metric_alarms(tpl: dict[str, Any], metric: str) -> list[dict[str, Any]]:
    """Alarms on `metric`, a plain metric alarm or one of a math alarm's inputs."""
    found = []
    for alarm in _alarms(tpl).values():
        names = {alarm.get("MetricName")} | {
            q["MetricStat"]["Metric"]["MetricName"]
            for q in alarm.get("Metrics", []) if "MetricStat" in q
        }
        if metric in names:
            found.append(alarm)
    return found


def _one(tpl: dict[str, Any], metric: str) -> dict[str, Any]:
    found = _metric_alarms(tpl, metric)
    assert len(found) == 1, metric
    return found[0]


def _inputs_of(alarm: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Id -> metric of each input of a math alarm."""
    return {q["Id"]: q["MetricStat"]["Metric"] for q in alarm["Metrics"] if "MetricStat" in q}


def _expression(alarm: dict[str, Any]) -> str:
    (query,) = [q for q in alarm["Metrics"] if "Expression" in q]
    assert query["ReturnData"] is True
    return str(query["Expression"])


def _dims(metric: dict[str, Any]) -> dict[str, Any]:
    return {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}


# --- the alarm topic ---------------------------------------------------------------------


def test_aws_stack_creates_an_encrypted_ssl_only_topic_every_alarm_notifies(
    aws: dict[str, Any],
) -> None:
    tpl, stack = aws["json"], aws["stack"]
    # Given no alarmTopicArn, then the stack has one topic, encrypted with a key of
    # its own (CloudWatch cannot publish to a topic under the AWS managed key)
    (topic_id,) = _resources(tpl, "AWS::SNS::Topic")
    assert topic_id == _logical_id(stack, stack.observability.alarm_topic)
    key_ref = tpl["Resources"][topic_id]["Properties"]["KmsMasterKeyId"]
    key = tpl["Resources"][key_ref["Fn::GetAtt"][0]]
    assert key["Type"] == "AWS::KMS::Key"
    assert key["Properties"]["EnableKeyRotation"] is True
    # that CloudWatch may use for the messages it publishes
    key_grants = [
        s for s in key["Properties"]["KeyPolicy"]["Statement"]
        if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert key_grants and {"kms:Decrypt", "kms:GenerateDataKey*"} <= set(key_grants[0]["Action"])
    # And the topic refuses plaintext and admits CloudWatch alarms of this account
    (policy,) = _resources(tpl, "AWS::SNS::TopicPolicy").values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in statements
    )
    cloudwatch = {"Service": "cloudwatch.amazonaws.com"}
    (publish,) = [s for s in statements if s.get("Principal") == cloudwatch]
    assert publish["Effect"] == "Allow" and publish["Action"] == "sns:Publish"
    assert publish["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    # And every alarm notifies it, on ALARM and on OK
    alarms = _alarms(tpl)
    assert len(alarms) > 19
    for name, alarm in alarms.items():
        assert alarm["AlarmActions"] == [{"Ref": topic_id}], name
        assert alarm["OKActions"] == [{"Ref": topic_id}], name
    # And the stack outputs the topic's ARN
    assert tpl["Outputs"]["AlarmTopicArn"]["Value"] == {"Ref": topic_id}


def test_a_given_topic_is_used_and_none_is_created(given_topic: dict[str, Any]) -> None:
    tpl = given_topic["json"]
    assert _resources(tpl, "AWS::SNS::Topic") == {}
    assert _resources(tpl, "AWS::SNS::TopicPolicy") == {}
    for name, alarm in _alarms(tpl).items():
        assert alarm["AlarmActions"] == [TOPIC_ARN], name
        assert alarm["OKActions"] == [TOPIC_ARN], name
    assert tpl["Outputs"]["AlarmTopicArn"]["Value"] == TOPIC_ARN


def test_local_stack_keeps_its_alarms_without_a_topic(local: dict[str, Any]) -> None:  # noqa: F811
    tpl = local["json"]
    # Given redisUrl (LocalStack), then no topic, no action and no new alarm
    assert _resources(tpl, "AWS::SNS::Topic") == {}
    alarms = _alarms(tpl)
    assert all("AlarmActions" not in a and "OKActions" not in a for a in alarms.values())
    # (6 DLQs, 9 functions, the safety circuit and stale jobs, as before)
    assert len(alarms) == 6 + 9 + 2
    assert "AlarmTopicArn" not in tpl["Outputs"]


# --- API Gateway -------------------------------------------------------------------------


def test_api_5xx_alarm_needs_a_share_of_requests_and_a_count(aws: dict[str, Any]) -> None:
    tpl, stack = aws["json"], aws["stack"]
    alarm = _one(tpl, "5XXError")
    metrics = _inputs_of(alarm)
    # Then it reads the stage's server errors and requests (ApiName and Stage)
    assert {m["MetricName"] for m in metrics.values()} == {"5XXError", "Count"}
    api_name = stack.resolve(stack.api.rest_api.rest_api_name)
    stage = stack.resolve(stack.api.rest_api.deployment_stage.stage_name)
    for metric in metrics.values():
        assert metric["Namespace"] == "AWS/ApiGateway"
        assert _dims(metric) == {"ApiName": api_name, "Stage": stage}
    # And fires on at least API_5XX_PERCENT of requests, once there are a few
    errors = next(i for i, m in metrics.items() if m["MetricName"] == "5XXError")
    requests = next(i for i, m in metrics.items() if m["MetricName"] == "Count")
    assert _expression(alarm) == (
        f"IF({errors} >= {API_5XX_MIN_COUNT}, 100 * {errors} / {requests}, 0)"
    )
    assert API_5XX_MIN_COUNT == 5 and alarm["Threshold"] == API_5XX_PERCENT == 1
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


def test_api_throttled_alarm_counts_429_answers_in_the_access_log(aws: dict[str, Any]) -> None:
    tpl, stack = aws["json"], aws["stack"]
    # Given the stage's JSON access log, then a metric filter counts its 429 lines
    filters = [
        f["Properties"] for f in _resources(tpl, "AWS::Logs::MetricFilter").values()
        if f["Properties"]["MetricTransformations"][0]["MetricName"] == API_THROTTLED_METRIC
    ]
    assert len(filters) == 1
    (flt,) = filters
    assert flt["LogGroupName"] == {"Ref": _logical_id(stack, stack.api.access_logs)}
    assert flt["FilterPattern"] == '{ $.status = "429" }'
    assert flt["MetricTransformations"][0]["MetricValue"] == "1"
    # And the alarm fires when 429s keep coming, period after period
    alarm = _one(tpl, API_THROTTLED_METRIC)
    assert alarm["Statistic"] == "Sum"
    assert alarm["Threshold"] == API_THROTTLED_THRESHOLD == 50
    assert alarm["EvaluationPeriods"] == alarm["DatapointsToAlarm"] == API_THROTTLED_PERIODS == 2


# --- Lambda ------------------------------------------------------------------------------


def test_each_function_has_a_throttles_alarm(aws: dict[str, Any]) -> None:
    tpl, stack = aws["json"], aws["stack"]
    alarms = _metric_alarms(tpl, "Throttles")
    watched = sorted(a["Dimensions"][0]["Value"]["Ref"] for a in alarms)
    assert watched == sorted(_logical_id(stack, stack.functions[s]) for s in ALL_FUNCTIONS)
    for alarm in alarms:
        assert alarm["Namespace"] == "AWS/Lambda" and alarm["Statistic"] == "Sum"
        assert alarm["Threshold"] == FUNCTION_THROTTLES_THRESHOLD


def test_account_concurrency_alarm_follows_the_context(
    aws: dict[str, Any], given_topic: dict[str, Any]
) -> None:
    # Given the default (1000) or accountConcurrencyLimit=3000, then the alarm
    # watches the region's ConcurrentExecutions (no dimension) at 80 % of it
    for shape, limit in ((aws, DEFAULT_ACCOUNT_CONCURRENCY), (given_topic, 3000)):
        alarm = _one(shape["json"], "ConcurrentExecutions")
        assert alarm["Namespace"] == "AWS/Lambda" and "Dimensions" not in alarm
        assert alarm["Statistic"] == "Maximum"
        assert alarm["Threshold"] == math.ceil(limit * ACCOUNT_CONCURRENCY_PERCENT / 100)
    assert _one(aws["json"], "ConcurrentExecutions")["Threshold"] == 800


@pytest.mark.parametrize("value", ["lots", "0", "-5", "12.5"])
def test_account_concurrency_limit_must_be_a_positive_integer(value: str) -> None:
    app = cdk.App(context={ACCOUNT_CONCURRENCY_CONTEXT: value})
    with pytest.raises(ContextError, match="context accountConcurrencyLimit must be"):
        account_concurrency_limit(app.node)
    assert account_concurrency_limit(cdk.App().node) == 1000


# --- queues ------------------------------------------------------------------------------


def test_submit_and_result_queues_alarm_on_their_oldest_message(aws: dict[str, Any]) -> None:
    tpl, stack = aws["json"], aws["stack"]
    alarms = _metric_alarms(tpl, "ApproximateAgeOfOldestMessage")
    watched = sorted(a["Dimensions"][0]["Value"]["Fn::GetAtt"][0] for a in alarms)
    assert watched == sorted(
        _logical_id(stack, q.queue) for q in (stack.submit_queue, stack.result_queue)
    )
    for alarm in alarms:
        assert alarm["Statistic"] == "Maximum"
        assert alarm["Threshold"] == QUEUE_AGE_THRESHOLD.to_seconds() == 600


# --- the safety kernel -------------------------------------------------------------------


def test_kernel_healthy_hosts_alarm_on_its_target_group(
    aws: dict[str, Any], given_topic: dict[str, Any]
) -> None:
    tpl, stack = aws["json"], aws["stack"]
    kernel = stack.services.kernel
    alarm = _one(tpl, "HealthyHostCount")
    assert alarm["Namespace"] == "AWS/NetworkELB"
    dims = _dims(alarm)
    assert dims.keys() == {"TargetGroup", "LoadBalancer"}
    assert dims["TargetGroup"] == {
        "Fn::GetAtt": [_logical_id(stack, kernel.target_group), "TargetGroupFullName"]
    }
    # (the load balancer's part of the name, cut from the ARN of its listener)
    listeners = {
        k for k, r in _resources(tpl, "AWS::ElasticLoadBalancingV2::Listener").items()
        if r["Properties"]["LoadBalancerArn"] == {"Ref": _logical_id(stack, kernel.load_balancer)}
    }
    assert listeners and all(
        f'"Ref": "{k}"' in json.dumps(dims["LoadBalancer"]) for k in listeners
    )
    # Then fewer healthy tasks than the service runs, minute after minute, fires it
    assert alarm["Statistic"] == "Minimum"
    assert alarm["ComparisonOperator"] == "LessThanThreshold"
    assert alarm["Threshold"] == SERVICE_TASKS == 2
    assert alarm["EvaluationPeriods"] == KERNEL_HOSTS_MINUTES == 5
    assert alarm["Period"] == 60
    # And a stack given an outside kernel has no such alarm
    assert _metric_alarms(given_topic["json"], "HealthyHostCount") == []


# --- Redis -------------------------------------------------------------------------------


def test_redis_connections_credits_and_replication_lag(aws: dict[str, Any]) -> None:
    tpl, stack = aws["json"], aws["stack"]
    group = _logical_id(stack, stack.cache.replication_group)
    cases = {
        # metric: (expression, comparison, threshold)
        "CurrConnections": ("MAX", "GreaterThanOrEqualToThreshold",
                            redis_connections_threshold(DEFAULT_ACCOUNT_CONCURRENCY)),
        "CPUCreditBalance": ("MIN", "LessThanThreshold", REDIS_CPU_CREDITS_THRESHOLD),
        "ReplicationLag": ("MAX", "GreaterThanOrEqualToThreshold",
                           REDIS_REPLICATION_LAG.to_seconds()),
    }
    for metric, (function, comparison, threshold) in cases.items():
        alarm = _one(tpl, metric)
        inputs_ = _inputs_of(alarm)
        # Then the alarm takes the worst of every node of the group
        assert _expression(alarm) == f"{function}([{', '.join(sorted(inputs_))}])", metric
        assert len(inputs_) == stack.cache.replication_group.num_cache_clusters
        for m in inputs_.values():
            assert m["Namespace"] == "AWS/ElastiCache"
            assert group in json.dumps(_dims(m)["CacheClusterId"])
        assert alarm["ComparisonOperator"] == comparison, metric
        assert alarm["Threshold"] == threshold, metric
    assert REDIS_CPU_CREDITS_THRESHOLD == 50 and REDIS_REPLICATION_LAG.to_seconds() == 10
    # And the connection bound grows with the account's concurrency, up to a ceiling
    assert redis_connections_threshold(1000) == 11_000
    assert redis_connections_threshold(100_000) == REDIS_CONNECTIONS_CEILING == 52_000


def test_cpu_credits_only_for_burstable_node_types() -> None:
    assert burstable("cache.t4g.small") and burstable("cache.t3.micro")
    assert not burstable("cache.m7g.large") and not burstable("cache.r7g.xlarge")
    assert not burstable(None)


# --- cdk-nag -----------------------------------------------------------------------------


def test_no_finding_is_acknowledged_stack_wide() -> None:
    # Every acknowledgement names the resource it concerns (nag.add_checks)
    assert nag.STACK_WIDE == {}


def test_cdk_nag_passes_on_the_aws_stack_with_its_topic(
    inputs: dict[str, Path], tmp_path: Path  # noqa: F811
) -> None:
    app, stack = _stack(inputs, tmp_path, _context(inputs, **AWS_NATS))
    nag.add_checks(app, stack)
    assert app.synth().get_stack_by_name(stack.stack_name).template["Resources"]


def test_cdk_nag_reports_a_function_the_acknowledgements_do_not_name(
    inputs: dict[str, Path], tmp_path: Path  # noqa: F811
) -> None:
    # Given one more function, like the stack's (runtime, managed execution role)
    app, stack = _stack(inputs, tmp_path, _context(inputs, **AWS_NATS))
    extra = lambda_.Function(
        stack, "Unlisted", runtime=RUNTIME, handler="index.handler",
        code=lambda_.Code.from_inline("def handler(e, c):\n    return None\n"),
    )
    nag.add_checks(app, stack)
    # When the app is synthesized, then its findings are not covered by anything
    with pytest.raises(Exception) as failed:  # noqa: PT011 (jsii's ValidationError)
        app.synth()
    report = str(failed.value)
    assert "AwsSolutions-L1" in report and "AwsSolutions-IAM4" in report
    assert extra.node.path in report
    assert isinstance(extra.role, iam.Role)


# --- the cost script ---------------------------------------------------------------------


def test_cost_inventory_counts_what_the_template_holds(aws: dict[str, Any]) -> None:
    tpl, template = aws["json"], aws["template"]
    inventory = costs.inventory(tpl)

    def count(kind: str) -> int:
        return len(template.find_resources(kind))

    assert inventory.alarms == count("AWS::CloudWatch::Alarm")
    assert inventory.dashboards == count("AWS::CloudWatch::Dashboard")
    assert inventory.secrets == count("AWS::SecretsManager::Secret")
    assert inventory.kms_keys == count("AWS::KMS::Key")
    assert inventory.load_balancers == count("AWS::ElasticLoadBalancingV2::LoadBalancer")
    assert inventory.nat_gateways == count("AWS::EC2::NatGateway")
    interface = [
        r for r in template.find_resources("AWS::EC2::VPCEndpoint").values()
        if r["Properties"].get("VpcEndpointType") == "Interface"
    ]
    assert inventory.interface_endpoint_zones == sum(
        len(r["Properties"]["SubnetIds"]) for r in interface
    )
    groups = template.find_resources("AWS::ElastiCache::ReplicationGroup").values()
    assert inventory.cache_nodes == {
        g["Properties"]["CacheNodeType"]: g["Properties"]["NumCacheClusters"] for g in groups
    }
    # Fargate: vCPU and GB of every task the services keep running
    services = template.find_resources("AWS::ECS::Service")
    tasks = template.find_resources("AWS::ECS::TaskDefinition")
    # A service that scales has no DesiredCount: its floor is its target's MinCapacity
    floors = {
        ref["Fn::GetAtt"][0]: t["Properties"]["MinCapacity"]
        for t in template.find_resources("AWS::ApplicationAutoScaling::ScalableTarget").values()
        for ref in t["Properties"]["ResourceId"]["Fn::Join"][1] if "Fn::GetAtt" in str(ref)
    }
    vcpu = sum(
        s["Properties"].get("DesiredCount", floors.get(sid, 1))
        * int(tasks[s["Properties"]["TaskDefinition"]["Ref"]]["Properties"]["Cpu"]) / 1024
        for sid, s in services.items()
    )
    assert inventory.fargate_vcpu == pytest.approx(vcpu) and vcpu > 0
    # And the ticks: every function a schedule invokes each minute
    assert inventory.tick_functions == 4
    assert inventory.functions == len(ALL_FUNCTIONS) == 9


def test_cost_table_prices_the_inventory(aws: dict[str, Any]) -> None:
    inventory = costs.inventory(aws["json"])
    idle = costs.monthly(inventory, jobs=0)
    busy = costs.monthly(inventory, jobs=100_000_000)
    # Then idle is the fixed part, and jobs only add to it
    assert costs.total(idle) > 0
    million = costs.monthly(inventory, jobs=1_000_000)
    assert costs.total(busy) > costs.total(million) > costs.total(idle)
    alarms = next(r for r in idle if r.item == "CloudWatch alarms")
    assert alarms.monthly == pytest.approx(inventory.alarm_metrics * costs.PRICES["alarm_metric"])
