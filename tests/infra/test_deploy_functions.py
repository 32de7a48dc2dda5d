"""Fan-out bounds, the FIFO queue's throughput, the API's throttles and web ACL, the API
keys' secret and the names of functions and log groups (CDK template assertions).

Shapes: the default AWS stack (no redisUrl), an AWS stack given every knob of this part
(queueConcurrency, gatewayReservedConcurrency, apiThrottleRate/Burst, wafRateLimit,
apiKeysSecret, stackName), and the local stack (redisUrl), which keeps its shape: no web
ACL, no reserved concurrency.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

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
from cordum_infra.api import (  # noqa: E402
    API_KEYS_TTL_S,
    DEFAULT_THROTTLE_BURST,
    DEFAULT_THROTTLE_RATE_RPS,
)
from cordum_infra.functions import (  # noqa: E402
    ALL_FUNCTIONS,
    DEFAULT_GATEWAY_RESERVED_CONCURRENCY,
    FUNCTION_CONNECTION_BUDGET,
    GATEWAY,
    REDIS_CONNECTIONS_PER_INSTANCE,
    TICK_FUNCTIONS,
)
from cordum_infra.queues import DEFAULT_MAX_CONCURRENCY  # noqa: E402
from cordum_infra.settings import API_KEYS_SECRET, ContextError  # noqa: E402
from cordum_infra.waf import DEFAULT_RATE_LIMIT, RATE_WINDOW_S  # noqa: E402

KEYS_SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/cordum-keys-AbCdEf"
OLD_FIXED_NAMES = {f"cordum-{spec.slug}" for spec in ALL_FUNCTIONS}
"""The names every stack used to give its functions (so two stacks collided)."""


_build = _built


@pytest.fixture(scope="module")
def aws(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given the default AWS stack."""
    return _build(inputs, tmp_path_factory.mktemp("fn-aws"), **AWS_NATS)


