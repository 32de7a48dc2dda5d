"""The AWS stack's network on a real account (CDK template assertions).

An existing VPC (context vpcId, its lookup answered by the committed
fixtures/cdk.context.json as the CDK CLI's context cache would answer it), or
the stack's own VPC with a chosen block and zones; the endpoints Cordum's code
calls and no others; closed egress in ``endpoints`` mode. No network access and
no AWS credentials: every lookup is in the fixture.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.infra.test_synth import (
    _context,
    _functions,
    _logical_id,
    _resources,
    inputs,  # noqa: F401  (the module fixture: stand-in layer, handlers, config)
)

cdk = pytest.importorskip("aws_cdk")
from aws_cdk.assertions import Template  # noqa: E402
from cordum_infra.cache import REDIS_PORT  # noqa: E402
from cordum_infra.nag import add_checks  # noqa: E402
from cordum_infra.network import KERNEL_PORT  # noqa: E402
from cordum_infra.network_settings import deployment_target  # noqa: E402
from cordum_infra.settings import ContextError, StackSettings  # noqa: E402
from cordum_infra.stack import STACK_NAME, CordumServerlessStack  # noqa: E402

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "cdk.context.json"
LOOKUPS: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
ACCOUNT, REGION = "123456789012", "us-east-1"
VPC_ID = "vpc-0c0d0e0f101112131"
VPC = LOOKUPS[
    f"vpc-provider:account={ACCOUNT}:filter.vpc-id={VPC_ID}:region={REGION}"
    ":returnAsymmetricSubnets=true"
]
GROUPS = {g["type"]: g["subnets"] for g in VPC["subnetGroups"]}
S3_PREFIX_LIST = next(v for k, v in LOOKUPS.items() if k.startswith("cc-api-provider:"))[0][
    "PrefixListId"
]
NATS_CREDS = "arn:aws:secretsmanager:us-east-1:123456789012:secret:cordum/nats-AbCdEf"
OUTSIDE_NATS = {
    "natsUrl": "tls://nats.example.internal:4222", "natsCredentialsSecretArn": NATS_CREDS,
}
ANYWHERE = "0.0.0.0/0"
CALLED_SERVICES = {"sqs", "lambda", "logs", "secretsmanager", "ecr.api", "ecr.dkr"}
"""What runs in the VPC calls: SQS (bridge, functions), Lambda (result -> saga-rollback),
Secrets Manager (API keys, Redis logins, NATS credentials), Logs and ECR (Fargate);
no SSM: the gateway reads its keys from Secrets Manager."""


def _build(inputs: dict[str, Path], tmp: Path, *, target: bool = True, nag: bool = False,  # noqa: F811
           **extra: str) -> dict[str, Any]:
    """The AWS stack as app.py builds it: the fixture's lookups in the context and, with
    `target`, the fixture's account and region as the stack's environment."""
    context: dict[str, Any] = {**LOOKUPS, **_context(inputs, **{**OUTSIDE_NATS, **extra})}
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
    return {"template": template, "json": template.to_json(), "stack": stack,
            "missing": _missing(assembly)}


def _missing(assembly: Any) -> list[str]:
    """Keys of the lookups the app made that its context did not answer (the CLI would
    make them and synthesize again)."""
    manifest = json.loads((Path(assembly.directory) / "manifest.json").read_text())
    return [m["key"] for m in manifest.get("missing", [])]


@pytest.fixture(scope="module")
def existing(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given vpcId (the fixture's VPC: public, private and isolated subnets in two zones)."""
    return _build(inputs, tmp_path_factory.mktemp("existing"), vpcId=VPC_ID)


