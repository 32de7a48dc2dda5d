"""The artifacts bucket in the synthesized templates (cordum_infra.artifacts)."""

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
from cordum_infra.artifacts import BUCKET_ENV, RETENTION_DAYS  # noqa: E402
from cordum_infra.functions import GATEWAY  # noqa: E402
from cordum_infra.settings import ContextError  # noqa: E402

from cordum.store.artifacts import OBJECT_PREFIX, RETENTION_TTL_S  # noqa: E402

LOCAL_BUCKET = "cordum-artifacts-local"


@pytest.fixture(scope="module")
def aws(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given the default AWS stack."""
    return _built(inputs, tmp_path_factory.mktemp("artifacts-aws"), **AWS_NATS)


def _bucket(built: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    stack = built["stack"]
    bucket_id = _logical_id(stack, stack.artifacts.bucket)
    return bucket_id, built["json"]["Resources"][bucket_id]


def _gateway_env(built: dict[str, Any]) -> dict[str, Any]:
    stack = built["stack"]
    gateway_id = _logical_id(stack, stack.functions[GATEWAY])
    return built["json"]["Resources"][gateway_id]["Properties"]["Environment"]["Variables"]


def _policy(built: dict[str, Any], bucket_id: str) -> list[dict[str, Any]]:
    policies = [p["Properties"] for p in _resources(built["json"], "AWS::S3::BucketPolicy")
                .values() if p["Properties"]["Bucket"] == {"Ref": bucket_id}]
    assert len(policies) == 1
    return policies[0]["PolicyDocument"]["Statement"]


def test_the_bucket_is_encrypted_private_and_kept(aws: dict[str, Any]) -> None:
    _, bucket = _bucket(aws)
    props = bucket["Properties"]
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True,
        "IgnorePublicAcls": True, "RestrictPublicBuckets": True}
    sse = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert sse["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert props["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    assert bucket["DeletionPolicy"] == "Retain"
    assert "ObjectLockEnabled" not in props


def test_each_retention_class_expires_its_prefix_as_redis_expires_its_metadata(
        aws: dict[str, Any]) -> None:
    _, bucket = _bucket(aws)
    rules = {r["Id"]: r for r in bucket["Properties"]["LifecycleConfiguration"]["Rules"]}
    assert rules["AbortIncompleteUploads"]["AbortIncompleteMultipartUpload"] == {
        "DaysAfterInitiation": 1}
    assert set(RETENTION_DAYS) == set(RETENTION_TTL_S)
    for name, days in RETENTION_DAYS.items():
        rule = rules[f"Expire{name.capitalize()}"]
        assert rule["Prefix"] == f"{OBJECT_PREFIX}{name}/"
        assert rule["ExpirationInDays"] == days == RETENTION_TTL_S[name] // 86400
        assert rule["Status"] == "Enabled"


def test_the_bucket_refuses_requests_without_tls(aws: dict[str, Any]) -> None:
    bucket_id, _ = _bucket(aws)
    deny = [s for s in _policy(aws, bucket_id) if s["Effect"] == "Deny"]
    assert any(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in deny)


def test_the_gateway_may_put_and_get_artifact_objects_only_and_knows_the_bucket(
        aws: dict[str, Any]) -> None:
    stack = aws["stack"]
    bucket_id, _ = _bucket(aws)
    assert _gateway_env(aws)[BUCKET_ENV] == {"Ref": bucket_id}
    role_id = _logical_id(stack, stack.functions[GATEWAY].role)
    allow = [s for s in _policy(aws, bucket_id) if s["Effect"] == "Allow"]
    assert len(allow) == 1
    grant = allow[0]
    assert sorted(grant["Action"]) == ["s3:GetObject", "s3:PutObject"]
    assert grant["Principal"] == {"AWS": {"Fn::GetAtt": [role_id, "Arn"]}}
    assert grant["Resource"] == {"Fn::Join": ["", [{"Fn::GetAtt": [bucket_id, "Arn"]},
                                                   f"/{OBJECT_PREFIX}*"]]}
    # No other function hears of the bucket.
    for module, fn in stack.functions.by_module.items():
        if module == GATEWAY.module:
            continue
        fn_id = _logical_id(stack, fn)
        env = aws["json"]["Resources"][fn_id]["Properties"]["Environment"]["Variables"]
        assert BUCKET_ENV not in env
    assert aws["json"]["Outputs"]["ArtifactBucketName"]["Value"] == {"Ref": bucket_id}


def test_a_local_stack_names_the_emulators_bucket_and_creates_none(
        inputs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    built = _built(inputs, tmp_path, redisUrl=LOCAL_REDIS, natsUrl=NATS, apiKeys="k1",
                   artifactBucket=LOCAL_BUCKET)
    assert not _resources(built["json"], "AWS::S3::Bucket")
    assert _gateway_env(built)[BUCKET_ENV] == LOCAL_BUCKET
    assert built["json"]["Outputs"]["ArtifactBucketName"]["Value"] == LOCAL_BUCKET


def test_without_a_bucket_a_local_stack_keeps_artifacts_inline(
        inputs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    built = _built(inputs, tmp_path, redisUrl=LOCAL_REDIS, natsUrl=NATS, apiKeys="k1")
    assert BUCKET_ENV not in _gateway_env(built)
    assert "ArtifactBucketName" not in built["json"]["Outputs"]


def test_an_aws_stack_refuses_a_bucket_of_its_own_choosing(
        inputs: dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    with pytest.raises(ContextError, match="artifactBucket"):
        _built(inputs, tmp_path, **AWS_NATS, artifactBucket="someone-elses")
