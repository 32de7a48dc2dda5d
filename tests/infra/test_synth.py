"""Synth tests of the CordumServerless stack (CDK template assertions).

Two shapes: a local stack (redisUrl given: no cache, no VPC) and an AWS stack
(no redisUrl: VPC + ElastiCache). The layer and the handler modules are
stand-ins in temporary folders, so no layer build is needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "18,20")

cdk = pytest.importorskip("aws_cdk")
from aws_cdk.assertions import Match, Template  # noqa: E402

CDK_DIR = Path(__file__).resolve().parents[2] / "infra" / "cdk"
sys.path.insert(0, str(CDK_DIR))

from cordum_infra.functions import (  # noqa: E402
    ALL_FUNCTIONS,
    AUDIT_TICK,
    GATEWAY,
    RECONCILER_TICK,
    REPLAYER_TICK,
    RESULT,
    SAGA_ROLLBACK,
    SUBMIT,
    WORKFLOW,
    WORKFLOW_TICK,
)
from cordum_infra.nag import add_checks  # noqa: E402
from cordum_infra.queues import BATCH_SIZE, MAX_RECEIVE_COUNT  # noqa: E402
from cordum_infra.settings import ContextError, StackSettings  # noqa: E402
from cordum_infra.stack import STACK_NAME, CordumServerlessStack  # noqa: E402

from cordum.safety.kernel_pki import issue  # noqa: E402
from tests.bench.bench_cold_start import BENCH_ENV  # noqa: E402

LOCAL_REDIS = "redis://127.0.0.1:6379"
NATS = "nats://127.0.0.1:4222"
AWS_NATS = {
    "natsUrl": "tls://10.0.0.10:4222",
    "natsCredentialsSecretArn": (
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:cordum/nats-AbCdEf"
    ),
}
"""An AWS stack's outside NATS: TLS with credentials (nats:// is refused without redisUrl)."""
HANDLERS = {spec.module for spec in ALL_FUNCTIONS}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A stand-in layer (a `python/` folder), handler modules, config files and the CA
    of an outside safety kernel (`kernel_ca`, for stacks given safetyKernelAddr)."""
    root = tmp_path_factory.mktemp("inputs")
    (root / "layer" / "python").mkdir(parents=True)
    (root / "layer" / "python" / "placeholder.py").write_text("")
    functions = root / "functions"
    functions.mkdir()
    for module in HANDLERS:
        (functions / f"{module}.py").write_text("def handler(event, context):\n    return None\n")
    (functions / "__pycache__").mkdir()
    (functions / "__pycache__" / "gateway.cpython-311.pyc").write_bytes(b"\0")
    config = root / "config"
    config.mkdir()
    for name in ("pools.yaml", "timeouts.yaml", "safety.yaml"):
        (config / name).write_text("{}\n")
    kernel_ca = root / "kernel-ca.pem"
    kernel_ca.write_text(issue("kernel.example.internal").ca_pem)
    return {"layer": root / "layer", "functions": functions, "config": config, "root": root,
            "kernel_ca": kernel_ca}


def _context(inputs: dict[str, Path], **extra: str) -> dict[str, str]:
    return {
        "layerPath": str(inputs["layer"]),
        "functionsDir": str(inputs["functions"]),
        "configDir": str(inputs["config"]),
        **extra,
    }


def _stack(
    inputs: dict[str, Path], tmp: Path, context: dict[str, str]
) -> tuple[Any, CordumServerlessStack]:
    app = cdk.App(context=context, outdir=str(tmp / "cdk.out"))
    settings = StackSettings.from_context(app.node, code_staging_dir=tmp / "function-code")
    return app, CordumServerlessStack(app, STACK_NAME, settings=settings)


def _built(inputs: dict[str, Path], tmp: Path, **extra: str) -> dict[str, Any]:
    """A stack of the context ``extra``: its template, the template's JSON and the stack."""
    _, stack = _stack(inputs, tmp, _context(inputs, **extra))
    template = Template.from_stack(stack)
    return {"template": template, "json": template.to_json(), "stack": stack}


