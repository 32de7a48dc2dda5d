"""What the AWS shape does when a part fails (CDK template assertions).

ECS replaces a bridge or kernel task that fails its health check and rolls back a
deploy whose tasks keep failing; the kernel's load balancer stops sending to a
task that does not accept on the gRPC port; a saga rollback event Lambda gives
up on lands in a dead-letter queue; an alarm fires when the bridge stops
forwarding. Shapes: the AWS stack running its own kernel, and the local stack
(redisUrl), which runs neither service on ECS and so has no bridge alarm.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.infra.test_synth import (
    AWS_NATS,
    _context,
    _fn_id,
    _logical_id,
    _resources,
    _stack,
    inputs,  # noqa: F401  (the module fixture: stand-in layer, handlers, config)
    local,  # noqa: F401  (the local stack fixture)
)

cdk = pytest.importorskip("aws_cdk")
from aws_cdk.assertions import Template  # noqa: E402
from cordum_infra.bridge import (  # noqa: E402
    BRIDGE_CONTAINER,
    BRIDGE_HEALTH_CHECK_INTERVAL,
    BRIDGE_HEALTH_CHECK_RETRIES,
    BRIDGE_HEALTH_CHECK_START,
    BRIDGE_HEALTH_CHECK_TIMEOUT,
    BRIDGE_HEALTH_FILE,
)
from cordum_infra.functions import RESULT, SAGA_ROLLBACK  # noqa: E402
from cordum_infra.metrics import (  # noqa: E402
    BRIDGE_BACKLOG,
    BRIDGE_FORWARDED,
    BRIDGE_OLDEST_AGE,
    BRIDGE_SERVICE,
)
from cordum_infra.network import KERNEL_PORT  # noqa: E402
from cordum_infra.observability import BRIDGE_LAG_MINUTES, BRIDGE_LAG_THRESHOLD  # noqa: E402
from cordum_infra.queues import DLQ_RETENTION  # noqa: E402
from cordum_infra.safety_kernel import KERNEL_CONTAINER  # noqa: E402
from cordum_infra.saga import MAX_EVENT_AGE, RETRY_ATTEMPTS  # noqa: E402

from cordum.bus import health  # noqa: E402
from cordum.bus.settings import ENV_EMF_METRICS, ENV_HEALTH_FILE  # noqa: E402
from cordum.scheduler.saga_trigger import SAGA_ROLLBACK_FUNCTION_ENV  # noqa: E402


@pytest.fixture(scope="module")
def aws(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given the AWS stack with an outside NATS, running its own kernel."""
    _, stack = _stack(inputs, tmp_path_factory.mktemp("faults"), _context(inputs, **AWS_NATS))
    template = Template.from_stack(stack)
    return {"template": template, "json": template.to_json(), "stack": stack}


@pytest.fixture(params=["local", "aws"])
def shape(request: pytest.FixtureRequest) -> dict[str, Any]:
    return request.getfixturevalue(request.param)


def _container(tpl: dict[str, Any], name: str) -> dict[str, Any]:
    for task in _resources(tpl, "AWS::ECS::TaskDefinition").values():
        for container in task["Properties"]["ContainerDefinitions"]:
            if container["Name"] == name:
                return container
    raise AssertionError(f"no container {name}")


def _service(tpl: dict[str, Any], name: str) -> dict[str, Any]:
    for task_id, task in _resources(tpl, "AWS::ECS::TaskDefinition").items():
        if any(c["Name"] == name for c in task["Properties"]["ContainerDefinitions"]):
            (service,) = [
                r["Properties"] for r in _resources(tpl, "AWS::ECS::Service").values()
                if r["Properties"]["TaskDefinition"] == {"Ref": task_id}
            ]
            return service
    raise AssertionError(f"no service runs {name}")


def _alarm(tpl: dict[str, Any], name_part: str) -> dict[str, Any]:
    (found,) = [
        r["Properties"] for k, r in _resources(tpl, "AWS::CloudWatch::Alarm").items()
        if name_part in k
    ]
    return found


# --- ECS ---------------------------------------------------------------------------------


def test_both_services_roll_back_a_deploy_whose_tasks_keep_failing(aws: dict[str, Any]) -> None:
    for name in (BRIDGE_CONTAINER, KERNEL_CONTAINER):
        deployment = _service(aws["json"], name)["DeploymentConfiguration"]
        assert deployment["DeploymentCircuitBreaker"] == {"Enable": True, "Rollback": True}, name


