"""Egress of Cordum's security groups: each destination named, none opens all traffic.

=========== ===================================================================
functions   HTTPS to the endpoints' group (``nat``: to anywhere, where the AWS
            APIs' public addresses are: thousands of ranges per region that
            change every week, too many to list), Redis to the cache's group,
            gRPC to the kernel's group (an outside kernel: its port inside the
            VPC), NATS (natsUrl's ports) inside the VPC (``nat``: anywhere, an
            outside cluster)
bridge      the same, and HTTPS to the region's S3 prefix list for its image
            layers (``nat``: covered by HTTPS to anywhere)
kernel      the load balancer's group: only what the kernel service adds
            towards its tasks (the tasks' group gets ``aws_apis``)
stream      the stream's tasks (when the stack runs them): as the bridge, but
            no kernel (the stream never calls it); its load balancer's group
            sends to the tasks' port alone (cordum_infra.stream)
cache       nothing (ElastiCache answers, it never calls out)
=========== ===================================================================

Each rule to another group is a resource of its own (CDK makes one for a group
peer), so no two groups' definitions refer to each other and CloudFormation
sees no dependency cycle.
"""

from __future__ import annotations

from aws_cdk import Annotations
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from cordum_infra.cache import REDIS_PORT
from cordum_infra.network_settings import DEFAULT_NATS_PORT, addr_port, url_ports
from cordum_infra.settings import EGRESS_NAT

KERNEL_PORT = 50051
"""gRPC port of the safety kernel (SafetyKernel service)."""
HTTPS_PORT = 443


class Egress:
    """The egress rules of one network (not a construct: it adds rules to groups and,
    once, the S3 prefix list lookup under `scope`)."""

    def __init__(
        self,
        scope: Construct,
        *,
        egress: str,
        vpc_cidr: str,
        region: str | None,
        endpoints_security_group: ec2.ISecurityGroup | None,
    ) -> None:
        self.scope = scope
        self.egress = egress
        self.vpc_cidr = vpc_cidr
        self.region = region
        self.endpoints_security_group = endpoints_security_group
        self._s3_peer: ec2.IPeer | None = None

    def inside(self) -> ec2.IPeer:
        """Where in-VPC services (NATS, an outside kernel) are: the VPC's block in
        ``endpoints`` mode, anywhere with a NAT (an outside cluster)."""
        if self.egress == EGRESS_NAT:
            return ec2.Peer.any_ipv4()
        return ec2.Peer.ipv4(self.vpc_cidr)

    def clients(
        self,
        *,
        functions: ec2.SecurityGroup,
        bridge: ec2.SecurityGroup,
        cache: ec2.ISecurityGroup,
        kernel: ec2.ISecurityGroup,
        nats_url: str,
        kernel_addr: str | None,
        stream: ec2.SecurityGroup | None = None,
    ) -> None:
        """The egress of the functions, the bridge and the stream (module docstring)."""
        nats_ports = url_ports(nats_url) if nats_url else (DEFAULT_NATS_PORT,)
        if stream is not None:
            self.aws_apis(stream, images=True)
            stream.add_egress_rule(cache, ec2.Port.tcp(REDIS_PORT), "Redis (the cache)")
            for port in nats_ports:
                stream.add_egress_rule(self.inside(), ec2.Port.tcp(port), f"NATS ({port})")
        for group, images in ((functions, False), (bridge, True)):
            self.aws_apis(group, images=images)
            group.add_egress_rule(cache, ec2.Port.tcp(REDIS_PORT), "Redis (the cache)")
            if kernel_addr is None:
                group.add_egress_rule(
                    kernel, ec2.Port.tcp(KERNEL_PORT), "Safety kernel gRPC (its load balancer)"
                )
            else:
                group.add_egress_rule(
                    self.inside(),
                    ec2.Port.tcp(addr_port(kernel_addr)),
                    f"Safety kernel gRPC ({kernel_addr})",
                )
            for port in nats_ports:
                group.add_egress_rule(self.inside(), ec2.Port.tcp(port), f"NATS ({port})")

    def aws_apis(self, group: ec2.SecurityGroup, *, images: bool = True) -> None:
        """Let `group` call the AWS APIs Cordum uses; `images`: pull ECR images too
        (their layers come from S3)."""
        if self.egress == EGRESS_NAT:
            group.add_egress_rule(
                ec2.Peer.any_ipv4(),
                ec2.Port.tcp(HTTPS_PORT),
                "AWS APIs at their public addresses, through the NAT gateway",
            )
            return
        assert self.endpoints_security_group is not None
        group.add_egress_rule(
            self.endpoints_security_group,
            ec2.Port.tcp(HTTPS_PORT),
            "AWS APIs through the VPC interface endpoints",
        )
        if images:
            group.add_egress_rule(
                self._s3(), ec2.Port.tcp(HTTPS_PORT), "ECR image layers (S3 gateway endpoint)"
            )

    def _s3(self) -> ec2.IPeer:
        """The region's S3 prefix list (what the gateway endpoint routes), looked up
        once; an environment-agnostic stack cannot look it up and gets HTTPS to
        anywhere instead, which its isolated subnets route only to S3 and the VPC."""
        if self._s3_peer is None:
            if self.region is not None:
                prefix_list = ec2.PrefixList.from_lookup(
                    self.scope,
                    "S3PrefixList",
                    prefix_list_name=f"com.amazonaws.{self.region}.s3",
                )
                self._s3_peer = ec2.Peer.prefix_list(prefix_list.prefix_list_id)
            else:
                Annotations.of(self.scope).add_warning_v2(
                    "cordum:s3-egress-open",
                    "No account/region at synth: HTTPS egress for image layers goes to "
                    "0.0.0.0/0 instead of the S3 prefix list. Give -c account=... -c "
                    "region=... (or deploy with credentials) to close it.",
                )
                self._s3_peer = ec2.Peer.any_ipv4()
        return self._s3_peer
