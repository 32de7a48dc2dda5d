"""The workflow engine's infrastructure (CDK template assertions), in both stack shapes:
its FIFO event queue and standard timer queue with their DLQs, the workflow function fed
by both, the workflow tick on its schedule, who may send to which queue, alarms, outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.infra.test_synth import (
    _fn_id,
    _functions,
    _logical_id,
    _resources,
    aws,  # noqa: F401  (the AWS stack fixture)
    inputs,  # noqa: F401  (the module fixture: stand-in layer, handlers, config)
    local,  # noqa: F401  (the local stack fixture)
)

cdk = pytest.importorskip("aws_cdk")
from cordum_infra.cache import AUTH_SECRET_ENV  # noqa: E402
from cordum_infra.functions import (  # noqa: E402
    ALL_FUNCTIONS,
    SUBMIT,
    WORKFLOW,
    WORKFLOW_TICK,
)
from cordum_infra.queues import (  # noqa: E402
    BATCH_SIZE,
    MAX_RECEIVE_COUNT,
    VISIBILITY_TIMEOUT_FACTOR,
)
from cordum_infra.safety_kernel import TLS_CA_ENV, TLS_REQUIRED_ENV  # noqa: E402
from cordum_infra.schedules import TARGET_MAX_EVENT_AGE, TARGET_RETRY_ATTEMPTS  # noqa: E402
from cordum_infra.workflow import (  # noqa: E402
    EVENT_SENDERS,
    QUEUE_URL_ENV,
    TIMER_QUEUE_URL_ENV,
    TIMER_SENDERS,
)

REPO = Path(__file__).resolve().parents[2]
SENDERS = {"gateway", "submit", "result", "workflow", "workflow_tick", "replayer_tick",
           "reconciler_tick"}
CONSUME_ACTIONS = {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"}


@pytest.fixture(params=["local", "aws"])
def shape(request: pytest.FixtureRequest) -> dict[str, Any]:
    return request.getfixturevalue(request.param)


# --- helpers -----------------------------------------------------------------------------


def _props(tpl: dict[str, Any], logical_id: str) -> dict[str, Any]:
    return tpl["Resources"][logical_id]["Properties"]


def _queue_ids(shape: dict[str, Any]) -> dict[str, str]:
    stack = shape["stack"]
    return {
        "events": _logical_id(stack, stack.workflow_queue.queue),
        "events_dlq": _logical_id(stack, stack.workflow_queue.dlq),
        "timers": _logical_id(stack, stack.workflow_timer_queue.queue),
        "timers_dlq": _logical_id(stack, stack.workflow_timer_queue.dlq),
    }


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _grants(tpl: dict[str, Any], role_id: str) -> set[tuple[str, str]]:
    """(action, resource) pairs every policy attached to the role allows, resources as
    JSON (so one statement or several, merged or not, read the same)."""
    pairs = set()
    for policy in _resources(tpl, "AWS::IAM::Policy").values():
        if {"Ref": role_id} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Allow"
            for action in _as_list(statement["Action"]):
                for resource in _as_list(statement["Resource"]):
                    pairs.add((action, json.dumps(resource, sort_keys=True)))
    return pairs


def _arn(logical_id: str) -> str:
    return json.dumps({"Fn::GetAtt": [logical_id, "Arn"]}, sort_keys=True)


def _role_id(shape: dict[str, Any], module: str) -> str:
    stack = shape["stack"]
    return _logical_id(stack, stack.functions.by_module[module].role)


# --- queues ------------------------------------------------------------------------------


def test_event_queue_is_fifo_with_sender_named_dedup_ids_and_a_fifo_dlq(
    shape: dict[str, Any],
) -> None:
    tpl, ids = shape["json"], _queue_ids(shape)
    queue, dlq = _props(tpl, ids["events"]), _props(tpl, ids["events_dlq"])
    # Then the event queue is FIFO and leaves deduplication to the MessageDeduplicationId
    # each sender names (the event id)
    assert queue["FifoQueue"] is True
    assert queue["ContentBasedDeduplication"] is False
    # And it carries no fixed name: CloudFormation generates one ending in .fifo
    assert "QueueName" not in queue
    # And it redrives to its own DLQ after the same number of receives as the others,
    # a FIFO queue as a FIFO queue's DLQ must be
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [ids["events_dlq"], "Arn"]},
        "maxReceiveCount": MAX_RECEIVE_COUNT,
    }
    assert dlq["FifoQueue"] is True and dlq["ContentBasedDeduplication"] is False
    assert "RedrivePolicy" not in dlq
    # And both are encrypted; the DLQ keeps its letters 14 days
    assert queue["SqsManagedSseEnabled"] is True and dlq["SqsManagedSseEnabled"] is True
    assert dlq["MessageRetentionPeriod"] == 14 * 24 * 3600


def test_timer_queue_is_standard_so_each_message_may_carry_its_own_delay(
    shape: dict[str, Any],
) -> None:
    tpl, ids = shape["json"], _queue_ids(shape)
    queue, dlq = _props(tpl, ids["timers"]), _props(tpl, ids["timers_dlq"])
    # Then the timer queue is a standard queue (per-message DelaySeconds is refused by
    # FIFO queues) with no queue-wide delay of its own
    for props in (queue, dlq):
        assert "FifoQueue" not in props and "ContentBasedDeduplication" not in props
    assert queue.get("DelaySeconds", 0) == 0
    # And it redrives to its own standard DLQ
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [ids["timers_dlq"], "Arn"]},
        "maxReceiveCount": MAX_RECEIVE_COUNT,
    }
    assert "RedrivePolicy" not in dlq
    assert queue["SqsManagedSseEnabled"] is True and dlq["SqsManagedSseEnabled"] is True


def test_both_queues_hide_a_received_message_for_six_workflow_timeouts(
    shape: dict[str, Any],
) -> None:
    tpl, ids = shape["json"], _queue_ids(shape)
    expected = VISIBILITY_TIMEOUT_FACTOR * WORKFLOW.timeout.to_seconds()
    assert expected == 6 * 60
    for name in ("events", "timers"):
        assert _props(tpl, ids[name])["VisibilityTimeout"] == expected, name


def test_the_workflow_queues_refuse_requests_without_tls(shape: dict[str, Any]) -> None:
    tpl, ids = shape["json"], _queue_ids(shape)
    tls_only = set()
    for policy in _resources(tpl, "AWS::SQS::QueuePolicy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}:
                assert statement["Effect"] == "Deny"
                tls_only.update(q["Ref"] for q in policy["Properties"]["Queues"])
    assert set(ids.values()) <= tls_only


# --- the workflow function and its event sources -----------------------------------------


def test_workflow_function_is_fed_by_both_queues_with_partial_batch_failures(
    shape: dict[str, Any],
) -> None:
    tpl, stack, ids = shape["json"], shape["stack"], _queue_ids(shape)
    mappings = {
        m["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]: m["Properties"]
        for m in _resources(tpl, "AWS::Lambda::EventSourceMapping").values()
    }
    for name in ("events", "timers"):
        mapping = mappings[ids[name]]
        # Then each queue feeds the workflow function in batches of 10, and only the
        # records the function reports failed come back
        assert mapping["FunctionName"] == {"Ref": _fn_id(stack, WORKFLOW)}, name
        assert mapping["BatchSize"] == BATCH_SIZE == 10, name
        assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"], name
    # And neither waits to fill a batch (a FIFO source takes no batching window at all)
    assert "MaximumBatchingWindowInSeconds" not in mappings[ids["events"]]
    assert mappings[ids["timers"]]["MaximumBatchingWindowInSeconds"] == 0
    # And nothing else consumes the workflow queues, nor does workflow consume another
    consumers = {
        source for source, m in mappings.items() if m["FunctionName"] == {
            "Ref": _fn_id(stack, WORKFLOW)}
    }
    assert consumers == {ids["events"], ids["timers"]}


def test_workflow_and_tick_functions_are_sized_for_their_work(shape: dict[str, Any]) -> None:
    tpl, stack = shape["json"], shape["stack"]
    functions = _functions(tpl)
    # Then the workflow function has a minute for a batch of 10 events
    workflow = functions["workflow"]
    assert workflow["Timeout"] == WORKFLOW.timeout.to_seconds() == 60
    assert workflow["MemorySize"] == WORKFLOW.memory_mb
    assert workflow["FunctionName"] == f"{stack.stack_name}-workflow"
    # And the tick ends before the next minute's invocation
    tick = functions["workflow_tick"]
    assert tick["Timeout"] == WORKFLOW_TICK.timeout.to_seconds() == 55
    assert tick["FunctionName"] == f"{stack.stack_name}-workflow-tick"
    # And a failed tick is not retried by Lambda (the next one comes within a minute)
    configs = [
        c["Properties"] for c in _resources(tpl, "AWS::Lambda::EventInvokeConfig").values()
        if c["Properties"]["FunctionName"] == {"Ref": _fn_id(stack, WORKFLOW_TICK)}
    ]
    assert [c["MaximumRetryAttempts"] for c in configs] == [0]
    assert WORKFLOW_TICK.async_retries == 0
    assert WORKFLOW in ALL_FUNCTIONS and WORKFLOW_TICK in ALL_FUNCTIONS


def test_workflow_tick_runs_every_minute_with_retries_and_the_tick_dlq(
    shape: dict[str, Any],
) -> None:
    tpl, stack, template = shape["json"], shape["stack"], shape["template"]
    tick_id = _fn_id(stack, WORKFLOW_TICK)
    rules = [
        r["Properties"] for r in _resources(tpl, "AWS::Events::Rule").values()
        if r["Properties"]["Targets"][0]["Arn"] == {"Fn::GetAtt": [tick_id, "Arn"]}
    ]
    # Then one rate(1 minute) rule targets the workflow tick
    assert len(rules) == 1
    (rule,) = rules
    assert rule["ScheduleExpression"] == "rate(1 minute)"
    assert rule["State"] == "ENABLED"
    # And an undelivered tick is retried, then dead-lettered with the other ticks'
    (target,) = rule["Targets"]
    assert target["RetryPolicy"] == {
        "MaximumRetryAttempts": TARGET_RETRY_ATTEMPTS,
        "MaximumEventAgeInSeconds": TARGET_MAX_EVENT_AGE.to_seconds(),
    }
    assert target["DeadLetterConfig"] == {
        "Arn": {"Fn::GetAtt": [_logical_id(stack, stack.schedules.dlq), "Arn"]}
    }
    # And EventBridge may invoke it
    template.has_resource_properties(
        "AWS::Lambda::Permission",
        {"Principal": "events.amazonaws.com", "FunctionName": {"Fn::GetAtt": [tick_id, "Arn"]}},
    )


# --- settings and reachability -----------------------------------------------------------


def test_each_sender_is_told_the_queues_it_sends_to_and_no_other(shape: dict[str, Any]) -> None:
    ids = _queue_ids(shape)
    assert {s.module for s in EVENT_SENDERS} == SENDERS
    assert {s.module for s in TIMER_SENDERS} == {"workflow", "workflow_tick"}
    for module, props in _functions(shape["json"]).items():
        env = props["Environment"]["Variables"]
        # Then the event senders have the FIFO queue's URL, the others none
        if module in SENDERS:
            assert env[QUEUE_URL_ENV] == {"Ref": ids["events"]}, module
        else:
            assert QUEUE_URL_ENV not in env, module
        # And only workflow and its tick know the timer queue
        if module in {"workflow", "workflow_tick"}:
            assert env[TIMER_QUEUE_URL_ENV] == {"Ref": ids["timers"]}, module
        else:
            assert TIMER_QUEUE_URL_ENV not in env, module
    assert (QUEUE_URL_ENV, TIMER_QUEUE_URL_ENV) == (
        "WORKFLOW_QUEUE_URL", "WORKFLOW_TIMER_QUEUE_URL")


def test_workflow_functions_reach_redis_nats_and_the_kernel_as_submit_does(
    shape: dict[str, Any],
) -> None:
    functions = _functions(shape["json"])
    submit = functions[SUBMIT.module]
    shared = ("REDIS_URL", "NATS_URL", "SAFETY_KERNEL_ADDR", "CORDUM_CONFIG_DIR",
              "OUTPUT_POLICY_ENABLED", "POWERTOOLS_LOG_LEVEL", "POWERTOOLS_METRICS_NAMESPACE")
    for module in ("workflow", "workflow_tick"):
        props, env = functions[module], functions[module]["Environment"]["Variables"]
        # Then the settings the shared library reads are submit's
        for key in shared:
            assert env[key] == submit["Environment"]["Variables"][key], (module, key)
        # And in the AWS shape the functions sit in submit's subnets and security group
        # (the one the cache, the kernel and NATS admit), and read the Redis AUTH secret
        assert props.get("VpcConfig") == submit.get("VpcConfig"), module
        for key in (AUTH_SECRET_ENV, TLS_CA_ENV, TLS_REQUIRED_ENV):
            assert env.get(key) == submit["Environment"]["Variables"].get(key), (module, key)
    if shape["stack"].network is not None:
        assert "VpcConfig" in functions["workflow"]
        assert functions["workflow"]["Environment"]["Variables"][AUTH_SECRET_ENV]


# --- IAM ---------------------------------------------------------------------------------


def test_only_the_senders_may_send_and_only_to_their_queues(shape: dict[str, Any]) -> None:
    tpl, ids = shape["json"], _queue_ids(shape)
    workflow_arns = {_arn(ids[name]) for name in ids}
    for module in _functions(tpl):
        grants = _grants(tpl, _role_id(shape, module))
        sends = {res for action, res in grants if action == "sqs:SendMessage"}
        # Then each function may send exactly to the workflow queues it writes
        expected = set()
        if module in SENDERS:
            expected.add(_arn(ids["events"]))
        if module in {"workflow", "workflow_tick"}:
            expected.add(_arn(ids["timers"]))
        assert sends & workflow_arns == expected, module
        # And no grant names a workflow queue by wildcard or reaches their DLQs
        for action, res in grants:
            if action.startswith("sqs:"):
                assert "*" not in res, (module, action, res)
                assert res not in {_arn(ids["events_dlq"]), _arn(ids["timers_dlq"])}, module


def test_only_the_workflow_function_consumes_the_workflow_queues(shape: dict[str, Any]) -> None:
    tpl, ids = shape["json"], _queue_ids(shape)
    queues = {_arn(ids["events"]), _arn(ids["timers"])}
    for module in _functions(tpl):
        grants = _grants(tpl, _role_id(shape, module))
        consumed = {res for action, res in grants if action in CONSUME_ACTIONS} & queues
        if module == "workflow":
            # Then workflow may receive, delete and delay the records of both queues
            for queue in queues:
                assert {(a, queue) for a in CONSUME_ACTIONS} <= grants
        else:
            assert consumed == set(), module


# --- observability and outputs -----------------------------------------------------------


def test_each_workflow_dlq_has_a_depth_alarm(shape: dict[str, Any]) -> None:
    tpl, ids = shape["json"], _queue_ids(shape)
    alarms = [
        a["Properties"] for a in _resources(tpl, "AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == "ApproximateNumberOfMessagesVisible"
    ]
    watched = {a["Dimensions"][0]["Value"]["Fn::GetAtt"][0]: a for a in alarms}
    for name in ("events_dlq", "timers_dlq"):
        alarm = watched[ids[name]]
        # Then the first dead letter of either workflow queue fires an alarm
        assert alarm["Threshold"] == 1
        assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    # And the workflow queues themselves have none (a busy queue is no incident)
    assert ids["events"] not in watched and ids["timers"] not in watched


def test_workflow_functions_have_error_alarms(shape: dict[str, Any]) -> None:
    tpl, stack = shape["json"], shape["stack"]
    errors = {
        a["Properties"]["Dimensions"][0]["Value"]["Ref"]
        for a in _resources(tpl, "AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == "Errors"
    }
    assert {_fn_id(stack, WORKFLOW), _fn_id(stack, WORKFLOW_TICK)} <= errors


def test_outputs_name_the_workflow_queues(shape: dict[str, Any]) -> None:
    outputs, ids = shape["json"]["Outputs"], _queue_ids(shape)
    assert outputs["WorkflowQueueUrl"]["Value"] == {"Ref": ids["events"]}
    assert outputs["WorkflowTimerQueueUrl"]["Value"] == {"Ref": ids["timers"]}
    assert outputs["WorkflowDlqUrl"]["Value"] == {"Ref": ids["events_dlq"]}
    assert outputs["WorkflowTimerDlqUrl"]["Value"] == {"Ref": ids["timers_dlq"]}
    assert outputs["WorkflowFunctionName"]["Value"] == {"Ref": _fn_id(shape["stack"], WORKFLOW)}
    assert outputs["WorkflowTickFunctionName"]["Value"] == {
        "Ref": _fn_id(shape["stack"], WORKFLOW_TICK)}


# --- the shipped handler modules ---------------------------------------------------------


def test_every_function_has_its_handler_module_in_the_repository() -> None:
    # Given the real functions/ folder the stack's code asset is built from
    for spec in ALL_FUNCTIONS:
        source = (REPO / "functions" / f"{spec.module}.py").read_text(encoding="utf-8")
        # Then each function's module is there and defines the handler Lambda calls
        assert "\ndef handler(event" in source, spec.module
