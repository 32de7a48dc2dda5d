"""The audit export: a bucket the tenants' audit chains are exported to, and the tick.

The bucket (docs/audit.md, "Export and retention") is the chains' long-term copy:

- S3 Object Lock in COMPLIANCE mode with a default retention (context
  ``auditRetentionDays``, default DEFAULT_RETENTION_DAYS): no object version can be
  deleted or overwritten by anyone, the account's root included, until its retention
  ends. Object Lock needs versioning, which the bucket has.
- All public access blocked, TLS only, SSE-S3, the bucket owner owns every object,
  retained when the stack goes (its objects are locked anyway).
- Lifecycle rules: incomplete multipart uploads aborted after a day, noncurrent
  versions (none are written: an export never replaces an object) expired once
  their retention is over.

A local stack (LocalStack) creates no bucket: context ``auditBucket`` names the one
the emulator was given at ``make up`` (localstack/stack.py); without it the tick only
drains the outboxes. On AWS ``auditBucket`` is refused: the bucket is the stack's.

The audit tick function (``functions/audit_tick.py``, cordum_infra.functions.AUDIT_TICK)
is one of the stack's functions (same layer, code, environment, VPC placement and
Redis login) and one of its ticks (the same ``rate(1 minute)`` schedule, retries and
dead-letter queue: cordum_infra.schedules). This construct gives it the bucket's name
(``CORDUM_AUDIT_BUCKET``), the entries kept in Redis (context ``auditKeepEntries``,
``CORDUM_AUDIT_KEEP_ENTRIES``), a grant to put, get and list the objects under
``audit/`` of that bucket and nothing else of S3, and, in a VPC, a security group of
its own beside the functions' one, which the stack opens to S3. The gateway (its
verify route reads the exported part of a chain) gets the bucket's name, get and list
under ``audit/`` and the same group; no other function calls S3.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, CfnOutput, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from cordum_infra.context_values import ContextError
from cordum_infra.functions import VpcPlacement

BUCKET_CONTEXT = "auditBucket"
"""Context key, local stacks only: the existing bucket the chains are exported to."""
RETENTION_CONTEXT = "auditRetentionDays"
DEFAULT_RETENTION_DAYS = 365
MAX_RETENTION_DAYS = 36500
KEEP_CONTEXT = "auditKeepEntries"
DEFAULT_KEEP_ENTRIES = 10_000

OBJECT_PREFIX = "audit/"
"""cordum.store.audit_export.OBJECT_PREFIX: the only keys the function may touch."""
BUCKET_ENV = "CORDUM_AUDIT_BUCKET"
HMAC_CONTEXT = "auditHmacKey"
"""Context key, local stacks only: the chains' HMAC key (hex), written into the template."""
HMAC_KEY_ENV = "CORDUM_AUDIT_HMAC_KEY"
HMAC_SECRET_ENV = "CORDUM_AUDIT_HMAC_SECRET_ID"
HMAC_ROTATION_REASON = (
    "The audit HMAC key signs every entry of the tenants' chains; a chain is verified "
    "with the key it was written under, so the key is replaced deliberately (with the "
    "old one kept to verify what it signed), never on a schedule."
)
KEEP_ENV = "CORDUM_AUDIT_KEEP_ENTRIES"

ACCESS_LOG_REASON = (
    "The audit bucket is written by the audit tick's role alone (put-if-absent under "
    "audit/), read by the audit verification, and every object version is under Object "
    "Lock in compliance mode: nothing can be erased to hide. Server access logs would need "
    "a second bucket; record access with CloudTrail S3 data events on this bucket where "
    "an access trail is required."
)
OBJECTS_REASON = (
    "The audit tick writes and reads one object per export, named by its tenant and seq "
    "range under audit/ (unknown in advance): the grant is s3:PutObject and s3:GetObject "
    "on audit/* of this bucket only."
)


def _whole(node: Construct, key: str, default: int, low: int, high: int) -> int:
    value = node.node.try_get_context(key)
    if value is None or str(value).strip() == "":
        return default
    text = str(value).strip()
    if not text.isdigit() or not low <= int(text) <= high:
        raise ContextError(f"context {key} must be a whole number from {low} to {high}: {value}")
    return int(text)


