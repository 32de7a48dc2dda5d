"""The long-running services on ECS Fargate: the NATS -> SQS bridge and the safety kernel.

Only the AWS stack runs them (a local stack starts both as host processes).
Their images are built from this repository at deploy time
(``docker/bridge.Dockerfile``, ``docker/safety-kernel.Dockerfile``, build
context the repo root as filtered by ``.dockerignore``); a synth only stages
the files, it never calls Docker.

- Bridge: SERVICE_TASKS tasks in the private subnets of both zones. A deploy
  starts the new tasks before the old ones stop (min 50 %, max 200 %); a task
  told to stop gets SIGTERM, finishes its in-flight forwards, drains NATS, and
  is killed only after STOP_TIMEOUT.
- Safety kernel: SERVICE_TASKS tasks behind an internal Network Load Balancer
  on KERNEL_PORT, health checked over TCP on that port. The load balancer's
  DNS name is stable, so the functions get ``<nlb dns>:<port>`` as
  SAFETY_KERNEL_ADDR; its security group (the network's kernel group) admits
  the functions and the bridge, and the tasks admit only the load balancer.
  The kernel serves TLS itself (the load balancer passes TCP through) with a
  certificate for that name issued at deploy time (cordum_infra.kernel_tls);
  every client requires TLS and trusts only that certificate's CA. Velocity
  windows are counted in the stack's Redis (TLS, AUTH token), shared by all
  tasks.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, Duration, IgnoreMode, RemovalPolicy, Stack, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cordum_infra.cache import REDIS_PORT
from cordum_infra.functions import LOG_RETENTION
from cordum_infra.kernel_tls import CERT_FIELD, KEY_FIELD, KernelTls
from cordum_infra.network import HTTPS_PORT, KERNEL_PORT
from cordum_infra.settings import REPO_ROOT, ContextError

BRIDGE_DOCKERFILE = "docker/bridge.Dockerfile"
KERNEL_DOCKERFILE = "docker/safety-kernel.Dockerfile"
KERNEL_PKI_DOCKERFILE = "docker/kernel-pki.Dockerfile"
"""Paths relative to the repo root, the build context of the images (the last one
is the Lambda image that issues the kernel's certificate at deploy time)."""

ASSET_EXCLUDE = (
    ".git",
    ".venv",
    ".cordum",
    "**/node_modules",
    "**/cdk.out",
    "layers/build",
    "infra/cdk/build",
)
"""Never staged as image build context, whatever ``.dockerignore`` says (it
lists what the images copy; these are the folders that would make a synth copy
hundreds of megabytes)."""

REDIS_AUTH_TOKEN_ENV = "REDIS_AUTH_TOKEN"
"""The Redis AUTH token of the bridge and the kernel, injected by ECS from the cache's
secret (cordum.config, cordum.safety.velocity)."""

TLS_CERT_ENV = "SAFETY_KERNEL_TLS_CERT"
TLS_KEY_ENV = "SAFETY_KERNEL_TLS_KEY"
TLS_CA_ENV = "SAFETY_KERNEL_TLS_CA"
TLS_REQUIRED_ENV = "SAFETY_KERNEL_TLS_REQUIRED"
"""cordum.safety.tls: the kernel's PEM certificate and key, the clients' CA (PEM text
or a file) and their refusal of plaintext."""
TLS_SERIAL_ENV = "SAFETY_KERNEL_TLS_SERIAL"
"""Read by nothing: a new certificate changes it, so ECS starts tasks that read the
new secret value (a task reads its secrets once, at start)."""

BRIDGE_CONTAINER = "bridge"
KERNEL_CONTAINER = "safety-kernel"

SERVICE_TASKS = 2
"""Tasks per service: one per zone, so a zone (or a task) lost leaves one running."""
MIN_HEALTHY_PERCENT = 50
MAX_HEALTHY_PERCENT = 200
"""A deploy may stop one of two tasks at a time and start up to two new ones."""

STOP_TIMEOUT = Duration.seconds(30)
"""SIGTERM to SIGKILL. The bridge needs about 10 s of it (``STOP_TIMEOUT_S`` of
cordum.bus.bridge for in-flight forwards, then the NATS drain); the kernel's
gRPC server stops with a 5 s grace. Fargate allows at most 120 s."""

BRIDGE_CPU = 256
BRIDGE_MEMORY_MIB = 512
KERNEL_CPU = 512
KERNEL_MEMORY_MIB = 1024
"""The kernel answers every submit and dispatch check: it gets the larger share."""

SERVICE_LOG_RETENTION = LOG_RETENTION
"""As long as the functions' logs: a job's history reads across both."""

KERNEL_HEALTH_CHECK_INTERVAL = Duration.seconds(10)
KERNEL_HEALTHY_THRESHOLD = 2
KERNEL_UNHEALTHY_THRESHOLD = 2
KERNEL_HEALTH_CHECK_GRACE = Duration.seconds(30)
KERNEL_DEREGISTRATION_DELAY = Duration.seconds(20)
"""A kernel task leaving gets no new connections at once and has its open ones
closed after this (clients rebuild their channel on UNAVAILABLE); ECS sends
SIGTERM only after it."""

CONTAINER_HEALTH_CHECK_INTERVAL = Duration.seconds(15)
CONTAINER_HEALTH_CHECK_START = Duration.seconds(15)

PLATFORMS = {
    "x86_64": (ecr_assets.Platform.LINUX_AMD64, ecs.CpuArchitecture.X86_64),
    "arm64": (ecr_assets.Platform.LINUX_ARM64, ecs.CpuArchitecture.ARM64),
}
"""Image build platform and Fargate CPU for the stack's ``architecture``."""

_ENV_REASON = (
    "The container environment holds endpoints and settings only (queue URLs, the "
    "Redis and NATS URLs, the log level, the safety kernel's public CA certificate). "
    "Credentials are never in it: the Redis AUTH token and the kernel's TLS key are "
    "ECS secrets read from Secrets Manager at task start, NATS credentials are named "
    "by their secret's ARN and read with the task role."
)
EXECUTION_ROLE_REASON = (
    "Task execution role: ecr:GetAuthorizationToken has no resource-level "
    "permissions; the image pull itself is limited to the CDK assets repository."
)
"""Acknowledges the one wildcard of every task execution role that pulls an image asset."""


def _image(dockerfile: str, platform: ecr_assets.Platform) -> ecs.ContainerImage:
    return ecs.ContainerImage.from_asset(
        str(REPO_ROOT),
        file=dockerfile,
        platform=platform,
        ignore_mode=IgnoreMode.DOCKER,
        exclude=list(ASSET_EXCLUDE),
    )


def _lambda_image(dockerfile: str, platform: ecr_assets.Platform) -> lambda_.DockerImageCode:
    return lambda_.DockerImageCode.from_image_asset(
        str(REPO_ROOT),
        file=dockerfile,
        platform=platform,
        ignore_mode=IgnoreMode.DOCKER,
        exclude=list(ASSET_EXCLUDE),
    )


def _tls_client_env(ca_pem: str) -> dict[str, str]:
    """What a client of the kernel needs to refuse anything but the stack's kernel."""
    return {TLS_REQUIRED_ENV: "true", TLS_CA_ENV: ca_pem}


def _task_definition(
    scope: Construct, construct_id: str, *, cpu: int, memory_mib: int, architecture: str
) -> ecs.FargateTaskDefinition:
    task = ecs.FargateTaskDefinition(
        scope,
        construct_id,
        cpu=cpu,
        memory_limit_mib=memory_mib,
        runtime_platform=ecs.RuntimePlatform(
            cpu_architecture=PLATFORMS[architecture][1],
            operating_system_family=ecs.OperatingSystemFamily.LINUX,
        ),
    )
    Validations.of(task).acknowledge(Acknowledgment(id="AwsSolutions-ECS2", reason=_ENV_REASON))
    Validations.of(task.obtain_execution_role()).acknowledge(
        Acknowledgment(id="AwsSolutions-IAM5[Resource::*]", reason=EXECUTION_ROLE_REASON)
    )
    return task


def _log_group(scope: Construct, construct_id: str, name: str) -> logs.LogGroup:
    return logs.LogGroup(
        scope,
        construct_id,
        log_group_name=f"/cordum/{name}",
        retention=SERVICE_LOG_RETENTION,
        removal_policy=RemovalPolicy.DESTROY,
    )



def _replicated_service(scope: Construct, cluster: ecs.ICluster,
                        task_definition: ecs.FargateTaskDefinition,
                        subnets: ec2.SubnetSelection, security_group: ec2.ISecurityGroup,
                        **extra: Any) -> ecs.FargateService:
    """SERVICE_TASKS private tasks spread over the zones, rolled back on a failed deploy."""
    return ecs.FargateService(
        scope,
        "Service",
        cluster=cluster,
        task_definition=task_definition,
        desired_count=SERVICE_TASKS,
        min_healthy_percent=MIN_HEALTHY_PERCENT,
        max_healthy_percent=MAX_HEALTHY_PERCENT,
        vpc_subnets=subnets,
        security_groups=[security_group],
        assign_public_ip=False,
        availability_zone_rebalancing=ecs.AvailabilityZoneRebalancing.ENABLED,
        circuit_breaker=ecs.DeploymentCircuitBreaker(rollback=True),
        **extra,
    )

class BridgeService(Construct):
    """``cordum-bridge`` tasks forwarding JetStream job subjects to the two queues."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ecs.ICluster,
        subnets: ec2.SubnetSelection,
        security_group: ec2.ISecurityGroup,
        redis_url: str,
        redis_auth_secret: secretsmanager.ISecret | None,
        nats_url: str,
        submit_queue: sqs.IQueue,
        result_queue: sqs.IQueue,
        architecture: str,
        log_level: str,
        safety_kernel_ca: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.task_definition = _task_definition(
            self,
            "Task",
            cpu=BRIDGE_CPU,
            memory_mib=BRIDGE_MEMORY_MIB,
            architecture=architecture,
        )
        self.log_group = _log_group(self, "Logs", "bridge")
        self.container = self.task_definition.add_container(
            BRIDGE_CONTAINER,
            image=_image(BRIDGE_DOCKERFILE, PLATFORMS[architecture][0]),
            essential=True,
            stop_timeout=STOP_TIMEOUT,
            environment={
                "REDIS_URL": redis_url,
                "NATS_URL": nats_url,
                "SUBMIT_QUEUE_URL": submit_queue.queue_url,
                "RESULT_QUEUE_URL": result_queue.queue_url,
                # boto3 takes the region from here; without it the bridge
                # would fall back to its local default.
                "AWS_REGION": Stack.of(self).region,
                "LOG_LEVEL": log_level,
                # Like every process of the stack that could call the kernel.
                **_tls_client_env(safety_kernel_ca),
            },
            logging=ecs.LogDrivers.aws_logs(stream_prefix="bridge", log_group=self.log_group),
            # ECS reads the token at task start with the execution role and hands it
            # to the container as a variable: neither the template nor the task
            # definition holds it.
            secrets=(
                {REDIS_AUTH_TOKEN_ENV: ecs.Secret.from_secrets_manager(redis_auth_secret)}
                if redis_auth_secret is not None
                else None
            ),
        )
        submit_queue.grant_send_messages(self.task_definition.task_role)
        result_queue.grant_send_messages(self.task_definition.task_role)
        self.service = _replicated_service(self, cluster, self.task_definition, subnets,
                                           security_group)


class SafetyKernelService(Construct):
    """``cordum-safety-kernel`` tasks behind an internal Network Load Balancer."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ecs.ICluster,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        security_group: ec2.ISecurityGroup,
        architecture: str,
        log_level: str,
        redis_url: str,
        redis_auth_secret: secretsmanager.ISecret | None,
        cache_security_group: ec2.ISecurityGroup,
    ) -> None:
        super().__init__(scope, construct_id)
        self.task_definition = _task_definition(
            self,
            "Task",
            cpu=KERNEL_CPU,
            memory_mib=KERNEL_MEMORY_MIB,
            architecture=architecture,
        )
        self.log_group = _log_group(self, "Logs", "safety-kernel")
        self.container = self.task_definition.add_container(
            KERNEL_CONTAINER,
            image=_image(KERNEL_DOCKERFILE, PLATFORMS[architecture][0]),
            essential=True,
            stop_timeout=STOP_TIMEOUT,
            port_mappings=[ecs.PortMapping(container_port=KERNEL_PORT)],
            # Velocity windows in the stack's Redis: one window per rule and key for
            # all tasks, not one per task.
            environment={"LOG_LEVEL": log_level, "REDIS_URL": redis_url},
            secrets=(
                {REDIS_AUTH_TOKEN_ENV: ecs.Secret.from_secrets_manager(redis_auth_secret)}
                if redis_auth_secret is not None
                else None
            ),
            logging=ecs.LogDrivers.aws_logs(
                stream_prefix="safety-kernel", log_group=self.log_group
            ),
            # The same probe as the image's HEALTHCHECK (ECS does not read that one).
            health_check=ecs.HealthCheck(
                command=[
                    "CMD",
                    "python",
                    "-c",
                    f"import socket; socket.create_connection(('127.0.0.1', {KERNEL_PORT}), 2)",
                ],
                interval=CONTAINER_HEALTH_CHECK_INTERVAL,
                start_period=CONTAINER_HEALTH_CHECK_START,
            ),
        )

        # The load balancer carries the network's kernel group, which admits the
        # functions and the bridge: that is where clients connect. The tasks admit
        # the load balancer alone (clients' traffic and health checks come from it).
        self.task_security_group = ec2.SecurityGroup(
            self,
            "TaskSecurityGroup",
            vpc=vpc,
            description=f"Cordum safety kernel tasks: {KERNEL_PORT} from the kernel load balancer",
            allow_all_outbound=False,
        )
        self.task_security_group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(HTTPS_PORT), "AWS APIs (ECR, S3, CloudWatch Logs)"
        )
        # Ingress on the tasks' group and, since the kernel group's egress is
        # closed, the matching egress rule on it.
        self.task_security_group.connections.allow_from(
            security_group, ec2.Port.tcp(KERNEL_PORT), "gRPC from the kernel load balancer"
        )
        self.task_security_group.connections.allow_to(
            cache_security_group, ec2.Port.tcp(REDIS_PORT), "Velocity windows in Redis"
        )
        self.load_balancer = elbv2.NetworkLoadBalancer(
            self,
            "LoadBalancer",
            vpc=vpc,
            vpc_subnets=subnets,
            internet_facing=False,
            security_groups=[security_group],
            # Both zones' nodes reach both tasks: a deploy or a failed task in one
            # zone does not leave that zone's clients without a kernel.
            cross_zone_enabled=True,
        )
        Validations.of(self.load_balancer).acknowledge(
            Acknowledgment(
                id="AwsSolutions-ELB2",
                reason=(
                    "Network Load Balancer access logs cover TLS listeners only; this "
                    "TCP listener passes the kernel's own TLS through and would log "
                    "nothing. The kernel logs every decision."
                ),
            )
        )
        self.service = _replicated_service(self, cluster, self.task_definition, subnets,
                                           self.task_security_group,
                                           health_check_grace_period=KERNEL_HEALTH_CHECK_GRACE)
        self.target_group = elbv2.NetworkTargetGroup(
            self,
            "Targets",
            vpc=vpc,
            port=KERNEL_PORT,
            protocol=elbv2.Protocol.TCP,
            target_type=elbv2.TargetType.IP,
            targets=[
                self.service.load_balancer_target(
                    container_name=KERNEL_CONTAINER, container_port=KERNEL_PORT
                )
            ],
            health_check=elbv2.HealthCheck(
                protocol=elbv2.Protocol.TCP,
                port=str(KERNEL_PORT),
                interval=KERNEL_HEALTH_CHECK_INTERVAL,
                healthy_threshold_count=KERNEL_HEALTHY_THRESHOLD,
                unhealthy_threshold_count=KERNEL_UNHEALTHY_THRESHOLD,
            ),
            deregistration_delay=KERNEL_DEREGISTRATION_DELAY,
            connection_termination=True,
        )
        self.load_balancer.add_listener(
            "Grpc",
            port=KERNEL_PORT,
            protocol=elbv2.Protocol.TCP,
            default_target_groups=[self.target_group],
        )
        self.address = f"{self.load_balancer.load_balancer_dns_name}:{KERNEL_PORT}"
        """``<nlb dns>:<port>``: the functions' SAFETY_KERNEL_ADDR."""

        # The certificate is for the name clients dial; the load balancer only passes
        # TCP through, so a client verifies the kernel task itself.
        self.tls = KernelTls(
            self,
            "Tls",
            host=self.load_balancer.load_balancer_dns_name,
            issuer_code=_lambda_image(KERNEL_PKI_DOCKERFILE, PLATFORMS[architecture][0]),
            architecture=architecture,
        )
        self.container.add_secret(
            TLS_CERT_ENV, ecs.Secret.from_secrets_manager(self.tls.secret, CERT_FIELD)
        )
        self.container.add_secret(
            TLS_KEY_ENV, ecs.Secret.from_secrets_manager(self.tls.secret, KEY_FIELD)
        )
        self.container.add_environment(TLS_SERIAL_ENV, self.tls.serial)
        # No task starts before the secret holds the certificate.
        self.service.node.add_dependency(self.tls.resource)
        self.ca_pem = self.tls.ca_pem
        """PEM of the CA clients trust (SAFETY_KERNEL_TLS_CA)."""


