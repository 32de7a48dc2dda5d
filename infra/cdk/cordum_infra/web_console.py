"""The web console on AWS: the built dashboard in an S3 bucket behind a CloudFront
distribution that also routes ``/api/*`` to the REST API and, with the stream, the
stream's paths to its load balancer, so the browser sees one origin (no CORS).

AWS shapes only: LocalStack's community edition has no CloudFront, and the local
stack's console server serves the same routes itself (localstack/web_console.py).
Where each path goes and the headers every answer carries: cordum_infra.web_console_edge.

The files
    ``dashboard/dist`` (``npm run build`` in dashboard/, or ``make dashboard``; context
    ``consoleDist`` names another folder) is copied into the bucket at each deploy by
    two deployments: the hashed files under ``assets/`` first, ``Cache-Control:
    IMMUTABLE`` and never pruned (a tab opened before a deploy still loads its lazy
    chunks), then everything else, ``index.html`` included, ``NO_CACHE`` and pruned.
    A folder without ``index.html`` (the dashboard not built: synth and tests need no
    node build) deploys NOT_BUILT_PAGE as index.html instead, with a synth warning.
    No invalidation is needed: index.html is revalidated on every load and every other
    file's name changes with its content.

The bucket
    Private (all public access blocked, object ACLs off), TLS only, SSE-S3 (CloudFront's
    origin access control reads SSE-S3 objects without a key policy), read by the
    distribution alone through OAC (its policy names the distribution's ARN).
    Versioning off: its content is a build of the repository, deployed again from any
    release (a rollback redeploys that release); old versions would only be billed.
    Server access logs go to the log bucket, which also takes CloudFront's access logs
    (standard logging, which writes through an ACL: that bucket keeps ACLs on), both
    expired after LOG_RETENTION. Both buckets are kept on destroy, like the stack's other
    buckets (generated names: a kept bucket never blocks a later deploy). CloudFront
    delivers no standard logs to a bucket in an opt-in region (af-south-1, ...), so the
    console cannot be created in one as it stands.

The distribution
    HTTPS only (HTTP is redirected), HTTP/2 and HTTP/3, IPv6, price class 100 (North
    America, Europe, Israel; ``consolePriceClass`` 200 or All for more edge locations),
    index.html as the default root object, no geo restriction (operators are anywhere;
    every API call carries its key). The default ``*.cloudfront.net`` certificate leaves
    the minimum TLS version to CloudFront (TLSv1, whatever the template says); with
    ``consoleDomain`` and ``consoleCertificateArn`` (an ACM certificate in us-east-1,
    CloudFront's region, covering that name) the distribution answers at that name with
    TLSv1.2_2021 as its minimum. The stack creates no DNS record: point the name at
    output ``ConsoleUrl``'s host (a CNAME, or a Route 53 alias).
    No web ACL of its own: a CloudFront-scope ACL must be created in us-east-1, outside
    this stack's region; ``/api/*`` still passes the REST API's regional ACL
    (cordum_infra.waf) at the stage, and the bucket holds static files only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aws_cdk import Annotations, CfnOutput, Duration, RemovalPolicy, Stack
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_cloudfront as cloudfront
from aws_cdk import aws_cloudfront_origins as origins
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from constructs import Construct

from cordum_infra.context_values import CERTIFICATE_ARN, DOMAIN_NAME, ContextError
from cordum_infra.functions import LOG_RETENTION as DEPLOYMENT_LOG_RETENTION
from cordum_infra.settings import REPO_ROOT
from cordum_infra.web_console_edge import (
    api_origin,
    behaviours,
    edge_name,
    response_headers_policy,
    security_headers,
    spa_fallback,
    stream_origin,
)

if TYPE_CHECKING:
    from constructs import Node

    from cordum_infra.api import GatewayApi
    from cordum_infra.settings import StackSettings
    from cordum_infra.stream import StreamService

DIST_CONTEXT = "consoleDist"
DOMAIN_CONTEXT = "consoleDomain"
CERTIFICATE_CONTEXT = "consoleCertificateArn"
PRICE_CLASS_CONTEXT = "consolePriceClass"
DEFAULT_DIST = REPO_ROOT / "dashboard" / "dist"
CERTIFICATE_REGION = "us-east-1"
"""CloudFront takes its certificates from ACM in us-east-1 only."""
PRICE_CLASSES = {
    "100": cloudfront.PriceClass.PRICE_CLASS_100,
    "200": cloudfront.PriceClass.PRICE_CLASS_200,
    "all": cloudfront.PriceClass.PRICE_CLASS_ALL,
}
"""``consolePriceClass``: 100 (default, the cheapest edge locations), 200 or All."""

ASSETS_PREFIX = "assets"
"""Where Vite puts the content-hashed files (``assets/index-<hash>.js``)."""
NO_CACHE = "no-cache"
IMMUTABLE = "public, max-age=31536000, immutable"
"""Cache-Control of index.html (and every file outside assets/) and of assets/: the
values the local console server sends too."""
LOG_RETENTION = Duration.days(90)
"""Access logs kept a quarter, as the API's and the stream's."""
CLOUDFRONT_LOG_PREFIX = "cloudfront/"
BUCKET_LOG_PREFIX = "s3/"
S3_LOGS_BY_POLICY_FLAG = "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy"
DEPLOYMENT_MEMORY_MB = 512
"""CDK's copy function syncing a few hundred files: more memory is more CPU for the CLI
(and a function of its own, apart from the kernel policy's 256 MB copy)."""

NOT_BUILT_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Cordum console</title></head>
<body><h1>The dashboard was not built</h1>
<p>This deploy found no <code>dashboard/dist/index.html</code>. Run <code>make
dashboard</code> (or <code>npm run build</code> in <code>dashboard/</code>) and deploy
again. The API answers under <code>/api/</code> all the same.</p></body></html>
"""
NOT_BUILT_WARNING = (
    "The dashboard is not built ({dist} has no index.html): the console's bucket gets a "
    "page saying so. Run `make dashboard` (npm run build in dashboard/) before cdk deploy "
    "to ship the dashboard (docs/deploy.md)."
)
STREAM_NAME_WARNING = (
    "No streamDomain: the console sends the stream's paths to the load balancer's own "
    "name, and CloudFront refuses an origin whose certificate does not cover the name it "
    "connects to (no ACM certificate covers an elb.amazonaws.com name), so those paths "
    "answer 502 and the dashboard polls. Give -c streamDomain=<the certificate's name>."
)


@dataclass(frozen=True)
class ConsoleSettings:
    """The console's context values, checked."""

    dist: Path = DEFAULT_DIST
    """The dashboard's build (``consoleDist``)."""
    domain: str | None = None
    """The name the console answers at besides its cloudfront.net one (``consoleDomain``)."""
    certificate_arn: str | None = None
    """ACM certificate (us-east-1) covering ``domain`` (``consoleCertificateArn``)."""
    price_class: cloudfront.PriceClass = cloudfront.PriceClass.PRICE_CLASS_100
    """Which edge locations serve it (``consolePriceClass``)."""

    @property
    def built(self) -> bool:
        return (self.dist / "index.html").is_file()

    @classmethod
    def from_context(cls, node: Node) -> ConsoleSettings:
        def get(key: str) -> str | None:
            value = node.try_get_context(key)
            text = "" if value is None else str(value).strip()
            return text or None

        dist = Path(get(DIST_CONTEXT) or DEFAULT_DIST).expanduser().resolve()
        domain = get(DOMAIN_CONTEXT)
        if domain is not None:
            domain = domain.lower().rstrip(".")
            if not DOMAIN_NAME.match(domain):
                raise ContextError(f"context {DOMAIN_CONTEXT} must be a DNS name such as "
                                   f"console.example.com: {domain}")
        certificate = get(CERTIFICATE_CONTEXT)
        if certificate is not None:
            match = CERTIFICATE_ARN.match(certificate)
            if match is None or match.group("region") != CERTIFICATE_REGION:
                raise ContextError(
                    f"context {CERTIFICATE_CONTEXT} must be the ARN of an ACM certificate in "
                    f"{CERTIFICATE_REGION} (the only region CloudFront takes certificates "
                    f"from): {certificate}")
        if (domain is None) != (certificate is None):
            raise ContextError(
                f"context {DOMAIN_CONTEXT} and {CERTIFICATE_CONTEXT} go together: the name "
                "the console answers at and a us-east-1 ACM certificate covering it")
        price = (get(PRICE_CLASS_CONTEXT) or "100").lower().removeprefix("priceclass_")
        if price not in PRICE_CLASSES:
            raise ContextError(f"context {PRICE_CLASS_CONTEXT} must be 100, 200 or All: "
                               f"{get(PRICE_CLASS_CONTEXT)}")
        return cls(dist=dist, domain=domain, certificate_arn=certificate,
                   price_class=PRICE_CLASSES[price])


class WebConsole(Construct):
    """The dashboard's bucket, its deployments, the log bucket and the distribution."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: ConsoleSettings,
        api: GatewayApi,
        stream_domain: str | None,
    ) -> None:
        """`stream_domain`: the name of the stream's load balancer its certificate
        covers; None: no stream, no stream route (the dashboard polls)."""
        super().__init__(scope, construct_id)
        # S3 delivers the bucket's access logs under a bucket policy of the log bucket,
        # not its legacy canned ACL (cfn-lint W3045); set here, before any child exists.
        self.node.set_context(S3_LOGS_BY_POLICY_FLAG, True)
        self.settings = settings
        self.logs = s3.Bucket(
            self,
            "Logs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            # CloudFront's standard logging writes through an object ACL.
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
            enforce_ssl=True,
            lifecycle_rules=[s3.LifecycleRule(
                expiration=LOG_RETENTION,
                abort_incomplete_multipart_upload_after=Duration.days(1))],
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            versioned=False,
            server_access_logs_bucket=self.logs,
            server_access_logs_prefix=BUCKET_LOG_PREFIX,
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.deployments = self._deploy_files()

        spa = spa_fallback(self, "SpaFallback")
        headers = response_headers_policy(self, "Headers", security_headers())
        access = cloudfront.S3OriginAccessControl(
            self, "OriginAccess", origin_access_control_name=edge_name(self, "console", 64),
            description="Cordum console: CloudFront reads the dashboard's bucket")
        default, additional = behaviours(
            static=origins.S3BucketOrigin.with_origin_access_control(
                self.bucket, origin_access_control=access),
            api=api_origin(self, api.rest_api.rest_api_id, api.stage_name),
            stream=stream_origin(stream_domain) if stream_domain is not None else None,
            headers=headers,
            spa=spa,
        )
        certificate = (
            acm.Certificate.from_certificate_arn(self, "Certificate", settings.certificate_arn)
            if settings.certificate_arn is not None else None)
        self.distribution = cloudfront.Distribution(
            self,
            "Distribution",
            comment="Cordum console: dashboard, /api/* and the live event stream",
            default_behavior=default,
            additional_behaviors=additional,
            default_root_object="index.html",
            http_version=cloudfront.HttpVersion.HTTP2_AND_3,
            enable_ipv6=True,
            price_class=settings.price_class,
            domain_names=[settings.domain] if settings.domain is not None else None,
            certificate=certificate,
            minimum_protocol_version=(
                cloudfront.SecurityPolicyProtocol.TLS_V1_2_2021 if certificate else None),
            ssl_support_method=cloudfront.SSLMethod.SNI if certificate else None,
            enable_logging=True,
            log_bucket=self.logs,
            log_file_prefix=CLOUDFRONT_LOG_PREFIX,
        )
        self.spa = spa
        self.headers = headers
        self.url = f"https://{settings.domain or self.distribution.distribution_domain_name}"
        """Where browsers open the console (``ConsoleUrl``)."""

    def _deploy_files(self) -> list[s3deploy.BucketDeployment]:
        """The dashboard's files into the bucket: assets first, then index.html and the
        rest (a placeholder index.html when the dashboard is not built)."""
        log_group = logs.LogGroup(self, "DeployLogs", retention=DEPLOYMENT_LOG_RETENTION,
                                  removal_policy=RemovalPolicy.DESTROY)
        common = {"destination_bucket": self.bucket, "memory_limit": DEPLOYMENT_MEMORY_MB,
                  "log_group": log_group}
        if not self.settings.built:
            Annotations.of(self).add_warning_v2(
                "cordum:console-not-built", NOT_BUILT_WARNING.format(dist=self.settings.dist))
            return [s3deploy.BucketDeployment(
                self, "DeployPage", sources=[s3deploy.Source.data("index.html", NOT_BUILT_PAGE)],
                cache_control=[s3deploy.CacheControl.from_string(NO_CACHE)],
                exclude=[f"{ASSETS_PREFIX}/*"], **common)]  # type: ignore[arg-type]
        source = s3deploy.Source.asset(str(self.settings.dist))
        assets = s3deploy.BucketDeployment(
            self, "DeployAssets", sources=[source], include=[f"{ASSETS_PREFIX}/*"],
            exclude=["*"], prune=False,
            cache_control=[s3deploy.CacheControl.from_string(IMMUTABLE)],
            **common)  # type: ignore[arg-type]
        files = s3deploy.BucketDeployment(
            self, "DeployFiles", sources=[source], exclude=[f"{ASSETS_PREFIX}/*"], prune=True,
            cache_control=[s3deploy.CacheControl.from_string(NO_CACHE)],
            **common)  # type: ignore[arg-type]
        # A new index.html names new assets: they are in the bucket before it is.
        files.node.add_dependency(assets)
        return [assets, files]


def add_web_console(stack: Stack, settings: StackSettings, *, api: GatewayApi,
                    stream: StreamService | None) -> WebConsole | None:
    """The console of an AWS stack and its outputs (None on a local stack); the stream's
    route only with the stream (at ``streamDomain``, else its load balancer's name, with
    a warning)."""
    if not settings.creates_cache:
        return None
    origin_name: str | None = None
    if stream is not None:
        origin_name = settings.stream_domain or stream.dns_name
        if settings.stream_domain is None:
            Annotations.of(stack).add_warning_v2("cordum:console-stream-name", STREAM_NAME_WARNING)
    console = WebConsole(stack, "Console", settings=ConsoleSettings.from_context(stack.node),
                         api=api, stream_domain=origin_name)
    for key, value, description in (
        ("ConsoleUrl", console.url,
         "The web console (dashboard, /api/* and the stream through CloudFront)"),
        ("ConsoleBucketName", console.bucket.bucket_name, "S3 bucket of the dashboard's files"),
        ("ConsoleDistributionId", console.distribution.distribution_id,
         "CloudFront distribution of the console (for an invalidation by hand)"),
    ):
        CfnOutput(stack, key, value=value, description=description)
    return console
