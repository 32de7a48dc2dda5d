"""The safety kernel's policy on AWS: an S3 object the stack manages, not a file in the image.

A bucket of the stack (SSE-S3, versioned, all public access blocked, TLS only,
retained) holds ``safety.yaml``; each deploy copies the repository's policy file
(the context ``configDir``'s ``safety.yaml``, by default config/safety.yaml) into it.
The kernel gets ``CORDUM_POLICY_URI=s3://<bucket>/safety.yaml`` and copies the object
into its config dir before it serves (cordum.safety.policy_source); its task role
may read that one object and nothing else of the bucket.

A changed policy file changes the object and CORDUM_POLICY_SHA256 in the kernel's
environment, so a deploy rolls the tasks onto it; versioning keeps every policy the
kernel was ever given. A local stack keeps reading config/safety.yaml in place.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from aws_cdk import Acknowledgment, RemovalPolicy, Stack, Token, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from constructs import Construct

from cordum_infra.functions import LOG_RETENTION

POLICY_URI_ENV = "CORDUM_POLICY_URI"
POLICY_DIGEST_ENV = "CORDUM_POLICY_SHA256"
"""The first is read by the kernel (cordum.safety.policy_source defines the same
name). The second is read by nothing: it changes with the policy's content, so ECS
starts tasks that download the new object (a task reads its policy once, at start)."""
POLICY_KEY = "safety.yaml"

DEPLOYMENT_MEMORY_MB = 256
"""CDK's copy function runs the AWS CLI on a few-KB object; 128 MB (its default) is
tight for the CLI itself."""

ACCESS_LOG_REASON = (
    "The bucket holds one object: the kernel's policy, written by the stack's "
    "deployment (CloudFormation records each one) and read by the kernel's task role "
    "alone, once per task start. Versioning keeps every policy it was given; server "
    "access logs would record those same reads in a second bucket."
)
DEPLOYMENT_LOGS_REASON = (
    "CDK's deploy-time copy function (BucketDeployment) writing its own logs: the "
    "AWS-maintained minimum for a Lambda function."
)
DEPLOYMENT_GRANTS_REASON = (
    "CDK's deploy-time copy function (BucketDeployment) reads its source from the CDK "
    "assets bucket and copies it into the policy bucket: CDK grants these object "
    "wildcards on exactly those two buckets and nothing else."
)
DEPLOYMENT_WILDCARD_ACTIONS = (
    "s3:GetObject*", "s3:GetBucket*", "s3:List*", "s3:DeleteObject*", "s3:Abort*",
)
DEFAULT_BOOTSTRAP_QUALIFIER = "hnb659fds"
BOOTSTRAP_QUALIFIER_CONTEXT = "@aws-cdk/core:bootstrapQualifier"
"""The CDK assets bucket is ``cdk-<qualifier>-assets-<account>-<region>``."""
DEPLOYMENT_RUNTIME_REASON = (
    "CDK's own deploy-time copy function (BucketDeployment): CDK chooses and updates "
    "its runtime; it runs only during a deployment."
)


def policy_digest(policy_file: Path) -> str:
    """SHA-256 of the policy file, hex."""
    return hashlib.sha256(policy_file.read_bytes()).hexdigest()


class KernelPolicy(Construct):
    """The policy bucket, the policy object in it, and a grant to read that object."""

    def __init__(self, scope: Construct, construct_id: str, *, policy_file: Path) -> None:
        super().__init__(scope, construct_id)
        if not policy_file.is_file():
            raise FileNotFoundError(
                f"safety kernel policy {policy_file}: no such file (context configDir "
                "names the folder holding safety.yaml)"
            )
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            # The policies the kernel was given: kept when the stack goes.
            removal_policy=RemovalPolicy.RETAIN,
        )
        Validations.of(self.bucket).acknowledge(
            Acknowledgment(id="AwsSolutions-S1", reason=ACCESS_LOG_REASON)
        )
        self.deployment = s3deploy.BucketDeployment(
            self,
            "Deploy",
            destination_bucket=self.bucket,
            sources=[s3deploy.Source.data(POLICY_KEY, policy_file.read_text(encoding="utf-8"))],
            # Only our object: anything else an operator keeps there stays.
            prune=False,
            memory_limit=DEPLOYMENT_MEMORY_MB,
            log_group=logs.LogGroup(
                self, "DeployLogs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY
            ),
        )
        acknowledge_bucket_deployment(self.deployment, self.bucket, DEPLOYMENT_GRANTS_REASON)
        self.digest = policy_digest(policy_file)
        # Through the deployment's bucket: the reader depends on the object being there.
        bucket_name = self.deployment.deployed_bucket.bucket_name
        self.uri = f"s3://{bucket_name}/{POLICY_KEY}"
        """``s3://<bucket>/safety.yaml``: the kernel's CORDUM_POLICY_URI."""

    def environment(self) -> dict[str, str]:
        """The kernel's variables: where its policy is, and which content it holds."""
        return {POLICY_URI_ENV: self.uri, POLICY_DIGEST_ENV: self.digest}

    def grant_read(self, role: iam.IRole) -> None:
        """`role` may get the policy object: no other key, no listing, no writes."""
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[self.bucket.arn_for_objects(POLICY_KEY)],
            )
        )


def acknowledge_bucket_deployment(deployment: s3deploy.BucketDeployment, bucket: s3.IBucket,
                                  grants_reason: str) -> None:
    """cdk-nag on CDK's copy function (a singleton per memory size) and its role: its
    managed logs policy, the object wildcards CDK grants on the assets bucket and
    ``bucket`` (``grants_reason`` says why the copy needs them), and its runtime, which
    CDK chooses; each finding acknowledged by name."""
    stack = Stack.of(deployment)
    bucket_id = stack.resolve(stack.get_logical_id(bucket.node.default_child))  # type: ignore[arg-type]
    qualifier = (deployment.node.try_get_context(BOOTSTRAP_QUALIFIER_CONTEXT)
                 or DEFAULT_BOOTSTRAP_QUALIFIER)
    # cdk-nag names the assets bucket as the template does: literal account and region
    # when the stack has them, pseudo parameters otherwise.
    account = "<AWS::AccountId>" if Token.is_unresolved(stack.account) else stack.account
    region = "<AWS::Region>" if Token.is_unresolved(stack.region) else stack.region
    findings = {
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
        "AWSLambdaBasicExecutionRole]": DEPLOYMENT_LOGS_REASON,
        f"AwsSolutions-IAM5[Resource::<{bucket_id}.Arn>/*]": grants_reason,
        "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::cdk-"
        f"{qualifier}-assets-{account}-{region}/*]": grants_reason,
        **{f"AwsSolutions-IAM5[Action::{a}]": grants_reason for a in DEPLOYMENT_WILDCARD_ACTIONS},
    }
    for rule, reason in findings.items():
        Validations.of(deployment.handler_role).acknowledge(Acknowledgment(id=rule, reason=reason))
    # The copy function is a singleton of the stack, not a child of the deployment.
    for child in stack.node.children:
        if child.node.id.startswith("Custom::CDKBucketDeployment"):
            Validations.of(child).acknowledge(
                Acknowledgment(id="AwsSolutions-L1", reason=DEPLOYMENT_RUNTIME_REASON))