@pytest.fixture(scope="module")
def own(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given the stack's own VPC with a chosen block and zones (endpoints mode)."""
    return _build(inputs, tmp_path_factory.mktemp("own"), vpcCidr="10.42.0.0/16",
                  availabilityZones="us-east-1c,us-east-1d")


@pytest.fixture(scope="module")
def nat(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    return _build(inputs, tmp_path_factory.mktemp("nat"), egress="nat")


def _ids(subnets: list[dict[str, str]], key: str = "subnetId") -> list[str]:
    return [s[key] for s in subnets]


def _egress(tpl: dict[str, Any], group_id: str) -> list[dict[str, Any]]:
    """Every egress rule of one group: inline, and AWS::EC2::SecurityGroupEgress resources."""
    rules = list(tpl["Resources"][group_id]["Properties"].get("SecurityGroupEgress", []))
    for resource in _resources(tpl, "AWS::EC2::SecurityGroupEgress").values():
        if resource["Properties"]["GroupId"] == {"Fn::GetAtt": [group_id, "GroupId"]}:
            rules.append(resource["Properties"])
    return rules


def _target(rule: dict[str, Any]) -> tuple[Any, ...]:
    dest = rule.get("CidrIp") or rule.get("DestinationPrefixListId")
    if dest is None:
        dest = rule["DestinationSecurityGroupId"]["Fn::GetAtt"][0]
    return rule["IpProtocol"], rule.get("FromPort"), rule.get("ToPort"), dest


def _service(props: dict[str, Any]) -> str:
    name = props["ServiceName"]
    if isinstance(name, dict):
        name = "".join(p if isinstance(p, str) else "<region>" for p in name["Fn::Join"][1])
    return name.split(".", 3)[3]


def _interface_services(tpl: dict[str, Any]) -> set[str]:
    return {_service(r["Properties"]) for r in _resources(tpl, "AWS::EC2::VPCEndpoint").values()
            if r["Properties"].get("VpcEndpointType") == "Interface"}


# --- an existing VPC ---------------------------------------------------------------------


def test_an_existing_vpc_is_looked_up_and_its_private_subnets_used(
    existing: dict[str, Any],
) -> None:
    template, tpl = existing["template"], existing["json"]
    # Then the lookup was answered (nothing left for the CLI to fetch)
    assert existing["missing"] == []
    # And the stack creates no VPC, subnet, route table or flow log of its own
    for kind in ("AWS::EC2::VPC", "AWS::EC2::Subnet", "AWS::EC2::RouteTable",
                 "AWS::EC2::FlowLog", "Custom::VpcRestrictDefaultSG"):
        template.resource_count_is(kind, 0)
    private = _ids(GROUPS["Private"])
    # And every function runs in the VPC's private subnets (by their literal ids)
    for module, props in _functions(tpl).items():
        assert props["VpcConfig"]["SubnetIds"] == private, module
    # And the cache's subnet group is those subnets
    (group,) = _resources(tpl, "AWS::ElastiCache::SubnetGroup").values()
    assert group["Properties"]["SubnetIds"] == private
    # And the endpoints are in those subnets, the S3 gateway on their route tables
    for endpoint in _resources(tpl, "AWS::EC2::VPCEndpoint").values():
        props = endpoint["Properties"]
        if props.get("VpcEndpointType") == "Interface":
            assert props["SubnetIds"] == private
        else:
            assert sorted(props["RouteTableIds"]) == _ids(GROUPS["Private"], "routeTableId")
        assert props["VpcId"] == VPC_ID


def test_subnet_ids_choose_other_subnets_of_the_existing_vpc(
    inputs: dict[str, Path], tmp_path: Path,  # noqa: F811
) -> None:
    isolated = _ids(GROUPS["Isolated"])
    built = _build(inputs, tmp_path, vpcId=VPC_ID, subnetIds=",".join(isolated))
    for module, props in _functions(built["json"]).items():
        assert props["VpcConfig"]["SubnetIds"] == isolated, module
    (group,) = _resources(built["json"], "AWS::ElastiCache::SubnetGroup").values()
    assert group["Properties"]["SubnetIds"] == isolated


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"subnetIds": "subnet-0aa00000000000002,subnet-0ffffffffffffffff"},
         "subnetIds: subnet-0ffffffffffffffff is not a subnet of vpc-0c0d0e0f101112131"),
        ({"subnetIds": "subnet-0aa00000000000002,subnet-0aa00000000000003"},
         "subnetIds must be in 2 zones"),
    ],
)
def test_subnets_the_vpc_lacks_or_in_one_zone_are_refused(
    inputs: dict[str, Path], tmp_path: Path, extra: dict[str, str], message: str,  # noqa: F811
) -> None:
    with pytest.raises(ContextError, match=message):
        _build(inputs, tmp_path, vpcId=VPC_ID, **extra)


