"""The live event stream on ECS Fargate, behind an internet-facing Application Load Balancer.

Only an AWS stack given context ``streamCertificateArn`` runs it (a local stack
starts ``cordum-stream`` under its supervisor; an AWS stack without the
certificate runs none, warns at synth, and its clients poll the REST API).

``cordum-stream`` (``python -m cordum.stream``) serves WebSocket and Server-Sent
Events on ``/api/v1/stream`` and ``/api/v1/jobs/*/stream`` at STREAM_PORT. Two to
six tasks (STREAM_SCALING, cordum_infra.fargate) run in the private subnets of
both zones, log in to Redis as ``cordum-stream`` (reads job keys, writes only
``cordum:stream:*``: cordum.redis_acl.STREAM), reach NATS like the bridge (the
same credentials' secret and CA), and read the API keys from the gateway's
secret: every connection is authenticated, with a limit of connections per key.

Where the load balancer stands (the public subnets question)
    An internet-facing load balancer needs public subnets, and the default
    ``egress=endpoints`` VPC has isolated subnets only. The stack adds two small
    public subnets, one per zone, for the load balancer alone (cordum_infra.network):
    an internet gateway routed from those two subnets only; no NAT gateway, no
    route from the isolated subnets, nothing there gets a public address of its
    own. So ``endpoints`` mode stays closed: the tasks keep private addresses,
    their group sends only to Redis, NATS and the AWS endpoints, and the load
    balancer's group sends only to the tasks' port. Traffic from the internet
    ends at the load balancer, which opens its own connections to the tasks.
    The alternative, an internal load balancer in the isolated subnets, would
    keep the VPC without an internet gateway but leave the stream to clients in
    the VPC or a peered one: not what a live stream for API clients is for. With
    ``egress=nat`` the VPC's public subnets serve; an existing VPC must have a
    public subnet in each zone of the stack's subnets.

The certificate
    ``streamCertificateArn``: an ACM certificate (ARN checked in
    cordum_infra.settings) in the stack's region, for the name clients dial
    (``streamDomain``, mapped by the operator to the load balancer's DNS name, a
    CNAME or an alias record). The stack neither requests nor validates it, so no
    hosted zone is assumed. HTTPS on 443 with TLS_POLICY (TLS 1.3 and 1.2 only);
    HTTP on 80 answers a permanent redirect to HTTPS.

Long-lived connections
    IDLE_TIMEOUT: the load balancer closes a connection idle for an hour; the
    server pings every 30 s, so only a dead client is cut. A task leaving (a deploy,
    a scale-in) gets no new connections, keeps its open ones DEREGISTRATION_DELAY,
    then gets SIGTERM and STOP_TIMEOUT to close them; clients reconnect to another
    task. No stickiness: any task serves any client (the event logs are in Redis).
    The listener forwards STREAM_PATHS only (and answers anything else 404 itself).

No WAF web ACL on the load balancer
    The API's web ACL guards the REST API, where requests are many and each one
    costs an invocation. Here a client makes one request per connection, which the
    stream authenticates (API key, the gateway's secret) and counts against its
    key's connection limit; WAF never sees the frames. Reusing the API's ACL would
    block clients that send no User-Agent (its common rule set does; Node's ``ws``
    sends none), and an ACL of its own costs $7 a month for little. Access logs
    (S3, ACCESS_LOG_RETENTION) record every connection with its address.

Its alarms and dashboard row are cordum_infra.alarms (StreamTargets) and
cordum_infra.dashboard (``stream_widgets``); the metrics it writes are EMF lines
on stdout in the stack's namespace, no dimension: STREAM_CONNECTIONS (a gauge),
STREAM_FRAMES_SENT and STREAM_SLOW_CLIENTS_CLOSED (counts).
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration, RemovalPolicy, Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from cordum_infra.api import API_KEYS_SECRET_ENV, API_KEYS_TTL_ENV, API_KEYS_TTL_S
from cordum_infra.context_values import CERTIFICATE_ARN, ContextError
from cordum_infra.fargate import (
    Scaling,
    SharedServiceSettings,
    replicated_service,
    scale_on_cpu,
    service_container,
)

STREAM_DOCKERFILE = "docker/stream.Dockerfile"
"""Relative to the repo root, the build context of the image."""
STREAM_CONTAINER = "stream"
STREAM_PORT = 8090
"""HTTP port of ``cordum-stream`` (STREAM_PORT of the container)."""
STREAM_PATH = "/api/v1/stream"
STREAM_PATHS = ("/api/v1/stream", "/api/v1/stream/*", "/api/v1/jobs/*/stream")
"""What the listener forwards: the tenant's stream and one job's."""
HEALTH_PATH = "/health"
"""200 while the task's NATS and Redis connections are up, 503 otherwise."""

