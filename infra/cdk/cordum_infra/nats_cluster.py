"""The stack's own NATS JetStream: a cluster of NATS_CLUSTER_NODES nodes on Fargate, or one node.

``natsCluster=true`` runs three ``nats-server`` nodes, each a Fargate service of
one task with a fixed Cloud Map name (``nats-0/1/2.cordum.internal``). The nodes
route to each other on ROUTE_PORT and form one JetStream cluster: its metadata
(streams, consumers) needs a quorum of two, so one node may be lost or replaced
at any time. Each node keeps its JetStream store on EFS through an access point
of its own, so a replaced task (another zone included: EFS is regional) opens the
store its predecessor left. The file system is encrypted, backed up by AWS Backup
and kept when the stack is deleted.

``devNats=true`` is the same server as one node (no routes), its store deleted
with the stack: a development account gets the production configuration, TLS and
password included, at a third of the price.

Every node serves TLS to its clients (CLIENT_PORT) and to the other nodes
(ROUTE_PORT, where NATS requires a certificate on both ends, so the node
certificate must allow client as well as server authentication). The
certificate, its key and the CA are parameters: ``tls_secret`` is a Secrets
Manager secret holding ``{"cert", "key"}`` (PEM) for every node's name,
``ca_pem`` the CA certificate (text or a token). ECS reads the secrets at task
start; the image's entrypoint (``docker/nats-entrypoint.sh``) writes them to
files for nats-server. Clients and routes log in with one user whose password
the stack generates into ``credentials`` (``{"username", "password"}``); the
functions and the bridge are told its ARN as NATS_CREDS_SECRET_ARN and the CA as
NATS_TLS_CA (cordum.runtime).

Who may connect: the node group admits CLIENT_PORT from the given client groups
(the functions and the bridge) and ROUTE_PORT from itself alone; the file
system's group admits NFS from the node group alone.
"""

from __future__ import annotations

from collections.abc import Callable

from aws_cdk import Acknowledgment, Duration, IgnoreMode, RemovalPolicy, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_efs as efs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_servicediscovery as servicediscovery
from constructs import Construct

from cordum_infra.fargate import EXECUTION_ROLE_REASON, PLATFORMS
from cordum_infra.settings import NATS_NAMESPACE, NATS_PORT, REPO_ROOT, nats_node_name

CLIENT_PORT = NATS_PORT
ROUTE_PORT = 6222
MONITOR_PORT = 8222
"""Served inside the task only (the container health check); no group admits it."""
HTTPS_PORT = 443
NFS_PORT = 2049

NATS_DOCKERFILE = "nats.Dockerfile"
NATS_ENTRYPOINT = "nats-entrypoint.sh"
"""In ``<repo>/docker``: the official NATS 2.10 image plus the entrypoint that writes
the TLS files and the configuration. Rebuilt at deploy time into the stack's asset
repository, so a VPC without internet egress (endpoints only) can pull it."""

NODE_CPU = 512
NODE_MEMORY_MIB = 1024
"""A cluster node: every stored message is written to EFS and sent to two peers over
TLS, and JetStream keeps its indexes in memory. Half a vCPU and 1 GB hold the job
stream (7 days at most, removed once forwarded) with room; about $18 a month a node
(0.5 x $0.04048 + 1 x $0.004445 an hour, us-east-1)."""
DEV_NODE_CPU = 256
DEV_NODE_MEMORY_MIB = 512
"""The one development node: a quarter vCPU and 0.5 GB, about $9 a month."""

JETSTREAM_DIR = "/data"
"""Where the container mounts its node's access point; JetStream's store_dir."""
JETSTREAM_VOLUME = "jetstream"
EFS_ROOT = "/jetstream"
"""Each node's access point roots at ``/jetstream/<node>`` inside the file system."""
NATS_UID = "1000"
"""POSIX user of the server and of every file it writes on EFS (the access point
enforces it whatever the container runs as)."""

TLS_CERT_ENV = "NATS_TLS_CERT"
TLS_KEY_ENV = "NATS_TLS_KEY"
TLS_CA_ENV = "NATS_TLS_CA"
USER_ENV = "NATS_USER"
PASSWORD_ENV = "NATS_PASSWORD"
ROUTES_ENV = "NATS_ROUTES"
ADVERTISE_ENV = "NATS_CLUSTER_ADVERTISE"
TLS_SERIAL_ENV = "NATS_TLS_SERIAL"
"""Read by nothing: a new certificate changes it, so ECS starts tasks that read it."""
CERT_FIELD = "cert"
KEY_FIELD = "key"
USERNAME = "cordum"
PASSWORD_LENGTH = 32
"""Letters and digits only (the entrypoint writes it into route URLs): 32 of 62
symbols is about 190 bits."""

LOG_RETENTION = logs.RetentionDays.ONE_MONTH
DNS_TTL = Duration.seconds(10)
"""Short: a replaced node's new address is picked up within seconds by its peers
(routes redial every second) and by clients."""