def test_vpc_id_needs_the_account_and_region(inputs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    with pytest.raises(ContextError, match="context vpcId .* account and region"):
        _build(inputs, tmp_path, target=False, vpcId=VPC_ID)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"vpcId": "vpc-123"}, "context vpcId must be a VPC id"),
        ({"vpcId": VPC_ID, "vpcCidr": "10.1.0.0/16"}, "context vpcCidr shapes the VPC"),
        ({"vpcId": VPC_ID, "availabilityZones": "us-east-1a,us-east-1b"},
         "context availabilityZones shapes the VPC"),
        ({"subnetIds": "subnet-0aa00000000000002,subnet-0bb00000000000002"},
         "context subnetIds picks subnets of the VPC given by vpcId"),
        ({"vpcId": VPC_ID, "subnetIds": "subnet-0aa00000000000002"},
         "context subnetIds needs at least 2 subnets"),
        ({"vpcCidr": "10.42.0.0"}, "context vpcCidr must be a /16 to /20"),
        ({"vpcCidr": "10.42.1.0/16"}, "context vpcCidr must be an IPv4 block"),
        ({"vpcCidr": "10.42.0.0/24"}, "context vpcCidr must be a /16 to /20"),
        ({"vpcCidr": "not-a-block"}, "context vpcCidr must be an IPv4 block"),
        ({"availabilityZones": "us-east-1a"}, "exactly 2 distinct zones"),
        ({"availabilityZones": "use1-az1,use1-az2"}, "zone names such as us-east-1a, not zone ids"),
        ({"availabilityZones": "us-east-1a,us-west-2a"}, "zones of one region"),
        ({"account": "12345"}, "context account must be a 12-digit"),
    ],
)
def test_malformed_network_context_is_an_error_naming_the_key(
    inputs: dict[str, Path], extra: dict[str, str], message: str,  # noqa: F811
) -> None:
    app = cdk.App(context=_context(inputs, **OUTSIDE_NATS, **extra))
    with pytest.raises(ContextError, match=message):
        StackSettings.from_context(app.node)
        deployment_target(lambda k: app.node.try_get_context(k), {})


def test_a_local_stack_takes_no_network_context(inputs: dict[str, Path]) -> None:  # noqa: F811
    app = cdk.App(context=_context(inputs, redisUrl="redis://127.0.0.1:6379",
                                   natsUrl="nats://127.0.0.1:4222", vpcId=VPC_ID))
    with pytest.raises(ContextError, match="context vpcId places the AWS stack's VPC"):
        StackSettings.from_context(app.node)


def test_the_target_comes_from_the_context_before_the_cli_environment() -> None:
    env = {"CDK_DEFAULT_ACCOUNT": "111111111111", "CDK_DEFAULT_REGION": "eu-west-1"}
    context = {"region": "us-east-2"}
    assert deployment_target(context.get, env) == ("111111111111", "us-east-2")
    assert deployment_target({}.get, env) == ("111111111111", "eu-west-1")
    # Without an account (no credentials) the stack stays environment-agnostic
    assert deployment_target({}.get, {"CDK_DEFAULT_REGION": "eu-west-1"}) is None


# --- the stack's own VPC -----------------------------------------------------------------


