"""How the stack takes in the live event stream (cordum_infra.stream): on AWS with a
certificate, the service behind its load balancer, its NATS login and its outputs;
without one, a warning that clients poll instead."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Annotations, CfnOutput, Stack

from cordum_infra.stream import StreamService

if TYPE_CHECKING:
    from aws_cdk import aws_secretsmanager as secretsmanager

    from cordum_infra.nats import NatsCredentials
    from cordum_infra.nats_cluster import NatsCluster
    from cordum_infra.network import Network
    from cordum_infra.services import CordumServices
    from cordum_infra.settings import StackSettings

NO_STREAM_WARNING = (
    "No streamCertificateArn: the stack runs no live event stream (cordum-stream), so "
    "clients poll the REST API for job and workflow state. Give -c "
    "streamCertificateArn=<ACM certificate ARN of this region> to run it behind an "
    "HTTPS load balancer (docs/deploy.md)."
)


def add_stream(stack: Stack, settings: StackSettings, *, services: CordumServices,
               network: Network, api_keys_secret: secretsmanager.ISecret | None,
               nats_credentials: NatsCredentials | None, nats: NatsCluster | None,
               metrics_namespace: str) -> StreamService | None:
    """The stream service of an AWS stack, or None (and a synth warning) without a
    certificate for its HTTPS listener."""
    if settings.stream_certificate_arn is None:
        Annotations.of(stack).add_warning_v2("cordum:no-stream", NO_STREAM_WARNING)
        return None
    assert network.public_subnets is not None
    assert network.stream_security_group is not None
    assert api_keys_secret is not None  # an AWS stack refuses apiKeys
    stream = StreamService(
        stack,
        "Stream",
        shared=services.shared,
        vpc=network.vpc,
        public_subnets=network.public_subnets,
        task_security_group=network.stream_security_group,
        nats_url=settings.nats_url,
        certificate_arn=settings.stream_certificate_arn,
        api_keys_secret=api_keys_secret,
        metrics_namespace=metrics_namespace,
        domain=settings.stream_domain,
    )
    if nats_credentials is not None:
        nats_credentials.grant_container(stream.container)
    if nats is not None:  # the stack's own NATS: the stream starts once every node runs
        for service in nats.services:
            stream.service.node.add_dependency(service)
    return stream


def stream_outputs(stack: Stack, stream: StreamService) -> None:
    """Where clients reach the stream, and what to point a DNS name at."""
    CfnOutput(
        stack,
        "StreamUrl",
        value=stream.url,
        description=(
            "Live events (WebSocket or SSE; one job's: /api/v1/jobs/<id>/stream), "
            "at the name the certificate covers (streamDomain, else the load "
            "balancer's name: map one to StreamLoadBalancerDns)"
        ),
    )
    CfnOutput(
        stack,
        "StreamLoadBalancerDns",
        value=stream.dns_name,
        description="DNS name of the stream's load balancer (CNAME or alias target)",
    )
