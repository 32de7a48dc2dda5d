"""cdk-nag (AwsSolutions) on the stack, with a written reason for every finding
the stack accepts instead of fixing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Acknowledgment, CfnElement, Validations
from cdk_nag import AwsSolutionsChecks

from cordum_infra.functions import RESULT, SAGA_ROLLBACK
from cordum_infra.kernel_policy import acknowledge_bucket_deployment
from cordum_infra.kernel_tls import KernelTls

if TYPE_CHECKING:
    from aws_cdk import App
    from constructs import IConstruct

    from cordum_infra.stack import CordumServerlessStack

STACK_WIDE: dict[str, str] = {}
"""Findings acknowledged for the whole stack: none. Each acknowledgement below
names the resources it concerns, so a resource added later is checked in full."""

MANAGED_POLICY = "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/{}"
LAMBDA_BASIC = "AwsSolutions-IAM4[" + MANAGED_POLICY.format("AWSLambdaBasicExecutionRole") + "]"
LAMBDA_VPC = "AwsSolutions-IAM4[" + MANAGED_POLICY.format("AWSLambdaVPCAccessExecutionRole") + "]"

FUNCTION_ROLE_REASONS = {
    LAMBDA_BASIC: (
        "AWSLambdaBasicExecutionRole lets a function write its own logs: the "
        "AWS-maintained minimum for a Lambda function."
    ),
    LAMBDA_VPC: (
        "AWSLambdaVPCAccessExecutionRole lets a function in the VPC manage its "
        "network interfaces: the AWS-maintained minimum for that."
    ),
}
"""On the execution roles of the stack's functions (and of the kernel's certificate
issuer, basic execution only)."""

RUNTIME_REASON = (
    "python3.12 on purpose: the layer's native wheels and bytecode are built for "
    "CPython 3.12 (layers/build.py) and the local runner uses the same version. "
    "Move runtime, layer build and runner together."
)
"""AwsSolutions-L1, on the stack's functions."""

API_REASONS = {
    "AwsSolutions-APIG2": (
        "The API is a proxy to the gateway function, which validates every body and "
        "query with pydantic models and answers Cordum's error format; API Gateway "
        "validators would answer in another format."
    ),
    "AwsSolutions-APIG4": (
        "Authentication happens in the gateway function (X-API-Key or Bearer, tenant "
        "from X-Tenant-ID) as Cordum's clients expect; an API Gateway authorizer "
        "would change the API's contract."
    ),
    "AwsSolutions-COG4": "Same as APIG4: Cordum API keys, not Cognito users.",
    "AwsSolutions-APIG6": (
        "No execution logging: API Gateway writes it to a log group it creates itself, "
        "outside the stack and kept forever. The stage's JSON access log (its own log "
        "group, with retention) and the gateway function's log record every request."
    ),
    "AwsSolutions-APIG3": (
        "No WAF web ACL by default: every request is authenticated by API key in the "
        "gateway; attach an ACL per deployment where internet exposure calls for it."
    ),
}
"""On the REST API, its methods and its stage."""

CACHE_PORT_REASON = (
    "Default port 6379: access is limited by security group, TLS and the AUTH "
    "token; a different port would add no protection."
)
"""AwsSolutions-AEC5, on the replication group."""


STREAM_REASONS = {
    "AwsSolutions-EC23": (
        "The live event stream's internet-facing load balancer: its clients are anywhere "
        "on the internet, so HTTPS (443) and HTTP (80, answered with a redirect to HTTPS) "
        "are open to every address. The tasks behind it admit the load balancer alone, "
        "and every connection is authenticated by API key."
    ),
    "AwsSolutions-S1": (
        "This bucket receives the stream load balancer's access logs; logging the access "
        "to those logs would need another bucket for no audit gain (S3 writes are by "
        "the Elastic Load Balancing log delivery alone, reads by the account's admins)."
    ),
}
"""On the stream's load balancer group (EC23) and its access-log bucket (S1)."""


CONSOLE_REASONS = {
    "AwsSolutions-CFR1": (
        "No geo restriction on the web console: its operators work from anywhere, every "
        "/api/* request and stream connection is authenticated by API key, and the "
        "bucket holds the dashboard's static files only, public to any browser anyway."
    ),
    "AwsSolutions-CFR2": (
        "No web ACL on the console's distribution: a CloudFront-scope web ACL can only be "
        "created in us-east-1, outside this stack's region (a second stack for one rule "
        "set). /api/* still passes the REST API's regional web ACL at its stage "
        "(cordum_infra.waf: rate limit per address, AWS's managed rules), the stream "
        "authenticates every connection, and the bucket holds static files only."
    ),
    "AwsSolutions-CFR4": (
        "The console answers at its default *.cloudfront.net name, whose certificate "
        "CloudFront serves with its TLSv1 policy whatever the template asks (browsers "
        "negotiate TLS 1.2 or 1.3 with it). Give consoleDomain and consoleCertificateArn "
        "(us-east-1) for TLSv1.2_2021 as the minimum (docs/deploy.md)."
    ),
}
"""On the console's distribution (CFR4: only at the default name)."""
CONSOLE_DEPLOYMENT_GRANTS_REASON = (
    "CDK's deploy-time copy function (BucketDeployment) reads the dashboard's build from "
    "the CDK assets bucket and syncs it into the console's bucket (writing, replacing "
    "and pruning files): CDK grants these object wildcards on exactly those two buckets."
)


XRAY_REASON = (
    "X-Ray tracing: xray:PutTraceSegments and xray:PutTelemetryRecords support no "
    "resource-level permissions, so the statement can only name '*'."
)


