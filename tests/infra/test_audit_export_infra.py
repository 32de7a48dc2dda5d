"""The audit bucket and the audit tick in the synthesized templates (cordum_infra.audit_export)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.infra.test_synth import (
    AWS_NATS,
    LOCAL_REDIS,
    NATS,
    _built,
    _logical_id,
    _resources,
    inputs,  # noqa: F401  (the module fixture: stand-in layer, handlers, config)
)

cdk = pytest.importorskip("aws_cdk")
from cordum_infra.audit_export import (  # noqa: E402
    BUCKET_ENV,
    DEFAULT_RETENTION_DAYS,
    KEEP_ENV,
)
from cordum_infra.functions import AUDIT_TICK, GATEWAY, TICK_FUNCTIONS  # noqa: E402
from cordum_infra.settings import ContextError  # noqa: E402

LOCAL_BUCKET = "cordum-audit-local"


_build = _built


@pytest.fixture(scope="module")
def aws(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given the default AWS stack."""
    return _build(inputs, tmp_path_factory.mktemp("audit-aws"), **AWS_NATS)


@pytest.fixture(scope="module")
def tuned(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given an AWS stack with a 30-day retention and 500 entries kept."""
    return _build(inputs, tmp_path_factory.mktemp("audit-tuned"), **AWS_NATS,
                  auditRetentionDays="30", auditKeepEntries="500")


@pytest.fixture(scope="module")
def local(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given a local stack told of the emulator's bucket."""
    return _build(inputs, tmp_path_factory.mktemp("audit-local"), redisUrl=LOCAL_REDIS,
                  natsUrl=NATS, apiKeys="k1", auditBucket=LOCAL_BUCKET)


def _bucket(built: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    stack = built["stack"]
    bucket_id = _logical_id(stack, stack.audit.bucket)
    return bucket_id, built["json"]["Resources"][bucket_id]


def _fn(built: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    stack = built["stack"]
    fn_id = _logical_id(stack, stack.functions[AUDIT_TICK])
    return fn_id, built["json"]["Resources"][fn_id]["Properties"]


def _statements(built: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    out = []
    for policy in _resources(built["json"], "AWS::IAM::Policy").values():
        roles = [r.get("Ref") for r in policy["Properties"]["Roles"]]
        if role_id in roles:
            out.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return out


def _actions(statement: dict[str, Any]) -> list[str]:
    actions = statement["Action"]
    return [actions] if isinstance(actions, str) else list(actions)


def test_the_bucket_has_object_lock_in_compliance_mode_with_its_retention(
        aws: dict[str, Any]) -> None:
    _, bucket = _bucket(aws)
    props = bucket["Properties"]
    assert props["ObjectLockEnabled"] is True
    assert props["ObjectLockConfiguration"] == {
        "ObjectLockEnabled": "Enabled",
        "Rule": {"DefaultRetention": {"Mode": "COMPLIANCE", "Days": DEFAULT_RETENTION_DAYS}},
    }
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True,
        "IgnorePublicAcls": True, "RestrictPublicBuckets": True}
    sse = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert sse["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert bucket["DeletionPolicy"] == "Retain" and bucket["UpdateReplacePolicy"] == "Retain"
    rules = {r["Id"]: r for r in props["LifecycleConfiguration"]["Rules"]}
    assert rules["AbortIncompleteUploads"]["AbortIncompleteMultipartUpload"] == {
        "DaysAfterInitiation": 1}
    assert rules["ExpireNoncurrentAfterRetention"]["NoncurrentVersionExpiration"] == {
        "NoncurrentDays": DEFAULT_RETENTION_DAYS + 1}


def test_the_bucket_refuses_requests_without_tls(aws: dict[str, Any]) -> None:
    bucket_id, _ = _bucket(aws)
    policies = [p["Properties"] for p in _resources(aws["json"], "AWS::S3::BucketPolicy").values()
                if p["Properties"]["Bucket"] == {"Ref": bucket_id}]
    assert len(policies) == 1
    deny = [s for s in policies[0]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    assert any(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in deny)


def test_retention_and_kept_entries_come_from_context(tuned: dict[str, Any]) -> None:
    _, bucket = _bucket(tuned)
    retention = bucket["Properties"]["ObjectLockConfiguration"]["Rule"]["DefaultRetention"]
    assert retention == {"Mode": "COMPLIANCE", "Days": 30}
    _, props = _fn(tuned)
    assert props["Environment"]["Variables"][KEEP_ENV] == "500"


def test_a_local_stack_exports_to_the_bucket_it_is_given(local: dict[str, Any]) -> None:
    # Then no bucket of its own (the emulator's was created at make up) and no group
    assert not _resources(local["json"], "AWS::S3::Bucket")
    stack = local["stack"]
    assert stack.audit.s3_security_group is None
    _, props = _fn(local)
    assert props["Environment"]["Variables"][BUCKET_ENV] == LOCAL_BUCKET
    assert "VpcConfig" not in props
    role_id = _logical_id(stack, stack.functions[AUDIT_TICK].role)
    s3 = [s for s in _statements(local, role_id) if any(a.startswith("s3:") for a in _actions(s))]
    assert {a for s in s3 for a in _actions(s)} == {"s3:PutObject", "s3:GetObject",
                                                   "s3:ListBucket"}
    assert f"{LOCAL_BUCKET}/audit/*" in str([s["Resource"] for s in s3])
    assert local["json"]["Outputs"]["AuditBucketName"]["Value"] == LOCAL_BUCKET


def test_without_a_bucket_a_local_tick_only_drains(
        inputs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    built = _build(inputs, tmp_path, redisUrl=LOCAL_REDIS, natsUrl=NATS, apiKeys="k1")
    _, props = _fn(built)
    assert BUCKET_ENV not in props["Environment"]["Variables"]
    assert not _resources(built["json"], "AWS::S3::Bucket")


def test_an_aws_stack_refuses_a_bucket_of_its_own_choosing(
        inputs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    with pytest.raises(ContextError, match="auditBucket"):
        _build(inputs, tmp_path, **AWS_NATS, auditBucket="someone-elses")


@pytest.mark.parametrize("key,value", [("auditRetentionDays", "0"),
                                       ("auditRetentionDays", "a year"),
                                       ("auditKeepEntries", "-1")])
def test_a_bad_context_value_is_refused_by_name(
        inputs: dict[str, Path], tmp_path: Path, key: str, value: str) -> None:  # noqa: F811
    with pytest.raises(ContextError, match=key):
        _build(inputs, tmp_path, redisUrl=LOCAL_REDIS, natsUrl=NATS, apiKeys="k1",
               **{key: value})


def test_the_tick_runs_every_minute_with_the_ticks_dead_letter_queue(aws: dict[str, Any]) -> None:
    stack = aws["stack"]
    fn_id, props = _fn(aws)
    rules = [r["Properties"] for r in _resources(aws["json"], "AWS::Events::Rule").values()
             if r["Properties"]["Targets"][0]["Arn"] == {"Fn::GetAtt": [fn_id, "Arn"]}]
    assert len(rules) == 1 and rules[0]["ScheduleExpression"] == "rate(1 minute)"
    target = rules[0]["Targets"][0]
    dlq_id = _logical_id(stack, stack.schedules.dlq)
    assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [dlq_id, "Arn"]}}
    assert target["RetryPolicy"]["MaximumRetryAttempts"] == 2
    aws["template"].has_resource_properties("AWS::Lambda::Permission", {
        "Principal": "events.amazonaws.com", "FunctionName": {"Fn::GetAtt": [fn_id, "Arn"]}})
    assert props["Handler"] == "audit_tick.handler" and props["Timeout"] < 60
    assert props["FunctionName"] == f"{stack.stack_name}-{AUDIT_TICK.slug}"
    assert AUDIT_TICK in TICK_FUNCTIONS


def test_the_function_may_put_get_and_list_audit_objects_of_its_bucket_only(
        aws: dict[str, Any]) -> None:
    stack = aws["stack"]
    bucket_id, _ = _bucket(aws)
    role_id = _logical_id(stack, stack.functions[AUDIT_TICK].role)
    s3 = [s for s in _statements(aws, role_id) if any(a.startswith("s3:") for a in _actions(s))]
    by_action = {a: s for s in s3 for a in _actions(s)}
    assert set(by_action) == {"s3:PutObject", "s3:GetObject", "s3:ListBucket"}
    objects = {"Fn::Join": ["", [{"Fn::GetAtt": [bucket_id, "Arn"]}, "/audit/*"]]}
    assert by_action["s3:PutObject"]["Resource"] == objects
    assert by_action["s3:GetObject"]["Resource"] == objects
    assert by_action["s3:ListBucket"]["Resource"] == {"Fn::GetAtt": [bucket_id, "Arn"]}
    assert by_action["s3:ListBucket"]["Condition"] == {"StringLike": {"s3:prefix": ["audit/*"]}}
    assert all(s["Effect"] == "Allow" for s in s3)
    # The gateway (its verify route) reads the audit objects, and writes none; no other
    # function's role names the bucket.
    gateway_role = _logical_id(stack, stack.functions[GATEWAY].role)
    read = {a: st for st in _statements(aws, gateway_role) for a in _actions(st)
            if a.startswith("s3:")}
    assert set(read) == {"s3:GetObject", "s3:ListBucket"}
    assert read["s3:GetObject"]["Resource"] == objects
    assert read["s3:ListBucket"]["Condition"] == {"StringLike": {"s3:prefix": ["audit/*"]}}
    others = [_logical_id(stack, fn.role) for module, fn in stack.functions.by_module.items()
              if module not in (AUDIT_TICK.module, GATEWAY.module)]
    for other in others:
        assert bucket_id not in str(_statements(aws, other))


def test_the_gateway_knows_the_bucket_and_reaches_s3_through_the_same_group(
        aws: dict[str, Any]) -> None:
    stack = aws["stack"]
    bucket_id, _ = _bucket(aws)
    gateway_id = _logical_id(stack, stack.functions[GATEWAY])
    props = aws["json"]["Resources"][gateway_id]["Properties"]
    assert props["Environment"]["Variables"][BUCKET_ENV] == {"Ref": bucket_id}
    own_sg = _logical_id(stack, stack.audit.s3_security_group)
    assert {"Fn::GetAtt": [own_sg, "GroupId"]} in props["VpcConfig"]["SecurityGroupIds"]


def test_the_function_reaches_redis_like_the_ticks_and_s3_through_its_own_group(
        aws: dict[str, Any]) -> None:
    stack = aws["stack"]
    bucket_id, _ = _bucket(aws)
    _, props = _fn(aws)
    network = stack.network
    groups = props["VpcConfig"]["SecurityGroupIds"]
    functions_sg = _logical_id(stack, network.functions_security_group)
    own_sg = _logical_id(stack, stack.audit.s3_security_group)
    assert groups == [{"Fn::GetAtt": [functions_sg, "GroupId"]},
                      {"Fn::GetAtt": [own_sg, "GroupId"]}]
    env = props["Environment"]["Variables"]
    assert env[BUCKET_ENV] == {"Ref": bucket_id} and env[KEEP_ENV] == "10000"
    assert env["REDIS_URL"] and "REDIS_AUTH_SECRET_ARN" in env
    egress = [r["Properties"] for r in _resources(aws["json"], "AWS::EC2::SecurityGroupEgress")
              .values() if r["Properties"]["GroupId"] == {"Fn::GetAtt": [own_sg, "GroupId"]}]
    inline = aws["json"]["Resources"][own_sg]["Properties"].get("SecurityGroupEgress", [])
    rules = egress + inline
    # Then it sends HTTPS only: to the endpoints' group and to S3 (the region's prefix
    # list; with no region at synth, anywhere, which isolated subnets route to S3 alone:
    # test_deploy_network checks the prefix list with a region)
    assert len(rules) == 2
    assert all((r["IpProtocol"], r["FromPort"], r["ToPort"]) == ("tcp", 443, 443) for r in rules)
    endpoints_sg = _logical_id(stack, network.endpoints_security_group)
    assert {"Fn::GetAtt": [endpoints_sg, "GroupId"]} in [
        r.get("DestinationSecurityGroupId") for r in rules]


def test_outputs_name_the_bucket_and_the_function(aws: dict[str, Any]) -> None:
    outputs = aws["json"]["Outputs"]
    assert {"AuditBucketName", "AuditTickFunctionName"} <= set(outputs)


def test_every_function_signs_with_the_stacks_secret_hmac_key(aws: dict[str, Any]) -> None:
    from cordum_infra.audit_export import HMAC_SECRET_ENV

    stack = aws["stack"]
    secret = stack.audit.hmac_secret
    assert secret is not None
    secret_id = _logical_id(stack, secret)
    generated = aws["json"]["Resources"][secret_id]["Properties"]["GenerateSecretString"]
    assert generated["PasswordLength"] == 64 and generated["ExcludeUppercase"] is True
    assert set("ghijklmnopqrstuvwxyz") <= set(generated["ExcludeCharacters"])  # hex only
    for module, fn in stack.functions.by_module.items():
        props = aws["json"]["Resources"][_logical_id(stack, fn)]["Properties"]
        assert props["Environment"]["Variables"][HMAC_SECRET_ENV] == {"Ref": secret_id}, module
        role_id = _logical_id(stack, fn.role)
        reads = [s for s in _statements(aws, role_id)
                 if "secretsmanager:GetSecretValue" in _actions(s)
                 and s["Resource"] == {"Ref": secret_id}]
        assert reads, module


def test_a_local_stack_signs_with_the_key_it_is_given_and_aws_refuses_one(
        inputs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    from cordum_infra.audit_export import HMAC_KEY_ENV

    key = "0f" * 32
    built = _build(inputs, tmp_path / "signed", redisUrl=LOCAL_REDIS, natsUrl=NATS,
                   apiKeys="k1", auditBucket=LOCAL_BUCKET, auditHmacKey=key)
    stack = built["stack"]
    for fn in stack.functions.by_module.values():
        env = built["json"]["Resources"][_logical_id(stack, fn)]["Properties"]["Environment"]
        assert env["Variables"][HMAC_KEY_ENV] == key
    with pytest.raises(ContextError, match="auditHmacKey"):
        _build(inputs, tmp_path / "aws-key", **AWS_NATS, auditHmacKey=key)
    with pytest.raises(ContextError, match="64 hex"):
        _build(inputs, tmp_path / "short", redisUrl=LOCAL_REDIS, natsUrl=NATS, apiKeys="k1",
               auditHmacKey="abc")
