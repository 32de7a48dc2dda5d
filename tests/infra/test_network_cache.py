"""The VPC, its security groups and the Redis replication group (CDK template assertions).

Two egress modes of the AWS stack (no redisUrl): ``endpoints`` (the default:
isolated subnets and VPC endpoints) and ``nat`` (one NAT gateway). The local
stack (redisUrl given) must stay without any of it.
"""

from __future__ import annotations

import json
import re
import string
from pathlib import Path
from typing import Any

import pytest

from tests.infra.test_synth import (
    AWS_NATS,
    _context,
    _functions,
    _logical_id,
    _resources,
    _settings,
    _stack,
    inputs,  # noqa: F401  (the module fixture: stand-in layer, handlers, config)
    local,  # noqa: F401  (the local stack fixture)
)

cdk = pytest.importorskip("aws_cdk")
from aws_cdk.assertions import Match, Template  # noqa: E402
from cordum_infra.cache import AUTH_SECRET_ENV, REDIS_PORT  # noqa: E402
from cordum_infra.cache_users import PASSWORD_SPECIALS  # noqa: E402
from cordum_infra.functions import ALL_FUNCTIONS, AUDIT_TICK, GATEWAY  # noqa: E402
from cordum_infra.nag import add_checks  # noqa: E402
from cordum_infra.network import KERNEL_PORT  # noqa: E402
from cordum_infra.settings import ContextError  # noqa: E402
from cordum_infra.stack import CordumServerlessStack  # noqa: E402

KERNEL_ADDR = "10.0.0.11:50051"
INTERFACE_SERVICES = {"sqs", "lambda", "logs", "secretsmanager", "ecr.api", "ecr.dkr"}
"""What Cordum calls from inside the VPC: queues, the saga-rollback invoke, Fargate logs,
the API keys, the Redis logins and NATS credentials, image pulls (no EventBridge, no STS,
no SSM:
tests/infra/test_deploy_network.py)."""
ANYWHERE = "0.0.0.0/0"


def _aws(inputs: dict[str, Path], tmp: Path, **extra: str) -> dict[str, Any]:  # noqa: F811
    context = _context(inputs, **AWS_NATS, **extra)
    _, stack = _stack(inputs, tmp, context)
    template = Template.from_stack(stack)
    return {"template": template, "json": template.to_json(), "stack": stack}