class AuditExport(Construct):
    """The audit bucket, and what the audit tick function needs to export to it."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        function: lambda_.Function,
        placement: VpcPlacement | None,
        local: bool = False,
        readers: tuple[lambda_.Function, ...] = (),
        signers: tuple[lambda_.Function, ...] = (),
    ) -> None:
        """`local`: a LocalStack stack (the bucket ``auditBucket`` names, if any).
        `readers`: functions that read the exported chains (the gateway's verify route):
        the bucket's name, get and list under ``audit/``, never a write. `signers`: the
        functions that append to the chains, given the HMAC key: on AWS a Secrets Manager
        secret of the stack (64 random hex digits), on a local stack context
        ``auditHmacKey`` when given."""
        super().__init__(scope, construct_id)
        self.function = function
        self.readers = readers
        self.hmac_secret: secretsmanager.Secret | None = None
        self._sign(signers, local)
        self.retention_days = _whole(self, RETENTION_CONTEXT, DEFAULT_RETENTION_DAYS, 1,
                                     MAX_RETENTION_DAYS)
        keep = _whole(self, KEEP_CONTEXT, DEFAULT_KEEP_ENTRIES, 0, 10_000_000)
        function.add_environment(KEEP_ENV, str(keep))
        named = str(self.node.try_get_context(BUCKET_CONTEXT) or "").strip()
        self.bucket: s3.IBucket | None = None
        self.s3_security_group: ec2.SecurityGroup | None = None
        if local:
            if named:
                self.bucket = s3.Bucket.from_bucket_name(self, "Bucket", named)
                self._grant_bucket(self.bucket)
                self._acknowledge_objects(f"arn:<AWS::Partition>:s3:::{named}/{OBJECT_PREFIX}*")
            return
        if named:
            raise ContextError(
                f"context {BUCKET_CONTEXT} is for local stacks (redisUrl): an AWS stack "
                "creates its audit bucket (Object Lock)")
        self.bucket = self._locked_bucket()
        self._grant_bucket(self.bucket)
        # In a VPC: a group of its own beside the functions' one (Redis, the AWS API
        # endpoints), which the stack opens to S3 (the gateway endpoint's prefix list
        # in endpoints mode).
        if placement is not None:
            self.s3_security_group = ec2.SecurityGroup(
                self,
                "S3Egress",
                vpc=placement.vpc,
                description="Cordum audit tick: HTTPS to S3 (the audit bucket)",
                allow_all_outbound=False,
            )
            # The functions are created with the functions' group alone (CordumFunctions).
            for reaching in (function, *readers):
                cfn = reaching.node.default_child
                assert isinstance(cfn, lambda_.CfnFunction)
                cfn.add_property_override("VpcConfig.SecurityGroupIds", [
                    placement.security_group.security_group_id,
                    self.s3_security_group.security_group_id])

    def _sign(self, signers: tuple[lambda_.Function, ...], local: bool) -> None:
        key = str(self.node.try_get_context(HMAC_CONTEXT) or "").strip()
        if local:
            if key:
                if len(key) < 64 or any(c not in "0123456789abcdef" for c in key.lower()):
                    raise ContextError(f"context {HMAC_CONTEXT} must be at least 64 hex digits")
                for fn in signers:
                    fn.add_environment(HMAC_KEY_ENV, key)
            return
        if key:
            raise ContextError(
                f"context {HMAC_CONTEXT} writes the key into the template: it is for local "
                "stacks (redisUrl); an AWS stack keeps it in a secret of its own")
        self.hmac_secret = secretsmanager.Secret(
            self, "HmacKey",
            description="Cordum audit chains' HMAC key (hex)",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=64, exclude_punctuation=True, exclude_uppercase=True,
                include_space=False, exclude_characters="ghijklmnopqrstuvwxyz"),
        )
        Validations.of(self.hmac_secret).acknowledge(
            Acknowledgment(id="AwsSolutions-SMG4", reason=HMAC_ROTATION_REASON))
        for fn in signers:
            fn.add_environment(HMAC_SECRET_ENV, self.hmac_secret.secret_arn)
            self.hmac_secret.grant_read(fn)

    def _locked_bucket(self) -> s3.Bucket:
        bucket = s3.Bucket(
            self,
            "Bucket",
            object_lock_enabled=True,
            object_lock_default_retention=s3.ObjectLockRetention.compliance(
                Duration.days(self.retention_days)),
            versioned=True,
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            # Locked objects outlive any stack; the bucket goes with its objects.
            removal_policy=RemovalPolicy.RETAIN,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="AbortIncompleteUploads",
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                ),
                s3.LifecycleRule(
                    id="ExpireNoncurrentAfterRetention",
                    noncurrent_version_expiration=Duration.days(self.retention_days + 1),
                ),
            ],
        )
        Validations.of(bucket).acknowledge(
            Acknowledgment(id="AwsSolutions-S1", reason=ACCESS_LOG_REASON)
        )
        stack = Stack.of(self)
        bucket_id = stack.resolve(stack.get_logical_id(bucket.node.default_child))  # type: ignore[arg-type]
        self._acknowledge_objects(f"<{bucket_id}.Arn>/{OBJECT_PREFIX}*")
        return bucket

    def _acknowledge_objects(self, resource: str) -> None:
        """cdk-nag's IAM5 on the grant of the objects under ``audit/`` (named by the
        export as it goes, so unknown in advance), on every role that has it."""
        for fn in (self.function, *self.readers):
            role = fn.role
            assert role is not None
            Validations.of(role).acknowledge(
                Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{resource}]",
                               reason=OBJECTS_REASON)
            )

    def _grant_bucket(self, bucket: s3.IBucket) -> None:
        """The bucket's name in the function's environment, and put, get and list under
        audit/ of it: no delete, no other bucket."""
        self.function.add_environment(BUCKET_ENV, bucket.bucket_name)
        self.function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject", "s3:GetObject"],
                resources=[bucket.arn_for_objects(f"{OBJECT_PREFIX}*")],
            )
        )
        self.function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{OBJECT_PREFIX}*"]}},
            )
        )
        for reader in self.readers:
            reader.add_environment(BUCKET_ENV, bucket.bucket_name)
            reader.add_to_role_policy(iam.PolicyStatement(
                actions=["s3:GetObject"], resources=[bucket.arn_for_objects(f"{OBJECT_PREFIX}*")]))
            reader.add_to_role_policy(iam.PolicyStatement(
                actions=["s3:ListBucket"], resources=[bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{OBJECT_PREFIX}*"]}}))
        CfnOutput(Stack.of(self), "AuditBucketName", value=bucket.bucket_name,
                  description="S3 bucket the audit chains are exported to")