STREAM_CPU = 256
STREAM_MEMORY_MIB = 512
"""A quarter vCPU and 512 MiB per task: the stream waits on sockets, and an open
connection holds tens of kilobytes. CPU (encoding and sending frames) is what
grows with load, and what the scaling follows."""
STREAM_SCALING = Scaling(min_tasks=2, max_tasks=6, cpu_percent=60)
"""Two tasks, one per zone, at least; up to six at 60 % CPU. Six tasks of 0.25 vCPU
bound the cost at about $54 a month, three times the floor."""
OPEN_FILES = 65_535
"""Open descriptors per task (one per connection, plus Redis and NATS): Fargate's
default, written down so the task definition says it."""

IDLE_TIMEOUT = Duration.seconds(3600)
"""Long-lived WebSocket and SSE connections: the server pings every 30 s, so a
connection is idle an hour only when its client is gone."""
TLS_POLICY = elbv2.SslPolicy.RECOMMENDED_TLS
"""ELBSecurityPolicy-TLS13-1-2-2021-06: TLS 1.3 and 1.2, forward secrecy only."""
DEREGISTRATION_DELAY = Duration.seconds(30)
"""A task leaving keeps its open connections 30 s (clients then reconnect to
another task); a deploy or a scale-in is not held up longer."""
HEALTH_CHECK_INTERVAL = Duration.seconds(10)
HEALTH_CHECK_TIMEOUT = Duration.seconds(5)
HEALTHY_THRESHOLD = 2
UNHEALTHY_THRESHOLD = 3
"""The load balancer's checks of HEALTH_PATH: a new task gets connections after two
answers 10 s apart; one that fails three in a row (30 s) gets none."""
HEALTH_CHECK_GRACE = Duration.seconds(60)
"""ECS ignores the load balancer's verdict on a new task this long: the process
starts, connects to NATS and Redis, then needs two good checks."""

HEALTH_PROBE = (
    "import os, urllib.request as u; "
    "u.urlopen('http://127.0.0.1:%s/health' % os.environ.get('STREAM_PORT', '8090'), "
    "timeout=3)"
)
"""``python -c`` of the container's health check, as in the image's HEALTHCHECK: exits 1
unless /health answers 200 (a 503, NATS or Redis lost, raises)."""
CONTAINER_HEALTH_CHECK_INTERVAL = Duration.seconds(30)
CONTAINER_HEALTH_CHECK_TIMEOUT = Duration.seconds(5)
CONTAINER_HEALTH_CHECK_RETRIES = 3
CONTAINER_HEALTH_CHECK_START = Duration.seconds(60)
"""As the bridge's: three failures 30 s apart (NATS or Redis out of reach for
about two minutes) before ECS replaces the task; a reconnect is far shorter."""

ACCESS_LOG_RETENTION = Duration.days(90)
"""Who connected, from where, and what the load balancer answered: kept a
quarter, as the REST API's access log."""
ACCESS_LOG_PREFIX = "stream"

METRICS_NAMESPACE_ENV = "POWERTOOLS_METRICS_NAMESPACE"
"""The namespace cordum.metrics writes EMF lines in: the stack's."""
STREAM_CONNECTIONS = "StreamConnections"
"""Open client connections of one task (a gauge)."""
STREAM_FRAMES_SENT = "StreamFramesSent"
"""Frames sent to clients (a count)."""
STREAM_SLOW_CLIENTS_CLOSED = "StreamSlowClientsClosed"
"""Connections closed because their client could not keep up (a count)."""