@pytest.fixture(scope="module")
def endpoints(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given the default AWS stack: VPC endpoints, the safety kernel run by the stack."""
    return _aws(inputs, tmp_path_factory.mktemp("endpoints"))


@pytest.fixture(scope="module")
def nat(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given an AWS stack with egress=nat and a safety kernel of its own elsewhere."""
    return _aws(inputs, tmp_path_factory.mktemp("nat"), egress="nat", safetyKernelAddr=KERNEL_ADDR,
                safetyKernelCa=str(inputs["kernel_ca"]))


@pytest.fixture(params=["endpoints", "nat"])
def either(request: pytest.FixtureRequest) -> dict[str, Any]:
    return request.getfixturevalue(request.param)


# --- helpers -----------------------------------------------------------------------------


def _group_ref(stack: CordumServerlessStack, group: Any) -> dict[str, Any]:
    return {"Fn::GetAtt": [_logical_id(stack, group), "GroupId"]}


def _private_subnets(stack: CordumServerlessStack) -> list[Any]:
    network = stack.network
    assert network is not None
    return network.vpc.select_subnets(subnet_type=network.private_subnets.subnet_type).subnets


def _private_subnet_refs(stack: CordumServerlessStack) -> list[Any]:
    return [stack.resolve(s.subnet_id) for s in _private_subnets(stack)]


def _ingress(tpl: dict[str, Any], stack: CordumServerlessStack, group: Any) -> list[dict[str, Any]]:
    """Every ingress rule of `group`: inline, and AWS::EC2::SecurityGroupIngress resources."""
    group_id = _logical_id(stack, group)
    rules = list(tpl["Resources"][group_id]["Properties"].get("SecurityGroupIngress", []))
    for resource in _resources(tpl, "AWS::EC2::SecurityGroupIngress").values():
        if resource["Properties"]["GroupId"] == _group_ref(stack, group):
            rules.append(resource["Properties"])
    return rules


def _rule(rule: dict[str, Any]) -> tuple[str, int, int, str]:
    """(protocol, from, to, source) of one rule; the source is a group or a CIDR."""
    source = rule.get("SourceSecurityGroupId", rule.get("CidrIp"))
    return rule["IpProtocol"], rule["FromPort"], rule["ToPort"], json.dumps(source, sort_keys=True)


def _service(props: dict[str, Any]) -> str:
    """``com.amazonaws.<region>.ecr.dkr`` -> ``ecr.dkr``."""
    name = props["ServiceName"]
    if isinstance(name, dict):
        name = "".join(p if isinstance(p, str) else "<region>" for p in name["Fn::Join"][1])
    match = re.fullmatch(r"com\.amazonaws\.[^.]+\.(.+)", name)
    assert match, name
    return match.group(1)


def _endpoints(tpl: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {
        _service(r["Properties"]): r["Properties"]
        for r in _resources(tpl, "AWS::EC2::VPCEndpoint").values()
        if r["Properties"].get("VpcEndpointType", "Gateway") == kind
    }


def _secret_id(stack: CordumServerlessStack, role: str = "functions") -> str:
    assert stack.cache is not None
    return _logical_id(stack, stack.cache.users.secret(role))


def _statements_of(tpl: dict[str, Any], role_ref: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for policy in (r["Properties"] for r in _resources(tpl, "AWS::IAM::Policy").values()):
        if role_ref in policy["Roles"]:
            found += policy["PolicyDocument"]["Statement"]
    return found


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else list(action)


# --- network -----------------------------------------------------------------------------


def test_endpoints_mode_keeps_the_vpc_off_the_internet(endpoints: dict[str, Any]) -> None:
    template, stack = endpoints["template"], endpoints["stack"]
    # Then there is no way out: no internet gateway, no NAT, no public subnet
    template.resource_count_is("AWS::EC2::VPC", 1)
    template.resource_count_is("AWS::EC2::InternetGateway", 0)
    template.resource_count_is("AWS::EC2::NatGateway", 0)
    template.resource_count_is("AWS::EC2::Subnet", 2)
    for route in _resources(endpoints["json"], "AWS::EC2::Route").values():
        assert route["Properties"].get("DestinationCidrBlock") != ANYWHERE
    # And the two private subnets are in two zones
    zones = {json.dumps(stack.resolve(s.availability_zone)) for s in _private_subnets(stack)}
    assert len(zones) == 2


def test_endpoints_mode_has_an_endpoint_for_every_aws_api_cordum_calls(
    endpoints: dict[str, Any],
) -> None:
    tpl, stack = endpoints["json"], endpoints["stack"]
    assert stack.network is not None and stack.network.endpoints_security_group is not None
    interface = _endpoints(tpl, "Interface")
    # Then every API has an interface endpoint with private DNS in both private subnets
    assert INTERFACE_SERVICES <= set(interface)
    endpoint_group = _group_ref(stack, stack.network.endpoints_security_group)
    for service in INTERFACE_SERVICES:
        props = interface[service]
        assert props["PrivateDnsEnabled"] is True, service
        assert props["SubnetIds"] == _private_subnet_refs(stack), service
        assert props["SecurityGroupIds"] == [endpoint_group], service
    # And that group admits HTTPS from the VPC's own address block only
    vpc_cidr = tpl["Resources"][_logical_id(stack, stack.network.vpc)]["Properties"]["CidrBlock"]
    assert [_rule(r) for r in _ingress(tpl, stack, stack.network.endpoints_security_group)] == [
        ("tcp", 443, 443, json.dumps(vpc_cidr))
    ]
    # And S3 (ECR image layers) is a gateway endpoint on the private route tables
    gateway = _endpoints(tpl, "Gateway")
    assert set(gateway) == {"s3"}
    tables = [stack.resolve(s.route_table.route_table_id) for s in _private_subnets(stack)]
    assert sorted(map(json.dumps, gateway["s3"]["RouteTableIds"])) == sorted(
        map(json.dumps, tables)
    )


def test_nat_mode_routes_private_subnets_through_one_nat(nat: dict[str, Any]) -> None:
    template, tpl, stack = nat["template"], nat["json"], nat["stack"]
    # Then there is one NAT gateway and no interface endpoint to pay for
    template.resource_count_is("AWS::EC2::NatGateway", 1)
    assert _endpoints(tpl, "Interface") == {}
    # And each private subnet's default route goes to that NAT
    nat_id = next(iter(_resources(tpl, "AWS::EC2::NatGateway")))
    routes = [r["Properties"] for r in _resources(tpl, "AWS::EC2::Route").values()]
    for subnet in _private_subnets(stack):
        table = stack.resolve(subnet.route_table.route_table_id)
        default = [r for r in routes if r["RouteTableId"] == table
                   and r.get("DestinationCidrBlock") == ANYWHERE]
        assert default == [{"RouteTableId": table, "DestinationCidrBlock": ANYWHERE,
                            "NatGatewayId": {"Ref": nat_id}}]


def test_every_function_runs_in_the_private_subnets_with_the_functions_group(
    either: dict[str, Any],
) -> None:
    tpl, stack = either["json"], either["stack"]
    assert stack.network is not None
    functions_group = _group_ref(stack, stack.network.functions_security_group)
    by_id = {k: v["Properties"] for k, v in _resources(tpl, "AWS::Lambda::Function").items()}
    for spec in ALL_FUNCTIONS:
        props = by_id[_logical_id(stack, stack.functions[spec])]
        # (the audit tick and the gateway, which reads the exported chains, have a second
        # group for S3: test_audit_export_infra)
        extra = [_group_ref(stack, stack.audit.s3_security_group)] \
            if spec in (AUDIT_TICK, GATEWAY) else []
        assert props["VpcConfig"] == {
            "SubnetIds": _private_subnet_refs(stack),
            "SecurityGroupIds": [functions_group, *extra],
        }, spec.module


def test_cache_admits_redis_from_functions_and_bridge_only(either: dict[str, Any]) -> None:
    tpl, stack = either["json"], either["stack"]
    network = stack.network
    assert network is not None
    clients = [network.functions_security_group, network.bridge_security_group]
    if stack.services is not None and stack.services.kernel is not None:
        # A kernel the stack runs counts velocity windows in the cache too.
        clients.append(stack.services.kernel.task_security_group)
    expected = sorted(
        ("tcp", REDIS_PORT, REDIS_PORT, json.dumps(_group_ref(stack, g), sort_keys=True))
        for g in clients
    )
    # Then the cache's group has exactly those rules: 6379 from each client group
    assert sorted(_rule(r) for r in _ingress(tpl, stack, network.cache_security_group)) == expected
    # And the replication group wears that group, and only it
    assert stack.cache is not None and stack.cache.security_group is network.cache_security_group
    rg = tpl["Resources"][_logical_id(stack, stack.cache.replication_group)]["Properties"]
    assert rg["SecurityGroupIds"] == [_group_ref(stack, network.cache_security_group)]


def test_kernel_admits_grpc_from_functions_and_bridge_only(either: dict[str, Any]) -> None:
    tpl, stack = either["json"], either["stack"]
    network = stack.network
    assert network is not None
    expected = sorted(
        ("tcp", KERNEL_PORT, KERNEL_PORT, json.dumps(_group_ref(stack, g), sort_keys=True))
        for g in (network.functions_security_group, network.bridge_security_group)
    )
    # Then the kernel's group admits its gRPC port from those two groups and nothing else
    assert sorted(_rule(r) for r in _ingress(tpl, stack, network.kernel_security_group)) == expected


def test_the_groups_are_distinct_and_exposed_for_the_services(either: dict[str, Any]) -> None:
    network = either["stack"].network
    assert network is not None
    groups = [network.functions_security_group, network.bridge_security_group,
              network.kernel_security_group, network.cache_security_group]
    ids = {_logical_id(either["stack"], g) for g in groups}
    assert len(ids) == 4
    assert network.private_subnets.subnet_type in (
        cdk.aws_ec2.SubnetType.PRIVATE_ISOLATED, cdk.aws_ec2.SubnetType.PRIVATE_WITH_EGRESS
    )


# --- cache -------------------------------------------------------------------------------


def test_replication_group_is_multi_az_tls_encrypted_with_users(
    endpoints: dict[str, Any],
) -> None:
    template, tpl, stack = endpoints["template"], endpoints["json"], endpoints["stack"]
    assert stack.cache is not None
    group_id = _logical_id(stack, stack.cache.users.group)
    # Then one replication group: Redis 7, failover across zones, TLS required, at rest
    # encrypted, and its clients log in as the users of its user group (no AUTH token)
    template.resource_count_is("AWS::ElastiCache::ReplicationGroup", 1)
    template.has_resource_properties(
        "AWS::ElastiCache::ReplicationGroup",
        {
            "Engine": "redis",
            "EngineVersion": Match.string_like_regexp(r"^7\."),
            "ClusterMode": "disabled",
            "NumCacheClusters": 2,
            "AutomaticFailoverEnabled": True,
            "MultiAZEnabled": True,
            "TransitEncryptionEnabled": True,
            "TransitEncryptionMode": "required",
            "AtRestEncryptionEnabled": True,
            "UserGroupIds": [{"Ref": group_id}],
            "AuthToken": Match.absent(),
        },
    )
    # And its subnet group is the two private subnets
    groups = list(_resources(tpl, "AWS::ElastiCache::SubnetGroup").values())
    assert [g["Properties"]["SubnetIds"] for g in groups] == [_private_subnet_refs(stack)]


def test_cache_never_evicts_a_key(endpoints: dict[str, Any]) -> None:
    tpl, stack = endpoints["json"], endpoints["stack"]
    # Then one parameter group of the Redis 7 family refuses writes when memory is full
    # instead of evicting keys (job metas and locks all carry a TTL: the default
    # volatile-lru policy would evict them)
    groups = _resources(tpl, "AWS::ElastiCache::ParameterGroup")
    assert len(groups) == 1
    ((group_id, group),) = groups.items()
    assert group["Properties"]["CacheParameterGroupFamily"] == "redis7"
    assert group["Properties"]["Properties"]["maxmemory-policy"] == "noeviction"
    # And the replication group runs with it
    assert stack.cache is not None
    rg = tpl["Resources"][_logical_id(stack, stack.cache.replication_group)]["Properties"]
    assert rg["CacheParameterGroupName"] == {"Ref": group_id}


def test_passwords_are_generated_without_characters_elasticache_rejects(
    endpoints: dict[str, Any],
) -> None:
    tpl, stack = endpoints["json"], endpoints["stack"]
    for role in ("functions", "bridge", "kernel", "worker"):
        secret = tpl["Resources"][_secret_id(stack, role)]["Properties"]
        generated = secret["GenerateSecretString"]
        # Then each user's secret is a JSON login: its user name, and a password of a
        # length ElastiCache accepts under "password"
        template = json.loads(generated["SecretStringTemplate"])
        assert template == {"username": stack.cache.users.users[role].name}, role
        assert generated["GenerateStringKey"] == "password"
        assert 16 <= generated["PasswordLength"] <= 128
        # And the only punctuation it may contain is ElastiCache's ! & # $ ^ < > -
        excluded = set(generated["ExcludeCharacters"])
        assert excluded == set(string.punctuation) - set("!&#$^<>-")
        assert set(PASSWORD_SPECIALS) == set("!&#$^<>-")
        assert generated.get("IncludeSpace") is False


def test_every_function_is_told_the_secret_and_may_read_it(endpoints: dict[str, Any]) -> None:
    tpl, stack = endpoints["json"], endpoints["stack"]
    secret_ref = {"Ref": _secret_id(stack)}
    functions = _functions(tpl)
    for spec in ALL_FUNCTIONS:
        # Then the function's environment names the secret
        env = functions[spec.module]["Environment"]["Variables"]
        assert env[AUTH_SECRET_ENV] == secret_ref, spec.module
        assert all("resolve:secretsmanager" not in json.dumps(v) for v in env.values())
        # And its role may read that secret; any other secret it reads is a NATS
        # credential, the audit chains' HMAC key or (the gateway's) the API keys
        role = stack.functions[spec].role
        statements = _statements_of(tpl, {"Ref": _logical_id(stack, role)})
        reads = [s["Resource"] for s in statements
                 if "secretsmanager:GetSecretValue" in _actions(s)]
        assert secret_ref in reads, spec.module
        assert stack.audit.hmac_secret is not None
        hmac_ref = {"Ref": _logical_id(stack, stack.audit.hmac_secret)}
        others = [r for r in reads if r not in (secret_ref, hmac_ref)]
        assert all("nats" in json.dumps(r).lower() or
                   (spec.module == "gateway" and "api-keys" in json.dumps(r)) for r in others), \
            (spec.module, others)


def test_local_stack_has_no_secret_and_no_token_variable(local: dict[str, Any]) -> None:  # noqa: F811
    # Given a redisUrl (LocalStack), then nothing of the AWS network or cache is there
    template = local["template"]
    template.resource_count_is("AWS::SecretsManager::Secret", 0)
    template.resource_count_is("AWS::EC2::VPCEndpoint", 0)
    template.resource_count_is("AWS::EC2::SecurityGroup", 0)
    assert local["stack"].network is None
    for module, props in _functions(local["json"]).items():
        assert AUTH_SECRET_ENV not in props["Environment"]["Variables"], module


# --- context and checks ------------------------------------------------------------------


def test_egress_context_defaults_to_endpoints(inputs: dict[str, Path]) -> None:  # noqa: F811
    base = {**AWS_NATS, "safetyKernelAddr": KERNEL_ADDR,
            "safetyKernelCa": str(inputs["kernel_ca"])}
    assert _settings(inputs, **base).egress == "endpoints"
    assert _settings(inputs, **base, egress="NAT").egress == "nat"
    with pytest.raises(ContextError, match="egress must be one of endpoints, nat"):
        _settings(inputs, **base, egress="internet")


@pytest.mark.parametrize("egress", ["endpoints", "nat"])
def test_cdk_nag_passes_in_both_egress_modes(
    inputs: dict[str, Path], tmp_path: Path, egress: str  # noqa: F811
) -> None:
    # Given the AWS stack in that mode with the AwsSolutions pack
    context = _context(inputs, **AWS_NATS, egress=egress)
    app, stack = _stack(inputs, tmp_path, context)
    add_checks(app, stack)
    # When the app is synthesized, then no unacknowledged finding fails it
    assert app.synth().get_stack_by_name(stack.stack_name).template["Resources"]
