"""Synth tests of the Fargate services (bridge, safety kernel) and of NATS on AWS.

Shapes: an AWS stack that runs its own safety kernel (no safetyKernelAddr), one
with a dev NATS node (devNats=true: one TLS node, arm64), one with an outside
kernel and NATS credentials from Secrets Manager, and the local stack (redisUrl), which
has none of it. The layer and handlers are test_synth's stand-ins; the images
are the repository's own Dockerfiles.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import test_synth as synth

cdk = pytest.importorskip("aws_cdk")
from aws_cdk.assertions import Template  # noqa: E402
from cordum_infra.bridge import BRIDGE_CONTAINER, BRIDGE_DOCKERFILE  # noqa: E402
from cordum_infra.fargate import STOP_TIMEOUT  # noqa: E402
from cordum_infra.functions import ALL_FUNCTIONS  # noqa: E402
from cordum_infra.kernel_tls import CA_RESOURCE_TYPE, LEAF_RESOURCE_TYPE  # noqa: E402
from cordum_infra.nag import add_checks  # noqa: E402
from cordum_infra.nats import NATS_CREDS_ENV  # noqa: E402
from cordum_infra.nats_cluster import JETSTREAM_DIR  # noqa: E402
from cordum_infra.network import KERNEL_PORT  # noqa: E402
from cordum_infra.safety_kernel import (  # noqa: E402
    KERNEL_CONTAINER,
    KERNEL_DOCKERFILE,
    KERNEL_PKI_DOCKERFILE,
)
from cordum_infra.settings import (  # noqa: E402
    DEV_NATS_URL,
    ContextError,
    StackSettings,
    nats_node_name,
)
from cordum_infra.stack import STACK_NAME  # noqa: E402

inputs = synth.inputs
_resources = synth._resources
_functions = synth._functions
_logical_id = synth._logical_id

REPO_ROOT = Path(__file__).resolve().parents[2]
AWS_NATS = "tls://10.0.0.10:4222"
OUTSIDE_KERNEL = "kernel.example.internal:50051"
CREDS_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:cordum/nats-creds-AbC123"
FARGATE_MAX_STOP_TIMEOUT_S = 120
OUTSIDE_NATS = {"natsUrl": AWS_NATS, "natsCredentialsSecretArn": CREDS_ARN}
"""On AWS an outside NATS is TLS with credentials."""
DEV_NATS_CONTAINER = nats_node_name(0)


def _shape(inputs: dict[str, Path], tmp: Path, **context: str) -> dict[str, Any]:
    app, stack = synth._stack(inputs, tmp, synth._context(inputs, **context))
    assembly = app.synth()
    template = Template.from_stack(stack)
    assets = json.loads((tmp / "cdk.out" / f"{STACK_NAME}.assets.json").read_text())
    return {
        "template": template,
        "json": template.to_json(),
        "stack": stack,
        "out": Path(assembly.directory),
        "assets": assets,
    }


@pytest.fixture(scope="module")
def kernel(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Given an AWS stack with an outside NATS and no safetyKernelAddr."""
    return _shape(inputs, tmp_path_factory.mktemp("kernel"), **OUTSIDE_NATS)