@pytest.fixture(scope="module")
def tuned(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given an AWS stack named cordum-staging with every knob of this part set."""
    return _build(
        inputs,
        tmp_path_factory.mktemp("fn-tuned"),
        **AWS_NATS,
        stackName="cordum-staging",
        queueConcurrency=json.dumps({"submit": 80, "workflow-timer": 2}),
        gatewayReservedConcurrency="250",
        apiThrottleRate="120.5",
        apiThrottleBurst="300",
        wafRateLimit="2000",
        apiKeysSecret=KEYS_SECRET_ARN,
    )


@pytest.fixture(params=["local", "aws"])
def shape(request: pytest.FixtureRequest) -> dict[str, Any]:
    return request.getfixturevalue(request.param)


def _mappings(shape: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Queue name (submit, result, workflow, workflow-timer) -> its event source mapping."""
    stack = shape["stack"]
    queues = {
        _logical_id(stack, q.queue): q.name
        for q in (stack.submit_queue, stack.result_queue, stack.workflow_queue,
                  stack.workflow_timer_queue)
    }
    found = {}
    for mapping in _resources(shape["json"], "AWS::Lambda::EventSourceMapping").values():
        props = mapping["Properties"]
        found[queues[props["EventSourceArn"]["Fn::GetAtt"][0]]] = props
    return found


def _reserved(shape: dict[str, Any]) -> dict[str, int]:
    return {
        module: props["ReservedConcurrentExecutions"]
        for module, props in _functions(shape["json"]).items()
        if "ReservedConcurrentExecutions" in props
    }


def _policy_statements(shape: dict[str, Any], spec: Any) -> list[dict[str, Any]]:
    stack = shape["stack"]
    role = {"Ref": _logical_id(stack, stack.functions[spec].role)}
    statements = []
    for policy in _resources(shape["json"], "AWS::IAM::Policy").values():
        if role in policy["Properties"]["Roles"]:
            statements += policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def _context_error(inputs: dict[str, Path], tmp: Path, **extra: str) -> str:  # noqa: F811
    with pytest.raises(ContextError) as info:
        _build(inputs, tmp, **AWS_NATS, **extra)
    return str(info.value)


# --- fan-out -----------------------------------------------------------------------------


def test_every_event_source_has_a_maximum_concurrency(shape: dict[str, Any]) -> None:
    # Then each of the four queues feeds its function through a mapping that caps the
    # pollers' concurrency at the queue's default
    mappings = _mappings(shape)
    assert set(mappings) == set(DEFAULT_MAX_CONCURRENCY) == {
        "submit", "result", "workflow", "workflow-timer"}
    for name, props in mappings.items():
        assert props["ScalingConfig"] == {"MaximumConcurrency": DEFAULT_MAX_CONCURRENCY[name]}


def test_lambda_connections_stay_within_the_default_cache_nodes_budget(
    aws: dict[str, Any],
) -> None:
    # Given the AWS stack's bounds: the queue pollers, the gateway's reservation, and the
    # tick functions (each runs one invocation a minute, shorter than a minute)
    tpl = aws["json"]
    pollers = sum(m["ScalingConfig"]["MaximumConcurrency"] for m in _mappings(aws).values())
    gateway = _functions(tpl)["gateway"]["ReservedConcurrentExecutions"]
    ticks = sum(1 for spec in TICK_FUNCTIONS if _functions(tpl)[spec.module]["Timeout"] < 60)
    assert ticks == len(TICK_FUNCTIONS) == 4
    # Then their Redis connections stay within the budget of the default node
    instances = pollers + gateway + ticks
    assert instances * REDIS_CONNECTIONS_PER_INSTANCE <= FUNCTION_CONNECTION_BUDGET
    # And far from where 1,000 unbounded instances would take it
    assert instances < 1000 / 4


def test_queue_concurrency_comes_from_the_context(tuned: dict[str, Any]) -> None:
    # Given queueConcurrency {"submit": 80, "workflow-timer": 2}
    caps = {n: m["ScalingConfig"]["MaximumConcurrency"] for n, m in _mappings(tuned).items()}
    # Then those two change and the others keep their defaults
    assert caps == {**DEFAULT_MAX_CONCURRENCY, "submit": 80, "workflow-timer": 2}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"submit": 1}', "queueConcurrency: submit must be a whole number from 2 to 1000"),
        ('{"submit": 1001}', "queueConcurrency: submit must be a whole number from 2 to 1000"),
        ('{"result": "ten"}', "queueConcurrency: result must be a whole number from 2 to 1000"),
        ('{"sumbit": 5}', "queueConcurrency: unknown queue 'sumbit'"),
        ("[5]", "queueConcurrency must be a JSON object"),
    ],
)
def test_bad_queue_concurrency_is_refused(
    inputs: dict[str, Path], tmp_path: Path, value: str, message: str  # noqa: F811
) -> None:
    assert message in _context_error(inputs, tmp_path, queueConcurrency=value)


def test_gateway_reserves_concurrency_on_aws_only(shape: dict[str, Any]) -> None:
    # Then on AWS the gateway, and only the gateway, reserves its default; the local
    # stack (redisUrl) reserves nothing, as before
    expected = {GATEWAY.module: DEFAULT_GATEWAY_RESERVED_CONCURRENCY}
    assert _reserved(shape) == (expected if shape["stack"].cache is not None else {})


def test_gateway_reservation_comes_from_the_context(tuned: dict[str, Any]) -> None:
    # Given gatewayReservedConcurrency=250
    assert _reserved(tuned) == {GATEWAY.module: 250}


def test_reserved_concurrency_context_wins_and_none_reserves_nothing(
    inputs: dict[str, Path], tmp_path: Path  # noqa: F811
) -> None:
    # Given reservedConcurrency naming the gateway beside gatewayReservedConcurrency
    both = _build(inputs, tmp_path / "both", **AWS_NATS, gatewayReservedConcurrency="250",
                  reservedConcurrency=json.dumps({"gateway": 60, "submit": 40}))
    # Then reservedConcurrency wins
    assert _reserved(both) == {"gateway": 60, "submit": 40}
    # And gatewayReservedConcurrency=none leaves the gateway in the unreserved pool
    none = _build(inputs, tmp_path / "none", **AWS_NATS, gatewayReservedConcurrency="none")
    assert _reserved(none) == {}


