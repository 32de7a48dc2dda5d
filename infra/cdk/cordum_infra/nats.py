"""NATS for the AWS stack: credentials of an existing cluster, or a dev server.

Production accounts point the stack at their own NATS cluster (context
``natsUrl``); when that cluster wants credentials, the operator stores the
``.creds`` text in Secrets Manager and names the secret with
``natsCredentialsSecretArn``. Every NATS client of the stack (the functions
and the bridge) is then told the secret's ARN in ``NATS_CREDS_SECRET_ARN`` and
may read exactly that secret; the value never passes through a template.

Development accounts can let the stack run NATS itself (``devNats=true``): one
``nats-server`` with JetStream on Fargate, its store on an encrypted EFS file
system, reachable at ``DEV_NATS_URL`` through a Cloud Map private DNS name. One
node, no authentication, no replication: not for production.
"""

from __future__ import annotations

from aws_cdk import Duration, IgnoreMode, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_efs as efs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_servicediscovery as servicediscovery
from constructs import Construct

from cordum_infra.fargate import PLATFORMS, task_definition
from cordum_infra.settings import (
    DEV_NATS_NAMESPACE,
    DEV_NATS_PORT,
    DEV_NATS_SERVICE,
    DEV_NATS_URL,
    REPO_ROOT,
)

NATS_CREDS_ENV = "NATS_CREDS_SECRET_ARN"
"""Environment variable naming the secret that holds the NATS ``.creds`` text."""

NATS_PORT = DEV_NATS_PORT
NATS_MONITOR_PORT = 8222
HTTPS_PORT = 443

DEV_NATS_DOCKERFILE = "nats.Dockerfile"
"""In ``<repo>/docker``: the official NATS 2.10 image, rebuilt at deploy time
into the stack's asset repository so that a VPC without internet egress (VPC
endpoints only, where ECR is reachable and Docker Hub is not) can pull it."""

DEV_NATS_CONTAINER = "nats"
DEV_NATS_CPU = 256
DEV_NATS_MEMORY_MIB = 512

JETSTREAM_DIR = "/data"
"""Where the container mounts the EFS access point; JetStream's store_dir."""
JETSTREAM_VOLUME = "jetstream"
EFS_ROOT = "/jetstream"
"""The access point's root inside the file system."""
NATS_UID = "1000"
"""POSIX user of the server and of every file it writes on EFS (the access
point enforces it whatever the container runs as)."""

DEV_NATS_LOG_RETENTION = logs.RetentionDays.ONE_WEEK
DNS_TTL = Duration.seconds(10)
"""Short: a replaced task's new address is picked up within seconds."""

HEALTH_CHECK_INTERVAL = Duration.seconds(15)
HEALTH_CHECK_START_PERIOD = Duration.seconds(30)
"""JetStream recovers its streams from EFS before /healthz answers 200."""


class NatsCredentials(Construct):
    """The secret holding the credentials of an existing NATS cluster."""

    def __init__(self, scope: Construct, construct_id: str, *, secret_arn: str) -> None:
        super().__init__(scope, construct_id)
        # A complete ARN (with the 6-character suffix): grants name exactly this
        # secret instead of ``<name>-??????``.
        self.secret = secretsmanager.Secret.from_secret_complete_arn(self, "Secret", secret_arn)
        self.secret_arn = secret_arn

    def grant_function(self, fn: lambda_.Function) -> None:
        """Tell `fn` where the credentials are and let it read them."""
        fn.add_environment(NATS_CREDS_ENV, self.secret_arn)
        self.secret.grant_read(fn)

    def grant_container(self, container: ecs.ContainerDefinition) -> None:
        """Same for a container; its task role reads the secret."""
        container.add_environment(NATS_CREDS_ENV, self.secret_arn)
        self.secret.grant_read(container.task_definition.task_role)


