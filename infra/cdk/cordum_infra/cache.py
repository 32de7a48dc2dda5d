"""ElastiCache Redis for the job store, created when no redisUrl is given.

A replication group with cluster mode disabled: one shard (so Cordum's key
names, which carry no hash tags, stay legal in multi-key Lua scripts and
MULTI), a primary and one replica in another zone, automatic failover.
ElastiCache Serverless is cluster-mode only and would fail those scripts with
CROSSSLOT.
"""

from __future__ import annotations

from aws_cdk import Fn
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticache as elasticache
from constructs import Construct

ENGINE_VERSION = "7.1"
"""Redis OSS 7.x (functions, ``SET ... PXAT``, Lua scripts as Cordum uses them)."""

NODE_TYPE = "cache.t4g.small"
"""Smallest Graviton node that keeps a replica affordable; resize per load."""

NODE_COUNT = 2
"""Primary + one replica (``NumCacheClusters``); failover needs at least 2."""

REDIS_PORT = 6379

SNAPSHOT_RETENTION_DAYS = 3
"""Redis holds the job state: keep a few daily snapshots to restore from."""


class RedisCache(Construct):
    """Replication group, its subnet group and its security group."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        client_security_group: ec2.ISecurityGroup,
    ) -> None:
        super().__init__(scope, construct_id)
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description="Cordum Redis: 6379 from the Cordum functions only",
            allow_all_outbound=False,
        )
        self.security_group.add_ingress_rule(
            ec2.Peer.security_group_id(client_security_group.security_group_id),
            ec2.Port.tcp(REDIS_PORT),
            "Redis from the Cordum functions",
        )
        subnet_group = elasticache.CfnSubnetGroup(
            self,
            "SubnetGroup",
            description="Cordum Redis private subnets",
            subnet_ids=vpc.select_subnets(subnet_type=subnets.subnet_type).subnet_ids,
        )
        self.replication_group = elasticache.CfnReplicationGroup(
            self,
            "ReplicationGroup",
            replication_group_description="Cordum job store",
            engine="redis",
            engine_version=ENGINE_VERSION,
            cache_node_type=NODE_TYPE,
            cluster_mode="disabled",
            num_cache_clusters=NODE_COUNT,
            automatic_failover_enabled=True,
            multi_az_enabled=True,
            transit_encryption_enabled=True,
            transit_encryption_mode="required",
            at_rest_encryption_enabled=True,
            port=REDIS_PORT,
            cache_subnet_group_name=subnet_group.ref,
            security_group_ids=[self.security_group.security_group_id],
            snapshot_retention_limit=SNAPSHOT_RETENTION_DAYS,
            auto_minor_version_upgrade=True,
        )
        self.url = Fn.join(
            "",
            [
                "rediss://",
                self.replication_group.attr_primary_end_point_address,
                ":",
                self.replication_group.attr_primary_end_point_port,
            ],
        )
        """``rediss://<primary endpoint>:<port>``: follows failovers (DNS)."""
