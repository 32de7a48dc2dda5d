"""The VPC and the security groups of Cordum on AWS (only when the stack owns Redis).

Where
    An existing VPC (context ``vpcId``, looked up at synth time in the stack's
    account and region and cached in cdk.context.json) and its private subnets,
    or the ones ``subnetIds`` names; or a VPC the stack creates from ``vpcCidr``
    (default 10.0.0.0/16) in two zones, ``availabilityZones`` or the region's
    first two. cordum_infra/network_settings.py checks those keys.

Availability zone names and ids
    A zone *name* (``us-east-1a``) is a per-account alias: AWS maps the letters
    to physical zones differently in each account, so ``us-east-1a`` in one
    account may be ``us-east-1c`` in another. A zone *id* (``use1-az1``) names
    the physical zone and is the same in every account. Ids matter when the
    stack must sit next to something in another account (an outside NATS
    cluster, a peered VPC: same zone, no cross-zone transfer charge of USD 0.01
    per GB each way) or avoid a zone short of a node type. Left to itself the
    CDK takes the region's first two names in alphabetical order: a choice by
    position that means different physical zones in different accounts, and
    that moves if the account's zone list changes. So choose: with
    ``availabilityZones`` (names, as CloudFormation's subnets take them; find
    the names of the ids you want with ``aws ec2 describe-availability-zones
    --query 'AvailabilityZones[].[ZoneName,ZoneId]'``), or with an existing
    VPC's subnets, whose zones are whatever they were created in.

How they reach AWS APIs: the ``egress`` context
    ``endpoints`` (default): isolated subnets and VPC endpoints for every AWS
    API called from inside the VPC (INTERFACE_ENDPOINTS names the callers),
    plus the free S3 gateway endpoint that serves ECR's image layers. NATS must
    be reachable inside the VPC (the stack's own NATS, or peering).
    ``nat``: public subnets with one NAT gateway, private subnets routed
    through it; an outside NATS is reachable, no interface endpoint is paid
    for. With ``vpcId``, ``nat`` means the VPC brings its own way out (a NAT,
    or endpoints it already has) and the stack adds no endpoint; ``endpoints``
    adds the stack's endpoints to that VPC, which must not have interface
    endpoints with private DNS, or an S3 gateway endpoint on the chosen
    subnets' route tables, for the same services already.

Security groups are created here, so every construct that attaches them
shares one definition of who may talk to whom: the cache admits 6379 and the
safety kernel admits its gRPC port from the functions and the bridge only,
and their egress names each destination (cordum_infra.network_egress).

The live event stream (``stream=True``: context streamCertificateArn)
    Its tasks are private like every service's and get a group of their own
    here (``stream_security_group``: the cache admits it; Redis, NATS and the
    AWS APIs are its only egress). Its internet-facing load balancer needs
    public subnets (``public_subnets``), one per zone: ``nat`` mode has them;
    ``endpoints`` mode adds two small ones (PUBLIC_SUBNET_MASK) after the
    private ones, so the private subnets keep their blocks, with an internet
    gateway routed from those two subnets alone. No NAT gateway, no route from
    the isolated subnets: the tasks still reach nothing outside the VPC
    (cordum_infra.stream). An existing VPC brings its own public subnets in
    the zones of the chosen private ones.
"""

from __future__ import annotations

from aws_cdk import CfnResource, RemovalPolicy, Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from cordum_infra.cache import REDIS_PORT
from cordum_infra.network_egress import HTTPS_PORT, KERNEL_PORT, Egress
from cordum_infra.network_settings import ZONE_COUNT, NetworkSettings
from cordum_infra.network_subnets import choose_subnets, public_subnets
from cordum_infra.settings import EGRESS_ENDPOINTS, EGRESS_NAT, ContextError

MAX_AZS = ZONE_COUNT
"""Availability zones spanned; the cache puts its primary and replica in two."""

NAT_GATEWAYS = 1
"""``nat`` mode: one NAT gateway (about USD 33 a month plus USD 0.045 per GB),
in the first zone. Losing that zone cuts the other zone's internet egress until
it returns; ``endpoints`` mode has no such single point (each endpoint has a
network interface in both zones)."""

PUBLIC_SUBNET_MASK = 24
PRIVATE_SUBNET_MASK = 22
"""Private subnets are larger (1,019 usable addresses each): every function in
a VPC holds Hyperplane network interfaces, shared per subnet + security group,
and each Fargate task holds one address."""