@pytest.mark.parametrize("value", ["0", "-5", "1.5", "many"])
def test_bad_gateway_reservation_is_refused(
    inputs: dict[str, Path], tmp_path: Path, value: str  # noqa: F811
) -> None:
    message = _context_error(inputs, tmp_path, gatewayReservedConcurrency=value)
    assert "gatewayReservedConcurrency must be a whole number >= 1, or none" in message


def test_workflow_fifo_queue_and_its_dlq_are_high_throughput(shape: dict[str, Any]) -> None:
    queues = _resources(shape["json"], "AWS::SQS::Queue")
    stack = shape["stack"]
    # Then the FIFO queue and its DLQ deduplicate per message group and scale per group
    for queue in (stack.workflow_queue.queue, stack.workflow_queue.dlq):
        props = queues[_logical_id(stack, queue)]["Properties"]
        assert props["FifoQueue"] is True
        assert props["DeduplicationScope"] == "messageGroup"
        assert props["FifoThroughputLimit"] == "perMessageGroupId"
    # And no standard queue carries FIFO settings
    for props in (q["Properties"] for q in queues.values() if not q["Properties"].get("FifoQueue")):
        assert "DeduplicationScope" not in props and "FifoThroughputLimit" not in props


# --- the API -----------------------------------------------------------------------------


def _stage(shape: dict[str, Any]) -> dict[str, Any]:
    (stage,) = _resources(shape["json"], "AWS::ApiGateway::Stage").values()
    return stage["Properties"]


def _throttle(shape: dict[str, Any]) -> tuple[float, int]:
    (setting,) = [s for s in _stage(shape)["MethodSettings"] if s["ResourcePath"] == "/*"]
    return setting["ThrottlingRateLimit"], setting["ThrottlingBurstLimit"]


def test_stage_throttles_by_default_and_from_the_context(
    aws: dict[str, Any], tuned: dict[str, Any]
) -> None:
    assert _throttle(aws) == (DEFAULT_THROTTLE_RATE_RPS, DEFAULT_THROTTLE_BURST)
    # Given apiThrottleRate=120.5 and apiThrottleBurst=300
    assert _throttle(tuned) == (120.5, 300)


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"apiThrottleRate": "0"}, "apiThrottleRate must be a number of requests per second > 0"),
        ({"apiThrottleRate": "fast"}, "apiThrottleRate must be a number"),
        ({"apiThrottleBurst": "2.5"}, "apiThrottleBurst must be a whole number >= 1"),
        ({"apiThrottleBurst": "0"}, "apiThrottleBurst must be a whole number >= 1"),
        ({"apiThrottleRate": "20000"}, "apiThrottleRate: at most 10000"),
        ({"apiThrottleBurst": "6000"}, "apiThrottleBurst: at most 5000"),
    ],
)
def test_bad_throttle_is_refused(
    inputs: dict[str, Path], tmp_path: Path, context: dict[str, str], message: str  # noqa: F811
) -> None:
    assert message in _context_error(inputs, tmp_path, **context)