def test_vpc_cidr_and_zones_shape_the_vpc_the_stack_creates(own: dict[str, Any]) -> None:
    tpl = own["json"]
    assert own["missing"] == []
    (vpc,) = _resources(tpl, "AWS::EC2::VPC").values()
    assert vpc["Properties"]["CidrBlock"] == "10.42.0.0/16"
    subnets = [r["Properties"] for r in _resources(tpl, "AWS::EC2::Subnet").values()]
    # Then the two subnets are in the zones named, by name, and inside the block
    assert sorted(s["AvailabilityZone"] for s in subnets) == ["us-east-1c", "us-east-1d"]
    assert all(s["CidrBlock"].startswith("10.42.") for s in subnets)
    # And the endpoints admit HTTPS from that block
    (endpoints_sg,) = [k for k, r in _resources(tpl, "AWS::EC2::SecurityGroup").items()
                       if "endpoints" in r["Properties"]["GroupDescription"]]
    ingress = tpl["Resources"][endpoints_sg]["Properties"]["SecurityGroupIngress"]
    assert [(r["FromPort"], r["CidrIp"]) for r in ingress] == [(443, "10.42.0.0/16")]


def test_zones_outside_the_target_region_are_refused(
    inputs: dict[str, Path], tmp_path: Path,  # noqa: F811
) -> None:
    with pytest.raises(ContextError, match="availabilityZones: .* not zones of us-east-1"):
        _build(inputs, tmp_path, availabilityZones="eu-west-1a,eu-west-1b")


def test_the_default_security_group_of_the_stacks_vpc_is_emptied(own: dict[str, Any]) -> None:
    tpl = own["json"]
    (vpc_id,) = _resources(tpl, "AWS::EC2::VPC")
    (restrict,) = _resources(tpl, "Custom::VpcRestrictDefaultSG").values()
    assert restrict["Properties"]["DefaultSecurityGroupId"] == {
        "Fn::GetAtt": [vpc_id, "DefaultSecurityGroup"]
    }


# --- endpoints and egress ----------------------------------------------------------------


@pytest.mark.parametrize("shape", ["existing", "own"])
def test_only_the_endpoints_cordum_calls_exist(shape: str, request: pytest.FixtureRequest) -> None:
    tpl = request.getfixturevalue(shape)["json"]
    # Then no EventBridge (events) or STS endpoint: nothing in the VPC calls them
    assert _interface_services(tpl) == CALLED_SERVICES


@pytest.mark.parametrize("shape", ["existing", "own"])
def test_no_group_may_send_anywhere_in_endpoints_mode(
    shape: str, request: pytest.FixtureRequest
) -> None:
    tpl = request.getfixturevalue(shape)["json"]
    stack = request.getfixturevalue(shape)["stack"]
    network = stack.network
    groups = [network.functions_security_group, network.bridge_security_group,
              network.kernel_security_group, network.cache_security_group]
    for group in groups:
        for rule in _egress(tpl, _logical_id(stack, group)):
            assert rule.get("CidrIp") != ANYWHERE, (group.node.path, rule)
            assert rule["IpProtocol"] != "-1", (group.node.path, rule)


@pytest.mark.parametrize("shape", ["existing", "own"])
def test_no_security_group_of_the_stack_sends_anywhere_in_endpoints_mode(
    shape: str, request: pytest.FixtureRequest
) -> None:
    tpl = request.getfixturevalue(shape)["json"]
    # Every group of the template (the kernel's tasks and the NATS nodes included):
    # AWS APIs through the endpoints' group and the S3 prefix list, never 0.0.0.0/0
    for group_id in _resources(tpl, "AWS::EC2::SecurityGroup"):
        for rule in _egress(tpl, group_id):
            assert rule.get("CidrIp") != ANYWHERE, (group_id, rule)


def test_functions_and_bridge_reach_exactly_what_they_use(own: dict[str, Any]) -> None:
    tpl, stack = own["json"], own["stack"]
    network = stack.network
    ids = {name: _logical_id(stack, getattr(network, f"{name}_security_group"))
           for name in ("functions", "bridge", "kernel", "cache", "endpoints")}
    expected = {
        ("tcp", 443, 443, ids["endpoints"]),  # SQS, Lambda, Secrets Manager, ...
        ("tcp", REDIS_PORT, REDIS_PORT, ids["cache"]),
        ("tcp", KERNEL_PORT, KERNEL_PORT, ids["kernel"]),
        ("tcp", 4222, 4222, "10.42.0.0/16"),  # NATS, inside the VPC in endpoints mode
    }
    assert {_target(r) for r in _egress(tpl, ids["functions"])} == expected
    # The bridge pulls its image: ECR's layers come from S3, through the gateway endpoint
    bridge = {_target(r) for r in _egress(tpl, ids["bridge"])}
    assert bridge - expected == {("tcp", 443, 443, S3_PREFIX_LIST)}
    # And the cache sends nothing (CDK's placeholder rule matches no traffic)
    assert all(r["CidrIp"] == "255.255.255.255/32" for r in _egress(tpl, ids["cache"]))


