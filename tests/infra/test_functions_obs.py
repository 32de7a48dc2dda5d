"""Functions, API, schedules and observability of the stack (CDK template assertions),
and cfn-lint on both synthesized templates.

Shapes: the local stack (redisUrl given), the AWS stack with the default context
(VPC, cache, the safety kernel on Fargate) and an AWS stack given the optional
knobs (reserved concurrency, an alarm topic, the account's own API logging role).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.infra.test_synth import (
    AWS_NATS,
    _built,
    _fn_id,
    _functions,
    _logical_id,
    _resources,
    inputs,  # noqa: F401  (the module fixture: stand-in layer, handlers, config)
    local,  # noqa: F401  (the local stack fixture)
)

cdk = pytest.importorskip("aws_cdk")
from aws_cdk.assertions import Match  # noqa: E402
from cfnlint.api import ManualArgs, lint  # noqa: E402
from cordum_infra.api import ACCESS_LOG_FIELDS, MAX_BODY_BYTES  # noqa: E402
from cordum_infra.functions import (  # noqa: E402
    ALL_FUNCTIONS,
    AUDIT_TICK,
    DEFAULT_GATEWAY_RESERVED_CONCURRENCY,
    RECONCILER_TICK,
    REPLAYER_TICK,
    SUBMIT,
    WORKFLOW_TICK,
    parse_reserved_concurrency,
)
from cordum_infra.observability import (  # noqa: E402
    CIRCUIT_OPEN_MINUTES,
    alarm_topic_arn_from_context,
)
from cordum_infra.schedules import TARGET_MAX_EVENT_AGE, TARGET_RETRY_ATTEMPTS  # noqa: E402
from cordum_infra.settings import ContextError  # noqa: E402
from cordum_infra.stack import CordumServerlessStack  # noqa: E402

CFN_LINT_CONFIG = Path(__file__).resolve().parents[2] / "infra" / "cdk" / ".cfnlintrc"
TOPIC_ARN = "arn:aws:sns:us-east-1:123456789012:cordum-alarms"


_build = _built


@pytest.fixture(scope="module")
def aws(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given the AWS stack with the default context (no redisUrl, no safetyKernelAddr)."""
    return _build(inputs, tmp_path_factory.mktemp("aws-default"), **AWS_NATS)


