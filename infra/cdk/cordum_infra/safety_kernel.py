"""The safety kernel on ECS Fargate: ``cordum-safety-kernel`` tasks behind an internal NLB.

Only the AWS stack runs it, and only when it is not given an outside kernel (a
local stack starts the kernel as a host process). Two to six tasks
(KERNEL_SCALING, cordum_infra.fargate) sit behind an internal Network Load Balancer on
KERNEL_PORT, health checked over TCP on that port. The load balancer's DNS name
is stable, so the functions get ``<nlb dns>:<port>`` as SAFETY_KERNEL_ADDR; its
security group (the network's kernel group) admits the functions and the
bridge, and the tasks admit only the load balancer.

The kernel serves TLS itself (the load balancer passes TCP through) with a
certificate for that name issued at deploy time by the stack's CA
(cordum_infra.kernel_tls); every client requires TLS and trusts only that CA
(:func:`tls_client_env`), which a certificate rotation keeps. Its policy is the
stack's S3 object, read at task start (cordum_infra.kernel_policy). Velocity
windows are counted in the stack's Redis (TLS, AUTH token), shared by all tasks.

Scaling: target tracking on CPU only (KERNEL_SCALING). A Network Load Balancer has no
per-target request count (ALBRequestCountPerTarget is an Application Load Balancer
metric), and its flow counts follow the clients' long-lived gRPC connections, not
the checks they carry.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from constructs import Construct

from cordum_infra.cache import REDIS_PORT
from cordum_infra.fargate import (
    Scaling,
    SharedServiceSettings,
    replicated_service,
    scale_on_cpu,
    service_container,
)
from cordum_infra.kernel_policy import KernelPolicy
from cordum_infra.kernel_tls import CERT_FIELD, KEY_FIELD, KernelTls
from cordum_infra.network import KERNEL_PORT

KERNEL_DOCKERFILE = "docker/safety-kernel.Dockerfile"
KERNEL_PKI_DOCKERFILE = "docker/kernel-pki.Dockerfile"
"""Paths relative to the repo root, the build context of the images (the second one
is the Lambda image that issues the kernel's certificate at deploy time)."""

KERNEL_CONTAINER = "safety-kernel"

BUNDLE_RELOAD_INTERVAL_S = "2"
"""cordum.safety.live_policy: seconds between two reads of the policy bundles, the
longest a bundle change waits when its NATS message does not reach a task."""

TLS_CERT_ENV = "SAFETY_KERNEL_TLS_CERT"
TLS_KEY_ENV = "SAFETY_KERNEL_TLS_KEY"
TLS_CA_ENV = "SAFETY_KERNEL_TLS_CA"
TLS_REQUIRED_ENV = "SAFETY_KERNEL_TLS_REQUIRED"
"""cordum.safety.tls: the kernel's PEM certificate and key, the clients' CA (PEM text
or a file) and their refusal of plaintext."""
TLS_SERIAL_ENV = "SAFETY_KERNEL_TLS_SERIAL"
"""Read by nothing: a new certificate changes it, so ECS starts tasks that read the
new secret value (a task reads its secrets once, at start)."""

KERNEL_CPU = 512
KERNEL_MEMORY_MIB = 1024
"""The kernel answers every submit and dispatch check: it gets a larger share than the bridge."""

# The load balancer's health check: a TCP connect to KERNEL_PORT on each task, from
# the load balancer's nodes (the path clients take). ECS replaces a task the load
# balancer finds unhealthy, as it replaces one whose container check fails.
KERNEL_HEALTH_CHECK_INTERVAL = Duration.seconds(10)
"""With the thresholds below, a dead task stops getting connections within about
20 s (the clients' retries and breaker carry the calls in between). 5 s would
double the probes (every node of the load balancer checks every task) to gain
10 s."""
KERNEL_HEALTH_CHECK_TIMEOUT = Duration.seconds(5)
"""A TCP handshake inside the VPC takes milliseconds; a task that has not accepted
within 5 s is not serving. Shorter than the interval, so checks never overlap."""
KERNEL_HEALTHY_THRESHOLD = 2
"""A new task gets connections after two good checks (about 20 s), not on the
first accept of a process that may still be loading its policy."""
KERNEL_UNHEALTHY_THRESHOLD = 2
"""Two failed checks in a row: one lost probe does not drain a serving task."""
KERNEL_HEALTH_CHECK_GRACE = Duration.seconds(30)
"""ECS ignores the load balancer's verdict on a new task this long: the container
starts (policy loaded, port bound, a few seconds) and needs two good checks, 10 s
apart, before it counts as healthy."""
KERNEL_DEREGISTRATION_DELAY = Duration.seconds(120)
"""A kernel task leaving gets no new connections at once; its open ones are cut after
this, and ECS sends SIGTERM only then. The kernel closes each connection itself
after at most 101 s (cordum.safety.kernel: a 60 s maximum age, plus up to 10 %
jitter, plus a 35 s grace for the calls on it, itself longer than the longest
deadline a client gives a check, the output content check's 30 s). 120 s lets
every connection of a draining task end that way, with no check cut mid-call. It
lengthens a deploy by 2 minutes, in which the new tasks already serve."""

KERNEL_SCALING = Scaling(min_tasks=2, max_tasks=6, cpu_percent=50)
"""Two tasks, one per zone, at least. Kept at 50 % CPU: should one zone's tasks go,
the others carry its load without saturating before new tasks start (about a
minute), and a check's 0.5 s (output meta) to 2 s deadline leaves no room for
queueing on a busy CPU. Six tasks of 0.5 vCPU bound the cost at about $108 a
month, three times the floor; raise max_tasks for a larger fleet."""

# The container's own health check: a TCP connect to KERNEL_PORT from inside the task,
# the same probe as the image's HEALTHCHECK (the kernel serves no gRPC health service).
# It catches a process that lives but no longer accepts, also when no client calls.
CONTAINER_HEALTH_CHECK_COMMAND = [
    "CMD",
    "python",
    "-c",
    f"import socket; socket.create_connection(('127.0.0.1', {KERNEL_PORT}), 2)",
]
"""Plain ``python -c`` with the standard library: starts in tens of milliseconds,
and the connect gives up after 2 s."""
CONTAINER_HEALTH_CHECK_INTERVAL = Duration.seconds(15)
"""Often enough that, with the retries below, a kernel that stopped accepting is
replaced within about 45 s; each check costs one short-lived interpreter."""
CONTAINER_HEALTH_CHECK_TIMEOUT = Duration.seconds(3)
"""As the image's: the probe's own 2 s connect bound plus the interpreter's start."""
CONTAINER_HEALTH_CHECK_RETRIES = 3
"""Three failures in a row: one probe starved of CPU on a busy task is no dead
kernel."""
CONTAINER_HEALTH_CHECK_START = Duration.seconds(15)
"""The kernel binds its port a few seconds after start (imports, policy load);
failures before 15 s do not count."""


def tls_client_env(ca_pem: str) -> dict[str, str]:
    """What a client of the kernel needs to refuse anything but the stack's kernel."""
    return {TLS_REQUIRED_ENV: "true", TLS_CA_ENV: ca_pem}


class SafetyKernelService(Construct):
    """``cordum-safety-kernel`` tasks behind an internal Network Load Balancer."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        shared: SharedServiceSettings,
        vpc: ec2.IVpc,
        security_group: ec2.ISecurityGroup,
        cache_security_group: ec2.ISecurityGroup,
        tls: KernelTls,
        policy_file: Path,
        nats_url: str | None = None,
    ) -> None:
        """`tls`: the stack's CA, which issues the kernel's certificate; `policy_file`:
        the safety.yaml the stack puts in its policy bucket; `nats_url`: the stack's
        NATS, on which the kernel hears ``sys.config.changed`` (its login and CA come
        from ``NatsCredentials.grant_container``, as the bridge's do). Without it the
        kernel still reads the policy bundles every SAFETY_POLICY_RELOAD_INTERVAL_S."""
        super().__init__(scope, construct_id)
        self.container = service_container(
            self,
            KERNEL_CONTAINER,
            shared,
            dockerfile=KERNEL_DOCKERFILE,
            cpu=KERNEL_CPU,
            memory_mib=KERNEL_MEMORY_MIB,
            redis_role="kernel",
            # Velocity windows in the stack's Redis: one window per rule and key for
            # all tasks, not one per task; the policy bundles (cfg:system:policy) are
            # read from the same Redis, every 2 s and on each NATS change message.
            environment={
                "LOG_LEVEL": shared.log_level,
                "REDIS_URL": shared.redis_url,
                "SAFETY_POLICY_RELOAD_INTERVAL_S": BUNDLE_RELOAD_INTERVAL_S,
                **({"NATS_URL": nats_url} if nats_url else {}),
            },
            port_mappings=[ecs.PortMapping(container_port=KERNEL_PORT)],
            # ECS does not read the image's HEALTHCHECK: the task definition repeats it.
            health_check=ecs.HealthCheck(
                command=CONTAINER_HEALTH_CHECK_COMMAND,
                interval=CONTAINER_HEALTH_CHECK_INTERVAL,
                timeout=CONTAINER_HEALTH_CHECK_TIMEOUT,
                retries=CONTAINER_HEALTH_CHECK_RETRIES,
                start_period=CONTAINER_HEALTH_CHECK_START,
            ),
        )
        self.task_definition = self.container.task_definition
        self.policy = KernelPolicy(self, "Policy", policy_file=policy_file)
        for name, value in self.policy.environment().items():
            self.container.add_environment(name, value)
        self.policy.grant_read(self.task_definition.task_role)

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
        # AWS APIs (ECR, the policy object in S3, CloudWatch Logs, Secrets Manager):
        # the stack opens them the way its egress mode allows (Network.allow_aws_apis).
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
            vpc_subnets=shared.subnets,
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
        self.service = replicated_service(
            self,
            shared,
            self.container,
            self.task_security_group,
            health_check_grace_period=KERNEL_HEALTH_CHECK_GRACE,
        )
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
                timeout=KERNEL_HEALTH_CHECK_TIMEOUT,
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
        self.certificate = tls.leaf("Kernel", [self.load_balancer.load_balancer_dns_name])
        secret = self.certificate.secret
        self.container.add_secret(TLS_CERT_ENV, ecs.Secret.from_secrets_manager(secret, CERT_FIELD))
        self.container.add_secret(TLS_KEY_ENV, ecs.Secret.from_secrets_manager(secret, KEY_FIELD))
        self.container.add_environment(TLS_SERIAL_ENV, self.certificate.serial)
        # No task starts before the secret holds the certificate and the bucket its policy.
        self.service.node.add_dependency(self.certificate.resource)
        self.service.node.add_dependency(self.policy.deployment)
        self.ca_pem = self.certificate.ca_pem
        """PEM of the CA clients trust (SAFETY_KERNEL_TLS_CA)."""
        self.scaling = scale_on_cpu(self.service, KERNEL_SCALING)
