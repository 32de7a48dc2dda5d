"""Where the AWS stack's network goes: the context keys that place it, checked up front.

Context keys (AWS stacks only, i.e. no ``redisUrl``):

=================== ==========================================================
account, region     the deployment target (12-digit account, region name);
                    default CDK_DEFAULT_ACCOUNT / CDK_DEFAULT_REGION, which the
                    CDK CLI sets from the caller's credentials. Needed by
                    vpcId (a lookup is made in one account and region); with
                    them the stack also looks up the region's zones and its
                    S3 prefix list (closed egress, see cordum_infra.network)
vpcId               an existing VPC (``vpc-`` + 8 or 17 hex digits) to deploy
                    into instead of creating one; looked up at synth time and
                    cached in cdk.context.json
subnetIds           with vpcId: the subnets (comma separated, one per zone, at
                    least two zones) for the functions, the cache, the Fargate
                    services and the endpoints. Default: the VPC's private
                    subnets (with a route to a NAT), or its isolated ones when
                    it has no private subnet
vpcCidr             IPv4 block of the VPC the stack creates (not with vpcId);
                    default 10.0.0.0/16; a /16 to a /20
availabilityZones   zone names (comma separated, exactly two) for the VPC the
                    stack creates (not with vpcId, whose subnets decide);
                    default the region's first two zones
=================== ==========================================================

Nothing here imports the CDK: app.py reads the target before it builds a stack.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_VPC_CIDR = "10.0.0.0/16"
"""65,536 addresses: the same block a default VPC gets, so it is the one most
networks already expect to route or to avoid."""

VPC_CIDR_PREFIXES = range(16, 21)
"""AWS accepts /16 to /28 for a VPC, but the stack carves two /22 private
subnets (1,024 addresses each, one per zone) and, with egress=nat, two /24
public ones out of it: that needs a /20 (4,096 addresses). /16 is AWS's
largest."""

ZONE_COUNT = 2
"""Zones spanned: the cache's primary and replica are in two zones, so is each
Fargate service's pair of tasks. A third zone would add a subnet, an endpoint
network interface per endpoint (about USD 7.30 a month each) and nothing the
two-node cache could use."""

DEFAULT_NATS_PORT = 4222
"""NATS client port when a natsUrl names none (the NATS default)."""

ACCOUNT = re.compile(r"^\d{12}$")
REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
VPC_ID = re.compile(r"^vpc-([0-9a-f]{8}|[0-9a-f]{17})$")
SUBNET_ID = re.compile(r"^subnet-([0-9a-f]{8}|[0-9a-f]{17})$")
ZONE_NAME = re.compile(r"^([a-z]{2}(-[a-z]+)+-\d+)[a-z]$")
"""An availability zone *name* (``us-east-1a``: region + letter). Zone ids
(``use1-az1``) are refused: see cordum_infra.network on names and ids."""


@dataclass(frozen=True)
class NetworkSettings:
    """The network placement read from the context (see the module docstring)."""

    vpc_id: str | None = None
    """Existing VPC to deploy into; None: the stack creates one."""
    subnet_ids: tuple[str, ...] = ()
    """With vpc_id: the chosen subnets; empty: the VPC's private subnets."""
    vpc_cidr: str = DEFAULT_VPC_CIDR
    """IPv4 block of a VPC the stack creates."""
    availability_zones: tuple[str, ...] = ()
    """Zone names of a VPC the stack creates; empty: the region's first two."""


Getter = Callable[[str], object]


def _error(message: str) -> Exception:
    # Imported here: settings.py imports this module.
    from cordum_infra.settings import ContextError

    return ContextError(message)


def _text(value: object) -> str | None:
    """A context value as stripped text (cdk.json may hold an account as a number)."""
    if value is None:
        return None
    return str(value).strip() or None


