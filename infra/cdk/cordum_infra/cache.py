"""ElastiCache Redis for the job store, created when no redisUrl is given.

A replication group with cluster mode disabled: one shard (so Cordum's key
names, which carry no hash tags, stay legal in multi-key Lua scripts and
MULTI), a primary and one replica in another zone, automatic failover.
ElastiCache Serverless is cluster-mode only and would fail those scripts with
CROSSSLOT.

Clients connect over TLS to the primary endpoint (a DNS name that follows a
failover) and log in as one of the users of ``cordum_infra.cache_users`` (one per
kind of client, each allowed only what it does), whose passwords are generated in
Secrets Manager: the template holds only references to the secrets. A function
reads its login from the secret named by REDIS_AUTH_SECRET_ARN; a Fargate task is
given REDIS_USERNAME and REDIS_AUTH_TOKEN (an ECS task secret), see
``cordum.runtime.redis_credentials``.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, CfnDeletionPolicy, Fn, Validations
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticache as elasticache
from constructs import Construct

from cordum_infra.cache_config import CacheConfig
from cordum_infra.cache_users import CacheUsers

MAXMEMORY_POLICY = "noeviction"
"""A full cache refuses writes instead of evicting keys: the default policy
(volatile-lru) evicts keys with a TTL, which is every job meta, job lock and
idempotency claim; losing one silently would unlock a job or forget its state.
The RedisMemory alarm (observability) warns well before writes are refused."""

IDLE_TIMEOUT_S = 300
"""Redis closes a client connection idle this long (parameter ``timeout``; 0, the
default, never does). A Lambda container frozen between invocations keeps its pool
open for as long as Lambda keeps the container (often an hour or more): at a few
hundred containers after a burst that is thousands of idle connections, each with
its buffers in the cache's memory. Five minutes covers the gap between two requests
of a steady stream; a connection closed under a client is retried on a new one
(cordum.runtime.RedisRetryPolicy), and the long-running processes PING well within
it (cordum.runtime.HEALTH_CHECK_INTERVAL_S)."""

NODE_COUNT = 2
"""Primary + one replica (``NumCacheClusters``); failover needs at least 2."""

REDIS_PORT = 6379

SNAPSHOT_RETENTION_DAYS = 3
"""Redis holds the job state: keep a few daily snapshots to restore from."""
SNAPSHOT_WINDOW = "03:00-04:00"
"""Daily, UTC, 60 minutes (ElastiCache's minimum). A snapshot forks the primary's
memory (taken from the replica here, but still slower commands): the quiet hours
of Europe and the Americas."""
MAINTENANCE_WINDOW = "sun:05:00-sun:06:00"
"""Weekly, UTC, one hour after the snapshot window ends: a patch that fails over the
group never meets a snapshot in progress."""

USERS_NOT_TOKEN_REASON = (
    "Clients log in as ElastiCache users (RBAC, a user group), the successor of the "
    "single AUTH token the rule looks for: one user per kind of client, each allowed "
    "only its keys and commands (cordum_infra.cache_users); the default user is off."
)

AUTH_SECRET_ENV = "REDIS_AUTH_SECRET_ARN"
"""Environment variable naming a login's secret to a client (cordum.config)."""

class RedisCache(Construct):
    """Replication group, its subnet and parameter groups, its users and their secrets.

    The security group is the network's ``cache_security_group``, which
    decides who may connect; this construct only attaches it.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        security_group: ec2.ISecurityGroup,
        config: CacheConfig | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        config = config or CacheConfig()
        self.config = config
        self.security_group = security_group
        self.users = CacheUsers(self, "Users", engine=config.engine)
        """One user per kind of client; ``users.secret(role)`` holds its login."""
        subnet_group = elasticache.CfnSubnetGroup(
            self,
            "SubnetGroup",
            description="Cordum Redis private subnets",
            subnet_ids=vpc.select_subnets(
                subnet_type=subnets.subnet_type, subnets=subnets.subnets
            ).subnet_ids,
        )
        self.parameter_group = elasticache.CfnParameterGroup(
            self,
            "ParameterGroup",
            cache_parameter_group_family=config.parameter_group_family,
            description="Cordum job store: never evict a key, close idle clients",
            properties={"maxmemory-policy": MAXMEMORY_POLICY, "timeout": str(IDLE_TIMEOUT_S)},
        )
        self.replication_group = elasticache.CfnReplicationGroup(
            self,
            "ReplicationGroup",
            replication_group_description="Cordum job store",
            engine=config.engine,
            engine_version=config.engine_version,
            cache_node_type=config.node_type,
            cluster_mode="disabled",
            num_cache_clusters=NODE_COUNT,
            automatic_failover_enabled=True,
            multi_az_enabled=True,
            transit_encryption_enabled=True,
            transit_encryption_mode="required",
            at_rest_encryption_enabled=True,
            # Users, not one AUTH token: a worker's login cannot touch a job's meta.
            user_group_ids=[self.users.group.ref],
            port=REDIS_PORT,
            cache_subnet_group_name=subnet_group.ref,
            cache_parameter_group_name=self.parameter_group.ref,
            security_group_ids=[security_group.security_group_id],
            snapshot_retention_limit=SNAPSHOT_RETENTION_DAYS,
            snapshot_window=SNAPSHOT_WINDOW,
            preferred_maintenance_window=MAINTENANCE_WINDOW,
            auto_minor_version_upgrade=True,
        )
        Validations.of(self.replication_group).acknowledge(
            Acknowledgment(id="AwsSolutions-AEC6", reason=USERS_NOT_TOKEN_REASON)
        )
        # The job store is the only copy of every job, approval and DLQ entry: a stack
        # delete, or a change that replaces the group (node type of another family,
        # subnet group, engine), first takes a final snapshot, kept after the stack is
        # gone. CloudFormation names that snapshot after the group: the API's
        # FinalSnapshotIdentifier is no template property. docs/aws.md says how to
        # restore from it.
        self.replication_group.cfn_options.deletion_policy = CfnDeletionPolicy.SNAPSHOT
        self.replication_group.cfn_options.update_replace_policy = CfnDeletionPolicy.SNAPSHOT
        self.url = Fn.join(
            "",
            [
                "rediss://",
                self.replication_group.attr_primary_end_point_address,
                ":",
                self.replication_group.attr_primary_end_point_port,
            ],
        )
        """``rediss://<primary endpoint>:<port>``: follows failovers (DNS); no login in it."""