class CordumServices(Construct):
    """The ECS cluster, the bridge and, unless the stack is given one, the safety kernel."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        bridge_security_group: ec2.ISecurityGroup,
        kernel_security_group: ec2.ISecurityGroup,
        redis_url: str,
        redis_auth_secret: secretsmanager.ISecret | None,
        nats_url: str,
        submit_queue: sqs.IQueue,
        result_queue: sqs.IQueue,
        architecture: str,
        log_level: str,
        run_kernel: bool,
        cache_security_group: ec2.ISecurityGroup,
        safety_kernel_ca: str | None = None,
    ) -> None:
        """`safety_kernel_ca`: PEM of an outside kernel's CA (required without `run_kernel`)."""
        super().__init__(scope, construct_id)
        self.cluster = ecs.Cluster(
            self,
            "Cluster",
            vpc=vpc,
            container_insights_v2=ecs.ContainerInsights.ENABLED,
        )
        self.kernel: SafetyKernelService | None = None
        if run_kernel:
            self.kernel = SafetyKernelService(
                self,
                "SafetyKernel",
                cluster=self.cluster,
                vpc=vpc,
                subnets=subnets,
                security_group=kernel_security_group,
                architecture=architecture,
                log_level=log_level,
                redis_url=redis_url,
                redis_auth_secret=redis_auth_secret,
                cache_security_group=cache_security_group,
            )
            safety_kernel_ca = self.kernel.ca_pem
        if safety_kernel_ca is None:
            raise ContextError("an outside safety kernel needs its CA (context safetyKernelCa)")
        self.safety_kernel_ca: str = safety_kernel_ca
        """PEM of the CA every client of the kernel trusts."""
        self.bridge = BridgeService(
            self,
            "Bridge",
            cluster=self.cluster,
            subnets=subnets,
            security_group=bridge_security_group,
            redis_url=redis_url,
            redis_auth_secret=redis_auth_secret,
            nats_url=nats_url,
            submit_queue=submit_queue,
            result_queue=result_queue,
            architecture=architecture,
            log_level=log_level,
            safety_kernel_ca=safety_kernel_ca,
        )