class DevNats(Construct):
    """Single-node NATS JetStream on Fargate with its store on EFS (dev accounts)."""

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
    ) -> None:
        super().__init__(scope, construct_id)
        self.url = DEV_NATS_URL
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description="Cordum dev NATS: 4222 from the Cordum functions and bridge",
            allow_all_outbound=False,
        )
        # Out: AWS APIs (image pull, logs) over HTTPS; NFS to its file system is
        # added with the file system's ingress rule below.
        self.security_group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(HTTPS_PORT), "AWS APIs (ECR, S3, CloudWatch Logs)"
        )
        for client in clients:
            self.security_group.connections.allow_from(
                client, ec2.Port.tcp(NATS_PORT), "NATS from a Cordum client"
            )

        storage_group = ec2.SecurityGroup(
            self,
            "StorageSecurityGroup",
            vpc=vpc,
            description="Cordum dev NATS storage: NFS from the dev NATS task",
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
            # Development data: a stack deleted takes its streams with it.
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.file_system.connections.allow_default_port_from(
            self.security_group, "NFS from the dev NATS task"
        )
        self.access_point = self.file_system.add_access_point(
            "JetStream",
            path=EFS_ROOT,
            create_acl=efs.Acl(owner_uid=NATS_UID, owner_gid=NATS_UID, permissions="750"),
            posix_user=efs.PosixUser(uid=NATS_UID, gid=NATS_UID),
        )

        task = task_definition(
            self, cpu=DEV_NATS_CPU, memory_mib=DEV_NATS_MEMORY_MIB, architecture=architecture
        )
        task.add_volume(
            name=JETSTREAM_VOLUME,
            efs_volume_configuration=ecs.EfsVolumeConfiguration(
                file_system_id=self.file_system.file_system_id,
                transit_encryption="ENABLED",
                authorization_config=ecs.AuthorizationConfig(
                    access_point_id=self.access_point.access_point_id, iam="ENABLED"
                ),
            ),
        )
        task.add_to_task_role_policy(
            iam.PolicyStatement(
                actions=["elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite"],
                resources=[self.file_system.file_system_arn],
                conditions={
                    "StringEquals": {
                        "elasticfilesystem:AccessPointArn": self.access_point.access_point_arn
                    }
                },
            )
        )
        log_group = logs.LogGroup(
            self,
            "Logs",
            retention=DEV_NATS_LOG_RETENTION,
            removal_policy=RemovalPolicy.DESTROY,
        )
        container = task.add_container(
            DEV_NATS_CONTAINER,
            image=ecs.ContainerImage.from_asset(
                str(REPO_ROOT / "docker"),
                file=DEV_NATS_DOCKERFILE,
                platform=PLATFORMS[architecture][0],
                ignore_mode=IgnoreMode.DOCKER,
                # The build needs the Dockerfile alone.
                exclude=["*", f"!{DEV_NATS_DOCKERFILE}"],
            ),
            command=[
                "nats-server",
                "--server_name",
                "cordum-dev",
                "--port",
                str(NATS_PORT),
                "--http_port",
                str(NATS_MONITOR_PORT),
                "--jetstream",
                "--store_dir",
                JETSTREAM_DIR,
            ],
            user=NATS_UID,
            essential=True,
            port_mappings=[ecs.PortMapping(container_port=NATS_PORT)],
            logging=ecs.LogDrivers.aws_logs(stream_prefix="nats", log_group=log_group),
            health_check=ecs.HealthCheck(
                command=[
                    "CMD",
                    "wget",
                    "-q",
                    "-O",
                    "/dev/null",
                    f"http://127.0.0.1:{NATS_MONITOR_PORT}/healthz",
                ],
                interval=HEALTH_CHECK_INTERVAL,
                start_period=HEALTH_CHECK_START_PERIOD,
            ),
        )
        container.add_mount_points(
            ecs.MountPoint(
                container_path=JETSTREAM_DIR, source_volume=JETSTREAM_VOLUME, read_only=False
            )
        )

        self.namespace = servicediscovery.PrivateDnsNamespace(
            self,
            "Namespace",
            name=DEV_NATS_NAMESPACE,
            vpc=vpc,
            description="Cordum dev NATS",
        )
        self.service = ecs.FargateService(
            self,
            "Service",
            cluster=cluster,
            task_definition=task,
            desired_count=1,
            # One store on EFS: the old server stops before the new one opens it.
            min_healthy_percent=0,
            max_healthy_percent=100,
            vpc_subnets=subnets,
            security_groups=[self.security_group],
            assign_public_ip=False,
            cloud_map_options=ecs.CloudMapOptions(
                cloud_map_namespace=self.namespace,
                name=DEV_NATS_SERVICE,
                dns_record_type=servicediscovery.DnsRecordType.A,
                dns_ttl=DNS_TTL,
            ),
        )
