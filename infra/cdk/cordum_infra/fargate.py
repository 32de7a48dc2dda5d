"""What every long-running Fargate service of the stack shares: image, task, logs, rollout.

The bridge (cordum_infra.bridge) and the safety kernel (cordum_infra.safety_kernel)
each run at least SERVICE_TASKS tasks in the private subnets of both zones, more
when Application Auto Scaling adds them (:func:`scale_on_cpu`). Their images are
built from this repository at deploy time (build context the repo root as filtered
by ``.dockerignore``); a synth only stages the files, it never calls Docker. A
deploy starts all new tasks before any old one stops (min 100 %, max 200 %); a task
told to stop gets SIGTERM and is killed only after STOP_TIMEOUT.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import Acknowledgment, Duration, IgnoreMode, RemovalPolicy, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from cordum_infra.cache_users import CacheUsers
from cordum_infra.functions import LOG_RETENTION
from cordum_infra.settings import REPO_ROOT

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
"""The Redis password of the bridge and the kernel, injected by ECS from their user's
secret (cordum.config, cordum.safety.velocity)."""
REDIS_USERNAME_ENV = "REDIS_USERNAME"
"""The Redis user that password belongs to (not a secret: the task definition names it)."""

SERVICE_TASKS = 2
"""Fewest tasks per service: one per zone, so a zone (or a task) lost leaves one
running. The floor of each service's scaling (:class:`Scaling`)."""
MIN_HEALTHY_PERCENT = 100
MAX_HEALTHY_PERCENT = 200
"""A deploy never runs fewer tasks than the service had: it starts a full new set
(up to twice the count) and stops an old task only once a new one is healthy. At 50 %
a deploy under load would halve the capacity, and with two tasks leave one zone
without a task for the length of the deploy."""

STOP_TIMEOUT = Duration.seconds(30)
"""SIGTERM to SIGKILL. The bridge needs about 10 s of it (``STOP_TIMEOUT_S`` of
cordum.bus.bridge for in-flight forwards, then the NATS drain); the kernel's
gRPC server stops with a 5 s grace. Fargate allows at most 120 s."""

SERVICE_LOG_RETENTION = LOG_RETENTION
"""As long as the functions' logs: a job's history reads across both."""

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


def _asset(dockerfile: str, architecture: str) -> dict[str, Any]:
    """Image asset options: `dockerfile` (relative to the repo root) built at deploy time."""
    return {
        "file": dockerfile,
        "platform": PLATFORMS[architecture][0],
        "ignore_mode": IgnoreMode.DOCKER,
        "exclude": list(ASSET_EXCLUDE),
    }


def lambda_image(dockerfile: str, architecture: str) -> lambda_.DockerImageCode:
    """A Lambda image built from `dockerfile` at deploy time."""
    return lambda_.DockerImageCode.from_image_asset(
        str(REPO_ROOT), **_asset(dockerfile, architecture)
    )


@dataclass(frozen=True)
class SharedServiceSettings:
    """What the stack gives every Fargate service: where its tasks run, and its settings."""

    cluster: ecs.ICluster
    subnets: ec2.SubnetSelection
    """Private subnets of both zones."""
    architecture: str
    """``x86_64`` or ``arm64``: the image build platform and the Fargate CPU."""
    log_level: str
    redis_url: str
    redis_users: CacheUsers | None
    """The cache's users and their secrets; None when the stack's Redis has none."""


def task_definition(
    scope: Construct, *, cpu: int, memory_mib: int, architecture: str
) -> ecs.FargateTaskDefinition:
    """A Linux task definition (``Task``) whose image is pulled from the assets repository."""
    task = ecs.FargateTaskDefinition(
        scope,
        "Task",
        cpu=cpu,
        memory_limit_mib=memory_mib,
        runtime_platform=ecs.RuntimePlatform(
            cpu_architecture=PLATFORMS[architecture][1],
            operating_system_family=ecs.OperatingSystemFamily.LINUX,
        ),
    )
    Validations.of(task.obtain_execution_role()).acknowledge(
        Acknowledgment(id="AwsSolutions-IAM5[Resource::*]", reason=EXECUTION_ROLE_REASON)
    )
    return task


