"""NATS on a real account (CDK template assertions and context rules).

An AWS stack (no redisUrl) reaches NATS over TLS with credentials only: its own
three-node JetStream cluster (natsCluster=true), or an existing cluster given as
tls:// URL(s) with natsCredentialsSecretArn. The cluster construct is tested on
its own with stand-ins for the certificate secret and the CA, and inside the
stack, wired to the stack's issuer. The local stack keeps plaintext nats://.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.infra.test_synth import (
    HANDLERS,
    NATS,
    _context,
    _functions,
    _logical_id,
    _resources,
    _stack,
    inputs,  # noqa: F401  (the module fixture: stand-in layer, handlers, config)
    local,  # noqa: F401  (the local stack fixture)
)

cdk = pytest.importorskip("aws_cdk")
from aws_cdk import aws_ec2 as ec2  # noqa: E402
from aws_cdk import aws_ecs as ecs  # noqa: E402
from aws_cdk import aws_secretsmanager as secretsmanager  # noqa: E402
from aws_cdk.assertions import Template  # noqa: E402
from cordum_infra.bridge import BRIDGE_CONTAINER  # noqa: E402
from cordum_infra.nag import add_checks  # noqa: E402
from cordum_infra.nats import NATS_CREDS_ENV, NATS_TLS_CA_ENV  # noqa: E402
from cordum_infra.nats_cluster import NatsCluster  # noqa: E402
from cordum_infra.settings import (  # noqa: E402
    CLUSTER_NATS_URL,
    DEV_NATS_URL,
    ContextError,
    StackSettings,
)
from cordum_infra.stack import STACK_NAME, CordumServerlessStack  # noqa: E402

CREDS_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:cordum/nats-AbCdEf"
OUTSIDE = "tls://nats.example.internal:4222"
STAND_IN_CA = "-----BEGIN CERTIFICATE-----\nstand-in\n-----END CERTIFICATE-----"
NODES = ("nats-0", "nats-1", "nats-2")
NAMES = [f"{node}.cordum.internal" for node in NODES]


def _settings(inputs: dict[str, Path], **context: str) -> StackSettings:  # noqa: F811
    return StackSettings.from_context(cdk.App(context=_context(inputs, **context)).node)


def _containers(tpl: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Container name -> (task definition logical id, container definition)."""
    found = {}
    for task_id, task in _resources(tpl, "AWS::ECS::TaskDefinition").items():
        for container in task["Properties"]["ContainerDefinitions"]:
            found[container["Name"]] = (task_id, container)
    return found


def _function_env(tpl: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Handler module -> environment of each Cordum function."""
    return {m: p["Environment"]["Variables"] for m, p in _functions(tpl).items() if m in HANDLERS}


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["Name"]: item["Value"] for item in container.get("Environment", [])}


def _secrets(container: dict[str, Any]) -> dict[str, str]:
    """Variable -> ``<secret logical id or ARN>:<json field>`` of an ECS secret."""
    found = {}
    for item in container.get("Secrets", []):
        parts = item["ValueFrom"]["Fn::Join"][1]
        ref = next(p for p in parts if isinstance(p, dict))
        field = next(p for p in parts if isinstance(p, str) and p.startswith(":") and p != ":")
        found[item["Name"]] = f"{ref.get('Ref', json.dumps(ref))}{field.split('::')[0]}"
    return found


def _services_by_node(tpl: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Node container name -> (service logical id, service properties)."""
    by_task = {task_id: name for name, (task_id, _) in _containers(tpl).items()}
    return {
        by_task[r["Properties"]["TaskDefinition"]["Ref"]]: (sid, r["Properties"])
        for sid, r in _resources(tpl, "AWS::ECS::Service").items()
        if by_task[r["Properties"]["TaskDefinition"]["Ref"]].startswith("nats-")
    }


def _ingress(tpl: dict[str, Any], group_id: str) -> set[tuple[int, int, str]]:
    """(from, to, source group logical id) of every ingress rule of `group_id`."""
    rules = list(tpl["Resources"][group_id]["Properties"].get("SecurityGroupIngress", []))
    rules += [
        r["Properties"]
        for r in _resources(tpl, "AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == {"Fn::GetAtt": [group_id, "GroupId"]}
    ]
    found = set()
    for rule in rules:
        source = rule.get("SourceSecurityGroupId", rule.get("CidrIp"))
        source = source["Fn::GetAtt"][0] if isinstance(source, dict) else source
        found.add((rule["FromPort"], rule["ToPort"], source))
    return found


# --- the cluster construct, with stand-ins -----------------------------------------------


@pytest.fixture(scope="module")
def construct() -> dict[str, Any]:
    """Given a NatsCluster of three nodes in a bare stack, its certificate secret and CA
    being stand-ins made by the test."""
    app = cdk.App()
    stack = cdk.Stack(app, "NatsOnly")
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=0, subnet_configuration=[
        ec2.SubnetConfiguration(name="private", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)])
    functions = ec2.SecurityGroup(stack, "Functions", vpc=vpc)
    bridge = ec2.SecurityGroup(stack, "Bridge", vpc=vpc)
    tls = secretsmanager.Secret(stack, "StandInTls")
    nats = NatsCluster(
        stack, "Nats", cluster=ecs.Cluster(stack, "Cluster", vpc=vpc), vpc=vpc,
        subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED),
        clients=[functions, bridge], architecture="x86_64", tls_secret=tls,
        ca_pem=STAND_IN_CA, nodes=3)
    template = Template.from_stack(stack)
    return {"json": template.to_json(), "template": template, "stack": stack, "nats": nats,
            "ids": {name: _logical_id(stack, c) for name, c in
                    (("functions", functions), ("bridge", bridge), ("tls", tls),
                     ("nodes", nats.security_group), ("credentials", nats.credentials))}}