@pytest.fixture(scope="module")
def tuned(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given the AWS stack with reserved concurrency, an alarm topic and no log role."""
    return _build(
        inputs,
        tmp_path_factory.mktemp("aws-tuned"),
        **AWS_NATS,
        reservedConcurrency=json.dumps({"submit": 50, "reconciler-tick": 1}),
        alarmTopicArn=TOPIC_ARN,
        apiGatewayLogRole="false",
    )


@pytest.fixture(params=["local", "aws"])
def shape(request: pytest.FixtureRequest) -> dict[str, Any]:
    return request.getfixturevalue(request.param)


# --- helpers -----------------------------------------------------------------------------


def _props(tpl: dict[str, Any], logical_id: str) -> dict[str, Any]:
    return tpl["Resources"][logical_id]["Properties"]


def _render(value: Any) -> str:
    """A CloudFormation string expression as text, tokens shown as ``${Ref:X}``,
    ``${X.Attr}`` (so the dashboard body can be read as JSON)."""
    if isinstance(value, str):
        return value
    if "Ref" in value:
        return "${Ref:" + value["Ref"] + "}"
    if "Fn::GetAtt" in value:
        return "${" + ".".join(value["Fn::GetAtt"]) + "}"
    if "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return sep.join(_render(part) for part in parts)
    raise AssertionError(f"unexpected expression in a string: {value}")


def _dashboard(tpl: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Widget title -> widget properties of the one dashboard."""
    dashboards = _resources(tpl, "AWS::CloudWatch::Dashboard")
    assert len(dashboards) == 1
    body = json.loads(_render(next(iter(dashboards.values()))["Properties"]["DashboardBody"]))
    return {w["properties"]["title"]: w["properties"] for w in body["widgets"]}


def _widget_text(widget: dict[str, Any]) -> str:
    return json.dumps(widget.get("metrics", []))


def _alarms(tpl: dict[str, Any]) -> list[dict[str, Any]]:
    return [r["Properties"] for r in _resources(tpl, "AWS::CloudWatch::Alarm").values()]


def _expression_alarm(tpl: dict[str, Any], needle: str) -> dict[str, Any]:
    found = [
        a for a in _alarms(tpl)
        if any(needle in q.get("Expression", "") for q in a.get("Metrics", []))
    ]
    assert len(found) == 1, needle
    return found[0]


def _simple_alarms(tpl: dict[str, Any], metric: str) -> list[dict[str, Any]]:
    return [a for a in _alarms(tpl) if a.get("MetricName") == metric]


def _dlqs(stack: CordumServerlessStack) -> dict[str, Any]:
    return {
        "submit": stack.submit_queue.dlq,
        "result": stack.result_queue.dlq,
        "workflow": stack.workflow_queue.dlq,
        "workflow_timer": stack.workflow_timer_queue.dlq,
        "tick": stack.schedules.dlq,
        "saga_rollback": stack.saga.dlq,
    }


# --- functions ---------------------------------------------------------------------------


def test_every_function_logs_to_its_own_group_with_retention(shape: dict[str, Any]) -> None:
    tpl, stack = shape["json"], shape["stack"]
    groups = _resources(tpl, "AWS::Logs::LogGroup")
    for spec in ALL_FUNCTIONS:
        # Given each function
        props = _props(tpl, _fn_id(stack, spec))
        # Then it logs to a group of the stack named after it (and its stack), kept 30 days
        group_id = props["LoggingConfig"]["LogGroup"]["Ref"]
        group = groups[group_id]
        name = spec.function_name(stack.stack_name)
        assert group["Properties"]["LogGroupName"] == f"/aws/lambda/{name}"
        assert group["Properties"]["RetentionInDays"] == 30
        # And the group goes with the stack (a kept one would block the next deploy)
        assert group["DeletionPolicy"] == "Delete"
    # And no two functions share a group
    ids = {_props(tpl, _fn_id(stack, s))["LoggingConfig"]["LogGroup"]["Ref"] for s in ALL_FUNCTIONS}
    assert len(ids) == len(ALL_FUNCTIONS)


def test_every_function_is_traced_with_xray(shape: dict[str, Any]) -> None:
    tpl, stack = shape["json"], shape["stack"]
    for spec in ALL_FUNCTIONS:
        fn = stack.functions[spec]
        # Then tracing is active
        assert _props(tpl, _fn_id(stack, spec))["TracingConfig"] == {"Mode": "Active"}
        # And the function's role may send the segments
        shape["template"].has_resource_properties(
            "AWS::IAM::Policy",
            {
                "Roles": [{"Ref": _logical_id(stack, fn.role)}],
                "PolicyDocument": {
                    "Statement": Match.array_with(
                        [
                            Match.object_like(
                                {
                                    "Action": ["xray:PutTraceSegments", "xray:PutTelemetryRecords"],
                                    "Resource": "*",
                                }
                            )
                        ]
                    )
                },
            },
        )


def test_no_function_but_the_aws_gateway_reserves_concurrency_by_default(
    shape: dict[str, Any],
) -> None:
    # (the gateway's reservation on AWS: tests/infra/test_deploy_functions.py)
    for module, props in _functions(shape["json"]).items():
        if module == "gateway" and shape["stack"].cache is not None:
            assert props["ReservedConcurrentExecutions"] == DEFAULT_GATEWAY_RESERVED_CONCURRENCY
        else:
            assert "ReservedConcurrentExecutions" not in props, module


def test_reserved_concurrency_comes_from_the_context(tuned: dict[str, Any]) -> None:
    # Given reservedConcurrency {"submit": 50, "reconciler-tick": 1}
    functions = _functions(tuned["json"])
    # Then exactly those two functions reserve it, by module or slug, beside the
    # gateway's default reservation on AWS
    reserved = {
        module: props["ReservedConcurrentExecutions"]
        for module, props in functions.items()
        if "ReservedConcurrentExecutions" in props
    }
    assert reserved == {SUBMIT.module: 50, RECONCILER_TICK.module: 1,
                        "gateway": DEFAULT_GATEWAY_RESERVED_CONCURRENCY}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"sumbit": 5}', "unknown function 'sumbit'"),
        ('{"submit": 0}', "submit must be a whole number >= 1"),
        ('{"submit": true}', "submit must be a whole number >= 1"),
        ('{"submit": 2.5}', "submit must be a whole number >= 1"),
        ("[1, 2]", "must be a JSON object of function -> number"),
        ("submit=5", "must be a JSON object"),
    ],
)
def test_bad_reserved_concurrency_is_a_context_error(value: str, message: str) -> None:
    with pytest.raises(ContextError, match=message):
        parse_reserved_concurrency(value)