def add_checks(app: App, stack: CordumServerlessStack) -> None:
    """Run the AwsSolutions pack at synth; acknowledged findings are listed above."""
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    for rule, reason in STACK_WIDE.items():
        Validations.of(stack).acknowledge(Acknowledgment(id=rule, reason=reason))
    _acknowledge_functions(stack)
    _acknowledge_api(stack)
    if stack.cache is not None:
        _acknowledge(stack.cache.replication_group, "AwsSolutions-AEC5", CACHE_PORT_REASON)
    if stack.stream is not None:
        _acknowledge(stack.stream.security_group, "AwsSolutions-EC23",
                     STREAM_REASONS["AwsSolutions-EC23"])
        _acknowledge(stack.stream.access_logs, "AwsSolutions-S1",
                     STREAM_REASONS["AwsSolutions-S1"])
    if stack.console is not None:
        _acknowledge_console(stack)

    # The result function may invoke saga-rollback: CDK grants that on the
    # function ARN and on `<arn>:*` (its versions and aliases), which the pack
    # reports as a wildcard.
    result = stack.functions[RESULT]
    saga_rollback = stack.functions[SAGA_ROLLBACK]
    saga_cfn = saga_rollback.node.default_child
    assert isinstance(saga_cfn, CfnElement) and result.role is not None
    logical_id = stack.resolve(stack.get_logical_id(saga_cfn))
    Validations.of(result.role).acknowledge(
        Acknowledgment(
            id=f"AwsSolutions-IAM5[Resource::<{logical_id}.Arn>:*]",
            reason="Invoking the saga-rollback function, any of its versions or aliases.",
        )
    )

    # Active tracing grants xray:PutTraceSegments and xray:PutTelemetryRecords,
    # actions that have no resource-level permissions: "*" is their only form.
    for fn in stack.functions.by_module.values():
        assert fn.role is not None
        Validations.of(fn.role).acknowledge(
            Acknowledgment(id="AwsSolutions-IAM5[Resource::*]", reason=XRAY_REASON)
        )

    Validations.of(stack.schedules.dlq).acknowledge(
        Acknowledgment(
            id="AwsSolutions-SQS3",
            reason=(
                "This queue is a dead-letter queue itself: EventBridge's, for tick events "
                "it could not deliver (the pack recognises only queues named in another "
                "queue's redrive policy)."
            ),
        )
    )
    Validations.of(stack.saga.dlq).acknowledge(
        Acknowledgment(
            id="AwsSolutions-SQS3",
            reason=(
                "This queue is a dead-letter queue itself: the on-failure destination of "
                "the saga-rollback function's asynchronous invocations (the pack "
                "recognises only queues named in another queue's redrive policy)."
            ),
        )
    )

    if stack.api.log_role is not None:
        Validations.of(stack.api.log_role).acknowledge(
            Acknowledgment(
                id="AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/"
                "service-role/AmazonAPIGatewayPushToCloudWatchLogs]",
                reason=(
                    "The role API Gateway logs through (the account's setting): the "
                    "AWS-maintained policy for exactly that, nothing more."
                ),
            )
        )


def _acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    Validations.of(scope).acknowledge(Acknowledgment(id=rule, reason=reason))


def _acknowledge_functions(stack: CordumServerlessStack) -> None:
    """The runtime and the managed execution policies of the stack's functions, and
    basic execution for the deploy-time certificate issuers (container images: no
    runtime to judge)."""
    for fn in stack.functions.by_module.values():
        _acknowledge(fn, "AwsSolutions-L1", RUNTIME_REASON)
        assert fn.role is not None
        for rule, reason in FUNCTION_ROLE_REASONS.items():
            _acknowledge(fn.role, rule, reason)
    # Every deploy-time certificate issuer (the kernel's, and NATS' when the stack
    # runs NATS): each is a KernelTls.
    for issuer in (c for c in stack.node.find_all() if isinstance(c, KernelTls)):
        if issuer.issuer.role is not None:
            _acknowledge(issuer.issuer.role, LAMBDA_BASIC, FUNCTION_ROLE_REASONS[LAMBDA_BASIC])


def _acknowledge_api(stack: CordumServerlessStack) -> None:
    """On the REST API (APIG2), its proxy methods (APIG4, COG4) and its stage
    (APIG3, APIG6): the rules apply to nothing else."""
    api = stack.api.rest_api
    _acknowledge(api, "AwsSolutions-APIG2", API_REASONS["AwsSolutions-APIG2"])
    for method in api.methods:
        for rule in ("AwsSolutions-APIG4", "AwsSolutions-COG4"):
            _acknowledge(method, rule, API_REASONS[rule])
    for rule in ("AwsSolutions-APIG3", "AwsSolutions-APIG6"):
        _acknowledge(api.deployment_stage, rule, API_REASONS[rule])


def _acknowledge_console(stack: CordumServerlessStack) -> None:
    """The console's distribution (CFR1, CFR2; CFR4 at the default name only) and CDK's
    copy function that fills its bucket."""
    console = stack.console
    assert console is not None
    rules = ["AwsSolutions-CFR1", "AwsSolutions-CFR2"]
    if console.settings.certificate_arn is None:
        rules.append("AwsSolutions-CFR4")
    for rule in rules:
        _acknowledge(console.distribution, rule, CONSOLE_REASONS[rule])
    for deployment in console.deployments:
        acknowledge_bucket_deployment(deployment, console.bucket,
                                      CONSOLE_DEPLOYMENT_GRANTS_REASON)