INTERFACE_ENDPOINTS: dict[str, ec2.InterfaceVpcEndpointAwsService] = {
    # cordum.bus.sqs, cordum.lambdas.sqs_batch: the bridge and the functions.
    "Sqs": ec2.InterfaceVpcEndpointAwsService.SQS,
    # cordum.scheduler.saga_trigger: the result function invokes saga-rollback.
    "Lambda": ec2.InterfaceVpcEndpointAwsService.LAMBDA_,
    # The Fargate tasks' awslogs driver (a function's own log lines leave
    # through the Lambda service, not its network interface).
    "Logs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    # cordum.runtime, cordum.gateway.core.auth, ECS secrets: the API keys, the Redis
    # users' logins, NATS credentials.
    "SecretsManager": ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER,
    # Fargate image pulls (the layers themselves come from S3).
    "EcrApi": ec2.InterfaceVpcEndpointAwsService.ECR,
    "EcrDocker": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
}
"""Interface endpoints of ``endpoints`` mode, by construct id, each with its caller:
about USD 14.60 a month each in two zones. No EventBridge endpoint (the schedules
are rules that EventBridge itself fires; no code in the VPC puts events) and no
STS endpoint (Lambda and ECS hand their roles' credentials over without an STS
call from the VPC; no code assumes a role) and no SSM endpoint (the gateway reads
its keys from Secrets Manager; an SSM parameter, CORDUM_API_KEYS_SSM_PARAMETER, is
for stacks with egress=nat)."""

LITERAL_ZONE_LINT = {"config": {"ignore_checks": ["W3010"]}}
"""cfn-lint metadata of the stack's subnets: W3010 ("avoid hardcoding availability
zones") asks for Fn::GetAZs positions, the choice by position this module avoids
once the account and region are known."""

FLOW_LOG_TRAFFIC = ec2.FlowLogTrafficType.REJECT
"""Rejected connections only: what a security group refused is what one needs
to debug or audit here, at a fraction of the cost of logging all traffic."""
FLOW_LOG_RETENTION = logs.RetentionDays.ONE_MONTH