def test_reserved_concurrency_accepts_a_mapping_from_cdk_json() -> None:
    assert parse_reserved_concurrency({"saga_rollback": 3, "gateway": 100}) == {
        "saga_rollback": 3,
        "gateway": 100,
    }
    assert parse_reserved_concurrency(None) == {}
    assert parse_reserved_concurrency("") == {}


# --- queues ------------------------------------------------------------------------------


def test_every_queue_is_encrypted_tls_only_and_dead_letters_somewhere(
    shape: dict[str, Any],
) -> None:
    tpl, stack = shape["json"], shape["stack"]
    queues = _resources(tpl, "AWS::SQS::Queue")
    dlq_ids = {_logical_id(stack, q) for q in _dlqs(stack).values()}
    # Then the queues are the four work queues and six dead-letter queues
    assert len(queues) == 10 and dlq_ids <= set(queues) and len(dlq_ids) == 6
    for logical_id, queue in queues.items():
        # And every one is encrypted at rest
        assert queue["Properties"]["SqsManagedSseEnabled"] is True, logical_id
        # And every work queue redrives to a DLQ
        if logical_id not in dlq_ids:
            target = queue["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]
            assert target["Fn::GetAtt"][0] in dlq_ids
    # And every queue refuses requests without TLS
    policies = _resources(tpl, "AWS::SQS::QueuePolicy").values()
    tls_only = set()
    for policy in policies:
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}:
                assert statement["Effect"] == "Deny"
                tls_only.update(q["Ref"] for q in policy["Properties"]["Queues"])
    assert tls_only == set(queues)


def test_consumer_mappings_report_batch_item_failures_and_queues_outwait_them(
    shape: dict[str, Any],
) -> None:
    tpl = shape["json"]
    mappings = [
        m["Properties"] for m in _resources(tpl, "AWS::Lambda::EventSourceMapping").values()
    ]
    assert len(mappings) == 4
    for mapping in mappings:
        assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        queue = _props(tpl, mapping["EventSourceArn"]["Fn::GetAtt"][0])
        consumer = _props(tpl, mapping["FunctionName"]["Ref"])
        assert queue["VisibilityTimeout"] >= 6 * consumer["Timeout"]


# --- API ---------------------------------------------------------------------------------