HEALTH_CHECK_COMMAND = [
    "CMD",
    "wget",
    "-q",
    "-O",
    "/dev/null",
    f"http://127.0.0.1:{MONITOR_PORT}/healthz?js-enabled-only=true",
]
"""This node's JetStream runs. Not the cluster's health (plain /healthz waits for a
meta leader): a node that fails while its peers are away would be replaced for
their absence, and the first node of a new cluster could never become healthy."""
HEALTH_CHECK_INTERVAL = Duration.seconds(15)
HEALTH_CHECK_RETRIES = 3
HEALTH_CHECK_START_PERIOD = Duration.seconds(60)
"""The EFS mount and JetStream's recovery of its streams from it come before the
monitor port answers: seconds for a small store, a minute leaves room."""

_ENV_REASON = (
    "The node's environment holds its route list, its advertised name and the CA "
    "certificate (public). Its certificate key and password are ECS secrets read "
    "from Secrets Manager at task start."
)
_ROTATION_REASON = (
    "The password is shared by every node (routes) and every client; a rotation must "
    "restart the nodes and the clients together, which a Secrets Manager rotation "
    "function cannot. Rotate by replacing the secret (a new logical id) in a deploy."
)


class NatsCluster(Construct):
    """`nodes` NATS JetStream servers on Fargate, routed to each other when more than one."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: ecs.ICluster,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        clients: list[ec2.ISecurityGroup],
        architecture: str,
        tls_secret: secretsmanager.ISecret,
        ca_pem: str,
        tls_serial: str | None = None,
        nodes: int,
        allow_aws_apis: Callable[[ec2.SecurityGroup], None] | None = None,
    ) -> None:
        """`allow_aws_apis` opens the node group's way to the AWS APIs (image pull, logs,
        secrets) the network's way; without it, HTTPS to any address."""
        super().__init__(scope, construct_id)
        self.nodes = nodes
        self.names = [f"{nats_node_name(i)}.{NATS_NAMESPACE}" for i in range(nodes)]
        self.url = ",".join(f"tls://{name}:{CLIENT_PORT}" for name in self.names)
        self.ca_pem = ca_pem
        production = nodes > 1

        self.credentials = secretsmanager.Secret(
            self,
            "Credentials",
            description="User and password of the Cordum NATS nodes (clients and routes)",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                secret_string_template=f'{{"username": "{USERNAME}"}}',
                generate_string_key="password",
                exclude_punctuation=True,
                password_length=PASSWORD_LENGTH,
            ),
            removal_policy=RemovalPolicy.DESTROY,
        )
        Validations.of(self.credentials).acknowledge(
            Acknowledgment(id="AwsSolutions-SMG4", reason=_ROTATION_REASON)
        )

        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description=(
                f"Cordum NATS nodes: {CLIENT_PORT} from the functions and bridge, "
                f"{ROUTE_PORT} between nodes"
            ),
            allow_all_outbound=False,
        )
        if allow_aws_apis is not None:
            allow_aws_apis(self.security_group)
        else:
            self.security_group.add_egress_rule(
                ec2.Peer.any_ipv4(), ec2.Port.tcp(HTTPS_PORT), "AWS APIs (ECR, S3, Logs, secrets)"
            )
        for client in clients:
            self.security_group.connections.allow_from(
                client, ec2.Port.tcp(CLIENT_PORT), "NATS (TLS) from a Cordum client"
            )
        if production:
            self.security_group.connections.allow_internally(
                ec2.Port.tcp(ROUTE_PORT), "NATS cluster routes (TLS) between the nodes"
            )

        storage_group = ec2.SecurityGroup(
            self,
            "StorageSecurityGroup",
            vpc=vpc,
            description="Cordum NATS storage: NFS from the NATS nodes",
            allow_all_outbound=False,
        )
        self.file_system = efs.FileSystem(
            self,
            "Storage",
            vpc=vpc,
            vpc_subnets=subnets,
            security_group=storage_group,
            encrypted=True,
            performance_mode=efs.PerformanceMode.GENERAL_PURPOSE,
            throughput_mode=efs.ThroughputMode.ELASTIC,
            # Production streams outlive the stack (and are backed up); a development
            # node's go with it.
            enable_automatic_backups=production,
            removal_policy=RemovalPolicy.RETAIN if production else RemovalPolicy.DESTROY,
        )
        self.file_system.connections.allow_default_port_from(
            self.security_group, "NFS from the NATS nodes"
        )

        self.namespace = servicediscovery.PrivateDnsNamespace(
            self, "Namespace", name=NATS_NAMESPACE, vpc=vpc, description="Cordum NATS nodes"
        )
        log_group = logs.LogGroup(
            self, "Logs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY
        )
        image = ecs.ContainerImage.from_asset(
            str(REPO_ROOT / "docker"),
            file=NATS_DOCKERFILE,
            platform=PLATFORMS[architecture][0],
            ignore_mode=IgnoreMode.DOCKER,
            # The build needs the Dockerfile and the entrypoint alone.
            exclude=["*", f"!{NATS_DOCKERFILE}", f"!{NATS_ENTRYPOINT}"],
        )
        routes = ",".join(f"{name}:{ROUTE_PORT}" for name in self.names)
        self.access_points: list[efs.AccessPoint] = []
        self.services: list[ecs.FargateService] = []
        self.containers: list[ecs.ContainerDefinition] = []
        for index in range(nodes):
            node = nats_node_name(index)
            scope_ = Construct(self, f"Node{index}")
            access_point = self.file_system.add_access_point(
                f"JetStream{index}",
                path=f"{EFS_ROOT}/{node}",
                create_acl=efs.Acl(owner_uid=NATS_UID, owner_gid=NATS_UID, permissions="750"),
                posix_user=efs.PosixUser(uid=NATS_UID, gid=NATS_UID),
            )
            task = ecs.FargateTaskDefinition(
                scope_,
                "Task",
                cpu=NODE_CPU if production else DEV_NODE_CPU,
                memory_limit_mib=NODE_MEMORY_MIB if production else DEV_NODE_MEMORY_MIB,
                runtime_platform=ecs.RuntimePlatform(
                    cpu_architecture=PLATFORMS[architecture][1],
                    operating_system_family=ecs.OperatingSystemFamily.LINUX,
                ),
            )
            Validations.of(task.obtain_execution_role()).acknowledge(
                Acknowledgment(id="AwsSolutions-IAM5[Resource::*]", reason=EXECUTION_ROLE_REASON)
            )
            Validations.of(task).acknowledge(
                Acknowledgment(id="AwsSolutions-ECS2", reason=_ENV_REASON)
            )
            task.add_volume(
                name=JETSTREAM_VOLUME,
                efs_volume_configuration=ecs.EfsVolumeConfiguration(
                    file_system_id=self.file_system.file_system_id,
                    transit_encryption="ENABLED",
                    authorization_config=ecs.AuthorizationConfig(
                        access_point_id=access_point.access_point_id, iam="ENABLED"
                    ),
                ),
            )
            task.add_to_task_role_policy(
                iam.PolicyStatement(
                    actions=["elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite"],
                    resources=[self.file_system.file_system_arn],
                    conditions={
                        "StringEquals": {
                            "elasticfilesystem:AccessPointArn": access_point.access_point_arn
                        }
                    },
                )
            )
            environment = {TLS_CA_ENV: ca_pem}
            if tls_serial is not None:
                environment[TLS_SERIAL_ENV] = tls_serial
            if production:
                environment[ROUTES_ENV] = routes
                environment[ADVERTISE_ENV] = f"{self.names[index]}:{ROUTE_PORT}"
            container = task.add_container(
                node,
                image=image,
                command=[
                    "--server_name", node,
                    "--port", str(CLIENT_PORT),
                    "--http_port", str(MONITOR_PORT),
                    "--jetstream",
                    "--store_dir", JETSTREAM_DIR,
                ],
                user=NATS_UID,
                essential=True,
                environment=environment,
                secrets={
                    TLS_CERT_ENV: ecs.Secret.from_secrets_manager(tls_secret, CERT_FIELD),
                    TLS_KEY_ENV: ecs.Secret.from_secrets_manager(tls_secret, KEY_FIELD),
                    USER_ENV: ecs.Secret.from_secrets_manager(self.credentials, "username"),
                    PASSWORD_ENV: ecs.Secret.from_secrets_manager(self.credentials, "password"),
                },
                port_mappings=[
                    ecs.PortMapping(container_port=CLIENT_PORT),
                    *([ecs.PortMapping(container_port=ROUTE_PORT)] if production else []),
                ],
                logging=ecs.LogDrivers.aws_logs(stream_prefix=node, log_group=log_group),
                health_check=ecs.HealthCheck(
                    command=HEALTH_CHECK_COMMAND,
                    interval=HEALTH_CHECK_INTERVAL,
                    retries=HEALTH_CHECK_RETRIES,
                    start_period=HEALTH_CHECK_START_PERIOD,
                ),
            )
            container.add_mount_points(
                ecs.MountPoint(
                    container_path=JETSTREAM_DIR, source_volume=JETSTREAM_VOLUME, read_only=False
                )
            )
            service = ecs.FargateService(
                scope_,
                "Service",
                cluster=cluster,
                task_definition=task,
                desired_count=1,
                # One store per node: the old task stops before the new one opens it.
                min_healthy_percent=0,
                max_healthy_percent=100,
                # Every private subnet: a node lost with its zone restarts in the other
                # (its store is on regional EFS).
                vpc_subnets=subnets,
                security_groups=[self.security_group],
                assign_public_ip=False,
                circuit_breaker=ecs.DeploymentCircuitBreaker(rollback=True),
                cloud_map_options=ecs.CloudMapOptions(
                    cloud_map_namespace=self.namespace,
                    name=node,
                    dns_record_type=servicediscovery.DnsRecordType.A,
                    dns_ttl=DNS_TTL,
                ),
            )
            if self.services:
                # One node at a time, in a deploy as at creation: two of three keep
                # the quorum while the third restarts.
                service.node.add_dependency(self.services[-1])
            self.access_points.append(access_point)
            self.containers.append(container)
            self.services.append(service)