class Network(Construct):
    """VPC, endpoints or NAT, and the security groups of every Cordum component.

    Attributes for the other constructs: ``vpc``, ``private_subnets``,
    ``vpc_cidr``, ``functions_security_group``, ``bridge_security_group``,
    ``kernel_security_group``, ``cache_security_group``,
    ``endpoints_security_group``; with ``stream``, ``stream_security_group``
    and ``public_subnets`` (None without); ``allow_aws_apis(group)`` opens a
    group the way the egress mode needs for AWS APIs (and image pulls).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        egress: str = EGRESS_ENDPOINTS,
        placement: NetworkSettings | None = None,
        nats_url: str = "",
        kernel_addr: str | None = None,
        stream: bool = False,
    ) -> None:
        """`stream`: the stack runs the live event stream (its group, public subnets)."""
        super().__init__(scope, construct_id)
        if egress not in (EGRESS_ENDPOINTS, EGRESS_NAT):
            raise ValueError(f"egress must be {EGRESS_ENDPOINTS} or {EGRESS_NAT}: {egress}")
        self.egress = egress
        self.stream = stream
        self.public_subnets: ec2.SubnetSelection | None = None
        """Public subnets, one per zone, for the stream's load balancer (``stream`` only)."""
        placement = placement or NetworkSettings()
        stack = Stack.of(self)
        self.region: str | None = None if Token.is_unresolved(stack.region) else stack.region
        self.targeted = self.region is not None and not Token.is_unresolved(stack.account)
        self.vpc: ec2.IVpc
        self.private_subnets: ec2.SubnetSelection
        self.vpc_cidr: str
        """The VPC's IPv4 block as a literal (cdk-nag's open-ingress check reads it)."""
        if placement.vpc_id is not None:
            self._existing_vpc(placement)
        else:
            self._own_vpc(placement)
        self._security_groups()

        self.endpoints_security_group: ec2.SecurityGroup | None = None
        self.endpoints: dict[str, ec2.InterfaceVpcEndpoint] = {}
        if egress == EGRESS_ENDPOINTS:
            self._add_interface_endpoints()
        self._egress = Egress(
            self,
            egress=egress,
            vpc_cidr=self.vpc_cidr,
            region=self.region if self.targeted else None,
            endpoints_security_group=self.endpoints_security_group,
        )
        self._egress.clients(
            functions=self.functions_security_group,
            bridge=self.bridge_security_group,
            cache=self.cache_security_group,
            kernel=self.kernel_security_group,
            nats_url=nats_url,
            kernel_addr=kernel_addr,
            stream=self.stream_security_group,
        )

    def allow_aws_apis(self, group: ec2.SecurityGroup, *, images: bool = True) -> None:
        """Let `group` (a Fargate service's, say) call the AWS APIs Cordum uses the way
        the egress mode allows; `images`: pull ECR images too (layers from S3)."""
        self._egress.aws_apis(group, images=images)

    # --- the VPC -------------------------------------------------------------------------

    def _own_vpc(self, placement: NetworkSettings) -> None:
        private_type = (
            ec2.SubnetType.PRIVATE_ISOLATED
            if self.egress == EGRESS_ENDPOINTS
            else ec2.SubnetType.PRIVATE_WITH_EGRESS
        )
        subnets = [
            ec2.SubnetConfiguration(
                name="private", subnet_type=private_type, cidr_mask=PRIVATE_SUBNET_MASK
            )
        ]
        if self.egress == EGRESS_NAT:
            subnets.insert(
                0,
                ec2.SubnetConfiguration(
                    name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=PUBLIC_SUBNET_MASK
                ),
            )
        elif self.stream:
            # For the stream's load balancer alone. Appended: the private subnets keep
            # the blocks they have without it. Nothing placed here gets a public
            # address of its own (the load balancer brings its own).
            subnets.append(
                ec2.SubnetConfiguration(
                    name="public",
                    subnet_type=ec2.SubnetType.PUBLIC,
                    cidr_mask=PUBLIC_SUBNET_MASK,
                    map_public_ip_on_launch=False,
                )
            )
        zones = list(placement.availability_zones)
        if zones and self.region is not None:
            foreign = [z for z in zones if z[:-1] != self.region]
            if foreign:
                raise ContextError(
                    f"context availabilityZones: {', '.join(foreign)} are not zones of "
                    f"{self.region} (the stack's region): name zones of that region"
                )
        self.private_subnets = ec2.SubnetSelection(subnet_type=private_type)
        self.vpc_cidr = placement.vpc_cidr
        vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(placement.vpc_cidr),
            max_azs=None if zones else MAX_AZS,
            availability_zones=zones or None,
            nat_gateways=NAT_GATEWAYS if self.egress == EGRESS_NAT else 0,
            subnet_configuration=subnets,
            # Free, and the path of ECR image layers: in nat mode it keeps
            # them off the NAT gateway's per-GB charge too.
            gateway_endpoints={
                "S3": ec2.GatewayVpcEndpointOptions(
                    service=ec2.GatewayVpcEndpointAwsService.S3, subnets=[self.private_subnets]
                )
            },
            # The default group admits all traffic from its members and sends
            # anywhere; nothing of Cordum wears it, and emptying it (a small
            # deploy-time function CDK provides) keeps anything later placed in
            # the VPC without a group from inheriting that.
            restrict_default_security_group=True,
        )
        self.vpc = vpc
        if self.stream:
            self.public_subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PUBLIC)
        for subnet in [*vpc.public_subnets, *vpc.private_subnets, *vpc.isolated_subnets]:
            cfn_subnet = subnet.node.default_child
            if isinstance(cfn_subnet, CfnResource):
                # A zone named on purpose (see "Availability zone names and ids").
                cfn_subnet.add_metadata("cfn-lint", LITERAL_ZONE_LINT)
        flow_logs = logs.LogGroup(
            self,
            "FlowLogs",
            retention=FLOW_LOG_RETENTION,
            removal_policy=RemovalPolicy.DESTROY,
        )
        vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
            traffic_type=FLOW_LOG_TRAFFIC,
        )

    def _existing_vpc(self, placement: NetworkSettings) -> None:
        # The VPC's owner keeps its default group, flow logs and routes: the
        # stack only places its resources there.
        if not self.targeted:
            raise ContextError(
                f"context vpcId ({placement.vpc_id}) is looked up in one account and region: "
                "give -c account=<12 digits> -c region=<name>, or run the CDK CLI with "
                "credentials (it sets CDK_DEFAULT_ACCOUNT and CDK_DEFAULT_REGION)"
            )
        vpc = ec2.Vpc.from_lookup(self, "Vpc", vpc_id=placement.vpc_id)
        self.vpc = vpc
        self.vpc_cidr = vpc.vpc_cidr_block
        # Until the CLI has answered the lookup, the VPC is CDK's placeholder:
        # check nothing against it (the CLI synthesizes again with the answer).
        pending = vpc.vpc_id != placement.vpc_id
        subnets = choose_subnets(vpc, placement, pending)
        self.private_subnets = ec2.SubnetSelection(subnets=subnets)
        if self.stream:
            self.public_subnets = public_subnets(vpc, placement, subnets, pending)

    # --- security groups -----------------------------------------------------------------

    def _security_groups(self) -> None:
        self.functions_security_group = ec2.SecurityGroup(
            self,
            "FunctionsSecurityGroup",
            vpc=self.vpc,
            description="Cordum Lambda functions",
            allow_all_outbound=False,
        )
        self.bridge_security_group = ec2.SecurityGroup(
            self,
            "BridgeSecurityGroup",
            vpc=self.vpc,
            description="Cordum bridge (Fargate): NATS to SQS, heartbeats to Redis",
            allow_all_outbound=False,
        )
        # The safety kernel's front door (its load balancer): a construct that
        # forwards through this group adds its own rule to its targets.
        self.kernel_security_group = ec2.SecurityGroup(
            self,
            "KernelSecurityGroup",
            vpc=self.vpc,
            description=(
                f"Cordum safety kernel (Fargate): gRPC {KERNEL_PORT} from functions and bridge"
            ),
            allow_all_outbound=False,
        )
        self.cache_security_group = ec2.SecurityGroup(
            self,
            "CacheSecurityGroup",
            vpc=self.vpc,
            description=f"Cordum Redis: {REDIS_PORT} from functions and bridge",
            allow_all_outbound=False,
        )
        self.stream_security_group: ec2.SecurityGroup | None = None
        if self.stream:
            self.stream_security_group = ec2.SecurityGroup(
                self,
                "StreamSecurityGroup",
                vpc=self.vpc,
                description="Cordum stream (Fargate): events to clients through its load balancer",
                allow_all_outbound=False,
            )
            self.cache_security_group.add_ingress_rule(
                ec2.Peer.security_group_id(self.stream_security_group.security_group_id),
                ec2.Port.tcp(REDIS_PORT),
                "Redis from the Cordum stream",
            )
        clients = {"functions": self.functions_security_group, "bridge": self.bridge_security_group}
        for name, group in clients.items():
            # security_group_id peers keep each rule inline in the admitting
            # group (no separate ingress resource, no dependency cycle).
            peer = ec2.Peer.security_group_id(group.security_group_id)
            self.cache_security_group.add_ingress_rule(
                peer, ec2.Port.tcp(REDIS_PORT), f"Redis from the Cordum {name}"
            )
            self.kernel_security_group.add_ingress_rule(
                peer, ec2.Port.tcp(KERNEL_PORT), f"Safety kernel gRPC from the Cordum {name}"
            )

    # --- endpoints -----------------------------------------------------------------------

    def _add_interface_endpoints(self) -> None:
        # One group for all endpoints: HTTPS from inside the VPC. Every Cordum
        # task (functions, bridge, kernel, a NATS service) pulls images or
        # calls AWS through them; each call is still authorised by IAM.
        group = ec2.SecurityGroup(
            self,
            "EndpointsSecurityGroup",
            vpc=self.vpc,
            description="Cordum VPC interface endpoints: HTTPS from the VPC",
            allow_all_outbound=False,
        )
        # The literal block, not the VPC's CidrBlock attribute: the same value,
        # and one that cdk-nag's open-ingress check (EC23) can read.
        group.add_ingress_rule(
            ec2.Peer.ipv4(self.vpc_cidr),
            ec2.Port.tcp(HTTPS_PORT),
            "AWS APIs from the Cordum VPC",
        )
        self.endpoints_security_group = group
        if not isinstance(self.vpc, ec2.Vpc):
            # An existing VPC: the S3 gateway on the chosen subnets' route tables
            # (the stack's own VPC declares it with the VPC).
            self.vpc.add_gateway_endpoint(
                "S3", service=ec2.GatewayVpcEndpointAwsService.S3, subnets=[self.private_subnets]
            )
        for name, service in INTERFACE_ENDPOINTS.items():
            self.endpoints[name] = self.vpc.add_interface_endpoint(
                name,
                service=service,
                subnets=self.private_subnets,
                security_groups=[group],
                private_dns_enabled=True,
                # Only for the default group, which the shared one replaces.
                open=False,
            )