def service_container(
    scope: Construct,
    name: str,
    shared: SharedServiceSettings,
    *,
    dockerfile: str,
    cpu: int,
    memory_mib: int,
    environment: dict[str, str],
    redis_role: str,
    **options: Any,
) -> ecs.ContainerDefinition:
    """The one essential container `name` of a new task definition (``Task``) in `scope`.

    Its image is `dockerfile` built at deploy time, its logs go to ``/cordum/<name>``
    (``Logs``), and, when the cache has users, it logs in as `redis_role`'s user
    (cordum_infra.cache_users): REDIS_USERNAME names it, REDIS_AUTH_TOKEN is its
    password, which ECS reads from the user's secret at task start with the execution
    role, so neither the template nor the task definition holds it. `options` go to
    ``add_container`` (ports, health check).
    """
    architecture = shared.architecture
    task = task_definition(scope, cpu=cpu, memory_mib=memory_mib, architecture=architecture)
    Validations.of(task).acknowledge(Acknowledgment(id="AwsSolutions-ECS2", reason=_ENV_REASON))
    log_group = logs.LogGroup(
        scope,
        "Logs",
        log_group_name=f"/cordum/{name}",
        retention=SERVICE_LOG_RETENTION,
        removal_policy=RemovalPolicy.DESTROY,
    )
    secrets = None
    if shared.redis_users is not None:
        user = shared.redis_users.users[redis_role]
        environment = {**environment, REDIS_USERNAME_ENV: user.name}
        secret = shared.redis_users.secret(redis_role)
        secrets = {REDIS_AUTH_TOKEN_ENV: ecs.Secret.from_secrets_manager(secret, "password")}
    return task.add_container(
        name,
        image=ecs.ContainerImage.from_asset(str(REPO_ROOT), **_asset(dockerfile, architecture)),
        essential=True,
        stop_timeout=STOP_TIMEOUT,
        environment=environment,
        logging=ecs.LogDrivers.aws_logs(stream_prefix=name, log_group=log_group),
        secrets=secrets,
        **options,
    )


def replicated_service(
    scope: Construct,
    shared: SharedServiceSettings,
    container: ecs.ContainerDefinition,
    security_group: ec2.ISecurityGroup,
    **extra: Any,
) -> ecs.FargateService:
    """Private tasks of `container`'s task definition, spread over the zones, rolled
    back on a failed deploy; give it a task count with :func:`scale_on_cpu`.

    ECS replaces a task whose essential container exits or fails its health
    check (and, behind a load balancer, one the load balancer finds unhealthy).
    During a deploy the circuit breaker counts such failures of the new tasks;
    past its threshold it stops the deploy and rolls back to the last version
    that ran.
    """
    return ecs.FargateService(
        scope,
        "Service",
        cluster=shared.cluster,
        task_definition=container.task_definition,
        # No DesiredCount: CloudFormation would set it again on every update of the
        # service, undoing whatever the service scaled to (its scaling sets the floor).
        min_healthy_percent=MIN_HEALTHY_PERCENT,
        max_healthy_percent=MAX_HEALTHY_PERCENT,
        vpc_subnets=shared.subnets,
        security_groups=[security_group],
        assign_public_ip=False,
        availability_zone_rebalancing=ecs.AvailabilityZoneRebalancing.ENABLED,
        circuit_breaker=ecs.DeploymentCircuitBreaker(rollback=True),
        **extra,
    )


@dataclass(frozen=True)
class Scaling:
    """Task count bounds of a service and the average CPU it is kept at."""

    min_tasks: int
    max_tasks: int
    cpu_percent: int
    scale_out_cooldown: Duration = Duration.seconds(60)
    """A task starts and passes its checks in about a minute: adding more before the
    last ones take load would overshoot."""
    scale_in_cooldown: Duration = Duration.minutes(5)
    """Slow to give tasks back: a burst that repeats within minutes finds them."""


def scale_on_cpu(service: ecs.FargateService, scaling: Scaling) -> ecs.ScalableTaskCount:
    """Target tracking on the service's average CPU between `scaling`'s bounds.

    Registering the scalable target also raises a new service (created with one task,
    see :func:`replicated_service`) to ``min_tasks``.
    """
    if not SERVICE_TASKS <= scaling.min_tasks <= scaling.max_tasks:
        raise ValueError(
            f"scaling {scaling}: needs {SERVICE_TASKS} <= min_tasks <= max_tasks "
            "(one task per zone at least)"
        )
    count = service.auto_scale_task_count(
        min_capacity=scaling.min_tasks, max_capacity=scaling.max_tasks
    )
    count.scale_on_cpu_utilization(
        "Cpu",
        target_utilization_percent=scaling.cpu_percent,
        scale_out_cooldown=scaling.scale_out_cooldown,
        scale_in_cooldown=scaling.scale_in_cooldown,
    )
    return count
