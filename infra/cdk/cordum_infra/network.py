"""The VPC and the security groups of Cordum on AWS (only when the stack owns Redis).

Two zones, private subnets for the functions, the cache and the Fargate
services. How they reach AWS APIs is chosen by the ``egress`` context:

``endpoints`` (default)
    Isolated subnets (no route to the internet) and VPC endpoints for every
    AWS API Cordum calls: SQS (bridge, functions), Lambda (result ->
    saga-rollback), SSM (gateway API keys), Secrets Manager (Redis AUTH token,
    NATS credentials), EventBridge, CloudWatch Logs and STS, and for the
    Fargate image pulls ECR (api + dkr) plus the S3 gateway endpoint that
    serves the image layers. NATS must then be reachable inside the VPC (the
    stack's own NATS service, or peering to an existing cluster).
``nat``
    Public subnets with one NAT gateway and private subnets with egress
    through it: an outside NATS cluster is reachable, no interface endpoint
    is paid for.

Security groups are created here, so every construct that attaches them
shares one definition of who may talk to whom: the cache admits 6379 and the
safety kernel admits its gRPC port from the functions and the bridge only.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from cordum_infra.cache import REDIS_PORT
from cordum_infra.settings import EGRESS_ENDPOINTS, EGRESS_NAT

MAX_AZS = 2
"""Availability zones spanned; the cache puts its primary and replica in two."""

VPC_CIDR = "10.0.0.0/16"

NAT_GATEWAYS = 1
"""``nat`` mode: one NAT gateway, in the first zone. Losing that zone cuts the
other zone's internet egress until it returns; ``endpoints`` mode has no such
single point (each endpoint has a network interface in both zones)."""

PUBLIC_SUBNET_MASK = 24
PRIVATE_SUBNET_MASK = 22
"""Private subnets are larger: every concurrent function execution in a VPC
holds a network interface address (through Hyperplane ENIs, shared per
subnet + security group, but sized generously anyway)."""

KERNEL_PORT = 50051
"""gRPC port of the safety kernel (SafetyKernel service)."""
HTTPS_PORT = 443

INTERFACE_ENDPOINTS: dict[str, ec2.InterfaceVpcEndpointAwsService] = {
    "Sqs": ec2.InterfaceVpcEndpointAwsService.SQS,
    "Lambda": ec2.InterfaceVpcEndpointAwsService.LAMBDA_,
    "EventBridge": ec2.InterfaceVpcEndpointAwsService.EVENTBRIDGE,
    "Logs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    "Ssm": ec2.InterfaceVpcEndpointAwsService.SSM,
    "SecretsManager": ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER,
    "Sts": ec2.InterfaceVpcEndpointAwsService.STS,
    "EcrApi": ec2.InterfaceVpcEndpointAwsService.ECR,
    "EcrDocker": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
}
"""Interface endpoints of ``endpoints`` mode, by construct id. A function's own
log lines leave through the Lambda service, not its network interface; the
Fargate tasks' awslogs driver is what needs the Logs endpoint."""

FLOW_LOG_TRAFFIC = ec2.FlowLogTrafficType.REJECT
"""Rejected connections only: what a security group refused is what one needs
to debug or audit here, at a fraction of the cost of logging all traffic."""
FLOW_LOG_RETENTION = logs.RetentionDays.ONE_MONTH


class Network(Construct):
    """VPC, endpoints or NAT, and the security groups of every Cordum component.

    Attributes for the other constructs: ``vpc``, ``private_subnets``,
    ``functions_security_group``, ``bridge_security_group``,
    ``kernel_security_group``, ``cache_security_group``,
    ``endpoints_security_group``.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, egress: str = EGRESS_ENDPOINTS
    ) -> None:
        super().__init__(scope, construct_id)
        if egress not in (EGRESS_ENDPOINTS, EGRESS_NAT):
            raise ValueError(f"egress must be {EGRESS_ENDPOINTS} or {EGRESS_NAT}: {egress}")
        self.egress = egress
        private_type = (
            ec2.SubnetType.PRIVATE_ISOLATED
            if egress == EGRESS_ENDPOINTS
            else ec2.SubnetType.PRIVATE_WITH_EGRESS
        )
        subnets = [
            ec2.SubnetConfiguration(
                name="private", subnet_type=private_type, cidr_mask=PRIVATE_SUBNET_MASK
            )
        ]
        if egress == EGRESS_NAT:
            subnets.insert(
                0,
                ec2.SubnetConfiguration(
                    name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=PUBLIC_SUBNET_MASK
                ),
            )
        self.private_subnets = ec2.SubnetSelection(subnet_type=private_type)
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(VPC_CIDR),
            max_azs=MAX_AZS,
            nat_gateways=NAT_GATEWAYS if egress == EGRESS_NAT else 0,
            subnet_configuration=subnets,
            # Free, and the path of ECR image layers: in nat mode it keeps
            # them off the NAT gateway's per-GB charge too.
            gateway_endpoints={
                "S3": ec2.GatewayVpcEndpointOptions(
                    service=ec2.GatewayVpcEndpointAwsService.S3, subnets=[self.private_subnets]
                )
            },
            # True would add a custom-resource Lambda (Node.js) at deploy time.
            restrict_default_security_group=False,
        )
        flow_logs = logs.LogGroup(
            self,
            "FlowLogs",
            retention=FLOW_LOG_RETENTION,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
            traffic_type=FLOW_LOG_TRAFFIC,
        )

        # Functions and the bridge reach NATS, SQS and Redis wherever they
        # are; the NATS address is deployment data, so their egress is open.
        self.functions_security_group = ec2.SecurityGroup(
            self,
            "FunctionsSecurityGroup",
            vpc=self.vpc,
            description="Cordum Lambda functions",
            allow_all_outbound=True,
        )
        self.bridge_security_group = ec2.SecurityGroup(
            self,
            "BridgeSecurityGroup",
            vpc=self.vpc,
            description="Cordum bridge (Fargate): NATS to SQS, heartbeats to Redis",
            allow_all_outbound=True,
        )
        # The safety kernel's front door (its tasks, or a load balancer before
        # them). The kernel answers policy checks and calls out only to AWS
        # APIs (image pull, logs), so egress is HTTPS alone; a construct that
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
        self.kernel_security_group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(HTTPS_PORT), "AWS APIs (ECR, S3, CloudWatch Logs)"
        )
        self.cache_security_group = ec2.SecurityGroup(
            self,
            "CacheSecurityGroup",
            vpc=self.vpc,
            description=f"Cordum Redis: {REDIS_PORT} from functions and bridge",
            allow_all_outbound=False,
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

        self.endpoints_security_group: ec2.SecurityGroup | None = None
        self.endpoints: dict[str, ec2.InterfaceVpcEndpoint] = {}
        if egress == EGRESS_ENDPOINTS:
            self._add_interface_endpoints()

    def _add_interface_endpoints(self) -> None:
        # One group for all endpoints: HTTPS from inside the VPC. Every Cordum
        # task (functions, bridge, kernel, a dev NATS service) pulls images or
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
            ec2.Peer.ipv4(VPC_CIDR),
            ec2.Port.tcp(HTTPS_PORT),
            "AWS APIs from the Cordum VPC",
        )
        self.endpoints_security_group = group
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