def test_stage_writes_json_access_logs_to_its_own_group(shape: dict[str, Any]) -> None:
    tpl, stack = shape["json"], shape["stack"]
    stages = list(_resources(tpl, "AWS::ApiGateway::Stage").values())
    assert len(stages) == 1
    stage = stages[0]["Properties"]
    # Then the stage logs to the API's access log group
    group_id = _logical_id(stack, stack.api.access_logs)
    assert stage["AccessLogSetting"]["DestinationArn"] == {"Fn::GetAtt": [group_id, "Arn"]}
    group = tpl["Resources"][group_id]
    assert group["Properties"]["RetentionInDays"] == 90
    assert group["DeletionPolicy"] == "Retain"
    # And one JSON object per request names the request, caller, route, status and latency
    fields = json.loads(stage["AccessLogSetting"]["Format"])
    assert fields == ACCESS_LOG_FIELDS
    assert {k: fields[k] for k in ("requestId", "ip", "method", "path", "status", "latency")} == {
        "requestId": "$context.requestId",
        "ip": "$context.identity.sourceIp",
        "method": "$context.httpMethod",
        "path": "$context.path",
        "status": "$context.status",
        "latency": "$context.responseLatency",
    }
    # And no request header (the API key travels in one) is logged
    assert "header" not in stage["AccessLogSetting"]["Format"].lower()
    # And the stage is traced
    assert stage["TracingEnabled"] is True


def test_api_has_no_cors_preflight(shape: dict[str, Any]) -> None:
    methods = [
        m["Properties"] for m in _resources(shape["json"], "AWS::ApiGateway::Method").values()
    ]
    # Then only the two proxy methods exist: no OPTIONS method, no mock integration
    assert sorted(m["HttpMethod"] for m in methods) == ["ANY", "ANY"]
    assert all(m["Integration"]["Type"] == "AWS_PROXY" for m in methods)


def test_gateway_is_told_the_body_limit(shape: dict[str, Any]) -> None:
    env = _functions(shape["json"])["gateway"]["Environment"]["Variables"]
    assert env["CORDUM_MAX_BODY_BYTES"] == str(MAX_BODY_BYTES) == "1048576"
    # And only the gateway, which is the only one reading bodies from HTTP
    others = [m for m, p in _functions(shape["json"]).items() if m != "gateway"]
    assert all(
        "CORDUM_MAX_BODY_BYTES" not in _functions(shape["json"])[m]["Environment"]["Variables"]
        for m in others
    )


def test_aws_stack_sets_the_account_api_logging_role(aws: dict[str, Any]) -> None:
    tpl = aws["json"]
    accounts = _resources(tpl, "AWS::ApiGateway::Account")
    # Then the account's API Gateway role is set, and kept on destroy
    assert len(accounts) == 1
    account_id, account = next(iter(accounts.items()))
    assert account["DeletionPolicy"] == "Retain"
    role_id = account["Properties"]["CloudWatchRoleArn"]["Fn::GetAtt"][0]
    role = tpl["Resources"][role_id]
    assert role["DeletionPolicy"] == "Retain"
    assert "AmazonAPIGatewayPushToCloudWatchLogs" in json.dumps(
        role["Properties"]["ManagedPolicyArns"]
    )
    # And the stage is created after it (API Gateway refuses access logs before)
    stage_id = next(iter(_resources(tpl, "AWS::ApiGateway::Stage")))
    assert account_id in tpl["Resources"][stage_id]["DependsOn"]


def test_local_stack_and_opt_out_leave_the_account_setting_alone(
    local: dict[str, Any], tuned: dict[str, Any]  # noqa: F811
) -> None:
    for stack in (local, tuned):
        assert not _resources(stack["json"], "AWS::ApiGateway::Account")
        assert stack["stack"].api.log_role is None


# --- schedules ---------------------------------------------------------------------------