def test_bridge_container_is_healthy_only_while_its_probe_answers(aws: dict[str, Any]) -> None:
    bridge = _container(aws["json"], BRIDGE_CONTAINER)
    # Then ECS runs the bridge's own check, in the bridge's environment
    assert bridge["HealthCheck"] == {
        "Command": ["CMD", "python", "-m", "cordum.bus.health"],
        "Interval": 30,
        "Timeout": 5,
        "Retries": 3,
        # Two minutes before a failed check counts: a NATS deployed with the stack may
        # still be starting (the probe itself forgives waiting for NATS at start)
        "StartPeriod": 120,
    }
    assert (
        BRIDGE_HEALTH_CHECK_INTERVAL.to_seconds(),
        BRIDGE_HEALTH_CHECK_TIMEOUT.to_seconds(),
        BRIDGE_HEALTH_CHECK_RETRIES,
        BRIDGE_HEALTH_CHECK_START.to_seconds(),
    ) == (30, 5, 3, 120)
    # And the bridge keeps the file that check reads, and writes its lag as EMF lines
    env = {item["Name"]: item["Value"] for item in bridge["Environment"]}
    assert env[ENV_HEALTH_FILE] == BRIDGE_HEALTH_FILE
    assert env[ENV_EMF_METRICS] == "true"
    # And a check fails only after several probes were missed in a row: the file's
    # bound spans four probes, and is more than the interval between two checks
    assert health.HEALTH_MAX_AGE_S == 4 * health.REPORT_INTERVAL_S
    assert health.HEALTH_MAX_AGE_S > BRIDGE_HEALTH_CHECK_INTERVAL.to_seconds()


def test_kernel_container_is_checked_by_a_connect_to_its_grpc_port(aws: dict[str, Any]) -> None:
    kernel = _container(aws["json"], KERNEL_CONTAINER)
    command = kernel["HealthCheck"]["Command"]
    assert command[:3] == ["CMD", "python", "-c"]
    assert f"socket.create_connection(('127.0.0.1', {KERNEL_PORT}), 2)" in command[3]
    assert {k: v for k, v in kernel["HealthCheck"].items() if k != "Command"} == {
        "Interval": 15,
        "Timeout": 3,
        "Retries": 3,
        "StartPeriod": 15,
    }


def test_kernel_load_balancer_checks_the_grpc_port_over_tcp(aws: dict[str, Any]) -> None:
    tpl = aws["json"]
    (group,) = [r["Properties"] for r in
                _resources(tpl, "AWS::ElasticLoadBalancingV2::TargetGroup").values()]
    # Then every task is probed with a TCP connect to the gRPC port, every 10 s
    assert group.items() >= {
        "HealthCheckProtocol": "TCP",
        "HealthCheckPort": str(KERNEL_PORT),
        "HealthCheckIntervalSeconds": 10,
        "HealthCheckTimeoutSeconds": 5,
        "HealthyThresholdCount": 2,
        "UnhealthyThresholdCount": 2,
    }.items()
    # And the timeout is shorter than the interval (checks never overlap)
    assert group["HealthCheckTimeoutSeconds"] < group["HealthCheckIntervalSeconds"]
    # And ECS judges a new task by the load balancer only after its grace period,
    # long enough for two good checks
    service = _service(tpl, KERNEL_CONTAINER)
    assert service["HealthCheckGracePeriodSeconds"] == 30
    assert service["HealthCheckGracePeriodSeconds"] >= 2 * group["HealthCheckIntervalSeconds"]


# --- saga rollback -----------------------------------------------------------------------


