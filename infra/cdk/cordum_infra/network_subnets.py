"""Which subnets of an existing VPC (context vpcId) the stack uses: the private ones
for everything it places (subnetIds, else one private or isolated subnet per zone),
and, for the live event stream's load balancer, a public one in each of their zones."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import aws_ec2 as ec2

from cordum_infra.context_values import ContextError
from cordum_infra.network_settings import ZONE_COUNT

if TYPE_CHECKING:
    from cordum_infra.network_settings import NetworkSettings


def public_subnets(
    vpc: ec2.IVpc, placement: NetworkSettings, private: list[ec2.ISubnet],
    pending: bool,
) -> ec2.SubnetSelection:
    """One public subnet of the existing VPC in each zone of the chosen private
    subnets: a load balancer sends only to targets in its own zones."""
    by_zone: dict[str, ec2.ISubnet] = {}
    for subnet in vpc.public_subnets:
        by_zone.setdefault(subnet.availability_zone, subnet)
    zones = [s.availability_zone for s in private]
    missing = [z for z in zones if z not in by_zone]
    if missing and not pending:
        raise ContextError(
            f"context streamCertificateArn: the stream's internet-facing load balancer "
            f"needs a public subnet (a route to an internet gateway) of {placement.vpc_id} "
            f"in each zone of the stack's subnets; none in {', '.join(missing)}. Add "
            "them, or deploy without streamCertificateArn"
        )
    return ec2.SubnetSelection(subnets=[by_zone[z] for z in zones if z in by_zone])

def choose_subnets(
    vpc: ec2.IVpc, placement: NetworkSettings, pending: bool
) -> list[ec2.ISubnet]:
    known = [*vpc.private_subnets, *vpc.isolated_subnets, *vpc.public_subnets]
    if placement.subnet_ids and not pending:
        by_id = {s.subnet_id: s for s in known}
        unknown = [s for s in placement.subnet_ids if s not in by_id]
        if unknown:
            raise ContextError(
                f"context subnetIds: {', '.join(unknown)} is not a subnet of "
                f"{placement.vpc_id}"
            )
        chosen = [by_id[s] for s in placement.subnet_ids]
        zones = [s.availability_zone for s in chosen]
        if len(set(zones)) != len(zones) or len(zones) < ZONE_COUNT:
            named = zip(placement.subnet_ids, zones, strict=True)
            raise ContextError(
                f"context subnetIds must be in {ZONE_COUNT} zones or more, one subnet "
                f"each: {', '.join(f'{s} ({z})' for s, z in named)}"
            )
        return chosen
    # The VPC's private subnets (a route to a NAT), else its isolated ones;
    # one per zone.
    candidates = list(vpc.private_subnets) or list(vpc.isolated_subnets)
    one_per_zone: dict[str, ec2.ISubnet] = {}
    for subnet in candidates:
        one_per_zone.setdefault(subnet.availability_zone, subnet)
    chosen = list(one_per_zone.values())
    if len(chosen) < ZONE_COUNT and not pending:
        raise ContextError(
            f"context vpcId: {placement.vpc_id} has private or isolated subnets in "
            f"{len(chosen)} zone(s), the stack needs {ZONE_COUNT}: name them with "
            "subnetIds (one per zone)"
        )
    return chosen