def test_ticks_retry_then_dead_letter_to_an_encrypted_queue(shape: dict[str, Any]) -> None:
    tpl, stack = shape["json"], shape["stack"]
    dlq_id = _logical_id(stack, stack.schedules.dlq)
    rules = _resources(tpl, "AWS::Events::Rule")
    tick_fns = {_fn_id(stack, RECONCILER_TICK), _fn_id(stack, REPLAYER_TICK),
                _fn_id(stack, WORKFLOW_TICK), _fn_id(stack, AUDIT_TICK)}
    assert len(rules) == 4
    rule_arns = []
    for rule_id, rule in rules.items():
        (target,) = rule["Properties"]["Targets"]
        assert target["Arn"]["Fn::GetAtt"][0] in tick_fns
        # Then a tick is retried twice within a minute
        assert target["RetryPolicy"] == {
            "MaximumRetryAttempts": TARGET_RETRY_ATTEMPTS,
            "MaximumEventAgeInSeconds": TARGET_MAX_EVENT_AGE.to_seconds(),
        }
        assert TARGET_RETRY_ATTEMPTS == 2 and TARGET_MAX_EVENT_AGE.to_seconds() == 60
        # And then goes to the ticks' DLQ
        assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [dlq_id, "Arn"]}}
        rule_arns.append({"Fn::GetAtt": [rule_id, "Arn"]})
    # And the DLQ is encrypted and keeps its letters 14 days
    dlq = _props(tpl, dlq_id)
    assert dlq["SqsManagedSseEnabled"] is True
    assert dlq["MessageRetentionPeriod"] == 14 * 24 * 3600
    # And EventBridge may send to it for exactly these four rules
    allowed = []
    for policy in _resources(tpl, "AWS::SQS::QueuePolicy").values():
        if policy["Properties"]["Queues"] != [{"Ref": dlq_id}]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement.get("Principal") == {"Service": "events.amazonaws.com"}:
                assert statement["Action"] == "sqs:SendMessage"
                allowed.append(statement["Condition"]["ArnEquals"]["aws:SourceArn"])
    assert sorted(map(json.dumps, allowed)) == sorted(map(json.dumps, rule_arns))


# --- dashboard ---------------------------------------------------------------------------


def test_dashboard_shows_jobs_latency_dlqs_safety_circuit_and_stale_jobs(
    shape: dict[str, Any],
) -> None:
    widgets = _dashboard(shape["json"])
    text = {title: _widget_text(w) for title, w in widgets.items()}
    # Then jobs by state: received, dispatched, completed grouped by status, all topics summed
    jobs = text["Jobs by state (per minute)"]
    for metric in ("jobs_received", "jobs_dispatched", "jobs_completed"):
        assert f'SELECT SUM({metric}) FROM \\"Cordum\\"' in jobs
    assert "GROUP BY status" in jobs
    (completed,) = [
        m[0] for m in widgets["Jobs by state (per minute)"]["metrics"]
        if "jobs_completed" in m[0]["expression"]
    ]
    assert "label" not in completed  # each series is named by its status
    # And dispatch latency percentiles per topic
    latency = text["Dispatch latency (ms, per topic)"]
    assert 'MetricName=\\"dispatch_latency\\"' in latency
    assert "'p50'" in latency and "'p99'" in latency
    # And safety denials, the circuit (checks answered unavailable) and stale jobs
    assert "SUM(safety_denied)" in text["Safety denials (per minute)"]
    assert "SUM(safety_unavailable)" in text["Safety kernel circuit: checks answered unavailable"]
    assert "SUM(stale_jobs)" in text["Stale jobs timed out, orphans replayed"]
    assert "GROUP BY state" in text["Stale jobs timed out, orphans replayed"]


def test_dashboard_shows_every_dlq_depth_and_each_function_errors_and_throttles(
    shape: dict[str, Any],
) -> None:
    stack = shape["stack"]
    widgets = _dashboard(shape["json"])
    # Then the DLQ widget has the visible-message count of each of the six DLQs
    dlq_metrics = widgets["Dead-letter queue depth"]["metrics"]
    assert sorted(m[3] for m in dlq_metrics) == sorted(
        "${" + _logical_id(stack, q) + ".QueueName}" for q in _dlqs(stack).values()
    )
    assert all(m[:3] == ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName"]
               for m in dlq_metrics)
    # And Lambda errors and throttles are graphed per function, all eight
    for title, metric in (("Lambda errors", "Errors"), ("Lambda throttles", "Throttles")):
        metrics = widgets[title]["metrics"]
        assert all(m[:3] == ["AWS/Lambda", metric, "FunctionName"] for m in metrics)
        assert sorted(m[3] for m in metrics) == sorted(
            "${Ref:" + _fn_id(stack, spec) + "}" for spec in ALL_FUNCTIONS
        )


