"""The safety kernel on a real account (CDK template assertions): it rolls without a
gap, keeps its CA across certificate rotations, reads its policy from the stack's S3
object and scales with its load.

Shapes: the AWS stack that runs its own kernel (outside NATS), the same with the
kernel's certificate rotated (kernelTlsGeneration=2), one with the stack's own NATS
cluster (its certificate from the same CA), and the local stack (redisUrl), which
keeps reading config/safety.yaml. No network access and no AWS credentials.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from tests.infra.test_synth import (
    AWS_NATS,
    LOCAL_REDIS,
    NATS,
    _context,
    _functions,
    _logical_id,
    _resources,
    _stack,
    inputs,  # noqa: F401  (the module fixture: stand-in layer, handlers, config)
)

cdk = pytest.importorskip("aws_cdk")
from aws_cdk.assertions import Template  # noqa: E402
from cordum_infra.bridge import BRIDGE_CONTAINER  # noqa: E402
from cordum_infra.kernel_tls import (  # noqa: E402
    CA_RESOURCE_TYPE,
    ISSUER_TIMEOUT,
    LEAF_RESOURCE_TYPE,
)
from cordum_infra.nag import add_checks  # noqa: E402
from cordum_infra.safety_kernel import KERNEL_CONTAINER  # noqa: E402
from cordum_infra.settings import NATS_NAMESPACE  # noqa: E402

from cordum.safety.kernel import (  # noqa: E402
    MAX_CONNECTION_AGE_GRACE_S,
    MAX_CONNECTION_AGE_JITTER,
    MAX_CONNECTION_AGE_S,
)
from cordum.safety.output_client import CONTENT_TIMEOUT_S  # noqa: E402
from cordum.safety.policy_source import POLICY_URI_ENV  # noqa: E402

CF_MAX_SERVICE_TIMEOUT_S = 3600
"""CloudFormation's default (and most) wait for a custom resource's answer."""


def _build(inputs: dict[str, Path], tmp: Path, *, nag: bool = False,  # noqa: F811
           **extra: str) -> dict[str, Any]:
    app, stack = _stack(inputs, tmp, _context(inputs, **extra))
    if nag:
        add_checks(app, stack)
    app.synth()
    template = Template.from_stack(stack)
    return {"template": template, "json": template.to_json(), "stack": stack}


@pytest.fixture(scope="module")
def aws(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given an AWS stack running its own kernel, cdk-nag's checks on."""
    return _build(inputs, tmp_path_factory.mktemp("kernel"), nag=True, **AWS_NATS)