def test_nats_egress_follows_the_ports_of_nats_url(
    inputs: dict[str, Path], tmp_path: Path,  # noqa: F811
) -> None:
    built = _build(inputs, tmp_path, vpcId=VPC_ID,
                   natsUrl="tls://a.example.internal:7422,tls://b.example.internal")
    stack = built["stack"]
    rules = {_target(r) for r in _egress(
        built["json"], _logical_id(stack, stack.network.functions_security_group))}
    assert {("tcp", 7422, 7422, VPC["vpcCidrBlock"]),
            ("tcp", 4222, 4222, VPC["vpcCidrBlock"])} <= rules


def test_nat_mode_keeps_https_and_nats_open_and_nothing_else(nat: dict[str, Any]) -> None:
    tpl, stack = nat["json"], nat["stack"]
    network = stack.network
    for group in (network.functions_security_group, network.bridge_security_group):
        rules = {_target(r) for r in _egress(tpl, _logical_id(stack, group))}
        open_rules = {r for r in rules if r[3] == ANYWHERE}
        # AWS APIs at their public addresses through the NAT, and an outside NATS
        assert open_rules == {("tcp", 443, 443, ANYWHERE), ("tcp", 4222, 4222, ANYWHERE)}
    assert _interface_services(tpl) == set()


@pytest.mark.parametrize("extra", [{"vpcId": VPC_ID}, {"vpcCidr": "10.42.0.0/16"}])
def test_cdk_nag_passes_on_an_existing_and_an_own_vpc(
    inputs: dict[str, Path], tmp_path: Path, extra: dict[str, str],  # noqa: F811
) -> None:
    built = _build(inputs, tmp_path, nag=True, **extra)
    assert built["missing"] == []


# --- make synth --------------------------------------------------------------------------


def test_every_synth_shape_has_its_lookups_answered_offline(
    inputs: dict[str, Path], tmp_path: Path,  # noqa: F811
) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "infra" / "cdk"))
    from synth import SYNTH_SHAPES, app_context

    # Given each AWS shape of make synth, with the context synth.py hands the app
    aws_shapes = [name for name, ctx in SYNTH_SHAPES.items() if "redisUrl" not in ctx]
    assert any("vpcId" in SYNTH_SHAPES[name] for name in aws_shapes)
    for name in aws_shapes:
        context = {**app_context(SYNTH_SHAPES[name]), **_context(inputs)}
        app = cdk.App(context=context, outdir=str(tmp_path / name))
        settings = StackSettings.from_context(app.node,
                                              code_staging_dir=tmp_path / name / "code")
        found = deployment_target(lambda k, a=app: a.node.try_get_context(k), {})
        assert found is not None, name
        CordumServerlessStack(app, STACK_NAME, settings=settings,
                              env=cdk.Environment(account=found[0], region=found[1]))
        # Then the app needs no lookup the fixture does not answer
        assert _missing(app.synth()) == [], name


@pytest.mark.parametrize("shape", ["existing", "own", "nat"])
def test_cfn_lint_accepts_the_zones_named_on_purpose(
    shape: str, request: pytest.FixtureRequest
) -> None:
    from tests.infra.test_functions_obs import _cfn_lint

    # Given a stack bound to its account and region, its subnets name their zones
    # literally (no Fn::GetAZs position), and cfn-lint with the project's settings
    # finds nothing to report
    assert _cfn_lint(request.getfixturevalue(shape)["json"]) == []