def test_dashboard_shows_redis_only_when_the_stack_owns_it(
    local: dict[str, Any], aws: dict[str, Any]  # noqa: F811
) -> None:
    group = _logical_id(aws["stack"], aws["stack"].cache.replication_group)
    aws_text = json.dumps(_dashboard(aws["json"]))
    for metric in ("DatabaseMemoryUsagePercentage", "EngineCPUUtilization"):
        assert metric in aws_text
        assert metric not in json.dumps(_dashboard(local["json"]))
    # Both members of the replication group are watched: the primary moves on failover
    assert "${Ref:" + group + "}-001" in aws_text and "${Ref:" + group + "}-002" in aws_text


# --- alarms ------------------------------------------------------------------------------


def test_each_dlq_has_a_depth_alarm(shape: dict[str, Any]) -> None:
    stack = shape["stack"]
    alarms = _simple_alarms(shape["json"], "ApproximateNumberOfMessagesVisible")
    # Then one alarm per DLQ fires on its first message
    watched = sorted(a["Dimensions"][0]["Value"]["Fn::GetAtt"][0] for a in alarms)
    assert watched == sorted(_logical_id(stack, q) for q in _dlqs(stack).values())
    for alarm in alarms:
        assert alarm["Namespace"] == "AWS/SQS"
        assert alarm["Threshold"] == 1
        assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
        assert alarm["TreatMissingData"] == "notBreaching"


def test_each_function_has_an_errors_alarm(shape: dict[str, Any]) -> None:
    stack = shape["stack"]
    alarms = _simple_alarms(shape["json"], "Errors")
    assert sorted(a["Dimensions"][0]["Value"]["Ref"] for a in alarms) == sorted(
        _fn_id(stack, spec) for spec in ALL_FUNCTIONS
    )
    for alarm in alarms:
        assert alarm["Namespace"] == "AWS/Lambda"
        assert alarm["Statistic"] == "Sum"
        assert alarm["Threshold"] == 1


def test_open_circuit_alarm_needs_unavailable_checks_for_n_minutes(shape: dict[str, Any]) -> None:
    alarm = _expression_alarm(shape["json"], "SUM(safety_unavailable)")
    (query,) = alarm["Metrics"]
    # Then it sums every topic's safety_unavailable per minute (a Metrics Insights query)
    assert query["Expression"] == 'SELECT SUM(safety_unavailable) FROM "Cordum"'
    assert query["Period"] == 60
    # And fires only when each of N consecutive minutes had one
    assert alarm["EvaluationPeriods"] == alarm["DatapointsToAlarm"] == CIRCUIT_OPEN_MINUTES == 5
    assert alarm["Threshold"] == 1
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["TreatMissingData"] == "notBreaching"


def test_stale_jobs_alarm(shape: dict[str, Any]) -> None:
    alarm = _expression_alarm(shape["json"], "SUM(stale_jobs)")
    assert alarm["Metrics"][0]["Expression"] == 'SELECT SUM(stale_jobs) FROM "Cordum"'
    assert alarm["Threshold"] == 1


