"""Synth tests of the live event stream on AWS: Fargate tasks behind an internet-facing
Application Load Balancer (cordum_infra.stream).

Shapes, each bound to the fixture account and region (the load balancer's certificate
and access logs are regional) with the lookups of fixtures/cdk.context.json: the
stack's own VPC in ``egress=endpoints`` mode (isolated subnets: two public subnets are
added for the load balancer alone), the same stack without a certificate (no stream,
a warning), an existing VPC (its public subnets) at a domain of the operator's, and
``egress=nat`` with the stack's own NATS. The local stack (redisUrl) has none of it.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.infra.test_synth import (
    _context,
    _logical_id,
    _resources,
    inputs,  # noqa: F401  (the module fixture: stand-in layer, handlers, config)
)

cdk = pytest.importorskip("aws_cdk")
import costs  # noqa: E402  (infra/cdk/costs.py; test_synth puts infra/cdk on the path)
from aws_cdk.assertions import Annotations, Match, Template  # noqa: E402
from cordum_infra.alarms import (  # noqa: E402
    STREAM_5XX_THRESHOLD,
    STREAM_SLOW_CLIENTS_THRESHOLD,
    STREAM_TASKS_MINUTES,
    STREAM_UNHEALTHY_MINUTES,
)
from cordum_infra.cache_users import ROLES  # noqa: E402
from cordum_infra.context_values import CERTIFICATE_ARN  # noqa: E402
from cordum_infra.nag import add_checks  # noqa: E402
from cordum_infra.network_settings import deployment_target  # noqa: E402
from cordum_infra.settings import ContextError, StackSettings  # noqa: E402
from cordum_infra.stack import STACK_NAME, CordumServerlessStack  # noqa: E402
from cordum_infra.stream import (  # noqa: E402
    HEALTH_PATH,
    HEALTH_PROBE,
    STREAM_CONNECTIONS,
    STREAM_CONTAINER,
    STREAM_DOCKERFILE,
    STREAM_FRAMES_SENT,
    STREAM_PATH,
    STREAM_PATHS,
    STREAM_PORT,
    STREAM_SLOW_CLIENTS_CLOSED,
)

from cordum.redis_acl import STREAM, USERS  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "cdk.context.json"
LOOKUPS: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
ACCOUNT, REGION = "123456789012", "us-east-1"
VPC_ID = "vpc-0c0d0e0f101112131"
VPC_KEY = (
    f"vpc-provider:account={ACCOUNT}:filter.vpc-id={VPC_ID}:region={REGION}"
    ":returnAsymmetricSubnets=true"
)
GROUPS = {g["type"]: g["subnets"] for g in LOOKUPS[VPC_KEY]["subnetGroups"]}
S3_PREFIX_LIST = next(v for k, v in LOOKUPS.items() if k.startswith("cc-api-provider:"))[0][
    "PrefixListId"
]
CERT = "arn:aws:acm:us-east-1:123456789012:certificate/12345678-90ab-4cde-8f01-234567890abc"
OTHER_REGION_CERT = CERT.replace("us-east-1", "eu-west-1")
DOMAIN = "stream.example.com"
CREDS_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:cordum/nats-AbCdEf"
OUTSIDE_NATS = {
    "natsUrl": "tls://nats.example.internal:4222", "natsCredentialsSecretArn": CREDS_ARN,
}
ANYWHERE = ("0.0.0.0/0", "::/0")
CIDR = "10.42.0.0/16"
OWN_VPC = {"vpcCidr": CIDR, "availabilityZones": "us-east-1c,us-east-1d"}
ELB_ACCOUNT_US_EAST_1 = "127311923021"
"""The Elastic Load Balancing account that writes access logs in us-east-1."""


def _build(inputs: dict[str, Path], tmp: Path, *, nag: bool = False,  # noqa: F811
           nats: dict[str, str] | None = None, target: bool = True,
           lookups: dict[str, Any] | None = None, **extra: str) -> dict[str, Any]:
    """The AWS stack as app.py builds it (bound to the fixture's account and region)."""
    context: dict[str, Any] = {
        **(lookups or LOOKUPS),
        **_context(inputs, **{**(OUTSIDE_NATS if nats is None else nats), **extra}),
    }
    if target:
        context.update(account=ACCOUNT, region=REGION)
    app = cdk.App(context=context, outdir=str(tmp / "cdk.out"))
    settings = StackSettings.from_context(app.node, code_staging_dir=tmp / "function-code")
    found = deployment_target(lambda k: app.node.try_get_context(k), {})
    env = cdk.Environment(account=found[0], region=found[1]) if found else None
    stack = CordumServerlessStack(app, STACK_NAME, settings=settings, env=env)
    if nag:
        add_checks(app, stack)
    assembly = app.synth()
    template = Template.from_stack(stack)
    assets = json.loads((Path(assembly.directory) / f"{STACK_NAME}.assets.json").read_text())
    return {"template": template, "json": template.to_json(), "stack": stack,
            "assets": assets}


@pytest.fixture(scope="module")
def own(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given the stack's own VPC (endpoints mode) and a certificate, with cdk-nag."""
    return _build(inputs, tmp_path_factory.mktemp("stream-own"), nag=True,
                  streamCertificateArn=CERT, **OWN_VPC)


@pytest.fixture(scope="module")
def without(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given the same stack without a certificate."""
    return _build(inputs, tmp_path_factory.mktemp("stream-without"), **OWN_VPC)


@pytest.fixture(scope="module")
def existing(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given an existing VPC (public, private and isolated subnets), a certificate and
    the domain it covers, with cdk-nag."""
    return _build(inputs, tmp_path_factory.mktemp("stream-existing"), nag=True,
                  vpcId=VPC_ID, streamCertificateArn=CERT, streamDomain=DOMAIN)


@pytest.fixture(scope="module")
def nat(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given egress=nat (public subnets of its own) and the stack's own NATS node."""
    return _build(inputs, tmp_path_factory.mktemp("stream-nat"), nats={"devNats": "true"},
                  egress="nat", streamCertificateArn=CERT)


# --- helpers -----------------------------------------------------------------------------


def _containers(tpl: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Container name -> (task definition logical id, container definition)."""
    return {
        c["Name"]: (task_id, c)
        for task_id, task in _resources(tpl, "AWS::ECS::TaskDefinition").items()
        for c in task["Properties"]["ContainerDefinitions"]
    }


def _service(tpl: dict[str, Any], name: str = STREAM_CONTAINER) -> tuple[str, dict[str, Any]]:
    """(logical id, properties) of the ECS service running container `name`."""
    task_id, _ = _containers(tpl)[name]
    (found,) = [(k, r["Properties"]) for k, r in _resources(tpl, "AWS::ECS::Service").items()
                if r["Properties"]["TaskDefinition"] == {"Ref": task_id}]
    return found


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["Name"]: item["Value"] for item in container.get("Environment", [])}


def _application_lb(tpl: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    (found,) = [(k, r["Properties"])
                for k, r in _resources(tpl, "AWS::ElasticLoadBalancingV2::LoadBalancer").items()
                if r["Properties"].get("Type") == "application"]
    return found


def _attributes(props: dict[str, Any], key: str) -> dict[str, Any]:
    return {a["Key"]: a["Value"] for a in props.get(key, [])}


def _rules(tpl: dict[str, Any], group_id: str, kind: str) -> list[dict[str, Any]]:
    """Ingress or Egress rules of a group: inline ones and separate resources alike."""
    rules = list(tpl["Resources"][group_id]["Properties"].get(f"SecurityGroup{kind}", []))
    for rule in _resources(tpl, f"AWS::EC2::SecurityGroup{kind}").values():
        if rule["Properties"]["GroupId"] == {"Fn::GetAtt": [group_id, "GroupId"]}:
            rules.append(rule["Properties"])
    return rules


def _peer(rule: dict[str, Any]) -> Any:
    for key in ("CidrIp", "CidrIpv6", "DestinationPrefixListId"):
        if key in rule:
            return rule[key]
    ref = rule.get("SourceSecurityGroupId") or rule["DestinationSecurityGroupId"]
    return ref["Fn::GetAtt"][0]


def _ports(rules: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    return {(r["IpProtocol"], r["FromPort"], r["ToPort"], _peer(r)) for r in rules}


def _role_statements(tpl: dict[str, Any], role_ref: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for p in _resources(tpl, "AWS::IAM::Policy").values()
            if role_ref in p["Properties"].get("Roles", [])
            for s in p["Properties"]["PolicyDocument"]["Statement"]]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _alarm(tpl: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [r["Properties"] for k, r in _resources(tpl, "AWS::CloudWatch::Alarm").items()
                if k.startswith(f"Observability{name}Alarm")]
    return found


# --- the service -------------------------------------------------------------------------


def test_stream_runs_two_to_six_fargate_tasks_in_the_private_subnets(own: dict[str, Any]) -> None:
    tpl, stack = own["json"], own["stack"]
    service_id, props = _service(tpl)
    # Then a Fargate service whose task count its scaling owns (floor two, one per zone)
    assert props["LaunchType"] == "FARGATE"
    assert "DesiredCount" not in props
    assert props["DeploymentConfiguration"]["MinimumHealthyPercent"] == 100
    assert props["DeploymentConfiguration"]["MaximumPercent"] == 200
    assert props["DeploymentConfiguration"]["DeploymentCircuitBreaker"] == {
        "Enable": True, "Rollback": True}
    assert props["HealthCheckGracePeriodSeconds"] == 60
    # in the stack's cluster, in both zones' private subnets, with no public address,
    # wearing the network's stream group
    assert props["Cluster"] == {"Ref": _logical_id(stack, stack.services.cluster)}
    vpc_config = props["NetworkConfiguration"]["AwsvpcConfiguration"]
    assert vpc_config["Subnets"] == stack.resolve(
        stack.network.vpc.select_subnets(subnet_type=stack.network.private_subnets.subnet_type)
        .subnet_ids)
    assert len(vpc_config["Subnets"]) == 2
    assert vpc_config["AssignPublicIp"] == "DISABLED"
    assert vpc_config["SecurityGroups"] == [
        {"Fn::GetAtt": [_logical_id(stack, stack.network.stream_security_group), "GroupId"]}]
    # And it scales between 2 and 6 tasks on average CPU, held at 60 %
    (target_id, target), = [
        (k, r["Properties"])
        for k, r in _resources(tpl, "AWS::ApplicationAutoScaling::ScalableTarget").items()
        if service_id in json.dumps(r["Properties"]["ResourceId"])]
    assert (target["MinCapacity"], target["MaxCapacity"]) == (2, 6)
    (policy,) = [r["Properties"]
                 for r in _resources(tpl, "AWS::ApplicationAutoScaling::ScalingPolicy").values()
                 if r["Properties"]["ScalingTargetId"] == {"Ref": target_id}]
    config = policy["TargetTrackingScalingPolicyConfiguration"]
    assert config["PredefinedMetricSpecification"]["PredefinedMetricType"] == (
        "ECSServiceAverageCPUUtilization")
    assert config["TargetValue"] == 60


def test_stream_gets_redis_nats_the_api_keys_and_its_port(own: dict[str, Any]) -> None:
    tpl, stack = own["json"], own["stack"]
    task_id, container = _containers(tpl)[STREAM_CONTAINER]
    env = _env(container)
    # Then it talks to the stack's Redis as its own user, the password an ECS secret
    assert env["REDIS_URL"] == stack.resolve(stack.cache.url)
    assert env["REDIS_USERNAME"] == STREAM.name == "cordum-stream"
    secret = {"Ref": _logical_id(stack, stack.cache.users.secret("stream"))}
    assert container["Secrets"] == [
        {"Name": "REDIS_AUTH_TOKEN", "ValueFrom": {"Fn::Join": ["", [secret, ":password::"]]}}]
    assert not any("TOKEN" in name or "PASSWORD" in name for name in env)
    # And to NATS as the bridge does (the credentials' secret by ARN)
    assert env["NATS_URL"] == OUTSIDE_NATS["natsUrl"]
    assert env["NATS_CREDS_SECRET_ARN"] == CREDS_ARN
    # And it reads the gateway's API keys secret, in the stack's region
    assert env["CORDUM_API_KEYS_SECRET_ID"] == "cordum/api-keys"
    assert env["CORDUM_API_KEYS_TTL_S"] == "300"
    assert env["AWS_REGION"] == REGION
    # And it serves STREAM_PORT, logs at the stack's level, writes metrics in its namespace
    assert env["STREAM_PORT"] == str(STREAM_PORT) == "8090"
    assert env["LOG_LEVEL"] == "INFO"
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == "Cordum"
    assert container["PortMappings"] == [{"ContainerPort": STREAM_PORT, "Protocol": "tcp"}]
    assert container["Ulimits"] == [{"Name": "nofile", "SoftLimit": 65535, "HardLimit": 65535}]
    # And its health check asks /health, as the image's does
    check = container["HealthCheck"]
    assert check["Command"] == ["CMD", "python", "-c", HEALTH_PROBE]
    assert HEALTH_PATH in HEALTH_PROBE
    assert (check["Interval"], check["Retries"], check["StartPeriod"]) == (30, 3, 60)
    assert container["StopTimeout"] == 30
    # And its logs go to /cordum/stream, kept 30 days
    group_id = container["LogConfiguration"]["Options"]["awslogs-group"]["Ref"]
    group = tpl["Resources"][group_id]["Properties"]
    assert (group["LogGroupName"], group["RetentionInDays"]) == ("/cordum/stream", 30)
    task = tpl["Resources"][task_id]["Properties"]
    assert (task["Cpu"], task["Memory"]) == ("256", "512")


def test_stream_may_read_the_api_keys_and_nats_secrets_and_nothing_else(
    own: dict[str, Any],
) -> None:
    tpl, stack = own["json"], own["stack"]
    role = {"Ref": _logical_id(stack, stack.stream.task_definition.task_role)}
    statements = _role_statements(tpl, role)
    resources = []
    for statement in statements:
        assert set(_as_list(statement["Action"])) <= {
            "secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"}, statement
        resources += _as_list(statement["Resource"])
    assert "*" not in resources
    assert CREDS_ARN in resources
    keys = [json.dumps(r) for r in resources if "api-keys" in json.dumps(r)]
    assert len(keys) == 1 and "secret:cordum/api-keys-??????" in keys[0]
    assert len(resources) == 2


def test_stream_image_is_its_dockerfile_built_at_deploy_time(own: dict[str, Any]) -> None:
    images = own["assets"]["dockerImages"].values()
    sources = {i["source"]["dockerFile"]: i["source"] for i in images}
    # Then the stream's image is built from its Dockerfile, for the stack's platform
    assert sources[STREAM_DOCKERFILE]["platform"] == "linux/amd64"
    _, container = _containers(own["json"])[STREAM_CONTAINER]
    assert "cdk-hnb659fds-container-assets" in json.dumps(container["Image"])
    # And the Dockerfile is the bridge's pattern: slim Python, the pinned set, the library,
    # an unprivileged user, python as PID 1 running cordum.stream
    text = (REPO_ROOT / STREAM_DOCKERFILE).read_text()
    assert re.search(r"^FROM python:3\.12-slim$", text, re.MULTILINE)
    assert re.search(r"^USER 10001$", text, re.MULTILINE)
    assert "pip install --no-deps -r" in text and "COPY shared/ /app/shared/" in text
    assert re.search(rf"^EXPOSE {STREAM_PORT}$", text, re.MULTILINE)
    entrypoint = re.search(r"^ENTRYPOINT (.+)$", text, re.MULTILINE)
    assert entrypoint is not None
    assert json.loads(entrypoint.group(1)) == ["python", "-m", "cordum.stream"]
    # with a HEALTHCHECK that is the task definition's probe of /health
    healthcheck = re.search(r"^HEALTHCHECK .*\\\n\s+CMD (.+)$", text, re.MULTILINE)
    assert healthcheck is not None
    assert json.loads(healthcheck.group(1)) == ["python", "-c", HEALTH_PROBE]


# --- the load balancer -------------------------------------------------------------------


def test_an_internet_facing_alb_in_the_public_subnets_keeps_long_connections(
    own: dict[str, Any],
) -> None:
    tpl, stack = own["json"], own["stack"]
    lb_id, lb = _application_lb(tpl)
    # Then it faces the internet from the public subnets, one per zone
    assert lb["Scheme"] == "internet-facing"
    public = stack.resolve([s.subnet_id for s in stack.network.vpc.public_subnets])
    assert lb["Subnets"] == public and len(public) == 2
    assert lb["SecurityGroups"] == [
        {"Fn::GetAtt": [_logical_id(stack, stack.stream.security_group), "GroupId"]}]
    # And keeps an idle WebSocket or SSE connection an hour, drops malformed headers and
    # logs every connection to its bucket
    attributes = _attributes(lb, "LoadBalancerAttributes")
    assert attributes["idle_timeout.timeout_seconds"] == "3600"
    assert attributes["routing.http.drop_invalid_header_fields.enabled"] == "true"
    assert attributes["access_logs.s3.enabled"] == "true"
    assert attributes["access_logs.s3.bucket"] == {
        "Ref": _logical_id(stack, stack.stream.access_logs)}
    assert lb_id == _logical_id(stack, stack.stream.load_balancer)


def test_https_with_the_certificate_and_http_redirected(own: dict[str, Any]) -> None:
    tpl, stack = own["json"], own["stack"]
    lb_id, _ = _application_lb(tpl)
    listeners = {r["Properties"]["Port"]: (k, r["Properties"])
                 for k, r in _resources(tpl, "AWS::ElasticLoadBalancingV2::Listener").items()
                 if r["Properties"]["LoadBalancerArn"] == {"Ref": lb_id}}
    assert set(listeners) == {443, 80}
    https_id, https = listeners[443]
    # Then HTTPS with the context's certificate and TLS 1.3/1.2 only
    assert https["Protocol"] == "HTTPS"
    assert https["Certificates"] == [{"CertificateArn": CERT}]
    assert https["SslPolicy"] == "ELBSecurityPolicy-TLS13-1-2-2021-06"
    # which forwards the stream's paths to its tasks and answers anything else 404 itself
    (default,) = https["DefaultActions"]
    assert default["Type"] == "fixed-response"
    assert default["FixedResponseConfig"]["StatusCode"] == "404"
    (rule,) = [r["Properties"]
               for r in _resources(tpl, "AWS::ElasticLoadBalancingV2::ListenerRule").values()
               if r["Properties"]["ListenerArn"] == {"Ref": https_id}]
    (condition,) = rule["Conditions"]
    assert condition["PathPatternConfig"]["Values"] == list(STREAM_PATHS)
    assert STREAM_PATH in STREAM_PATHS and "/api/v1/jobs/*/stream" in STREAM_PATHS
    target_group = {"Ref": _logical_id(stack, stack.stream.target_group)}
    assert rule["Actions"] == [{"TargetGroupArn": target_group, "Type": "forward"}]
    # And HTTP answers a permanent redirect to HTTPS
    _, http = listeners[80]
    assert http["Protocol"] == "HTTP"
    assert http["DefaultActions"] == [{
        "Type": "redirect",
        "RedirectConfig": {"Protocol": "HTTPS", "Port": "443", "StatusCode": "HTTP_301"},
    }]


def test_target_group_checks_health_and_drains_without_stickiness(own: dict[str, Any]) -> None:
    tpl, stack = own["json"], own["stack"]
    group_id = _logical_id(stack, stack.stream.target_group)
    group = tpl["Resources"][group_id]["Properties"]
    # Then the tasks, by IP, over HTTP on their port, checked on /health (200 only)
    assert (group["Port"], group["Protocol"], group["TargetType"]) == (STREAM_PORT, "HTTP", "ip")
    assert group["HealthCheckPath"] == HEALTH_PATH
    assert group["Matcher"] == {"HttpCode": "200"}
    assert (group["HealthCheckIntervalSeconds"], group["HealthyThresholdCount"],
            group["UnhealthyThresholdCount"]) == (10, 2, 3)
    # drained 30 s, no session cookie
    attributes = _attributes(group, "TargetGroupAttributes")
    assert attributes["deregistration_delay.timeout_seconds"] == "30"
    assert attributes["stickiness.enabled"] == "false"
    # And the service registers its container's port there
    service_id, props = _service(tpl)
    assert props["LoadBalancers"] == [{"ContainerName": STREAM_CONTAINER,
                                       "ContainerPort": STREAM_PORT,
                                       "TargetGroupArn": {"Ref": group_id}}]


def test_access_logs_go_to_a_private_encrypted_bucket_kept_90_days(own: dict[str, Any]) -> None:
    tpl, stack = own["json"], own["stack"]
    bucket_id = _logical_id(stack, stack.stream.access_logs)
    bucket = tpl["Resources"][bucket_id]
    props = bucket["Properties"]
    # Then S3-managed keys (all load balancer logs accept), nothing public, kept 90 days,
    # and the bucket outlives the stack (an audit trail)
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"] == [
        {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
    assert set(props["PublicAccessBlockConfiguration"].values()) == {True}
    assert props["LifecycleConfiguration"]["Rules"][0]["ExpirationInDays"] == 90
    assert bucket["DeletionPolicy"] == "Retain"
    # And its policy refuses plaintext and lets the region's log delivery write
    (policy,) = [r["Properties"] for r in _resources(tpl, "AWS::S3::BucketPolicy").values()
                 if r["Properties"]["Bucket"] == {"Ref": bucket_id}]
    statements = policy["PolicyDocument"]["Statement"]
    assert any(s["Effect"] == "Deny" and s["Condition"] == {
        "Bool": {"aws:SecureTransport": "false"}} for s in statements)
    writers = json.dumps([s["Principal"] for s in statements
                          if s["Effect"] == "Allow" and s["Action"] == "s3:PutObject"])
    assert ELB_ACCOUNT_US_EAST_1 in writers


# --- the network -------------------------------------------------------------------------


def _subnets(tpl: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: r["Properties"] for k, r in _resources(tpl, "AWS::EC2::Subnet").items()}


def _public(props: dict[str, Any]) -> bool:
    return {"Key": "aws-cdk:subnet-type", "Value": "Public"} in props["Tags"]


def test_endpoints_mode_adds_public_subnets_for_the_load_balancer_alone(
    own: dict[str, Any], without: dict[str, Any],
) -> None:
    tpl = own["json"]
    subnets = _subnets(tpl)
    public = {k: p for k, p in subnets.items() if _public(p)}
    private = {k: p for k, p in subnets.items() if not _public(p)}
    # Then two small public subnets, one per zone, that give nothing a public address
    assert sorted(p["AvailabilityZone"] for p in public.values()) == ["us-east-1c", "us-east-1d"]
    assert all(p["CidrBlock"].endswith("/24") for p in public.values())
    assert all(p["MapPublicIpOnLaunch"] is False for p in public.values())
    # And the private subnets keep the blocks they have without the stream
    assert sorted(p["CidrBlock"] for p in private.values()) == sorted(
        p["CidrBlock"] for p in _subnets(without["json"]).values())
    # And one internet gateway, no NAT gateway, and a default route from the public
    # subnets' route tables alone: the isolated subnets still reach nothing outside
    assert len(_resources(tpl, "AWS::EC2::InternetGateway")) == 1
    assert not _resources(tpl, "AWS::EC2::NatGateway")
    (igw_id,) = _resources(tpl, "AWS::EC2::InternetGateway")
    associations = {r["Properties"]["SubnetId"]["Ref"]: r["Properties"]["RouteTableId"]
                    for r in _resources(tpl, "AWS::EC2::SubnetRouteTableAssociation").values()}
    routes = [r["Properties"] for r in _resources(tpl, "AWS::EC2::Route").values()]
    assert sorted(json.dumps(r["RouteTableId"]) for r in routes) == sorted(
        json.dumps(associations[k]) for k in public)
    assert all(r["DestinationCidrBlock"] == "0.0.0.0/0" and r["GatewayId"] == {"Ref": igw_id}
               for r in routes)
    # Without a certificate, the VPC is as before: no gateway, no public subnet
    assert not _resources(without["json"], "AWS::EC2::InternetGateway")
    assert not [p for p in _subnets(without["json"]).values() if _public(p)]


def test_clients_reach_the_load_balancer_and_it_alone_reaches_the_tasks(
    own: dict[str, Any],
) -> None:
    tpl, stack = own["json"], own["stack"]
    network = stack.network
    lb_sg = _logical_id(stack, stack.stream.security_group)
    task_sg = _logical_id(stack, network.stream_security_group)
    ids = {name: _logical_id(stack, getattr(network, f"{name}_security_group"))
           for name in ("cache", "endpoints")}
    # Then HTTPS and HTTP from every address (both families) at the load balancer
    assert _ports(_rules(tpl, lb_sg, "Ingress")) == {
        ("tcp", port, port, peer) for port in (443, 80) for peer in ANYWHERE}
    # which sends to the tasks' port and nowhere else
    assert _ports(_rules(tpl, lb_sg, "Egress")) == {("tcp", STREAM_PORT, STREAM_PORT, task_sg)}
    # And the tasks admit the load balancer alone
    assert _ports(_rules(tpl, task_sg, "Ingress")) == {
        ("tcp", STREAM_PORT, STREAM_PORT, lb_sg)}
    # and reach Redis, NATS (inside the VPC) and the AWS APIs through the endpoints
    assert _ports(_rules(tpl, task_sg, "Egress")) == {
        ("tcp", 443, 443, ids["endpoints"]),
        ("tcp", 443, 443, S3_PREFIX_LIST),
        ("tcp", 6379, 6379, ids["cache"]),
        ("tcp", 4222, 4222, CIDR),
    }
    # And the cache admits them
    assert ("tcp", 6379, 6379, task_sg) in _ports(_rules(tpl, ids["cache"], "Ingress"))


def test_no_group_sends_anywhere_in_endpoints_mode_with_the_stream(own: dict[str, Any]) -> None:
    tpl = own["json"]
    for group_id in _resources(tpl, "AWS::EC2::SecurityGroup"):
        for rule in _rules(tpl, group_id, "Egress"):
            assert _peer(rule) not in ANYWHERE, (group_id, rule)
            assert rule["IpProtocol"] != "-1", (group_id, rule)


def test_an_existing_vpc_puts_the_load_balancer_in_its_public_subnets(
    existing: dict[str, Any],
) -> None:
    tpl, stack = existing["json"], existing["stack"]
    _, lb = _application_lb(tpl)
    assert lb["Subnets"] == [s["subnetId"] for s in GROUPS["Public"]]
    # And the tasks stay in the VPC's private subnets
    _, props = _service(tpl)
    assert props["NetworkConfiguration"]["AwsvpcConfiguration"]["Subnets"] == [
        s["subnetId"] for s in GROUPS["Private"]]
    # And the stack adds no gateway or subnet to a VPC it does not own
    for kind in ("AWS::EC2::Subnet", "AWS::EC2::InternetGateway", "AWS::EC2::Route"):
        assert not _resources(tpl, kind), kind
    assert stack.stream is not None


def test_an_existing_vpc_without_public_subnets_is_refused(
    inputs: dict[str, Path], tmp_path: Path,  # noqa: F811
) -> None:
    # Given an existing VPC with private and isolated subnets only
    other = "vpc-0f0e0d0c0b0a09080"
    lookups = copy.deepcopy(LOOKUPS)
    vpc = copy.deepcopy(lookups[VPC_KEY])
    vpc["vpcId"] = other
    vpc["subnetGroups"] = [g for g in vpc["subnetGroups"] if g["type"] != "Public"]
    lookups[VPC_KEY.replace(VPC_ID, other)] = vpc
    # Then the stream's load balancer has nowhere to stand
    with pytest.raises(ContextError, match="streamCertificateArn: .* public subnet .* us-east-1a"):
        _build(inputs, tmp_path, lookups=lookups, vpcId=other, streamCertificateArn=CERT)


def test_nat_mode_uses_its_public_subnets_and_the_stacks_nats_admits_the_stream(
    nat: dict[str, Any],
) -> None:
    tpl, stack = nat["json"], nat["stack"]
    _, lb = _application_lb(tpl)
    # Then the load balancer stands in the NAT mode's own public subnets (no others)
    public = [k for k, p in _subnets(tpl).items() if _public(p)]
    assert sorted(ref["Ref"] for ref in lb["Subnets"]) == sorted(public)
    assert len(public) == 2
    # And the NATS node admits the stream's tasks, which start once it runs
    task_sg = _logical_id(stack, stack.network.stream_security_group)
    nats_sg = _logical_id(stack, stack.nats.security_group)
    assert ("tcp", 4222, 4222, task_sg) in _ports(_rules(tpl, nats_sg, "Ingress"))
    service_id, _ = _service(tpl)
    assert _logical_id(stack, stack.nats.services[0]) in tpl["Resources"][service_id]["DependsOn"]
    # And the stream gets the node's credentials and CA, as the bridge does
    _, container = _containers(tpl)[STREAM_CONTAINER]
    _, bridge = _containers(tpl)["bridge"]
    for key in ("NATS_URL", "NATS_CREDS_SECRET_ARN", "NATS_TLS_CA"):
        assert _env(container)[key] == _env(bridge)[key], key


# --- alarms, dashboard, outputs ----------------------------------------------------------


def test_stream_alarms_notify_the_alarm_topic(own: dict[str, Any]) -> None:
    tpl, stack = own["json"], own["stack"]
    topic = [{"Ref": _logical_id(stack, stack.observability.alarm_topic)}]
    lb_name = {"Fn::GetAtt": [_logical_id(stack, stack.stream.load_balancer),
                              "LoadBalancerFullName"]}
    # 5xx answers: the load balancer's own and the tasks', 10 or more in 5 minutes
    errors = _alarm(tpl, "Stream5xx")
    stats = {m["Id"]: m["MetricStat"] for m in errors["Metrics"] if "MetricStat" in m}
    assert {s["Metric"]["MetricName"] for s in stats.values()} == {
        "HTTPCode_ELB_5XX_Count", "HTTPCode_Target_5XX_Count"}
    for stat in stats.values():
        assert stat["Metric"]["Namespace"] == "AWS/ApplicationELB"
        assert stat["Metric"]["Dimensions"] == [{"Name": "LoadBalancer", "Value": lb_name}]
        assert (stat["Period"], stat["Stat"]) == (300, "Sum")
    assert errors["Threshold"] == STREAM_5XX_THRESHOLD == 10
    # a task unhealthy for 5 minutes in a row
    unhealthy = _alarm(tpl, "StreamUnhealthyHosts")
    assert (unhealthy["MetricName"], unhealthy["Statistic"], unhealthy["Period"]) == (
        "UnHealthyHostCount", "Maximum", 60)
    assert unhealthy["EvaluationPeriods"] == STREAM_UNHEALTHY_MINUTES == 5
    assert (unhealthy["ComparisonOperator"], unhealthy["Threshold"]) == (
        "GreaterThanOrEqualToThreshold", 1)
    # no task running (or none reported)
    running = _alarm(tpl, "StreamTasksRunning")
    assert (running["Namespace"], running["MetricName"]) == (
        "ECS/ContainerInsights", "RunningTaskCount")
    assert (running["ComparisonOperator"], running["Threshold"]) == ("LessThanThreshold", 1)
    assert running["TreatMissingData"] == "breaching"
    assert running["EvaluationPeriods"] == STREAM_TASKS_MINUTES
    service_id, _ = _service(tpl)
    assert {"Name": "ServiceName", "Value": {"Fn::GetAtt": [service_id, "Name"]}} in (
        running["Dimensions"])
    # more than 100 slow clients closed in 5 minutes (its own metric, no dimension)
    slow = _alarm(tpl, "StreamSlowClients")
    assert (slow["Namespace"], slow["MetricName"], slow["Statistic"], slow["Period"]) == (
        "Cordum", STREAM_SLOW_CLIENTS_CLOSED, "Sum", 300)
    assert "Dimensions" not in slow
    assert slow["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert slow["Threshold"] == STREAM_SLOW_CLIENTS_THRESHOLD + 1 == 101
    # And every one notifies the topic on ALARM and on OK
    for alarm in (errors, unhealthy, running, slow):
        assert alarm["AlarmActions"] == topic and alarm["OKActions"] == topic


def test_the_dashboard_has_a_stream_row(own: dict[str, Any], without: dict[str, Any]) -> None:
    def body(view: dict[str, Any]) -> str:
        (dashboard,) = _resources(view["json"], "AWS::CloudWatch::Dashboard").values()
        return json.dumps(dashboard["Properties"]["DashboardBody"])

    for metric in (STREAM_CONNECTIONS, STREAM_FRAMES_SENT, STREAM_SLOW_CLIENTS_CLOSED):
        assert metric in body(own), metric
        assert metric not in body(without), metric
    # And the alarms panel lists the stream's alarms with the others
    for name in ("Stream5xx", "StreamUnhealthyHosts", "StreamTasksRunning", "StreamSlowClients"):
        assert f"Observability{name}Alarm" in body(own), name


def test_stream_url_is_an_output(own: dict[str, Any], existing: dict[str, Any]) -> None:
    stack = own["stack"]
    dns = {"Fn::GetAtt": [_logical_id(stack, stack.stream.load_balancer), "DNSName"]}
    outputs = own["json"]["Outputs"]
    # Then, without a domain, the load balancer's name
    assert outputs["StreamUrl"]["Value"] == {"Fn::Join": ["", ["https://", dns, STREAM_PATH]]}
    assert outputs["StreamLoadBalancerDns"]["Value"] == dns
    # And with streamDomain, that name
    assert existing["json"]["Outputs"]["StreamUrl"]["Value"] == f"https://{DOMAIN}{STREAM_PATH}"


# --- no stream ---------------------------------------------------------------------------


def test_without_a_certificate_there_is_no_stream_and_a_warning(without: dict[str, Any]) -> None:
    tpl, stack = without["json"], without["stack"]
    assert stack.stream is None
    assert STREAM_CONTAINER not in _containers(tpl)
    assert [r["Properties"]["Type"]
            for r in _resources(tpl, "AWS::ElasticLoadBalancingV2::LoadBalancer").values()] == [
        "network"]
    assert not [k for k in tpl["Outputs"] if k.startswith("Stream")]
    assert not [k for k in _resources(tpl, "AWS::CloudWatch::Alarm") if "Stream" in k]
    # And the synth warns that clients poll
    Annotations.from_stack(stack).has_warning(
        f"/{STACK_NAME}", Match.string_like_regexp("No streamCertificateArn.*clients poll"))


def test_local_stack_runs_no_stream(inputs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    app = cdk.App(context=_context(inputs, redisUrl="redis://127.0.0.1:6379",
                                   natsUrl="nats://127.0.0.1:4222"), outdir=str(tmp_path))
    settings = StackSettings.from_context(app.node, code_staging_dir=tmp_path / "code")
    stack = CordumServerlessStack(app, STACK_NAME, settings=settings)
    template = Template.from_stack(stack)
    assert stack.stream is None and not settings.runs_stream
    template.resource_count_is("AWS::ElasticLoadBalancingV2::LoadBalancer", 0)
    template.resource_count_is("AWS::ECS::Service", 0)
    # (its supervisor runs the stream: no synth warning about a certificate)
    assert not Annotations.from_stack(stack).find_warning(
        "*", Match.string_like_regexp(".*streamCertificateArn.*"))


# --- settings ----------------------------------------------------------------------------


def _settings(inputs: dict[str, Path], **context: str) -> StackSettings:  # noqa: F811
    return StackSettings.from_context(cdk.App(context=_context(inputs, **context)).node)


def test_stream_settings_are_read_from_the_context(inputs: dict[str, Path]) -> None:  # noqa: F811
    settings = _settings(inputs, **OUTSIDE_NATS, streamCertificateArn=CERT,
                         streamDomain="Stream.Example.com.")
    assert settings.stream_certificate_arn == CERT and settings.runs_stream
    assert settings.stream_domain == DOMAIN
    plain = _settings(inputs, **OUTSIDE_NATS)
    assert plain.stream_certificate_arn is None and not plain.runs_stream


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"streamCertificateArn": "arn:aws:acm:us-east-1:123456789012:certificate/nope"},
         "streamCertificateArn must be the ARN of an ACM certificate"),
        ({"streamCertificateArn": CREDS_ARN},
         "streamCertificateArn must be the ARN of an ACM certificate"),
        ({"streamCertificateArn": CERT, "redisUrl": "redis://127.0.0.1:6379",
          "natsUrl": "nats://127.0.0.1:4222"},
         "streamCertificateArn .* needs an AWS stack"),
        ({"streamDomain": DOMAIN}, "streamDomain .* give streamCertificateArn"),
        ({"streamCertificateArn": CERT, "streamDomain": "not a name"},
         "streamDomain must be a DNS name"),
    ],
)
def test_stream_context_errors(
    inputs: dict[str, Path], context: dict[str, str], message: str,  # noqa: F811
) -> None:
    nats = {} if "redisUrl" in context else OUTSIDE_NATS
    with pytest.raises(ContextError, match=message):
        _settings(inputs, **{**nats, **context})


def test_the_certificate_must_be_of_the_stacks_region(
    inputs: dict[str, Path], tmp_path: Path,  # noqa: F811
) -> None:
    assert CERTIFICATE_ARN.match(OTHER_REGION_CERT)
    with pytest.raises(ContextError, match="certificate of eu-west-1.* in us-east-1"):
        _build(inputs, tmp_path / "region", streamCertificateArn=OTHER_REGION_CERT, **OWN_VPC)
    # And a stack that does not know its region cannot place the load balancer
    with pytest.raises(ContextError, match="streamCertificateArn: .* -c account=.* -c region="):
        _build(inputs, tmp_path / "agnostic", target=False, streamCertificateArn=CERT)


# --- its Redis user ----------------------------------------------------------------------


def test_stream_logs_in_as_a_user_that_writes_its_event_logs_only(own: dict[str, Any]) -> None:
    # Then the user exists on the local stack's Redis and in ElastiCache alike
    assert STREAM in USERS and ROLES["stream"] is STREAM
    users = {u["Properties"]["UserName"]: u["Properties"]
             for u in _resources(own["json"], "AWS::ElastiCache::User").values()}
    assert users[STREAM.name]["AccessString"] == STREAM.rules
    # reading any key, writing only its logs and their written-once marks, no admin
    # command (tests/integration/test_stream_acl.py runs the service's calls as it)
    words = STREAM.rules.split()
    assert words[0] == "on" and "%R~*" in words and "~cordum:stream:*" in words
    assert [w for w in words if w.startswith("~") or w.startswith("%")] == [
        "%R~*", "~cordum:stream:*", "~cordum:stream-seen:*"]
    assert words.index("-@all") < words.index("+@read")
    assert {"+xadd", "+xtrim", "+expire", "+ping"} <= set(words)
    assert not {"+@all", "+@write", "+@dangerous", "+@admin"} & set(words)
    assert words[-1] == "-@dangerous"


# --- cdk-nag, cfn-lint, make synth, costs ------------------------------------------------


@pytest.mark.parametrize("shape", ["own", "existing"])
def test_cdk_nag_and_cfn_lint_pass_with_the_stream(
    shape: str, request: pytest.FixtureRequest,
) -> None:
    from tests.infra.test_functions_obs import _cfn_lint

    # Given the shapes built with the AwsSolutions pack (a finding fails their synth),
    # then cfn-lint with the project's settings finds nothing either
    built = request.getfixturevalue(shape)
    assert built["stack"].stream is not None
    assert _cfn_lint(built["json"]) == []


def test_both_aws_synth_shapes_run_the_stream() -> None:
    sys.path.insert(0, str(REPO_ROOT / "infra" / "cdk"))
    from synth import SYNTH_SHAPES

    for name, context in SYNTH_SHAPES.items():
        if "redisUrl" in context:
            assert "streamCertificateArn" not in context, name
            continue
        match = CERTIFICATE_ARN.match(context["streamCertificateArn"])
        assert match is not None and match.group("region") == context["region"], name
        assert f":{context['account']}:" in context["streamCertificateArn"], name


def test_the_cost_script_prices_the_stream(own: dict[str, Any], without: dict[str, Any]) -> None:
    inventory = costs.inventory(own["json"])
    assert (inventory.load_balancers, inventory.application_load_balancers) == (2, 1)
    assert inventory.stream
    rows = {r.item: r for r in costs.monthly(inventory, jobs=0)}
    prices = costs.PRICES
    assert rows["Application Load Balancer"].monthly == pytest.approx(
        costs.HOURS * (prices["alb_hour"] + costs.ALB_LCUS * prices["alb_lcu_hour"]
                       + costs.ALB_PUBLIC_IPS * prices["public_ipv4_hour"]))
    assert rows["Network Load Balancer"].monthly == pytest.approx(
        costs.HOURS * prices["nlb_hour"])
    # And the stream's two tasks are Fargate's
    plain = costs.inventory(without["json"])
    assert plain.application_load_balancers == 0 and not plain.stream
    assert inventory.fargate_vcpu - plain.fargate_vcpu == pytest.approx(2 * 0.25)
    assert inventory.fargate_gb - plain.fargate_gb == pytest.approx(2 * 0.5)
    assert "Application Load Balancer" not in {r.item for r in costs.monthly(plain, jobs=0)}