@pytest.fixture(scope="module")
def dev(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Given an AWS stack on arm64 that runs its own NATS (devNats=true)."""
    return _shape(inputs, tmp_path_factory.mktemp("dev"), devNats="true", architecture="arm64")


@pytest.fixture(scope="module")
def creds(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Given an AWS stack with an outside kernel and NATS credentials in Secrets Manager."""
    return _shape(
        inputs,
        tmp_path_factory.mktemp("creds"),
        natsUrl=AWS_NATS,
        safetyKernelAddr=OUTSIDE_KERNEL,
        safetyKernelCa=str(inputs["kernel_ca"]),
        natsCredentialsSecretArn=CREDS_ARN,
    )


@pytest.fixture(scope="module")
def local(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Given a local stack (redisUrl)."""
    tmp = tmp_path_factory.mktemp("local")
    _, stack = synth._stack(
        inputs, tmp, synth._context(inputs, redisUrl=synth.LOCAL_REDIS, natsUrl=synth.NATS)
    )
    return {"template": Template.from_stack(stack)}


# --- helpers -----------------------------------------------------------------------------


def _containers(tpl: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Container name -> (task definition logical id, container definition)."""
    found = {}
    for task_id, task in _resources(tpl, "AWS::ECS::TaskDefinition").items():
        for container in task["Properties"]["ContainerDefinitions"]:
            found[container["Name"]] = (task_id, container)
    return found


def _services(tpl: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Container name -> properties of the ECS service running its task definition."""
    by_task = {task_id: name for name, (task_id, _) in _containers(tpl).items()}
    return {
        by_task[props["TaskDefinition"]["Ref"]]: props
        for props in (r["Properties"] for r in _resources(tpl, "AWS::ECS::Service").values())
    }


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["Name"]: item["Value"] for item in container.get("Environment", [])}


def _task(tpl: dict[str, Any], name: str) -> dict[str, Any]:
    task_id, _ = _containers(tpl)[name]
    return tpl["Resources"][task_id]["Properties"]


def _role_statements(tpl: dict[str, Any], role_ref: dict[str, Any]) -> list[dict[str, Any]]:
    statements = []
    for policy in _resources(tpl, "AWS::IAM::Policy").values():
        if role_ref in policy["Properties"].get("Roles", []):
            statements += policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return action if isinstance(action, list) else [action]


def _resource_list(statement: dict[str, Any]) -> list[Any]:
    resource = statement["Resource"]
    return resource if isinstance(resource, list) else [resource]


def _private_subnets(stack: Any) -> list[Any]:
    network = stack.network
    selection = network.vpc.select_subnets(subnet_type=network.private_subnets.subnet_type)
    return stack.resolve(selection.subnet_ids)


def _ingress(tpl: dict[str, Any], group_id: str) -> list[dict[str, Any]]:
    """Ingress rules of a security group, inline ones and separate resources alike."""
    rules = list(tpl["Resources"][group_id]["Properties"].get("SecurityGroupIngress", []))
    for rule in _resources(tpl, "AWS::EC2::SecurityGroupIngress").values():
        if rule["Properties"]["GroupId"] == {"Fn::GetAtt": [group_id, "GroupId"]}:
            rules.append(rule["Properties"])
    return rules


def _image_functions(tpl: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Logical id -> properties of the Lambda functions run from a container image."""
    return {
        k: r["Properties"]
        for k, r in _resources(tpl, "AWS::Lambda::Function").items()
        if r["Properties"].get("PackageType") == "Image"
    }


def _source(rule: dict[str, Any]) -> str:
    """Logical id of the security group a rule admits."""
    source = rule["SourceSecurityGroupId"]
    assert "CidrIp" not in rule
    return str(source["Fn::GetAtt"][0])


# --- both services -----------------------------------------------------------------------


def test_bridge_and_kernel_run_two_fargate_tasks_in_the_private_subnets(
    kernel: dict[str, Any],
) -> None:
    tpl, stack = kernel["json"], kernel["stack"]
    services = _services(tpl)
    # Then exactly the bridge and the kernel run as services
    assert set(services) == {BRIDGE_CONTAINER, KERNEL_CONTAINER}
    private = _private_subnets(stack)
    assert len(private) == 2
    for name, props in services.items():
        # each on Fargate, its task count left to its scaling (floor two: one per zone,
        # tests/infra/test_deploy_kernel.py), which a deploy never goes below
        assert props["LaunchType"] == "FARGATE", name
        assert "DesiredCount" not in props, name
        deployment = props["DeploymentConfiguration"]
        assert deployment["MinimumHealthyPercent"] == 100, name
        assert deployment["MaximumPercent"] == 200, name
        assert deployment["DeploymentCircuitBreaker"] == {"Enable": True, "Rollback": True}
        # spread over both zones' private subnets, with no public address
        vpc_config = props["NetworkConfiguration"]["AwsvpcConfiguration"]
        assert vpc_config["Subnets"] == private, name
        assert vpc_config["AssignPublicIp"] == "DISABLED", name
        assert props["AvailabilityZoneRebalancing"] == "ENABLED", name
        assert _task(tpl, name)["RequiresCompatibilities"] == ["FARGATE"]
    # And the cluster reports Container Insights
    kernel["template"].has_resource_properties(
        "AWS::ECS::Cluster",
        {"ClusterSettings": [{"Name": "containerInsights", "Value": "enabled"}]},
    )


def test_a_stopping_task_gets_time_to_finish(kernel: dict[str, Any]) -> None:
    from cordum.bus.bridge import DRAIN_TIMEOUT_S, STOP_TIMEOUT_S

    # Then both containers wait STOP_TIMEOUT between SIGTERM and SIGKILL
    stop_s = STOP_TIMEOUT.to_seconds()
    for name, (_, container) in _containers(kernel["json"]).items():
        assert container["StopTimeout"] == stop_s, name
    # And that is within Fargate's limit and longer than the bridge's own shutdown
    assert stop_s <= FARGATE_MAX_STOP_TIMEOUT_S
    assert stop_s > STOP_TIMEOUT_S + DRAIN_TIMEOUT_S
    # And the bridge is PID 1 of its container (exec form), so SIGTERM reaches it
    dockerfile = (REPO_ROOT / BRIDGE_DOCKERFILE).read_text()
    entrypoint = re.search(r"^ENTRYPOINT (.+)$", dockerfile, re.MULTILINE)
    assert entrypoint is not None
    assert json.loads(entrypoint.group(1)) == ["python", "-m", "cordum.bus.bridge"]


def test_service_logs_go_to_log_groups_with_retention(kernel: dict[str, Any]) -> None:
    tpl = kernel["json"]
    log_groups = _resources(tpl, "AWS::Logs::LogGroup")
    for name, (_, container) in _containers(tpl).items():
        # Then each container logs through awslogs to its own group
        logging = container["LogConfiguration"]
        assert logging["LogDriver"] == "awslogs", name
        group_id = logging["Options"]["awslogs-group"]["Ref"]
        group = log_groups[group_id]["Properties"]
        # which keeps the logs for a limited time
        assert group["RetentionInDays"] == 30, name
        assert group["LogGroupName"] == f"/cordum/{name}"


def test_images_are_built_from_the_repo_dockerfiles_at_deploy_time(
    kernel: dict[str, Any],
) -> None:
    images = kernel["assets"]["dockerImages"]
    # Then there is one image asset per service, and one for the kernel's certificate
    # issuer (a Lambda image), each built from its Dockerfile for amd64
    sources = {image["source"]["dockerFile"]: image["source"] for image in images.values()}
    assert set(sources) == {BRIDGE_DOCKERFILE, KERNEL_DOCKERFILE, KERNEL_PKI_DOCKERFILE}
    for dockerfile, source in sources.items():
        assert source["platform"] == "linux/amd64", dockerfile
        # And its staged build context holds only what the images copy
        staged = kernel["out"] / source["directory"]
        assert sorted(p.name for p in staged.iterdir()) == [
            ".dockerignore",
            "config",
            "docker",
            "layers",
            "shared",
        ]
        assert [p.name for p in (staged / "layers").iterdir()] == ["requirements.txt"]
        assert (staged / "config" / "safety.yaml").is_file()
        assert (staged / "shared" / "cordum" / "bus" / "bridge.py").is_file()
        assert not list(staged.rglob("__pycache__"))
    # And the task definitions point at those images
    for name, (_, container) in _containers(kernel["json"]).items():
        image = json.dumps(container["Image"])
        assert "dkr.ecr" in image and "cdk-hnb659fds-container-assets" in image, name


def test_images_run_as_a_user_and_the_kernel_image_checks_its_port() -> None:
    for dockerfile in (BRIDGE_DOCKERFILE, KERNEL_DOCKERFILE):
        text = (REPO_ROOT / dockerfile).read_text()
        assert re.search(r"^FROM python:3\.12-slim$", text, re.MULTILINE), dockerfile
        assert re.search(r"^USER 10001$", text, re.MULTILINE), dockerfile
        # pinned requirements, the library and the shipped config
        assert "pip install --no-deps -r" in text
        assert "COPY shared/ /app/shared/" in text and "COPY config/ /app/config/" in text
    kernel_file = (REPO_ROOT / KERNEL_DOCKERFILE).read_text()
    assert f"socket.create_connection(('127.0.0.1', {KERNEL_PORT}), 2)" in kernel_file
    assert f'CMD ["--addr", "0.0.0.0:{KERNEL_PORT}"]' in kernel_file


def test_synth_needs_no_docker(inputs: dict[str, Path], tmp_path: Path) -> None:
    # Given a `docker` on the PATH that records any call and fails
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "docker-was-called"
    fake = bin_dir / "docker"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    fake.chmod(0o755)
    out = tmp_path / "cdk.out"
    # (cdk-nag has tests of its own: this one is about the images alone)
    context = synth._context(inputs, **OUTSIDE_NATS, nag="false")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "CDK_CONTEXT_JSON": json.dumps(context),
        "CDK_OUTDIR": str(out),
    }
    # When the app (with its cdk-nag checks) synthesizes the AWS stack
    proc = subprocess.run(
        [sys.executable, "app.py"], cwd=synth.CDK_DIR, env=env, capture_output=True, text=True
    )
    # Then it succeeds without calling docker and leaves the images (bridge, kernel,
    # kernel certificate issuer) to the deploy
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not marker.exists()
    assets = json.loads((out / f"{STACK_NAME}.assets.json").read_text())
    assert len(assets["dockerImages"]) == 3


# --- bridge ------------------------------------------------------------------------------


def test_bridge_gets_redis_nats_and_both_queues(kernel: dict[str, Any]) -> None:
    tpl, stack = kernel["json"], kernel["stack"]
    _, bridge = _containers(tpl)[BRIDGE_CONTAINER]
    env = _env(bridge)
    # Then it talks to the stack's Redis (TLS endpoint) and the given NATS
    assert env["REDIS_URL"] == stack.resolve(stack.cache.url)
    assert env["NATS_URL"] == AWS_NATS
    # And forwards to the stack's two queues in the stack's region
    assert env["SUBMIT_QUEUE_URL"] == {"Ref": _logical_id(stack, stack.submit_queue.queue)}
    assert env["RESULT_QUEUE_URL"] == {"Ref": _logical_id(stack, stack.result_queue.queue)}
    assert env["AWS_REGION"] == {"Ref": "AWS::Region"}
    # And logs in to Redis as the bridge's user: its name in the environment, the
    # password from that user's secret as an ECS secret, never as a plain variable
    secret = {"Ref": _logical_id(stack, stack.cache.users.secret("bridge"))}
    assert env["REDIS_USERNAME"] == "cordum-bridge"
    assert bridge["Secrets"] == [
        {"Name": "REDIS_AUTH_TOKEN", "ValueFrom": {"Fn::Join": ["", [secret, ":password::"]]}}
    ]
    assert not any("TOKEN" in name for name in env)


def test_bridge_may_send_to_both_queues_and_nothing_else(kernel: dict[str, Any]) -> None:
    tpl, stack = kernel["json"], kernel["stack"]
    role = {"Ref": _logical_id(stack, stack.services.bridge.task_definition.task_role)}
    statements = _role_statements(tpl, role)
    sent_to = []
    for statement in statements:
        # Then the bridge's task role has no wildcard resource
        resources = _resource_list(statement)
        assert "*" not in resources
        if "sqs:SendMessage" in _actions(statement):
            sent_to += [r["Fn::GetAtt"][0] for r in resources]
        if set(_actions(statement)) <= {"secretsmanager:GetSecretValue",
                                         "secretsmanager:DescribeSecret"}:
            # (its NATS credentials: AWS stacks speak to NATS with credentials only)
            assert "nats" in json.dumps(resources).lower(), resources
            continue
        # and no action but SQS sends (and the queue lookups that go with them)
        assert set(_actions(statement)) <= {
            "sqs:SendMessage",
            "sqs:GetQueueAttributes",
            "sqs:GetQueueUrl",
        }
    # And it may send to exactly the two queues
    assert sorted(sent_to) == sorted(
        [_logical_id(stack, stack.submit_queue.queue), _logical_id(stack, stack.result_queue.queue)]
    )


def test_bridge_runs_in_the_bridge_security_group(kernel: dict[str, Any]) -> None:
    stack = kernel["stack"]
    props = _services(kernel["json"])[BRIDGE_CONTAINER]
    groups = props["NetworkConfiguration"]["AwsvpcConfiguration"]["SecurityGroups"]
    # Then it carries the network's bridge group, the one the cache admits
    assert groups == [stack.resolve(stack.network.bridge_security_group.security_group_id)]


# --- safety kernel -----------------------------------------------------------------------


def test_kernel_sits_behind_an_internal_nlb_health_checked_on_its_port(
    kernel: dict[str, Any],
) -> None:
    template, tpl, stack = kernel["template"], kernel["json"], kernel["stack"]
    # Then one internal network load balancer in the private subnets
    balancers = _resources(tpl, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    assert len(balancers) == 1
    nlb_id, nlb = next(iter(balancers.items()))
    assert nlb["Properties"]["Type"] == "network"
    assert nlb["Properties"]["Scheme"] == "internal"
    assert nlb["Properties"]["Subnets"] == _private_subnets(stack)
    # listens on the kernel port over TCP
    template.has_resource_properties(
        "AWS::ElasticLoadBalancingV2::Listener",
        {"LoadBalancerArn": {"Ref": nlb_id}, "Port": KERNEL_PORT, "Protocol": "TCP"},
    )
    # and forwards to the kernel tasks by IP, health checked with TCP on that port
    groups = _resources(tpl, "AWS::ElasticLoadBalancingV2::TargetGroup")
    assert len(groups) == 1
    group_id, group = next(iter(groups.items()))
    assert group["Properties"].items() >= {
        "Port": KERNEL_PORT,
        "Protocol": "TCP",
        "TargetType": "ip",
        "HealthCheckProtocol": "TCP",
        "HealthCheckPort": str(KERNEL_PORT),
    }.items()
    service = _services(tpl)[KERNEL_CONTAINER]
    assert service["LoadBalancers"] == [
        {
            "ContainerName": KERNEL_CONTAINER,
            "ContainerPort": KERNEL_PORT,
            "TargetGroupArn": {"Ref": group_id},
        }
    ]
    _, container = _containers(tpl)[KERNEL_CONTAINER]
    assert container["PortMappings"][0]["ContainerPort"] == KERNEL_PORT
    assert "HealthCheck" in container


def test_functions_call_the_kernel_through_the_nlb(kernel: dict[str, Any]) -> None:
    stack = kernel["stack"]
    nlb_id = _logical_id(stack, stack.services.kernel.load_balancer)
    expected = {"Fn::Join": ["", [{"Fn::GetAtt": [nlb_id, "DNSName"]}, f":{KERNEL_PORT}"]]}
    # Then every function's SAFETY_KERNEL_ADDR is the load balancer's name and port
    functions = _functions(kernel["json"])
    assert len(functions) == 9
    for module, props in functions.items():
        assert props["Environment"]["Variables"]["SAFETY_KERNEL_ADDR"] == expected, module
    assert kernel["json"]["Outputs"]["SafetyKernelAddr"]["Value"] == expected


def test_only_functions_and_bridge_reach_the_kernel(kernel: dict[str, Any]) -> None:
    tpl, stack = kernel["json"], kernel["stack"]
    network = stack.network
    kernel_sg = _logical_id(stack, network.kernel_security_group)
    nlb = _resources(tpl, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    # Then the load balancer carries the network's kernel group
    (props,) = [r["Properties"] for r in nlb.values()]
    assert props["SecurityGroups"] == [{"Fn::GetAtt": [kernel_sg, "GroupId"]}]
    # which admits the kernel port from the functions and the bridge only
    rules = _ingress(tpl, kernel_sg)
    assert {_source(rule) for rule in rules} == {
        _logical_id(stack, network.functions_security_group),
        _logical_id(stack, network.bridge_security_group),
    }
    assert all(rule["FromPort"] == rule["ToPort"] == KERNEL_PORT for rule in rules)
    # And the tasks admit the load balancer alone
    service = _services(tpl)[KERNEL_CONTAINER]
    (task_sg,) = service["NetworkConfiguration"]["AwsvpcConfiguration"]["SecurityGroups"]
    task_rules = _ingress(tpl, task_sg["Fn::GetAtt"][0])
    assert [(_source(r), r["FromPort"], r["ToPort"]) for r in task_rules] == [
        (kernel_sg, KERNEL_PORT, KERNEL_PORT)
    ]


def test_kernel_serves_tls_with_a_certificate_issued_at_deploy_time(
    kernel: dict[str, Any],
) -> None:
    tpl, stack = kernel["json"], kernel["stack"]
    tls = stack.services.tls
    secret_id = _logical_id(stack, stack.services.kernel.certificate.secret)
    ca_secret_id = _logical_id(stack, tls.ca_secret)
    nlb_id = _logical_id(stack, stack.services.kernel.load_balancer)
    # Then one custom resource issues the certificate for the load balancer's name
    # into the kernel's secret, from the stack's CA, by a container-image function
    (cert_id, cert), = [
        (k, r) for k, r in tpl["Resources"].items() if r["Type"] == LEAF_RESOURCE_TYPE
    ]
    (issuer_id, issuer), = _image_functions(tpl).items()
    assert cert["Properties"]["ServiceToken"] == {"Fn::GetAtt": [issuer_id, "Arn"]}
    assert cert["Properties"]["DnsNames"] == [{"Fn::GetAtt": [nlb_id, "DNSName"]}]
    assert cert["Properties"]["SecretArn"] == {"Ref": secret_id}
    assert cert["Properties"]["CaSecretArn"] == {"Ref": ca_secret_id}
    assert cert["Properties"]["Generation"] == "1"
    assert issuer["Architectures"] == ["x86_64"]
    # And the issuer may read the CA's secret alone and write it and the kernel's
    role = {"Ref": issuer["Role"]["Fn::GetAtt"][0]}
    statements = _role_statements(tpl, role)
    reads = [s for s in statements
             if any(a.startswith("secretsmanager:Get") for a in _actions(s))]
    assert [s["Resource"] for s in reads] == [{"Ref": ca_secret_id}]
    writes = [s for s in statements if "secretsmanager:PutSecretValue" in _actions(s)]
    assert sorted(str(s["Resource"]) for s in writes) == sorted(
        str({"Ref": i}) for i in (ca_secret_id, secret_id))
    # And the kernel gets certificate and key from that secret, by JSON field, at task
    # start, and a variable that changes with each new certificate
    _, container = _containers(tpl)[KERNEL_CONTAINER]
    secrets = {s["Name"]: s["ValueFrom"] for s in container["Secrets"]}
    for name, field in (("SAFETY_KERNEL_TLS_CERT", "cert"), ("SAFETY_KERNEL_TLS_KEY", "key")):
        assert secrets[name] == {"Fn::Join": ["", [{"Ref": secret_id}, f":{field}::"]]}, name
    assert _env(container)["SAFETY_KERNEL_TLS_SERIAL"] == {"Fn::GetAtt": [cert_id, "Serial"]}
    # And no kernel task starts before the certificate is in the secret
    service_id = _logical_id(stack, stack.services.kernel.service)
    assert cert_id in tpl["Resources"][service_id]["DependsOn"]


def test_every_client_trusts_only_the_issued_ca(kernel: dict[str, Any]) -> None:
    tpl = kernel["json"]
    (ca_id,) = [k for k, r in tpl["Resources"].items() if r["Type"] == CA_RESOURCE_TYPE]
    ca = {"Fn::GetAtt": [ca_id, "CaPem"]}
    clients = {m: p["Environment"]["Variables"] for m, p in _functions(tpl).items()}
    clients["bridge"] = _env(_containers(tpl)[BRIDGE_CONTAINER][1])
    assert len(clients) == 10  # the nine functions and the bridge
    for name, env in clients.items():
        assert env["SAFETY_KERNEL_TLS_REQUIRED"] == "true", name
        assert env["SAFETY_KERNEL_TLS_CA"] == ca, name


def test_kernel_counts_velocity_in_the_stacks_redis(kernel: dict[str, Any]) -> None:
    tpl, stack = kernel["json"], kernel["stack"]
    _, container = _containers(tpl)[KERNEL_CONTAINER]
    # Then it has the cache's TLS URL, its own user and that user's password as an
    # ECS secret
    assert _env(container)["REDIS_URL"] == stack.resolve(stack.cache.url)
    assert _env(container)["REDIS_USERNAME"] == "cordum-kernel"
    secrets = {s["Name"]: s["ValueFrom"] for s in container["Secrets"]}
    secret = {"Ref": _logical_id(stack, stack.cache.users.secret("kernel"))}
    assert secrets["REDIS_AUTH_TOKEN"] == {"Fn::Join": ["", [secret, ":password::"]]}
    # And its tasks may reach the cache, which admits them
    task_sg = _logical_id(stack, stack.services.kernel.task_security_group)
    cache_sg = _logical_id(stack, stack.network.cache_security_group)
    assert (task_sg, 6379) in [(_source(r), r["FromPort"]) for r in _ingress(tpl, cache_sg)]
    egress = tpl["Resources"][task_sg]["Properties"]["SecurityGroupEgress"] + [
        r["Properties"] for r in _resources(tpl, "AWS::EC2::SecurityGroupEgress").values()
        if r["Properties"]["GroupId"] == {"Fn::GetAtt": [task_sg, "GroupId"]}
    ]
    assert any(
        r.get("DestinationSecurityGroupId") == {"Fn::GetAtt": [cache_sg, "GroupId"]}
        and r["FromPort"] == r["ToPort"] == 6379
        for r in egress
    )


def test_an_outside_kernels_ca_reaches_every_client(
    creds: dict[str, Any], inputs: dict[str, Path]
) -> None:
    tpl = creds["json"]
    ca = inputs["kernel_ca"].read_text().strip()
    clients = {m: p["Environment"]["Variables"] for m, p in _functions(tpl).items()}
    clients["bridge"] = _env(_containers(tpl)[BRIDGE_CONTAINER][1])
    for name, env in clients.items():
        assert env["SAFETY_KERNEL_TLS_REQUIRED"] == "true", name
        assert env["SAFETY_KERNEL_TLS_CA"] == ca, name
    # And the stack issues no certificate of its own
    kinds = (CA_RESOURCE_TYPE, LEAF_RESOURCE_TYPE)
    assert not [r for r in tpl["Resources"].values() if r["Type"] in kinds]
    assert not _image_functions(tpl)


def test_outside_kernel_address_means_no_kernel_service(creds: dict[str, Any]) -> None:
    tpl = creds["json"]
    # Given safetyKernelAddr, then only the bridge runs and no load balancer exists
    assert set(_services(tpl)) == {BRIDGE_CONTAINER}
    creds["template"].resource_count_is("AWS::ElasticLoadBalancingV2::LoadBalancer", 0)
    # And the functions call the given address
    for module, props in _functions(tpl).items():
        assert props["Environment"]["Variables"]["SAFETY_KERNEL_ADDR"] == OUTSIDE_KERNEL, module


# --- NATS --------------------------------------------------------------------------------


def test_nats_credentials_reach_every_client_by_arn(creds: dict[str, Any]) -> None:
    tpl, stack = creds["json"], creds["stack"]

    def may_read(role: Any) -> bool:
        statements = _role_statements(tpl, {"Ref": _logical_id(stack, role)})
        return any(
            "secretsmanager:GetSecretValue" in _actions(s) and CREDS_ARN in _resource_list(s)
            for s in statements
        )

    # Then every function is told the secret's ARN and may read that secret
    for module, props in _functions(tpl).items():
        assert props["Environment"]["Variables"][NATS_CREDS_ENV] == CREDS_ARN, module
    for module, fn in stack.functions.by_module.items():
        assert may_read(fn.role), module
    # And so is the bridge, through its task role
    _, bridge = _containers(tpl)[BRIDGE_CONTAINER]
    assert _env(bridge)[NATS_CREDS_ENV] == CREDS_ARN
    assert may_read(stack.services.bridge.task_definition.task_role)


def test_no_dev_nats_unless_asked(kernel: dict[str, Any]) -> None:
    tpl = kernel["json"]
    # Given an outside NATS and no devNats, then the stack runs no NATS, no file
    # system and no Cloud Map namespace
    assert DEV_NATS_CONTAINER not in _containers(tpl)
    for kind in ("AWS::EFS::FileSystem", "AWS::ServiceDiscovery::PrivateDnsNamespace"):
        kernel["template"].resource_count_is(kind, 0)


def test_dev_nats_is_one_jetstream_task_on_encrypted_efs(dev: dict[str, Any]) -> None:
    template, tpl, stack = dev["template"], dev["json"], dev["stack"]
    # Then a third service runs one NATS task (the old one stops before a new one starts)
    services = _services(tpl)
    assert set(services) == {BRIDGE_CONTAINER, KERNEL_CONTAINER, DEV_NATS_CONTAINER}
    nats = services[DEV_NATS_CONTAINER]
    assert nats["DesiredCount"] == 1
    assert nats["DeploymentConfiguration"]["MaximumPercent"] == 100
    assert nats["NetworkConfiguration"]["AwsvpcConfiguration"]["Subnets"] == _private_subnets(stack)
    # with JetStream storing on the EFS volume
    task = _task(tpl, DEV_NATS_CONTAINER)
    _, container = _containers(tpl)[DEV_NATS_CONTAINER]
    command = container["Command"]
    assert "--jetstream" in command
    assert command[command.index("--store_dir") + 1] == JETSTREAM_DIR
    assert container["MountPoints"] == [
        {"ContainerPath": JETSTREAM_DIR, "ReadOnly": False, "SourceVolume": "jetstream"}
    ]
    (volume,) = task["Volumes"]
    efs_config = volume["EFSVolumeConfiguration"]
    assert efs_config["TransitEncryption"] == "ENABLED"
    assert efs_config["AuthorizationConfig"]["IAM"] == "ENABLED"
    # on a file system encrypted at rest, reached through an access point
    file_systems = _resources(tpl, "AWS::EFS::FileSystem")
    assert len(file_systems) == 1
    fs_id, fs = next(iter(file_systems.items()))
    assert fs["Properties"]["Encrypted"] is True
    assert efs_config["FilesystemId"] == {"Ref": fs_id}
    template.has_resource_properties(
        "AWS::EFS::AccessPoint",
        {"FileSystemId": {"Ref": fs_id}, "PosixUser": {"Uid": "1000", "Gid": "1000"}},
    )
    # with mount targets in the private subnets only
    targets = [r["Properties"] for r in _resources(tpl, "AWS::EFS::MountTarget").values()]
    assert sorted(json.dumps(t["SubnetId"]) for t in targets) == sorted(
        json.dumps(s) for s in _private_subnets(stack)
    )


def test_dev_nats_is_the_nats_of_every_client(dev: dict[str, Any]) -> None:
    template, tpl, stack = dev["template"], dev["json"], dev["stack"]
    # Then its Cloud Map name is what natsUrl became
    assert DEV_NATS_URL == "tls://nats-0.cordum.internal:4222"
    template.has_resource_properties(
        "AWS::ServiceDiscovery::PrivateDnsNamespace", {"Name": "cordum.internal"}
    )
    template.has_resource_properties("AWS::ServiceDiscovery::Service", {"Name": "nats-0"})
    for module, props in _functions(tpl).items():
        assert props["Environment"]["Variables"]["NATS_URL"] == DEV_NATS_URL, module
    assert _env(_containers(tpl)[BRIDGE_CONTAINER][1])["NATS_URL"] == DEV_NATS_URL
    # And it admits 4222 from the functions and the bridge only
    nats_sg = _logical_id(stack, stack.nats.security_group)
    rules = _ingress(tpl, nats_sg)
    assert {_source(r) for r in rules} == {
        _logical_id(stack, stack.network.functions_security_group),
        _logical_id(stack, stack.network.bridge_security_group),
    }
    assert all(r["FromPort"] == r["ToPort"] == 4222 for r in rules)
    # And its file system admits NFS from the NATS task alone
    (fs_sg,) = _resources(tpl, "AWS::EFS::MountTarget").popitem()[1]["Properties"][
        "SecurityGroups"
    ]
    assert [(_source(r), r["FromPort"]) for r in _ingress(tpl, fs_sg["Fn::GetAtt"][0])] == [
        (nats_sg, 2049)
    ]
    # And the bridge starts once NATS runs
    bridge_service = _logical_id(stack, stack.services.bridge.service)
    nats_service = _logical_id(stack, stack.nats.services[0])
    assert nats_service in tpl["Resources"][bridge_service]["DependsOn"]


def test_arm64_builds_and_runs_every_image_for_arm64(dev: dict[str, Any]) -> None:
    tpl = dev["json"]
    # Given architecture=arm64, then every image is built for linux/arm64
    images = dev["assets"]["dockerImages"].values()
    assert len(images) == 4
    assert {image["source"]["platform"] for image in images} == {"linux/arm64"}
    # and every task runs on ARM64
    for name in _containers(tpl):
        assert _task(tpl, name)["RuntimePlatform"]["CpuArchitecture"] == "ARM64", name
    # and so does the stack's certificate issuer
    (issuer,) = _image_functions(tpl).values()
    assert issuer["Architectures"] == ["arm64"]


def test_local_stack_speaks_plaintext_to_its_host_kernel_unless_given_a_ca(
    inputs: dict[str, Path], tmp_path: Path
) -> None:
    def kernel_env(**extra: str) -> list[dict[str, Any]]:
        _, stack = synth._stack(inputs, tmp_path / str(len(extra)), synth._context(
            inputs, redisUrl=synth.LOCAL_REDIS, natsUrl=synth.NATS, **extra))
        functions = _functions(Template.from_stack(stack).to_json())
        return [
            {k: v for k, v in p["Environment"]["Variables"].items() if "TLS" in k}
            for p in functions.values()
        ]

    assert kernel_env() == [{}] * len(ALL_FUNCTIONS)
    ca = inputs["kernel_ca"].read_text().strip()
    assert kernel_env(safetyKernelCa=str(inputs["kernel_ca"])) == [
        {"SAFETY_KERNEL_TLS_CA": ca}
    ] * len(ALL_FUNCTIONS)


def test_local_stack_runs_no_services(local: dict[str, Any]) -> None:
    template = local["template"]
    # Given a redisUrl (LocalStack), then nothing of ECS, load balancing, EFS or Cloud Map
    for kind in (
        "AWS::ECS::Cluster",
        "AWS::ECS::Service",
        "AWS::ECS::TaskDefinition",
        "AWS::ElasticLoadBalancingV2::LoadBalancer",
        "AWS::EFS::FileSystem",
        "AWS::ServiceDiscovery::PrivateDnsNamespace",
    ):
        template.resource_count_is(kind, 0)


# --- settings ----------------------------------------------------------------------------


def _settings(inputs: dict[str, Path], **context: str) -> StackSettings:
    app = cdk.App(context=synth._context(inputs, **context))
    return StackSettings.from_context(app.node)


def test_aws_stack_runs_its_kernel_unless_given_an_address(inputs: dict[str, Path]) -> None:
    own = _settings(inputs, **OUTSIDE_NATS)
    assert own.safety_kernel_addr is None and own.runs_safety_kernel
    given = _settings(inputs, **OUTSIDE_NATS, safetyKernelAddr=OUTSIDE_KERNEL,
                      safetyKernelCa=str(inputs["kernel_ca"]))
    assert given.safety_kernel_addr == OUTSIDE_KERNEL and not given.runs_safety_kernel
    local = _settings(inputs, natsUrl=synth.NATS, redisUrl=synth.LOCAL_REDIS)
    assert local.safety_kernel_addr == "127.0.0.1:50051" and not local.runs_safety_kernel


def test_dev_nats_sets_the_nats_url(inputs: dict[str, Path]) -> None:
    settings = _settings(inputs, devNats="true")
    assert settings.dev_nats and settings.nats_url == DEV_NATS_URL
    # (naming that same URL is no conflict)
    same = _settings(inputs, devNats="true", natsUrl=DEV_NATS_URL)
    assert same.dev_nats and same.nats_url == DEV_NATS_URL
    assert not _settings(inputs, **OUTSIDE_NATS).dev_nats


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"devNats": "true", "redisUrl": synth.LOCAL_REDIS}, "devNats .* needs an AWS stack"),
        ({"devNats": "true", "natsUrl": AWS_NATS}, "give no other natsUrl"),
        (
            {"devNats": "true", "natsCredentialsSecretArn": CREDS_ARN},
            "no natsCredentialsSecretArn",
        ),
        ({"devNats": "yes", "natsUrl": AWS_NATS}, "devNats must be true or false"),
        (
            {"natsUrl": AWS_NATS, "natsCredentialsSecretArn": "cordum/nats-creds"},
            "must be the complete ARN",
        ),
        (
            {"natsUrl": AWS_NATS, "natsCredentialsSecretArn": CREDS_ARN.removesuffix("-AbC123")},
            "must be the complete ARN",
        ),
        (
            {
                "natsUrl": synth.NATS,
                "redisUrl": synth.LOCAL_REDIS,
                "natsCredentialsSecretArn": CREDS_ARN,
            },
            "natsCredentialsSecretArn .* needs an AWS stack",
        ),
        ({}, "natsUrl is required"),
    ],
)
def test_nats_context_errors(
    inputs: dict[str, Path], context: dict[str, str], message: str
) -> None:
    with pytest.raises(ContextError, match=message):
        _settings(inputs, **context)