def certificate_region(arn: str) -> str:
    """The region of an ACM certificate ARN (checked by cordum_infra.settings)."""
    match = CERTIFICATE_ARN.match(arn)
    if match is None:
        raise ContextError(f"context streamCertificateArn is not an ACM certificate ARN: {arn}")
    return match.group("region")


@dataclass(frozen=True)
class StreamTargets:
    """What the stream's alarms watch."""

    load_balancer: elbv2.ApplicationLoadBalancer
    target_group: elbv2.ApplicationTargetGroup
    cluster_name: str
    service_name: str


class StreamService(Construct):
    """``cordum-stream`` tasks behind an internet-facing Application Load Balancer."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        shared: SharedServiceSettings,
        vpc: ec2.IVpc,
        public_subnets: ec2.SubnetSelection,
        task_security_group: ec2.SecurityGroup,
        nats_url: str,
        certificate_arn: str,
        api_keys_secret: str,
        metrics_namespace: str,
        domain: str | None = None,
    ) -> None:
        """`task_security_group`: the network's stream group (cache, NATS, AWS APIs);
        `api_keys_secret`: name or complete ARN of the gateway's keys secret;
        `domain`: the name clients dial (else the load balancer's)."""
        super().__init__(scope, construct_id)
        region = Stack.of(self).region
        if Token.is_unresolved(region):
            raise ContextError(
                "context streamCertificateArn: the stream's load balancer is bound to a "
                "region (its certificate's, and the account that writes its access logs): "
                "give -c account=<12 digits> -c region=<name>, or run the CDK CLI with "
                "credentials"
            )
        if certificate_region(certificate_arn) != region:
            raise ContextError(
                f"context streamCertificateArn is a certificate of "
                f"{certificate_region(certificate_arn)}; the stack's load balancer is in "
                f"{region} and can use a certificate of that region only: {certificate_arn}"
            )

        self.container = service_container(
            self,
            STREAM_CONTAINER,
            shared,
            dockerfile=STREAM_DOCKERFILE,
            cpu=STREAM_CPU,
            memory_mib=STREAM_MEMORY_MIB,
            redis_role="stream",
            environment={
                "REDIS_URL": shared.redis_url,
                "NATS_URL": nats_url,
                "STREAM_PORT": str(STREAM_PORT),
                "LOG_LEVEL": shared.log_level,
                # boto3 (the API keys' secret) takes the region from here.
                "AWS_REGION": region,
                API_KEYS_SECRET_ENV: api_keys_secret,
                API_KEYS_TTL_ENV: str(API_KEYS_TTL_S),
                # The log driver ships the EMF lines; CloudWatch Logs extracts them.
                METRICS_NAMESPACE_ENV: metrics_namespace,
            },
            port_mappings=[ecs.PortMapping(container_port=STREAM_PORT)],
            ulimits=[
                ecs.Ulimit(name=ecs.UlimitName.NOFILE, soft_limit=OPEN_FILES,
                           hard_limit=OPEN_FILES)
            ],
            # ECS does not read the image's HEALTHCHECK: the task definition repeats it.
            health_check=ecs.HealthCheck(
                command=["CMD", "python", "-c", HEALTH_PROBE],
                interval=CONTAINER_HEALTH_CHECK_INTERVAL,
                timeout=CONTAINER_HEALTH_CHECK_TIMEOUT,
                retries=CONTAINER_HEALTH_CHECK_RETRIES,
                start_period=CONTAINER_HEALTH_CHECK_START,
            ),
        )
        self.task_definition = self.container.task_definition
        self._grant_api_keys(api_keys_secret)
        self.task_security_group = task_security_group

        # The load balancer's own group: HTTPS and HTTP from anywhere (both address
        # families: the rules hold if the load balancer is made dual-stack in a VPC
        # with IPv6), and it sends to the tasks' port alone.
        self.security_group = ec2.SecurityGroup(
            self,
            "LoadBalancerSecurityGroup",
            vpc=vpc,
            description="Cordum stream load balancer: HTTPS (and HTTP to redirect) from anywhere",
            allow_all_outbound=False,
        )
        for peer in (ec2.Peer.any_ipv4(), ec2.Peer.any_ipv6()):
            self.security_group.add_ingress_rule(peer, ec2.Port.tcp(443), "HTTPS from clients")
            self.security_group.add_ingress_rule(
                peer, ec2.Port.tcp(80), "HTTP from clients (redirected to HTTPS)"
            )
        task_security_group.connections.allow_from(
            self.security_group, ec2.Port.tcp(STREAM_PORT), "Stream from its load balancer"
        )

        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            # The only encryption load balancer access logs may be written with.
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    expiration=ACCESS_LOG_RETENTION,
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                )
            ],
            # An audit trail: it outlives the stack (a generated name, so a retained
            # bucket never blocks a later deploy).
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.load_balancer = elbv2.ApplicationLoadBalancer(
            self,
            "LoadBalancer",
            vpc=vpc,
            vpc_subnets=public_subnets,
            internet_facing=True,
            security_group=self.security_group,
            idle_timeout=IDLE_TIMEOUT,
            drop_invalid_header_fields=True,
        )
        self.load_balancer.log_access_logs(self.access_logs, ACCESS_LOG_PREFIX)

        self.service = replicated_service(
            self,
            shared,
            self.container,
            task_security_group,
            health_check_grace_period=HEALTH_CHECK_GRACE,
        )
        self.target_group = elbv2.ApplicationTargetGroup(
            self,
            "Targets",
            vpc=vpc,
            port=STREAM_PORT,
            protocol=elbv2.ApplicationProtocol.HTTP,
            target_type=elbv2.TargetType.IP,
            targets=[
                self.service.load_balancer_target(
                    container_name=STREAM_CONTAINER, container_port=STREAM_PORT
                )
            ],
            health_check=elbv2.HealthCheck(
                path=HEALTH_PATH,
                healthy_http_codes="200",
                interval=HEALTH_CHECK_INTERVAL,
                timeout=HEALTH_CHECK_TIMEOUT,
                healthy_threshold_count=HEALTHY_THRESHOLD,
                unhealthy_threshold_count=UNHEALTHY_THRESHOLD,
            ),
            deregistration_delay=DEREGISTRATION_DELAY,
        )
        # Any task serves any client: no session cookie.
        self.target_group.set_attribute("stickiness.enabled", "false")

        self.https = self.load_balancer.add_listener(
            "Https",
            port=443,
            protocol=elbv2.ApplicationProtocol.HTTPS,
            certificates=[elbv2.ListenerCertificate.from_arn(certificate_arn)],
            ssl_policy=TLS_POLICY,
            open=False,
            default_action=elbv2.ListenerAction.fixed_response(
                404, content_type="application/json", message_body='{"error":"not found"}'
            ),
        )
        self.https.add_action(
            "Stream",
            priority=10,
            conditions=[elbv2.ListenerCondition.path_patterns(list(STREAM_PATHS))],
            action=elbv2.ListenerAction.forward([self.target_group]),
        )
        self.http = self.load_balancer.add_listener(
            "Http",
            port=80,
            protocol=elbv2.ApplicationProtocol.HTTP,
            open=False,
            default_action=elbv2.ListenerAction.redirect(
                protocol="HTTPS", port="443", permanent=True
            ),
        )
        self.scaling = scale_on_cpu(self.service, STREAM_SCALING)

        self.dns_name = self.load_balancer.load_balancer_dns_name
        """The load balancer's DNS name: where the operator points ``streamDomain``."""
        self.url = f"https://{domain or self.dns_name}{STREAM_PATH}"
        """What clients connect to (``StreamUrl``)."""

    def _grant_api_keys(self, secret: str) -> None:
        """Name the gateway's keys secret and let the task role read it (any version),
        as cordum_infra.api does for the gateway."""
        if secret.startswith("arn:"):
            ref = secretsmanager.Secret.from_secret_complete_arn(self, "ApiKeysSecret", secret)
        else:
            ref = secretsmanager.Secret.from_secret_name_v2(self, "ApiKeysSecret", secret)
        ref.grant_read(self.task_definition.task_role)

    def alarm_targets(self, cluster_name: str) -> StreamTargets:
        """What the stream's alarms watch (cordum_infra.alarms)."""
        return StreamTargets(load_balancer=self.load_balancer, target_group=self.target_group,
                             cluster_name=cluster_name, service_name=self.service.service_name)
