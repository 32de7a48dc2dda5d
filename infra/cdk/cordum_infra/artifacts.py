"""The artifacts bucket: where large artifacts are uploaded through presigned URLs.

An artifact over the inline limit (4 MiB) is not carried by the API: the gateway
records its metadata in Redis and signs a PUT the client uploads with, and a GET for
its readers (cordum.store.artifact_objects). Signing is done with the gateway's role,
so the bucket's policy lets that role ``s3:PutObject`` and ``s3:GetObject`` on
``artifacts/*`` of this bucket, and nothing else of it; the gateway gets the bucket's name
(``CORDUM_ARTIFACT_BUCKET``). It makes no S3 call itself, so it needs no route to S3.

The bucket: SSE-S3, all public access blocked, TLS only, the bucket owner owns every
object, and lifecycle rules that expire each retention class's prefix as Redis expires
its metadata (``artifacts/short/`` after 1 day, ``artifacts/standard/`` after 7,
``artifacts/audit/`` after 30: cordum.store.artifacts.RETENTION_TTL_S) and abort
incomplete uploads after a day. Objects expire anyway, so the bucket is kept when the
stack goes only until it is emptied (RETAIN: no object is lost to a stack update).

A local stack (LocalStack) creates no bucket: context ``artifactBucket`` names the one
the emulator was given at ``make up`` (localstack/artifact_bucket.py); without it large
artifacts are off (the upload route answers 400 ``artifact_uploads_unavailable``). On
AWS ``artifactBucket`` is refused: the bucket is the stack's.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, CfnOutput, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct

from cordum_infra.context_values import ContextError

BUCKET_CONTEXT = "artifactBucket"
"""Context key, local stacks only: the existing bucket large artifacts go to."""
BUCKET_ENV = "CORDUM_ARTIFACT_BUCKET"
OBJECT_PREFIX = "artifacts/"
"""cordum.store.artifacts.OBJECT_PREFIX: the only keys the gateway may sign for."""
RETENTION_DAYS = {"short": 1, "standard": 7, "audit": 30}
"""Each retention class's lifetime (cordum.store.artifacts.RETENTION_TTL_S, in days)."""

ACCESS_LOG_REASON = (
    "The artifacts bucket holds short-lived job inputs, written and read only through "
    "URLs the gateway signs for one object each, for minutes. Server access logs would "
    "need a second bucket; record access with CloudTrail S3 data events where required."
)


class ArtifactBucket(Construct):
    """The artifacts bucket and the gateway's grant to sign uploads and downloads."""

    def __init__(self, scope: Construct, construct_id: str, *, gateway: lambda_.Function,
                 local: bool = False) -> None:
        super().__init__(scope, construct_id)
        self.gateway = gateway
        named = str(self.node.try_get_context(BUCKET_CONTEXT) or "").strip()
        self.bucket: s3.IBucket | None = None
        if local:
            if named:
                self.bucket = s3.Bucket.from_bucket_name(self, "Bucket", named)
                # An imported bucket takes no policy from here: the emulator enforces
                # none unless told to (ENFORCE_IAM), so the name is all the gateway needs.
                self._grant(self.bucket)
            return
        if named:
            raise ContextError(
                f"context {BUCKET_CONTEXT} is for local stacks (redisUrl): an AWS stack "
                "creates its artifacts bucket")
        bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=RemovalPolicy.RETAIN,
            lifecycle_rules=[
                s3.LifecycleRule(id="AbortIncompleteUploads",
                                 abort_incomplete_multipart_upload_after=Duration.days(1)),
                *(s3.LifecycleRule(id=f"Expire{name.capitalize()}",
                                   prefix=f"{OBJECT_PREFIX}{name}/",
                                   expiration=Duration.days(days))
                  for name, days in RETENTION_DAYS.items()),
            ],
        )
        Validations.of(bucket).acknowledge(
            Acknowledgment(id="AwsSolutions-S1", reason=ACCESS_LOG_REASON))
        self.bucket = bucket
        self._grant(bucket)

    def _grant(self, bucket: s3.IBucket) -> None:
        """The bucket's name in the gateway's environment; for a bucket of the stack, its
        policy lets the gateway's role put and get under artifacts/ (a resource policy:
        the role's own statements stay the audit bucket's alone)."""
        self.gateway.add_environment(BUCKET_ENV, bucket.bucket_name)
        role = self.gateway.role
        assert role is not None
        bucket.add_to_resource_policy(iam.PolicyStatement(
            principals=[iam.ArnPrincipal(role.role_arn)],
            actions=["s3:PutObject", "s3:GetObject"],
            resources=[bucket.arn_for_objects(f"{OBJECT_PREFIX}*")]))
        CfnOutput(Stack.of(self), "ArtifactBucketName", value=bucket.bucket_name,
                  description="S3 bucket large artifacts are uploaded to")