def test_three_services_of_one_task_each_under_fixed_names(construct: dict[str, Any]) -> None:
    tpl = construct["json"]
    services = _services_by_node(tpl)
    # Then each node is its own service of one task, never two at once on its store
    assert set(services) == set(NODES)
    for _, props in services.values():
        assert props["DesiredCount"] == 1
        assert props["DeploymentConfiguration"]["MaximumPercent"] == 100
        assert props["DeploymentConfiguration"]["DeploymentCircuitBreaker"]["Rollback"] is True
    # registered in Cloud Map as nats-0/1/2 under cordum.internal
    discovery = [
        r["Properties"] for r in _resources(tpl, "AWS::ServiceDiscovery::Service").values()
    ]
    assert sorted(d["Name"] for d in discovery) == list(NODES)
    (namespace,) = _resources(tpl, "AWS::ServiceDiscovery::PrivateDnsNamespace").values()
    assert namespace["Properties"]["Name"] == "cordum.internal"
    # and a deploy replaces them one after the other (two keep the quorum)
    ids = {node: sid for node, (sid, _) in services.items()}
    assert ids["nats-0"] in tpl["Resources"][ids["nats-1"]]["DependsOn"]
    assert ids["nats-1"] in tpl["Resources"][ids["nats-2"]]["DependsOn"]
    assert construct["nats"].url == CLUSTER_NATS_URL


def test_each_node_keeps_its_store_on_its_own_encrypted_retained_access_point(
    construct: dict[str, Any],
) -> None:
    tpl = construct["json"]
    (fs_id, fs), = _resources(tpl, "AWS::EFS::FileSystem").items()
    # Then the file system is encrypted, backed up, and kept when the stack goes
    assert fs["Properties"]["Encrypted"] is True
    assert fs["Properties"]["BackupPolicy"] == {"Status": "ENABLED"}
    assert fs["DeletionPolicy"] == fs["UpdateReplacePolicy"] == "Retain"
    points = _resources(tpl, "AWS::EFS::AccessPoint")
    # And every node mounts a different access point, rooted at its own folder
    mounted = {}
    for node, (task_id, container) in _containers(tpl).items():
        (volume,) = tpl["Resources"][task_id]["Properties"]["Volumes"]
        efs = volume["EFSVolumeConfiguration"]
        assert efs["FilesystemId"] == {"Ref": fs_id} and efs["TransitEncryption"] == "ENABLED"
        point = efs["AuthorizationConfig"]["AccessPointId"]["Ref"]
        mounted[node] = points[point]["Properties"]["RootDirectory"]["Path"]
        assert container["MountPoints"][0]["ContainerPath"] == "/data"
        command = container["Command"]
        assert "--jetstream" in command and command[command.index("--store_dir") + 1] == "/data"
        assert command[command.index("--server_name") + 1] == node
    assert mounted == {node: f"/jetstream/{node}" for node in NODES}
    # And the file system admits NFS from the nodes alone
    (target,) = {json.dumps(r["Properties"]["SecurityGroups"])
                 for r in _resources(tpl, "AWS::EFS::MountTarget").values()}
    storage_group = json.loads(target)[0]["Fn::GetAtt"][0]
    assert _ingress(tpl, storage_group) == {(2049, 2049, construct["ids"]["nodes"])}


