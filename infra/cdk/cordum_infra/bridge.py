"""The NATS -> SQS bridge on ECS Fargate (AWS stack only; a local stack runs it on the host).

SERVICE_TASKS ``cordum-bridge`` tasks (cordum_infra.fargate) forward the
JetStream job subjects to the submit and result queues. A task told to stop
gets SIGTERM, finishes its in-flight forwards, drains NATS, and is killed only
after STOP_TIMEOUT. It is a client of the safety kernel like every process of
the stack, so it refuses any kernel but the stack's (TLS with its CA).

The bridge serves no port, so its health is its own report (cordum.bus.health):
every 15 s it asks JetStream how far each consumer lags, touches BRIDGE_HEALTH_FILE
when JetStream answered, and writes the lag as EMF metrics that the alarm
``BridgeNotForwarding`` (cordum_infra.observability) watches. The container's
health check fails once that file is stale; ECS then replaces the task, as it
does a task that exits.
"""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cordum_infra.fargate import SharedServiceSettings, replicated_service, service_container
from cordum_infra.safety_kernel import tls_client_env

BRIDGE_DOCKERFILE = "docker/bridge.Dockerfile"
"""Relative to the repo root, the build context of the image."""

BRIDGE_CONTAINER = "bridge"

BRIDGE_CPU = 256
BRIDGE_MEMORY_MIB = 512

BRIDGE_HEALTH_FILE = "/tmp/cordum-bridge.alive"
"""Where the bridge notes its last answered forwarding probe (BRIDGE_HEALTH_FILE);
the image's user may write /tmp."""
BRIDGE_HEALTH_COMMAND = ["CMD", "python", "-m", "cordum.bus.health"]
"""Exits 1 once the file is older than cordum.bus.health's HEALTH_MAX_AGE_S (60 s:
four missed 15 s probes). Before the first answered probe it passes for
STARTUP_GRACE_S (600 s) from the bridge's start: a bridge waiting for a NATS that
comes up with the stack (JetStream electing its leader) is not replaced, and a
first deploy is not rolled back for it."""
BRIDGE_HEALTH_CHECK_INTERVAL = Duration.seconds(30)
"""Half the file's 60 s bound, so a stale file is seen within 30 s of going
stale. Each check starts a Python interpreter (about 0.2 s of CPU, on a quarter
vCPU): more often would tax the bridge for no faster verdict."""
BRIDGE_HEALTH_CHECK_TIMEOUT = Duration.seconds(5)
"""The check reads the settings and one file's time, well under a second; 5 s
leaves room on a busy quarter vCPU without hiding a check that hangs."""
BRIDGE_HEALTH_CHECK_RETRIES = 3
"""Three failed checks in a row (90 s) before ECS replaces the task: with the 60 s
bound, about two and a half minutes after the last answered probe. A NATS
reconnect (retried every second) or a JetStream leader election is far shorter,
so neither costs a task."""
BRIDGE_HEALTH_CHECK_START = Duration.seconds(120)
"""Failures in the first two minutes do not count. The check passes once the bridge
has noted its start (cordum.bus.health's start-up grace), seconds after the
interpreter starts; 120 s covers that start on a quarter vCPU whose image is
pulled while the stack's other tasks start too, and is twice a NATS node's own
start period (cordum_infra.nats_cluster), so a bridge is never judged before the
nodes it waits for."""


class BridgeService(Construct):
    """``cordum-bridge`` tasks forwarding JetStream job subjects to the two queues."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        shared: SharedServiceSettings,
        security_group: ec2.ISecurityGroup,
        nats_url: str,
        submit_queue: sqs.IQueue,
        result_queue: sqs.IQueue,
        safety_kernel_ca: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.container = service_container(
            self,
            BRIDGE_CONTAINER,
            shared,
            dockerfile=BRIDGE_DOCKERFILE,
            cpu=BRIDGE_CPU,
            memory_mib=BRIDGE_MEMORY_MIB,
            redis_role="bridge",
            environment={
                "REDIS_URL": shared.redis_url,
                "NATS_URL": nats_url,
                "SUBMIT_QUEUE_URL": submit_queue.queue_url,
                "RESULT_QUEUE_URL": result_queue.queue_url,
                # boto3 takes the region from here; without it the bridge
                # would fall back to its local default.
                "AWS_REGION": Stack.of(self).region,
                "LOG_LEVEL": shared.log_level,
                # Like every process of the stack that could call the kernel.
                **tls_client_env(safety_kernel_ca),
                "BRIDGE_HEALTH_FILE": BRIDGE_HEALTH_FILE,
                # The log driver ships these lines; CloudWatch Logs extracts the metrics.
                "BRIDGE_EMF_METRICS": "true",
            },
            health_check=ecs.HealthCheck(
                command=BRIDGE_HEALTH_COMMAND,
                interval=BRIDGE_HEALTH_CHECK_INTERVAL,
                timeout=BRIDGE_HEALTH_CHECK_TIMEOUT,
                retries=BRIDGE_HEALTH_CHECK_RETRIES,
                start_period=BRIDGE_HEALTH_CHECK_START,
            ),
        )
        self.task_definition = self.container.task_definition
        submit_queue.grant_send_messages(self.task_definition.task_role)
        result_queue.grant_send_messages(self.task_definition.task_role)
        self.service = replicated_service(self, shared, self.container, security_group)