def _list(value: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


def read_network_settings(get: Getter, *, aws: bool) -> NetworkSettings:
    """Read and check vpcId, subnetIds, vpcCidr and availabilityZones.

    `get` returns a context value (None when absent); `aws` is False
    for a local stack (redisUrl given), which has no VPC and takes none of them.
    """
    vpc_id = _text(get("vpcId"))
    subnet_ids = _list(_text(get("subnetIds")))
    vpc_cidr = _text(get("vpcCidr"))
    zones = _list(_text(get("availabilityZones")))
    if not aws:
        given = [k for k, v in (("vpcId", vpc_id), ("subnetIds", subnet_ids),
                                ("vpcCidr", vpc_cidr), ("availabilityZones", zones)) if v]
        if given:
            raise _error(
                f"context {', '.join(given)} places the AWS stack's VPC: a local stack "
                "(redisUrl) has none. Drop redisUrl to deploy to AWS, or drop "
                f"{', '.join(given)}"
            )
        return NetworkSettings()

    if vpc_id is not None:
        if not VPC_ID.match(vpc_id):
            raise _error(f"context vpcId must be a VPC id (vpc- and 8 or 17 hex digits): {vpc_id}")
        for key, value in (("vpcCidr", vpc_cidr), ("availabilityZones", zones)):
            if value:
                raise _error(
                    f"context {key} shapes the VPC the stack creates; with vpcId the "
                    "existing VPC and its subnets decide: drop one of the two"
                )
    elif subnet_ids:
        raise _error("context subnetIds picks subnets of the VPC given by vpcId: give vpcId too")

    bad = [s for s in subnet_ids if not SUBNET_ID.match(s)]
    if bad:
        raise _error(
            f"context subnetIds must be subnet ids (subnet- and 8 or 17 hex digits): "
            f"{', '.join(bad)}"
        )
    if subnet_ids and len(set(subnet_ids)) < ZONE_COUNT:
        raise _error(
            f"context subnetIds needs at least {ZONE_COUNT} subnets in {ZONE_COUNT} zones "
            "(the cache keeps its replica in another zone): "
            f"{', '.join(subnet_ids)}"
        )

    cidr = DEFAULT_VPC_CIDR if vpc_cidr is None else _vpc_cidr(vpc_cidr)
    if zones:
        bad = [z for z in zones if not ZONE_NAME.match(z)]
        if bad:
            raise _error(
                "context availabilityZones takes zone names such as us-east-1a, not zone "
                f"ids (use1-az1): {', '.join(bad)}. aws ec2 describe-availability-zones "
                "lists both"
            )
        if len(set(zones)) != ZONE_COUNT or len(zones) != ZONE_COUNT:
            raise _error(
                f"context availabilityZones must name exactly {ZONE_COUNT} distinct zones "
                f"(the cache's primary and replica): {', '.join(zones)}"
            )
        regions = {ZONE_NAME.match(z).group(1) for z in zones}  # type: ignore[union-attr]
        if len(regions) != 1:
            raise _error(
                f"context availabilityZones must be zones of one region: {', '.join(zones)}"
            )
    return NetworkSettings(
        vpc_id=vpc_id, subnet_ids=subnet_ids, vpc_cidr=cidr, availability_zones=zones
    )


def _vpc_cidr(value: str) -> str:
    try:
        network = ipaddress.IPv4Network(value, strict=True)
    except ValueError as exc:
        raise _error(
            f"context vpcCidr must be an IPv4 block such as 10.0.0.0/16 (network address, "
            f"no host bits): {value}: {exc}"
        ) from exc
    if "/" not in value or network.prefixlen not in VPC_CIDR_PREFIXES:
        raise _error(
            f"context vpcCidr must be a /{VPC_CIDR_PREFIXES.start} to "
            f"/{VPC_CIDR_PREFIXES.stop - 1} (two /22 private subnets and, with egress=nat, "
            f"two /24 public ones must fit): {value}"
        )
    return str(network)


def deployment_target(
    get: Getter, environ: Mapping[str, str]
) -> tuple[str, str] | None:
    """(account, region) of the stack: the ``account`` / ``region`` context, else
    CDK_DEFAULT_ACCOUNT / CDK_DEFAULT_REGION; None when either is unknown (an
    environment-agnostic stack). A context value that is given must be well formed."""
    ctx_account, ctx_region = (_text(get(key)) for key in ("account", "region"))
    if ctx_account is not None and not ACCOUNT.match(ctx_account):
        raise _error(f"context account must be a 12-digit AWS account id: {ctx_account}")
    if ctx_region is not None and not REGION.match(ctx_region):
        raise _error(f"context region must be a region name such as us-east-1: {ctx_region}")
    account = ctx_account or environ.get("CDK_DEFAULT_ACCOUNT") or None
    region = ctx_region or environ.get("CDK_DEFAULT_REGION") or None
    if account is None or region is None:
        return None
    return account, region


def url_ports(urls: str, default: int = DEFAULT_NATS_PORT) -> tuple[int, ...]:
    """Distinct ports of comma-separated server URLs (`default` where a URL has none)."""
    ports: list[int] = []
    for url in _list(urls):
        port = urlsplit(url).port or default
        if port not in ports:
            ports.append(port)
    return tuple(ports) or (default,)


def addr_port(addr: str) -> int:
    """The port of ``host:port``."""
    _, _, port = addr.rpartition(":")
    if not port.isdigit():
        raise _error(f"context safetyKernelAddr must be host:port: {addr}")
    return int(port)