def test_nodes_route_to_each_other_and_serve_tls_with_the_given_certificate(
    construct: dict[str, Any],
) -> None:
    tpl, ids = construct["json"], construct["ids"]
    for index, node in enumerate(NODES):
        _, container = _containers(tpl)[node]
        env = _env(container)
        # Then every node knows the route port of all three by name, and is known by its own
        assert env["NATS_ROUTES"] == ",".join(f"{name}:6222" for name in NAMES)
        assert env["NATS_CLUSTER_ADVERTISE"] == f"{NAMES[index]}:6222"
        # and serves TLS with the certificate and key of the given secret, the given CA
        assert env["NATS_TLS_CA"] == STAND_IN_CA
        secrets = _secrets(container)
        assert secrets["NATS_TLS_CERT"] == f"{ids['tls']}:cert"
        assert secrets["NATS_TLS_KEY"] == f"{ids['tls']}:key"
        # and logs clients and routes in with the generated password
        assert secrets["NATS_PASSWORD"] == f"{ids['credentials']}:password"
        assert secrets["NATS_USER"] == f"{ids['credentials']}:username"
        # and is healthy while its own JetStream runs, whatever its peers do
        check = " ".join(container["HealthCheck"]["Command"])
        assert "/healthz?js-enabled-only=true" in check
    # And the password is generated, letters and digits (it goes into route URLs)
    secret = tpl["Resources"][ids["credentials"]]["Properties"]["GenerateSecretString"]
    assert secret["ExcludePunctuation"] is True and secret["PasswordLength"] >= 32


def test_nodes_admit_clients_on_4222_and_each_other_on_6222_only(
    construct: dict[str, Any],
) -> None:
    tpl, ids = construct["json"], construct["ids"]
    assert _ingress(tpl, ids["nodes"]) == {
        (4222, 4222, ids["functions"]),
        (4222, 4222, ids["bridge"]),
        (6222, 6222, ids["nodes"]),
    }


# --- the stack with its own cluster --------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given an AWS stack with natsCluster=true."""
    _, stack = _stack(inputs, tmp_path_factory.mktemp("cluster"),
                      _context(inputs, natsCluster="true"))
    template = Template.from_stack(stack)
    return {"json": template.to_json(), "stack": stack}