def test_redis_memory_and_cpu_alarms_only_when_the_stack_owns_redis(
    local: dict[str, Any], aws: dict[str, Any]  # noqa: F811
) -> None:
    group = _logical_id(aws["stack"], aws["stack"].cache.replication_group)
    for metric, threshold in (("DatabaseMemoryUsagePercentage", 80), ("EngineCPUUtilization", 90)):
        found = [a for a in _alarms(aws["json"]) if metric in json.dumps(a.get("Metrics", []))]
        assert len(found) == 1, metric
        alarm = found[0]
        # Then the alarm takes the worst of both nodes, for three 5-minute periods
        (expression,) = [q for q in alarm["Metrics"] if "Expression" in q]
        assert expression["Expression"] == "MAX([n1, n2])"
        nodes = sorted(
            _render(q["MetricStat"]["Metric"]["Dimensions"][0]["Value"])
            for q in alarm["Metrics"] if "MetricStat" in q
        )
        assert nodes == ["${Ref:" + group + "}-001", "${Ref:" + group + "}-002"]
        assert alarm["Threshold"] == threshold
        assert alarm["EvaluationPeriods"] == 3
        assert metric not in json.dumps(_alarms(local["json"]))


def test_alarms_notify_the_topic_from_the_context(
    aws: dict[str, Any], tuned: dict[str, Any]
) -> None:
    # Given alarmTopicArn, then every alarm notifies it on ALARM and on OK
    alarms = _alarms(tuned["json"])
    # (6 DLQs, 9 functions, circuit and stale jobs, Redis memory and CPU, the bridge;
    # the capacity alarms: API 5xx and 429, 9 functions' throttles, account
    # concurrency, 2 queues' oldest message, kernel hosts, Redis connections, CPU
    # credits and replication lag)
    assert len(alarms) == 6 + 9 + 2 + 2 + 1 + (2 + 9 + 1 + 2 + 1 + 3)
    for alarm in alarms:
        assert alarm["AlarmActions"] == [TOPIC_ARN]
        assert alarm["OKActions"] == [TOPIC_ARN]
    # And without it, every alarm notifies the topic the AWS stack creates
    # (tests/infra/test_deploy_alarms.py)
    assert all(len(a["AlarmActions"]) == 1 for a in _alarms(aws["json"]))


def test_alarm_topic_must_be_an_sns_topic_arn(inputs: dict[str, Path]) -> None:  # noqa: F811
    app = cdk.App(context={"alarmTopicArn": "arn:aws:sqs:us-east-1:123456789012:not-a-topic"})
    with pytest.raises(ContextError, match="alarmTopicArn must be an SNS topic ARN"):
        alarm_topic_arn_from_context(app.node)
    assert alarm_topic_arn_from_context(cdk.App(context={"alarmTopicArn": TOPIC_ARN}).node) == (
        TOPIC_ARN
    )


# --- cfn-lint ----------------------------------------------------------------------------


def _cfn_lint(template: dict[str, Any]) -> list[str]:
    config = yaml.safe_load(CFN_LINT_CONFIG.read_text(encoding="utf-8")) or {}
    args = ManualArgs(
        regions=config.get("regions", ["us-east-1"]),
        ignore_checks=config.get("ignore_checks", []),
    )
    return [str(match) for match in lint(json.dumps(template), config=args)]


@pytest.mark.parametrize("which", ["local", "aws"])
def test_cfn_lint_passes_on_both_templates(which: str, request: pytest.FixtureRequest) -> None:
    # Given the synthesized template of either shape, then cfn-lint finds nothing
    assert _cfn_lint(request.getfixturevalue(which)["json"]) == []


def test_cfn_lint_would_report_a_broken_template(local: dict[str, Any]) -> None:  # noqa: F811
    # Given a template with a function that has an unknown runtime
    broken = json.loads(json.dumps(local["json"]))
    fn = next(iter(_resources(broken, "AWS::Lambda::Function")))
    broken["Resources"][fn]["Properties"]["Runtime"] = "python2.0"
    # Then the same lint reports it (the check above is not vacuous)
    assert any("python2.0" in finding for finding in _cfn_lint(broken))