@pytest.fixture(scope="module")
def rotated(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given the same stack with the kernel's certificate rotated."""
    return _build(inputs, tmp_path_factory.mktemp("rotated"), kernelTlsGeneration="2", **AWS_NATS)


# --- helpers -----------------------------------------------------------------------------


def _containers(tpl: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    found = {}
    for task_id, task in _resources(tpl, "AWS::ECS::TaskDefinition").items():
        for container in task["Properties"]["ContainerDefinitions"]:
            found[container["Name"]] = (task_id, container)
    return found


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["Name"]: item["Value"] for item in container.get("Environment", [])}


def _service(tpl: dict[str, Any], name: str) -> tuple[str, dict[str, Any]]:
    task_id, _ = _containers(tpl)[name]
    ((service_id, service),) = [
        (k, r) for k, r in _resources(tpl, "AWS::ECS::Service").items()
        if r["Properties"]["TaskDefinition"] == {"Ref": task_id}
    ]
    return service_id, service


def _one(tpl: dict[str, Any], kind: str) -> tuple[str, dict[str, Any]]:
    ((logical_id, resource),) = _resources(tpl, kind).items()
    return logical_id, resource


def _statements(tpl: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    found = []
    for policy in _resources(tpl, "AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"].get("Roles", []):
            found += policy["Properties"]["PolicyDocument"]["Statement"]
    return found


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


# --- rolling deploys ---------------------------------------------------------------------


def test_a_kernel_deploy_never_runs_below_its_task_count(aws: dict[str, Any]) -> None:
    _, service = _service(aws["json"], KERNEL_CONTAINER)
    deployment = service["Properties"]["DeploymentConfiguration"]
    # Then a deploy starts a full new set before an old task stops
    assert deployment["MinimumHealthyPercent"] == 100
    assert deployment["MaximumPercent"] == 200
    # And the template sets no task count a deploy would reset the scaled count to
    assert "DesiredCount" not in service["Properties"]


def test_a_draining_task_outlasts_its_longest_check_and_connection(aws: dict[str, Any]) -> None:
    _, group = _one(aws["json"], "AWS::ElasticLoadBalancingV2::TargetGroup")
    attributes = {a["Key"]: a["Value"] for a in group["Properties"]["TargetGroupAttributes"]}
    delay_s = int(attributes["deregistration_delay.timeout_seconds"])
    # Then the delay is longer than the longest deadline a client gives a check
    assert delay_s > CONTENT_TIMEOUT_S
    # And longer than a connection to the kernel may live (age with jitter, then grace),
    # so the server's GOAWAY, not the load balancer's cut, ends every connection
    longest_connection_s = MAX_CONNECTION_AGE_S * (1 + MAX_CONNECTION_AGE_JITTER)
    assert delay_s > longest_connection_s + MAX_CONNECTION_AGE_GRACE_S
    # And the grace itself covers the longest check in flight at the GOAWAY
    assert MAX_CONNECTION_AGE_GRACE_S >= CONTENT_TIMEOUT_S
    assert attributes["deregistration_delay.connection_termination.enabled"] == "true"


# --- certificate authority ---------------------------------------------------------------


def test_the_ca_is_a_retained_resource_of_its_own_and_signs_the_kernels_leaf(
    aws: dict[str, Any],
) -> None:
    tpl, stack = aws["json"], aws["stack"]
    ca_id, ca = _one(tpl, CA_RESOURCE_TYPE)
    leaf_id, leaf = _one(tpl, LEAF_RESOURCE_TYPE)
    ca_secret_id = ca["Properties"]["CaSecretArn"]["Ref"]
    # Then the CA and its secret outlive any update, replacement or stack deletion
    for resource in (ca, tpl["Resources"][ca_secret_id]):
        assert resource["DeletionPolicy"] == "Retain"
        assert resource["UpdateReplacePolicy"] == "Retain"
    # And the kernel's leaf is issued from that CA, after it, for the load balancer's name,
    # into a secret of its own
    props = leaf["Properties"]
    assert props["CaSecretArn"] == {"Ref": ca_secret_id}
    assert props["CaSerial"] == {"Fn::GetAtt": [ca_id, "CaSerial"]}
    nlb_id = _logical_id(stack, stack.services.kernel.load_balancer)
    assert props["DnsNames"] == [{"Fn::GetAtt": [nlb_id, "DNSName"]}]
    assert props["SecretArn"]["Ref"] != ca_secret_id
    assert props["Generation"] == "1"
    # And the kernel reads the leaf's secret and rolls with its serial
    _, kernel = _containers(tpl)[KERNEL_CONTAINER]
    secrets = {s["Name"]: s["ValueFrom"] for s in kernel["Secrets"]}
    assert secrets["SAFETY_KERNEL_TLS_KEY"] == {
        "Fn::Join": ["", [props["SecretArn"], ":key::"]]
    }
    assert _env(kernel)["SAFETY_KERNEL_TLS_SERIAL"] == {"Fn::GetAtt": [leaf_id, "Serial"]}
    # And every client trusts the CA resource's certificate, not a leaf's answer
    clients = [p["Environment"]["Variables"] for p in _functions(tpl).values()]
    clients.append(_env(_containers(tpl)[BRIDGE_CONTAINER][1]))
    for env in clients:
        assert env["SAFETY_KERNEL_TLS_CA"] == {"Fn::GetAtt": [ca_id, "CaPem"]}


def test_a_rotation_reissues_the_leaf_and_leaves_the_ca_untouched(
    aws: dict[str, Any], rotated: dict[str, Any],
) -> None:
    before, after = aws["json"], rotated["json"]
    # Then the CA resource and its secret are the same resources with the same
    # properties: CloudFormation sends them no update
    assert _one(before, CA_RESOURCE_TYPE) == _one(after, CA_RESOURCE_TYPE)
    ca_secret_id = _one(before, CA_RESOURCE_TYPE)[1]["Properties"]["CaSecretArn"]["Ref"]
    assert before["Resources"][ca_secret_id] == after["Resources"][ca_secret_id]
    # And only the leaf's generation changes, which issues it again
    (leaf_id, leaf), (leaf_id_after, leaf_after) = (
        _one(before, LEAF_RESOURCE_TYPE), _one(after, LEAF_RESOURCE_TYPE))
    assert leaf_id == leaf_id_after
    props, props_after = leaf["Properties"], leaf_after["Properties"]
    changed = {k for k in props if props[k] != props_after[k]}
    assert changed == {"Generation"}
    # And the clients' CA is the same reference in both
    ca_id = _one(before, CA_RESOURCE_TYPE)[0]
    for tpl in (before, after):
        env = _env(_containers(tpl)[BRIDGE_CONTAINER][1])
        assert env["SAFETY_KERNEL_TLS_CA"] == {"Fn::GetAtt": [ca_id, "CaPem"]}


def test_the_issuer_answers_within_a_bounded_wait(aws: dict[str, Any]) -> None:
    tpl = aws["json"]
    ((issuer_id, issuer),) = [
        (k, r["Properties"]) for k, r in _resources(tpl, "AWS::Lambda::Function").items()
        if r["Properties"].get("PackageType") == "Image"
    ]
    timeout_s = issuer["Timeout"]
    assert timeout_s == ISSUER_TIMEOUT.to_seconds()
    for kind in (CA_RESOURCE_TYPE, LEAF_RESOURCE_TYPE):
        _, resource = _one(tpl, kind)
        assert resource["Properties"]["ServiceToken"] == {"Fn::GetAtt": [issuer_id, "Arn"]}
        # Then CloudFormation gives up long before its default hour, and only after the
        # function itself has timed out
        service_timeout = int(resource["Properties"]["ServiceTimeout"])
        assert timeout_s < service_timeout < CF_MAX_SERVICE_TIMEOUT_S / 6, kind
    # And the issuer may read the CA's secret (to sign) but no leaf's
    role_id = issuer["Role"]["Fn::GetAtt"][0]
    ca_secret = _one(tpl, CA_RESOURCE_TYPE)[1]["Properties"]["CaSecretArn"]
    reads = [s for s in _statements(tpl, role_id)
             if "secretsmanager:GetSecretValue" in _listed(s["Action"])]
    assert [_listed(s["Resource"]) for s in reads] == [[ca_secret]]


def test_nats_gets_its_certificate_from_the_same_ca(
    inputs: dict[str, Path], tmp_path: Path,  # noqa: F811
) -> None:
    tpl = _build(inputs, tmp_path, natsCluster="true")["json"]
    # Then there is one CA and one issuer for the kernel's and the nodes' certificates
    ca_id, ca = _one(tpl, CA_RESOURCE_TYPE)
    leaves = _resources(tpl, LEAF_RESOURCE_TYPE)
    assert len(leaves) == 2
    names = [leaf["Properties"]["DnsNames"] for leaf in leaves.values()]
    assert [f"*.{NATS_NAMESPACE}"] in names
    for leaf in leaves.values():
        assert leaf["Properties"]["CaSecretArn"] == ca["Properties"]["CaSecretArn"]
    images = [r for r in _resources(tpl, "AWS::Lambda::Function").values()
              if r["Properties"].get("PackageType") == "Image"]
    assert len(images) == 1


# --- policy ------------------------------------------------------------------------------


def test_the_policy_lives_in_a_private_versioned_bucket(aws: dict[str, Any]) -> None:
    tpl, stack = aws["json"], aws["stack"]
    bucket_id = _logical_id(stack, stack.services.kernel.policy.bucket)
    bucket = tpl["Resources"][bucket_id]
    props = bucket["Properties"]
    # Then it is encrypted, versioned, closed to the public and kept with the stack
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"] == [
        {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
    ]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True,
        "IgnorePublicAcls": True, "RestrictPublicBuckets": True,
    }
    assert bucket["DeletionPolicy"] == "Retain"
    # And it refuses every request not made over TLS
    (policy,) = [p["Properties"] for p in _resources(tpl, "AWS::S3::BucketPolicy").values()
                 if p["Properties"]["Bucket"] == {"Ref": bucket_id}]
    denies = [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    assert any(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in denies)
    # And the stack's deployment copies the policy file into it, keeping what else is there
    (deployment,) = [d for d in _resources(tpl, "Custom::CDKBucketDeployment").values()
                     if d["Properties"]["DestinationBucketName"] == {"Ref": bucket_id}]
    assert deployment["Properties"]["Prune"] is False


def test_the_kernel_reads_its_policy_object_and_nothing_else(
    aws: dict[str, Any], inputs: dict[str, Path],  # noqa: F811
) -> None:
    tpl, stack = aws["json"], aws["stack"]
    kernel = stack.services.kernel
    bucket_id = _logical_id(stack, kernel.policy.bucket)
    (deployment_id,) = [k for k, d in _resources(tpl, "Custom::CDKBucketDeployment").items()
                        if d["Properties"]["DestinationBucketName"] == {"Ref": bucket_id}]
    _, container = _containers(tpl)[KERNEL_CONTAINER]
    env = _env(container)
    # Then the kernel is told where its policy is (through the deployment: the object is
    # there before the task definition is)
    scheme, bucket_name, key = env[POLICY_URI_ENV]["Fn::Join"][1]
    assert (scheme, key) == ("s3://", "/safety.yaml")
    # (the bucket's name, cut out of the ARN the deployment answers)
    arn = {"Fn::GetAtt": [deployment_id, "DestinationBucketArn"]}
    assert bucket_name == {"Fn::Select": [0, {"Fn::Split": ["/", {
        "Fn::Select": [5, {"Fn::Split": [":", arn]}]}]}]}
    # and which content it holds, so that a new policy rolls the tasks
    digest = hashlib.sha256((inputs["config"] / "safety.yaml").read_bytes()).hexdigest()
    assert env["CORDUM_POLICY_SHA256"] == digest
    _, service = _service(tpl, KERNEL_CONTAINER)
    assert deployment_id in service["DependsOn"]
    # And its task role may get that one object: no other key, no list, no write
    task_role_id = _logical_id(stack, kernel.task_definition.task_role)
    s3 = [s for s in _statements(tpl, task_role_id)
          if any(a.startswith("s3:") for a in _listed(s["Action"]))]
    assert s3 == [{
        "Action": "s3:GetObject", "Effect": "Allow",
        "Resource": {"Fn::Join": ["", [{"Fn::GetAtt": [bucket_id, "Arn"]}, "/safety.yaml"]]},
    }]


def test_the_local_stack_keeps_reading_its_config_folder(
    inputs: dict[str, Path], tmp_path: Path,  # noqa: F811
) -> None:
    tpl = _build(inputs, tmp_path, redisUrl=LOCAL_REDIS, natsUrl=NATS)["json"]
    # Then no bucket, no deployment, no certificate, and no function told of an S3 policy
    for kind in ("AWS::S3::Bucket", "Custom::CDKBucketDeployment", CA_RESOURCE_TYPE):
        assert not _resources(tpl, kind), kind
    for module, props in _functions(tpl).items():
        assert POLICY_URI_ENV not in props["Environment"]["Variables"], module


# --- scaling -----------------------------------------------------------------------------


def _scaling(tpl: dict[str, Any], service_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    (target_id, target), = [
        (k, r["Properties"]) for k, r in
        _resources(tpl, "AWS::ApplicationAutoScaling::ScalableTarget").items()
        if service_id in str(r["Properties"]["ResourceId"])
    ]
    policies = [
        r["Properties"] for r in
        _resources(tpl, "AWS::ApplicationAutoScaling::ScalingPolicy").values()
        if r["Properties"].get("ScalingTargetId") == {"Ref": target_id}
    ]
    return target, policies


@pytest.mark.parametrize(("container", "floor", "ceiling", "cpu"), [
    (KERNEL_CONTAINER, 2, 6, 50),
    (BRIDGE_CONTAINER, 2, 4, 60),
])
def test_services_track_their_cpu_between_stated_bounds(
    aws: dict[str, Any], container: str, floor: int, ceiling: int, cpu: int,
) -> None:
    tpl = aws["json"]
    service_id, _ = _service(tpl, container)
    target, policies = _scaling(tpl, service_id)
    # Then the task count stays between one task per zone and the stated ceiling
    assert (target["MinCapacity"], target["MaxCapacity"]) == (floor, ceiling)
    assert target["ScalableDimension"] == "ecs:service:DesiredCount"
    # And one target-tracking policy holds the service's average CPU
    (policy,) = policies
    assert policy["PolicyType"] == "TargetTrackingScaling"
    tracking = policy["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["PredefinedMetricSpecification"] == {
        "PredefinedMetricType": "ECSServiceAverageCPUUtilization"
    }
    assert tracking["TargetValue"] == cpu
    assert tracking["ScaleOutCooldown"] < tracking["ScaleInCooldown"]


def test_cdk_nag_finds_nothing_unacknowledged(aws: dict[str, Any]) -> None:
    # The fixture's synth ran the AwsSolutions pack; an unacknowledged error fails it.
    assert _resources(aws["json"], "AWS::S3::Bucket")