@pytest.fixture(scope="module")
def outside(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given an AWS stack pointed at an existing cluster over TLS with credentials."""
    _, stack = _stack(inputs, tmp_path_factory.mktemp("outside"),
                      _context(inputs, natsUrl=OUTSIDE, natsCredentialsSecretArn=CREDS_ARN))
    template = Template.from_stack(stack)
    return {"json": template.to_json(), "stack": stack}


def test_functions_and_bridge_reach_the_own_cluster_over_tls_with_its_password(
    cluster: dict[str, Any],
) -> None:
    tpl, stack = cluster["json"], cluster["stack"]
    nats = stack.nats
    assert nats is not None and nats.nodes == 3
    credentials = {"Ref": _logical_id(stack, nats.credentials)}
    # The nodes' certificate is a leaf of the stack's CA for every node's name
    _, node0 = _containers(tpl)["nats-0"]
    cert_secret = _secrets(node0)["NATS_TLS_CERT"].split(":")[0]
    (leaf,) = [r["Properties"] for r in _resources(tpl, "Custom::CordumTlsCertificate").values()
               if r["Properties"]["SecretArn"] == {"Ref": cert_secret}]
    assert leaf["DnsNames"] == ["*.cordum.internal"]
    # and the clients trust that CA: the one the kernel's clients trust too
    ca = _env(node0)["NATS_TLS_CA"]
    assert ca["Fn::GetAtt"][1] == "CaPem"
    assert _function_env(tpl)["submit"]["SAFETY_KERNEL_TLS_CA"] == ca
    clients = _function_env(tpl)
    assert set(clients) == HANDLERS
    clients[BRIDGE_CONTAINER] = _env(_containers(tpl)[BRIDGE_CONTAINER][1])
    for name, env in clients.items():
        assert env["NATS_URL"] == CLUSTER_NATS_URL, name
        assert env[NATS_TLS_CA_ENV] == ca, name
        assert env[NATS_CREDS_ENV] == credentials, name
    # And CloudFormation starts the bridge once every node runs
    bridge = tpl["Resources"][_logical_id(stack, stack.services.bridge.service)]
    for service in nats.services:
        assert _logical_id(stack, service) in bridge["DependsOn"]


def test_the_job_stream_is_replicated_on_every_node_of_the_cluster(
    cluster: dict[str, Any], outside: dict[str, Any],
) -> None:
    # Then the bridge of the three-node cluster creates the job stream with 3 replicas
    bridge = _env(_containers(cluster["json"])[BRIDGE_CONTAINER][1])
    assert bridge["JOB_STREAM_REPLICAS"] == "3"
    # And with an outside cluster the stream is the operator's (the bridge's default: 1)
    assert "JOB_STREAM_REPLICAS" not in _env(_containers(outside["json"])[BRIDGE_CONTAINER][1])


def test_bridge_is_judged_only_after_the_nodes_it_waits_for(cluster: dict[str, Any]) -> None:
    tpl = cluster["json"]
    containers = _containers(tpl)
    bridge = containers[BRIDGE_CONTAINER][1]["HealthCheck"]
    node = containers["nats-0"][1]["HealthCheck"]
    # Then the bridge's first failed checks do not count until well after a node's
    assert bridge["StartPeriod"] >= 2 * node["StartPeriod"]
    # and within the 300 s ECS allows
    assert bridge["StartPeriod"] <= 300
    assert bridge["Command"] == ["CMD", "python", "-m", "cordum.bus.health"]


def test_outside_cluster_is_tls_with_the_given_credentials(outside: dict[str, Any]) -> None:
    tpl, stack = outside["json"], outside["stack"]
    assert stack.nats is None
    assert not _resources(tpl, "AWS::EFS::FileSystem")
    clients = _function_env(tpl)
    assert set(clients) == HANDLERS
    clients[BRIDGE_CONTAINER] = _env(_containers(tpl)[BRIDGE_CONTAINER][1])
    for name, env in clients.items():
        assert env["NATS_URL"] == OUTSIDE, name
        assert env[NATS_CREDS_ENV] == CREDS_ARN, name
        # verified against the system trust store: no CA of the stack's
        assert NATS_TLS_CA_ENV not in env, name


def test_outside_cluster_with_its_ca_is_verified_against_that_ca_alone(
    inputs: dict[str, Path], tmp_path: Path,  # noqa: F811
) -> None:
    # Given an outside cluster whose certificate chains to a private CA, named by natsCa
    ca_file = tmp_path / "nats-ca.pem"
    ca_file.write_text(STAND_IN_CA + "\n")
    app = cdk.App(context=_context(inputs, natsUrl=OUTSIDE, natsCredentialsSecretArn=CREDS_ARN,
                                   natsCa=str(ca_file)), outdir=str(tmp_path / "out"))
    settings = StackSettings.from_context(app.node, code_staging_dir=tmp_path / "code")
    stack = CordumServerlessStack(app, STACK_NAME, settings=settings)
    tpl = Template.from_stack(stack).to_json()
    clients = _function_env(tpl)
    clients[BRIDGE_CONTAINER] = _env(_containers(tpl)[BRIDGE_CONTAINER][1])
    # Then every client is given that CA to verify the cluster with
    for name, env in clients.items():
        assert env[NATS_TLS_CA_ENV] == STAND_IN_CA, name
        assert env[NATS_CREDS_ENV] == CREDS_ARN, name


def test_local_stack_keeps_plaintext_nats_without_credentials(local: dict[str, Any]) -> None:  # noqa: F811
    for module, env in _function_env(local["json"]).items():
        assert env["NATS_URL"] == NATS, module
        assert NATS_CREDS_ENV not in env and NATS_TLS_CA_ENV not in env, module


def test_cdk_nag_passes_with_the_cluster(inputs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    app = cdk.App(context=_context(inputs, natsCluster="true"), outdir=str(tmp_path / "out"))
    settings = StackSettings.from_context(app.node, code_staging_dir=tmp_path / "code")
    stack = CordumServerlessStack(app, STACK_NAME, settings=settings)
    add_checks(app, stack)
    assert app.synth().get_stack_by_name(STACK_NAME).template["Resources"]


# --- context rules -------------------------------------------------------------------------


def test_own_cluster_and_dev_node_set_the_nats_url(inputs: dict[str, Path]) -> None:  # noqa: F811
    own = _settings(inputs, natsCluster="true")
    assert (own.nats_url, own.nats_nodes) == (CLUSTER_NATS_URL, 3)
    assert CLUSTER_NATS_URL.split(",") == [f"tls://{name}:4222" for name in NAMES]
    dev = _settings(inputs, devNats="true")
    assert (dev.nats_url, dev.nats_nodes) == (DEV_NATS_URL, 1)
    assert DEV_NATS_URL == f"tls://{NAMES[0]}:4222"


def test_tls_with_a_secret_is_accepted_on_aws(inputs: dict[str, Path]) -> None:  # noqa: F811
    given = _settings(inputs, natsUrl=f"{OUTSIDE},tls://nats-b.example.internal:4222",
                      natsCredentialsSecretArn=CREDS_ARN)
    assert given.nats_nodes == 0 and given.nats_credentials_secret_arn == CREDS_ARN


def test_local_stack_accepts_plaintext_nats(inputs: dict[str, Path]) -> None:  # noqa: F811
    assert _settings(inputs, natsUrl=NATS, redisUrl="redis://127.0.0.1:6379").nats_url == NATS


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"natsUrl": "nats://10.0.0.10:4222", "natsCredentialsSecretArn": CREDS_ARN},
         r"natsUrl: plaintext nats:// is refused on AWS .* tls:// .* natsCluster=true"),
        ({"natsUrl": f"{OUTSIDE},nats://10.0.0.10:4222", "natsCredentialsSecretArn": CREDS_ARN},
         "plaintext nats:// is refused on AWS"),
        ({"natsUrl": OUTSIDE}, "natsCredentialsSecretArn is required with a tls:// natsUrl"),
        ({"natsCluster": "true", "redisUrl": "redis://127.0.0.1:6379"},
         "natsCluster .* needs an AWS stack"),
        ({"natsCluster": "true", "natsUrl": OUTSIDE}, "give no other natsUrl"),
        ({"natsCluster": "true", "natsCredentialsSecretArn": CREDS_ARN},
         "no natsCredentialsSecretArn"),
        ({"natsCluster": "true", "devNats": "true"}, "not both"),
        ({"natsCluster": "true", "natsCa": "/dev/null"}, "no natsCa"),
        ({"natsUrl": OUTSIDE, "natsCredentialsSecretArn": CREDS_ARN,
          "natsCa": "/nonexistent/ca.pem"}, "context natsCa: cannot read"),
        ({"natsUrl": OUTSIDE, "natsCredentialsSecretArn": CREDS_ARN, "natsCa": "/dev/null"},
         "context natsCa: .* must hold the CA certificate"),
        ({"natsCluster": "3"}, "natsCluster must be true or false"),
        ({}, "natsUrl is required: .* natsCluster=true"),
    ],
)
def test_nats_context_errors(
    inputs: dict[str, Path], context: dict[str, str], message: str  # noqa: F811
) -> None:
    with pytest.raises(ContextError, match=message):
        _settings(inputs, **context)


def test_direct_construction_cannot_put_plaintext_on_aws(inputs: dict[str, Path]) -> None:  # noqa: F811
    settings = _settings(inputs, natsCluster="true")
    with pytest.raises(ContextError, match="plaintext nats:// is refused"):
        StackSettings(**{**settings.__dict__, "nats_cluster": False,
                         "nats_url": "nats://10.0.0.10:4222"})