def test_safety_kernel_ca_context_errors(inputs: dict[str, Path], tmp_path: Path) -> None:
    ca = str(inputs["kernel_ca"])
    with pytest.raises(ContextError, match="safetyKernelCa is required with safetyKernelAddr"):
        _settings(inputs, natsUrl=AWS_NATS, safetyKernelAddr=OUTSIDE_KERNEL)
    with pytest.raises(ContextError, match="the stack's own kernel uses the certificate"):
        _settings(inputs, natsUrl=AWS_NATS, safetyKernelCa=ca)
    with pytest.raises(ContextError, match="safetyKernelCa: cannot read"):
        _settings(inputs, natsUrl=AWS_NATS, safetyKernelAddr=OUTSIDE_KERNEL,
                  safetyKernelCa=str(tmp_path / "missing.pem"))
    key_too = tmp_path / "ca-and-key.pem"
    key_too.write_text(inputs["kernel_ca"].read_text()
                       + "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n")
    with pytest.raises(ContextError, match="must hold the CA certificate .* and nothing else"):
        _settings(inputs, natsUrl=AWS_NATS, safetyKernelAddr=OUTSIDE_KERNEL,
                  safetyKernelCa=str(key_too))
    settings = _settings(inputs, **OUTSIDE_NATS, safetyKernelAddr=OUTSIDE_KERNEL,
                         safetyKernelCa=ca)
    assert settings.safety_kernel_ca == inputs["kernel_ca"].read_text().strip()