def test_saga_rollback_retries_then_sends_the_event_to_its_dlq(shape: dict[str, Any]) -> None:
    tpl, stack = shape["json"], shape["stack"]
    saga_id = _fn_id(stack, SAGA_ROLLBACK)
    dlq_id = _logical_id(stack, stack.saga.dlq)
    (config,) = [
        r["Properties"] for r in _resources(tpl, "AWS::Lambda::EventInvokeConfig").values()
        if r["Properties"]["FunctionName"] == {"Ref": saga_id}
    ]
    # Then a failed rollback event is retried twice, kept at most an hour, and then
    # sent, as Lambda's invocation record, to the saga's dead-letter queue
    assert config == {
        "FunctionName": {"Ref": saga_id},
        "Qualifier": "$LATEST",
        "MaximumRetryAttempts": 2,
        "MaximumEventAgeInSeconds": 3600,
        "DestinationConfig": {"OnFailure": {"Destination": {"Fn::GetAtt": [dlq_id, "Arn"]}}},
    }
    assert (RETRY_ATTEMPTS, MAX_EVENT_AGE.to_seconds()) == (2, 3600)
    # And that queue is kept like the other dead-letter queues: encrypted, 14 days
    dlq = tpl["Resources"][dlq_id]["Properties"]
    assert dlq["SqsManagedSseEnabled"] is True
    assert dlq["MessageRetentionPeriod"] == DLQ_RETENTION.to_seconds() == 14 * 24 * 3600
    # And the function may send there (Lambda delivers with the function's role)
    role = {"Ref": _logical_id(stack, stack.functions[SAGA_ROLLBACK].role)}
    sends = [
        statement
        for policy in _resources(tpl, "AWS::IAM::Policy").values()
        if role in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "sqs:SendMessage" in json.dumps(statement["Action"])
    ]
    assert [s["Resource"] for s in sends] == [{"Fn::GetAtt": [dlq_id, "Arn"]}]
    # And the result function still names the function it hands rollbacks to
    result_id = _fn_id(stack, RESULT)
    variables = tpl["Resources"][result_id]["Properties"]["Environment"]["Variables"]
    assert variables[SAGA_ROLLBACK_FUNCTION_ENV] == {"Ref": saga_id}
    # And the queue's URL is an output, for whoever redrives it
    assert tpl["Outputs"]["SagaRollbackDlqUrl"]["Value"] == {"Ref": dlq_id}


def test_saga_dlq_has_a_depth_alarm_like_the_others(shape: dict[str, Any]) -> None:
    tpl, stack = shape["json"], shape["stack"]
    alarm = _alarm(tpl, "SagaRollbackDlqDepth")
    dlq_id = _logical_id(stack, stack.saga.dlq)
    assert alarm["Namespace"] == "AWS/SQS"
    assert alarm["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert alarm["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": [dlq_id, "QueueName"]}}
    ]
    assert alarm["Threshold"] == 1
    assert alarm["TreatMissingData"] == "notBreaching"


# --- the bridge alarm --------------------------------------------------------------------


def test_bridge_alarm_fires_on_a_stale_oldest_message_or_on_no_data(aws: dict[str, Any]) -> None:
    alarm = _alarm(aws["json"], "BridgeNotForwarding")
    # Then it watches the age of the oldest message no bridge has forwarded yet,
    # one series that every bridge task reports to, the worst of each minute
    assert alarm.items() >= {
        "Namespace": "Cordum",
        "MetricName": "bridge_oldest_age_ms",
        "Dimensions": [{"Name": "service", "Value": "cordum-bridge"}],
        "Statistic": "Maximum",
        "Period": 60,
    }.items()
    # And fires when that age stays at two minutes or more for three minutes
    assert alarm["Threshold"] == 120_000 == BRIDGE_LAG_THRESHOLD.to_milliseconds()
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["EvaluationPeriods"] == alarm["DatapointsToAlarm"] == BRIDGE_LAG_MINUTES == 3
    # And also when no bridge reports at all (every task gone, or none reaching NATS)
    assert alarm["TreatMissingData"] == "breaching"


def test_bridge_metric_names_are_the_ones_the_bridge_writes() -> None:
    assert BRIDGE_SERVICE == health.BRIDGE_SERVICE
    assert BRIDGE_OLDEST_AGE == health.OLDEST_AGE_METRIC
    assert BRIDGE_BACKLOG == health.BACKLOG_METRIC
    assert BRIDGE_FORWARDED == health.FORWARDED_METRIC
    # And a bridge reports several times within each one-minute period
    assert health.REPORT_INTERVAL_S * 2 <= 60


def test_dashboard_graphs_the_bridge_lag(aws: dict[str, Any]) -> None:
    (dashboard,) = _resources(aws["json"], "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in (BRIDGE_OLDEST_AGE, BRIDGE_BACKLOG, BRIDGE_FORWARDED):
        assert metric in body, metric


def test_local_stack_has_no_bridge_alarm(local: dict[str, Any]) -> None:  # noqa: F811
    # Given a local stack, whose bridge runs on the host and reports to no CloudWatch,
    # then no alarm would wait for its data (with missing data breaching, it would
    # always fire), and no widget graphs it
    tpl = local["json"]
    assert not [k for k in _resources(tpl, "AWS::CloudWatch::Alarm") if "Bridge" in k]
    assert BRIDGE_OLDEST_AGE not in json.dumps(tpl)