@pytest.fixture(scope="module")
def local(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Given a local deployment: redisUrl, natsUrl and literal API keys."""
    tmp = tmp_path_factory.mktemp("local")
    context = _context(inputs, redisUrl=LOCAL_REDIS, natsUrl=NATS, apiKeys="k1,k2")
    _, stack = _stack(inputs, tmp, context)
    template = Template.from_stack(stack)
    return {"template": template, "json": template.to_json(), "stack": stack, "tmp": tmp}


@pytest.fixture(scope="module")
def aws(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Given an AWS deployment: no redisUrl, a reachable safety kernel, no API keys."""
    tmp = tmp_path_factory.mktemp("aws")
    context = _context(inputs, **AWS_NATS, safetyKernelAddr="10.0.0.11:50051",
                       safetyKernelCa=str(inputs["kernel_ca"]))
    _, stack = _stack(inputs, tmp, context)
    template = Template.from_stack(stack)
    return {"template": template, "json": template.to_json(), "stack": stack}


def _resources(tpl: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in tpl["Resources"].items() if v["Type"] == kind}


def _functions(tpl: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Handler module -> function properties (of Cordum's zip functions: the AWS stack's
    deploy-time certificate issuer is a container image, without a handler, CDK's
    deploy-time provider that empties the VPC's default security group has the
    handler ``__entrypoint__.handler`` and CDK's copy function that puts the kernel's
    policy into its bucket ``index.handler``)."""
    found = {}
    for props in (r["Properties"] for r in _resources(tpl, "AWS::Lambda::Function").values()):
        handler = props.get("Handler")
        if handler and not handler.startswith("__entrypoint__.") and handler != "index.handler":
            found[props["Handler"].removesuffix(".handler")] = props
    return found


def _logical_id(stack: CordumServerlessStack, construct: Any) -> str:
    element = construct if isinstance(construct, cdk.CfnElement) else construct.node.default_child
    return stack.resolve(stack.get_logical_id(element))


def _fn_id(stack: CordumServerlessStack, spec: Any) -> str:
    return _logical_id(stack, stack.functions[spec])


# --- local stack -------------------------------------------------------------------------


def test_local_stack_creates_no_cache_and_no_vpc(local: dict[str, Any]) -> None:
    # When the stack is given a Redis URL
    template = local["template"]
    # Then it brings no ElastiCache, no VPC, and no function is placed in one
    template.resource_count_is("AWS::ElastiCache::ReplicationGroup", 0)
    template.resource_count_is("AWS::ElastiCache::SubnetGroup", 0)
    template.resource_count_is("AWS::EC2::VPC", 0)
    template.resource_count_is("AWS::EC2::SecurityGroup", 0)
    assert all("VpcConfig" not in props for props in _functions(local["json"]).values())


def test_every_python312_function_shares_the_one_layer(local: dict[str, Any]) -> None:
    tpl, stack = local["json"], local["stack"]
    # Then there are the nine handlers, each on python3.12 with exactly the cordum layer
    local["template"].resource_count_is("AWS::Lambda::LayerVersion", 1)
    layer_id = _logical_id(stack, stack.functions.layer)
    functions = _functions(tpl)
    assert set(functions) == HANDLERS and len(HANDLERS) == 9
    for module, props in functions.items():
        assert props["Runtime"] == "python3.12", module
        assert props["Layers"] == [{"Ref": layer_id}], module
        assert props["FunctionName"] == f"{STACK_NAME}-" + module.replace("_", "-")
    layer = _resources(tpl, "AWS::Lambda::LayerVersion")[layer_id]["Properties"]
    assert layer["CompatibleRuntimes"] == ["python3.12"]


def test_rest_api_proxies_every_path_to_the_gateway(local: dict[str, Any]) -> None:
    template, tpl, stack = local["template"], local["json"], local["stack"]
    # Then one REST API (v1) has a greedy {proxy+} resource
    template.resource_count_is("AWS::ApiGateway::RestApi", 1)
    template.resource_count_is("AWS::ApiGateway::Resource", 1)
    template.has_resource_properties("AWS::ApiGateway::Resource", {"PathPart": "{proxy+}"})
    # And both ANY methods (root and {proxy+}) are Lambda proxy integrations of the gateway
    methods = [m["Properties"] for m in _resources(tpl, "AWS::ApiGateway::Method").values()]
    assert len(methods) == 2
    gateway_id = _fn_id(stack, GATEWAY)
    for method in methods:
        assert method["HttpMethod"] == "ANY"
        assert method["Integration"]["Type"] == "AWS_PROXY"
        assert gateway_id in json.dumps(method["Integration"]["Uri"])
    template.has_resource_properties("AWS::ApiGateway::Stage", {"StageName": "prod"})
    template.resource_count_is("AWS::ApiGatewayV2::Api", 0)
    # And the stage throttles every method before a flood reaches the gateway function
    template.has_resource_properties("AWS::ApiGateway::Stage", {"MethodSettings": Match.array_with(
        [Match.object_like({"HttpMethod": "*", "ResourcePath": "/*",
                            "ThrottlingRateLimit": 500, "ThrottlingBurstLimit": 1000})])})


def test_each_work_queue_redrives_to_its_own_dlq(local: dict[str, Any]) -> None:
    tpl, stack = local["json"], local["stack"]
    queues = _resources(tpl, "AWS::SQS::Queue")
    # Then there are 10 queues: submit, result, workflow (FIFO) and workflow timer, each
    # with a DLQ after N receives, and the dead-letter queues of the tick schedules and
    # of the saga rollback's asynchronous invocations
    assert len(queues) == 10
    work_queues = (stack.submit_queue, stack.result_queue, stack.workflow_queue,
                   stack.workflow_timer_queue)
    for job_queue in work_queues:
        main = queues[_logical_id(stack, job_queue.queue)]["Properties"]
        dlq_id = _logical_id(stack, job_queue.dlq)
        assert main["RedrivePolicy"] == {
            "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
            "maxReceiveCount": MAX_RECEIVE_COUNT,
        }
        assert "RedrivePolicy" not in queues[dlq_id]["Properties"]
    assert len({_logical_id(stack, q.dlq) for q in work_queues}) == len(work_queues)


def test_queues_feed_their_function_with_partial_batch_failures(local: dict[str, Any]) -> None:
    tpl, stack = local["json"], local["stack"]
    mappings = [
        m["Properties"] for m in _resources(tpl, "AWS::Lambda::EventSourceMapping").values()
    ]
    # Then exactly four mappings exist: submit queue -> submit, result queue -> result,
    # and both workflow queues -> workflow
    wiring = {json.dumps(m["EventSourceArn"]): m["FunctionName"]["Ref"] for m in mappings}

    def arn(job_queue: Any) -> str:
        return json.dumps({"Fn::GetAtt": [_logical_id(stack, job_queue.queue), "Arn"]})

    assert wiring == {
        arn(stack.submit_queue): _fn_id(stack, SUBMIT),
        arn(stack.result_queue): _fn_id(stack, RESULT),
        arn(stack.workflow_queue): _fn_id(stack, WORKFLOW),
        arn(stack.workflow_timer_queue): _fn_id(stack, WORKFLOW),
    }
    # And each reports batch item failures, in batches of 10
    for mapping in mappings:
        assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert mapping["BatchSize"] == BATCH_SIZE == 10


def test_visibility_timeout_is_at_least_six_consumer_timeouts(local: dict[str, Any]) -> None:
    tpl = local["json"]
    queues = _resources(tpl, "AWS::SQS::Queue")
    functions = {k: v["Properties"] for k, v in _resources(tpl, "AWS::Lambda::Function").items()}
    mappings = list(_resources(tpl, "AWS::Lambda::EventSourceMapping").values())
    assert len(mappings) == 4
    for mapping in mappings:
        # Given the queue and the function of one mapping
        queue = queues[mapping["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]]["Properties"]
        consumer = functions[mapping["Properties"]["FunctionName"]["Ref"]]
        # Then the queue hides a received message for 6 x the function's timeout or longer
        assert queue["VisibilityTimeout"] >= 6 * consumer["Timeout"]


def test_ticks_run_every_minute(local: dict[str, Any]) -> None:
    tpl, stack = local["json"], local["stack"]
    rules = [r["Properties"] for r in _resources(tpl, "AWS::Events::Rule").values()]
    # Then four rate(1 minute) rules target the reconciler, replayer, workflow and audit ticks
    assert len(rules) == 4
    assert all(rule["ScheduleExpression"] == "rate(1 minute)" for rule in rules)
    targets = sorted(rule["Targets"][0]["Arn"]["Fn::GetAtt"][0] for rule in rules)
    assert targets == sorted(
        [_fn_id(stack, RECONCILER_TICK), _fn_id(stack, REPLAYER_TICK),
         _fn_id(stack, WORKFLOW_TICK), _fn_id(stack, AUDIT_TICK)]
    )
    # And EventBridge may invoke them
    for fn_id in targets:
        local["template"].has_resource_properties(
            "AWS::Lambda::Permission",
            {
                "Principal": "events.amazonaws.com",
                "FunctionName": {"Fn::GetAtt": [fn_id, "Arn"]},
            },
        )


def test_every_function_gets_its_settings(local: dict[str, Any]) -> None:
    tpl, stack = local["json"], local["stack"]
    submit_queue_ref = {"Ref": _logical_id(stack, stack.submit_queue.queue)}
    result_queue_ref = {"Ref": _logical_id(stack, stack.result_queue.queue)}
    for module, props in _functions(tpl).items():
        env = props["Environment"]["Variables"]
        # Then Redis, NATS, the safety kernel (local default), config and logging are set
        assert env["REDIS_URL"] == LOCAL_REDIS
        assert env["NATS_URL"] == NATS
        assert env["SAFETY_KERNEL_ADDR"] == "127.0.0.1:50051"
        assert env["OUTPUT_POLICY_ENABLED"] == "true"
        assert env["CORDUM_CONFIG_DIR"] == "config"
        assert env["POWERTOOLS_SERVICE_NAME"] == "cordum-" + module.replace("_", "-")
        assert env["POWERTOOLS_LOG_LEVEL"] == "INFO"
        # pydantic's plugin discovery is not imported (cordum/__init__.py), and the
        # import bench measures the functions with the same switch
        assert env["PYDANTIC_DISABLE_PLUGINS"] == "1" == BENCH_ENV["PYDANTIC_DISABLE_PLUGINS"]
        assert env["SUBMIT_QUEUE_URL"] == submit_queue_ref
        assert env["RESULT_QUEUE_URL"] == result_queue_ref
    functions = _functions(tpl)
    # And only the gateway has the API keys (literal, from the context)
    assert functions["gateway"]["Environment"]["Variables"]["CORDUM_API_KEYS"] == "k1,k2"
    assert "CORDUM_API_KEYS_SSM_PARAMETER" not in functions["gateway"]["Environment"]["Variables"]
    assert all(
        "CORDUM_API_KEYS" not in props["Environment"]["Variables"]
        for module, props in functions.items()
        if module != "gateway"
    )
    # And the result function knows which function rolls a saga back
    assert functions["result"]["Environment"]["Variables"]["SAGA_ROLLBACK_FUNCTION"] == {
        "Ref": _fn_id(stack, SAGA_ROLLBACK)
    }


def test_result_may_invoke_saga_rollback_and_consumers_may_delay_records(
    local: dict[str, Any],
) -> None:
    stack = local["stack"]
    template = local["template"]
    saga_arn = {"Fn::GetAtt": [_fn_id(stack, SAGA_ROLLBACK), "Arn"]}
    # Then the result role may invoke saga-rollback
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "Roles": [{"Ref": _logical_id(stack, stack.functions[RESULT].role)}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": "lambda:InvokeFunction",
                                "Resource": Match.array_with([saga_arn]),
                            }
                        )
                    ]
                )
            },
        },
    )
    # And the submit role may change the visibility of its own queue's messages
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "Roles": [{"Ref": _logical_id(stack, stack.functions[SUBMIT].role)}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": Match.array_with(["sqs:ChangeMessageVisibility"]),
                                "Resource": {
                                    "Fn::GetAtt": [
                                        _logical_id(stack, stack.submit_queue.queue),
                                        "Arn",
                                    ]
                                },
                            }
                        )
                    ]
                )
            },
        },
    )


def test_outputs_name_every_endpoint(local: dict[str, Any]) -> None:
    outputs = local["json"]["Outputs"]
    expected = {
        "ApiUrl",
        "RestApiId",
        "StageName",
        "SubmitQueueUrl",
        "ResultQueueUrl",
        "SubmitDlqUrl",
        "ResultDlqUrl",
        "WorkflowQueueUrl",
        "WorkflowTimerQueueUrl",
        "WorkflowDlqUrl",
        "WorkflowTimerDlqUrl",
        "GatewayFunctionName",
        "SubmitFunctionName",
        "ResultFunctionName",
        "ReconcilerTickFunctionName",
        "ReplayerTickFunctionName",
        "SagaRollbackFunctionName",
        "WorkflowFunctionName",
        "WorkflowTickFunctionName",
    }
    assert expected <= set(outputs)
    assert outputs["StageName"]["Value"] == "prod"


def test_function_code_holds_handlers_and_config_only(local: dict[str, Any]) -> None:
    # Given the staging folder the synth recreated as the function code asset
    staged = local["tmp"] / "function-code"
    # Then it has the handler modules and config/, and no bytecode
    names = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*"))
    assert names == sorted(
        [f"{m}.py" for m in HANDLERS]
        + ["config", "config/pools.yaml", "config/safety.yaml", "config/timeouts.yaml"]
    )


# --- AWS stack ---------------------------------------------------------------------------


def test_aws_stack_creates_an_encrypted_failover_redis(aws: dict[str, Any]) -> None:
    template = aws["template"]
    # When no Redis URL is given, then the stack creates a VPC and a replication group
    template.resource_count_is("AWS::EC2::VPC", 1)
    template.resource_count_is("AWS::ElastiCache::ReplicationGroup", 1)
    template.resource_count_is("AWS::ElastiCache::ServerlessCache", 0)
    template.has_resource_properties(
        "AWS::ElastiCache::ReplicationGroup",
        {
            "Engine": "redis",
            "EngineVersion": Match.string_like_regexp(r"^7\."),
            "ClusterMode": "disabled",
            "TransitEncryptionEnabled": True,
            "AtRestEncryptionEnabled": True,
            "AutomaticFailoverEnabled": True,
            "MultiAZEnabled": True,
            "NumCacheClusters": 2,
        },
    )


def test_aws_stack_puts_every_function_in_the_vpc(aws: dict[str, Any]) -> None:
    stack = aws["stack"]
    functions = _functions(aws["json"])
    assert set(functions) == HANDLERS
    sg_ids = set()
    for module, props in functions.items():
        # Then each function has a VPC config with two private subnets
        assert len(props["VpcConfig"]["SubnetIds"]) == 2, module
        # (the audit tick has a second group of its own, for S3: test_audit_export_infra)
        sg_ids.add(json.dumps(props["VpcConfig"]["SecurityGroupIds"][:1]))
    # And they share one security group, the one the cache admits
    assert len(sg_ids) == 1
    functions_sg = json.loads(sg_ids.pop())[0]
    cache_sg = _logical_id(stack, stack.cache.security_group)
    ingress = _resources(aws["json"], "AWS::EC2::SecurityGroup")[cache_sg]["Properties"][
        "SecurityGroupIngress"
    ]
    # (the cache also admits the bridge: tests/infra/test_network_cache.py)
    from_functions = [r for r in ingress if r.get("SourceSecurityGroupId") == functions_sg]
    assert len(from_functions) == 1
    assert {k: from_functions[0][k] for k in ("FromPort", "ToPort", "IpProtocol")} == {
        "FromPort": 6379,
        "ToPort": 6379,
        "IpProtocol": "tcp",
    }
    assert all("CidrIp" not in r for r in ingress)


def test_aws_stack_points_functions_at_the_primary_endpoint_over_tls(aws: dict[str, Any]) -> None:
    stack = aws["stack"]
    group = _logical_id(stack, stack.cache.replication_group)
    for module, props in _functions(aws["json"]).items():
        env = props["Environment"]["Variables"]
        # Then REDIS_URL is rediss://<primary endpoint>:<port> of the replication group
        assert env["REDIS_URL"] == {
            "Fn::Join": [
                "",
                [
                    "rediss://",
                    {"Fn::GetAtt": [group, "PrimaryEndPoint.Address"]},
                    ":",
                    {"Fn::GetAtt": [group, "PrimaryEndPoint.Port"]},
                ],
            ]
        }, module
        assert env["SAFETY_KERNEL_ADDR"] == "10.0.0.11:50051"


def test_aws_gateway_reads_api_keys_from_secrets_manager(aws: dict[str, Any]) -> None:
    stack = aws["stack"]
    gateway = _functions(aws["json"])["gateway"]["Environment"]["Variables"]
    # Given no apiKeys context, then the gateway is told the secret's name, not SSM's
    assert gateway["CORDUM_API_KEYS_SECRET_ID"] == "cordum/api-keys"
    assert "CORDUM_API_KEYS" not in gateway and "CORDUM_API_KEYS_SSM_PARAMETER" not in gateway
    # And may read that secret (details: tests/infra/test_deploy_functions.py)
    aws["template"].has_resource_properties(
        "AWS::IAM::Policy",
        {
            "Roles": [{"Ref": _logical_id(stack, stack.functions[GATEWAY].role)}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": Match.array_with(["secretsmanager:GetSecretValue"]),
                                "Resource": {
                                    "Fn::Join": [
                                        "",
                                        Match.array_with(
                                            [Match.string_like_regexp(
                                                ":secret:cordum/api-keys-\\?{6}$")]
                                        ),
                                    ]
                                },
                            }
                        )
                    ]
                )
            },
        },
    )


# --- context errors and checks -----------------------------------------------------------


def _settings(inputs: dict[str, Path], **context: str) -> StackSettings:
    app = cdk.App(context=_context(inputs, **context))
    return StackSettings.from_context(app.node)


def test_missing_nats_url_is_an_error(inputs: dict[str, Path]) -> None:
    # Given no natsUrl, when the settings are read, then the error names the key
    with pytest.raises(ContextError, match="natsUrl is required"):
        _settings(inputs, redisUrl=LOCAL_REDIS)


def test_output_policy_is_on_unless_the_context_turns_it_off(inputs: dict[str, Path]) -> None:
    assert _settings(inputs, natsUrl=NATS, redisUrl=LOCAL_REDIS).output_policy is True
    off = _settings(inputs, natsUrl=NATS, redisUrl=LOCAL_REDIS, outputPolicy="false")
    assert off.output_policy is False
    with pytest.raises(ContextError, match="outputPolicy must be true or false"):
        _settings(inputs, natsUrl=NATS, redisUrl=LOCAL_REDIS, outputPolicy="maybe")


def test_unbuilt_layer_is_an_error(inputs: dict[str, Path], tmp_path: Path) -> None:
    # Given a layer folder without python/, then the message says how to build it
    with pytest.raises(ContextError, match=r"build the layer first: python layers/build.py"):
        _settings(inputs, redisUrl=LOCAL_REDIS, natsUrl=NATS, layerPath=str(tmp_path))


def test_app_exits_with_the_context_error(inputs: dict[str, Path], tmp_path: Path) -> None:
    # Given the real entry point without natsUrl
    env = {
        **os.environ,
        "CDK_CONTEXT_JSON": json.dumps(_context(inputs, redisUrl=LOCAL_REDIS)),
        "CDK_OUTDIR": str(tmp_path),
    }
    # When it runs, then it exits non-zero with a one-line reason
    proc = subprocess.run(
        [sys.executable, "app.py"], cwd=CDK_DIR, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert "error: context natsUrl is required" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("shape", ["local", "aws"])
def test_cdk_nag_aws_solutions_passes(inputs: dict[str, Path], tmp_path: Path, shape: str) -> None:
    # Given either stack shape with the AwsSolutions pack and its acknowledgements
    extra = (
        {"redisUrl": LOCAL_REDIS, "natsUrl": NATS}
        if shape == "local"
        else {**AWS_NATS, "safetyKernelAddr": "10.0.0.11:50051",
              "safetyKernelCa": str(inputs["kernel_ca"])}
    )
    app, stack = _stack(inputs, tmp_path, _context(inputs, **extra))
    add_checks(app, stack)
    # When the app is synthesized, then no unacknowledged finding fails it
    assembly = app.synth()
    assert assembly.get_stack_by_name(STACK_NAME).template["Resources"]
