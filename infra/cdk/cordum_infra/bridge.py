"""The NATS -> SQS bridge on ECS Fargate (AWS stack only; a local stack runs it on the host).

SERVICE_TASKS ``cordum-bridge`` tasks (cordum_infra.fargate) forward the
JetStream job subjects to the submit and result queues. A task told to stop
gets SIGTERM, finishes its in-flight forwards, drains NATS, and is killed only
after STOP_TIMEOUT. It is a client of the safety kernel like every process of
the stack, so it refuses any kernel but the stack's (TLS with its CA).
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cordum_infra.fargate import SharedServiceSettings, replicated_service, service_container
from cordum_infra.safety_kernel import tls_client_env

BRIDGE_DOCKERFILE = "docker/bridge.Dockerfile"
"""Relative to the repo root, the build context of the image."""

BRIDGE_CONTAINER = "bridge"

BRIDGE_CPU = 256
BRIDGE_MEMORY_MIB = 512


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
            },
        )
        self.task_definition = self.container.task_definition
        submit_queue.grant_send_messages(self.task_definition.task_role)
        result_queue.grant_send_messages(self.task_definition.task_role)
        self.service = replicated_service(self, shared, self.container, security_group)