def _web_acl(shape: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    ((acl_id, acl),) = _resources(shape["json"], "AWS::WAFv2::WebACL").items()
    return acl_id, acl["Properties"]


def test_aws_api_stage_is_behind_a_regional_web_acl(aws: dict[str, Any]) -> None:
    stack = aws["stack"]
    acl_id, acl = _web_acl(aws)
    # Then a regional web ACL that allows by default, with metrics and samples on
    assert acl["Scope"] == "REGIONAL"
    assert acl["DefaultAction"] == {"Allow": {}}
    assert acl["VisibilityConfig"]["CloudWatchMetricsEnabled"] is True
    assert acl["VisibilityConfig"]["SampledRequestsEnabled"] is True
    # And it is associated with the API's stage
    (assoc,) = _resources(aws["json"], "AWS::WAFv2::WebACLAssociation").values()
    assert assoc["Properties"]["WebACLArn"] == {"Fn::GetAtt": [acl_id, "Arn"]}
    stage_id = _logical_id(stack, stack.api.rest_api.deployment_stage)
    assert {"Ref": stage_id} in json.loads(json.dumps(assoc["Properties"]["ResourceArn"]))[
        "Fn::Join"][1]


def test_web_acl_rules_rate_limit_each_address_and_block_known_attacks(
    aws: dict[str, Any], tuned: dict[str, Any]
) -> None:
    for shape, limit in ((aws, DEFAULT_RATE_LIMIT), (tuned, 2000)):
        rules = {r["Name"]: r for r in _web_acl(shape)[1]["Rules"]}
        # Then the first rule blocks a source address past its limit per window
        rate = min(rules.values(), key=lambda r: r["Priority"])
        assert rate["Action"] == {"Block": {}}
        assert rate["Statement"]["RateBasedStatement"] == {
            "Limit": limit, "AggregateKeyType": "IP", "EvaluationWindowSec": RATE_WINDOW_S}
        # And the AWS common and known-bad-inputs rule sets follow, enforced
        managed = {
            r["Statement"]["ManagedRuleGroupStatement"]["Name"]: r
            for r in rules.values() if "ManagedRuleGroupStatement" in r["Statement"]
        }
        assert set(managed) == {"AWSManagedRulesCommonRuleSet",
                                "AWSManagedRulesKnownBadInputsRuleSet"}
        for rule in managed.values():
            assert rule["Statement"]["ManagedRuleGroupStatement"]["VendorName"] == "AWS"
            assert rule["OverrideAction"] == {"None": {}}
        # But the common set only counts what it would block in a body: job bodies are
        # prompts (any text, code included) up to 1 MiB, checked by the gateway
        common = managed["AWSManagedRulesCommonRuleSet"]["Statement"]["ManagedRuleGroupStatement"]
        counted = {o["Name"] for o in common["RuleActionOverrides"]
                   if o["ActionToUse"] == {"Count": {}}}
        assert "SizeRestrictions_BODY" in counted and "CrossSiteScripting_BODY" in counted
        assert all(name.endswith("_BODY") for name in counted)
        # And every rule reports metrics
        for rule in rules.values():
            assert rule["VisibilityConfig"]["CloudWatchMetricsEnabled"] is True, rule["Name"]


@pytest.mark.parametrize("value", ["9", "2000000001", "lots"])
def test_bad_waf_rate_limit_is_refused(
    inputs: dict[str, Path], tmp_path: Path, value: str  # noqa: F811
) -> None:
    message = _context_error(inputs, tmp_path, wafRateLimit=value)
    assert "wafRateLimit must be a whole number of requests per 5 minutes" in message


def test_local_stack_has_no_web_acl(local: dict[str, Any]) -> None:  # noqa: F811
    # Given the local shape (LocalStack has no WAFv2), then no ACL and no association
    local["template"].resource_count_is("AWS::WAFv2::WebACL", 0)
    local["template"].resource_count_is("AWS::WAFv2::WebACLAssociation", 0)
    assert local["stack"].api.web_acl is None


# --- API keys ----------------------------------------------------------------------------


def _secret_statements(shape: dict[str, Any], spec: Any, secret: str) -> list[dict[str, Any]]:
    """`spec`'s statements that let it read `secret` (its name or ARN in the resource)."""
    return [s for s in _policy_statements(shape, spec)
            if "secretsmanager:GetSecretValue" in json.dumps(s["Action"])
            and secret in json.dumps(s["Resource"])]


def test_aws_gateway_reads_api_keys_from_the_default_secret(aws: dict[str, Any]) -> None:
    env = _functions(aws["json"])["gateway"]["Environment"]["Variables"]
    # Then the gateway is told the secret's name and how long it keeps what it read
    assert env["CORDUM_API_KEYS_SECRET_ID"] == API_KEYS_SECRET
    assert env["CORDUM_API_KEYS_TTL_S"] == str(API_KEYS_TTL_S)
    assert "CORDUM_API_KEYS" not in env and "CORDUM_API_KEYS_SSM_PARAMETER" not in env
    # And may read that secret (any of the suffixes Secrets Manager adds to a name)
    (statement,) = _secret_statements(aws, GATEWAY, f":secret:{API_KEYS_SECRET}-")
    assert json.dumps(statement["Resource"]).endswith(':secret:cordum/api-keys-??????"]]}')
    # And no longer reads SSM
    assert not any("ssm:" in json.dumps(s["Action"]) for s in _policy_statements(aws, GATEWAY))
    # And no other function may read the keys
    for spec in ALL_FUNCTIONS:
        if spec is not GATEWAY:
            assert not _secret_statements(aws, spec, API_KEYS_SECRET)


def test_api_keys_secret_by_arn_is_granted_exactly(tuned: dict[str, Any]) -> None:
    env = _functions(tuned["json"])["gateway"]["Environment"]["Variables"]
    assert env["CORDUM_API_KEYS_SECRET_ID"] == KEYS_SECRET_ARN
    (statement,) = _secret_statements(tuned, GATEWAY, KEYS_SECRET_ARN)
    assert statement["Resource"] == KEYS_SECRET_ARN


@pytest.mark.parametrize("value", [
    "arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/cordum-keys",
    "arn:aws:ssm:us-east-1:123456789012:parameter/cordum/api-keys",
    "cordum keys!",
])
def test_bad_api_keys_secret_is_refused(
    inputs: dict[str, Path], tmp_path: Path, value: str  # noqa: F811
) -> None:
    message = _context_error(inputs, tmp_path, apiKeysSecret=value)
    assert message.startswith("context apiKeysSecret must be a secret's name")


# --- names -------------------------------------------------------------------------------


def _names(shape: dict[str, Any]) -> tuple[set[str], set[str]]:
    tpl = shape["json"]
    ours = _functions(tpl)
    functions = {ours[spec.module]["FunctionName"] for spec in ALL_FUNCTIONS}
    groups = {
        r["Properties"]["LogGroupName"] for r in _resources(tpl, "AWS::Logs::LogGroup").values()
        if str(r["Properties"].get("LogGroupName", "")).startswith("/aws/lambda/")
    }
    return functions, groups


def test_function_and_log_group_names_follow_the_stack_name(
    aws: dict[str, Any], tuned: dict[str, Any]
) -> None:
    default_fns, default_groups = _names(aws)
    staging_fns, staging_groups = _names(tuned)
    # Then every function and its log group is named after its stack
    assert default_fns == {f"CordumServerless-{s.slug}" for s in ALL_FUNCTIONS}
    assert staging_fns == {f"cordum-staging-{s.slug}" for s in ALL_FUNCTIONS}
    assert staging_groups == {f"/aws/lambda/{name}" for name in staging_fns}
    assert default_groups == {f"/aws/lambda/{name}" for name in default_fns}
    # And two stacks in one account share no name, nor use the old fixed ones
    assert not (default_fns & staging_fns) and not (default_groups & staging_groups)
    assert not ((default_fns | staging_fns) & OLD_FIXED_NAMES)
    # And the outputs scripts read still name each function
    outputs = tuned["json"]["Outputs"]
    for spec in ALL_FUNCTIONS:
        assert outputs[f"{spec.construct_id}FunctionName"]["Value"] == {
            "Ref": _fn_id(tuned["stack"], spec)}
    assert tuned["stack"].stack_name == "cordum-staging"


@pytest.mark.parametrize(("value", "message"), [
    ("9lives", "stackName must start with a letter"),
    ("cordum_prod", "stackName must start with a letter"),
    ("c" * 49, "stackName: at most 48 characters"),
])
def test_bad_stack_name_is_refused(
    inputs: dict[str, Path], tmp_path: Path, value: str, message: str  # noqa: F811
) -> None:
    assert message in _context_error(inputs, tmp_path, stackName=value)
