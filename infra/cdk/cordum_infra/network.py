"""The VPC the functions and the cache live in (only when the stack owns Redis).

Functions in a VPC reach SQS, Lambda, SSM, CloudWatch Logs and an outside NATS
only through NAT, so the private subnets have egress.
"""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from constructs import Construct

MAX_AZS = 2
"""Availability zones spanned; the cache puts its primary and replica in two."""

NAT_GATEWAYS = 2
"""One NAT gateway per zone, so losing a zone does not cut the other one's
egress (the cache fails over across zones; so should the path to SQS/NATS)."""

PUBLIC_SUBNET_MASK = 24
PRIVATE_SUBNET_MASK = 22
"""Private subnets are larger: every concurrent function execution in a VPC
holds a network interface address (through Hyperplane ENIs, shared per
subnet + security group, but sized generously anyway)."""


class Network(Construct):
    """VPC with public subnets (NAT) and private subnets with egress."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            max_azs=MAX_AZS,
            nat_gateways=NAT_GATEWAYS,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=PUBLIC_SUBNET_MASK
                ),
                ec2.SubnetConfiguration(
                    name="private",
                    subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                    cidr_mask=PRIVATE_SUBNET_MASK,
                ),
            ],
            # True would add a custom-resource Lambda (Node.js) at deploy time.
            restrict_default_security_group=False,
        )
        self.private_subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        self.functions_security_group = ec2.SecurityGroup(
            self,
            "FunctionsSecurityGroup",
            vpc=self.vpc,
            description="Cordum Lambda functions",
            allow_all_outbound=True,
        )