def test_api_keys_context_is_for_local_stacks_only(inputs: dict[str, Path]) -> None:
    with pytest.raises(ContextError, match="apiKeys writes the keys into the template"):
        _settings(inputs, natsUrl=AWS_NATS, apiKeys="k1")
    local = _settings(inputs, natsUrl=synth.NATS, redisUrl=synth.LOCAL_REDIS, apiKeys="k1")
    assert local.api_keys == "k1"


# --- cdk-nag -----------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["dev", "creds"])
def test_cdk_nag_passes_with_the_services(
    inputs: dict[str, Path], tmp_path: Path, shape: str
) -> None:
    # Given the dev NATS shape or the credentials shape with the AwsSolutions pack
    extra = (
        {"devNats": "true"}
        if shape == "dev"
        else {
            "natsUrl": AWS_NATS,
            "safetyKernelAddr": OUTSIDE_KERNEL,
            "safetyKernelCa": str(inputs["kernel_ca"]),
            "natsCredentialsSecretArn": CREDS_ARN,
        }
    )
    app, stack = synth._stack(inputs, tmp_path, synth._context(inputs, **extra))
    add_checks(app, stack)
    # When the app is synthesized, then no unacknowledged finding fails it
    assembly = app.synth()
    assert assembly.get_stack_by_name(STACK_NAME).template["Resources"]
