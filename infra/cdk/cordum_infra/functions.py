"""The six Lambda functions, their shared layer and their code asset.

Every function runs the same code asset (the thin handler modules plus
``config/``) on top of the one ``cordum`` layer; the handler is
``<module>.handler``.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

RUNTIME = lambda_.Runtime.PYTHON_3_12
"""Must match the interpreter layers/build.py builds the layer for."""

LOG_RETENTION = logs.RetentionDays.TWO_WEEKS


@dataclass(frozen=True)
class FunctionSpec:
    """Size and purpose of one function."""

    module: str
    """Handler module in functions/ (the handler is ``<module>.handler``)."""
    memory_mb: int
    """Memory; CPU share grows with it, which shortens cold starts too."""
    timeout: Duration
    """Hard limit of one invocation."""
    description: str
    async_retries: int | None = None
    """Retries of a failed asynchronous invocation (None: Lambda's default, 2)."""

    @property
    def slug(self) -> str:
        """``reconciler_tick`` -> ``reconciler-tick``."""
        return self.module.replace("_", "-")

    @property
    def function_name(self) -> str:
        return f"cordum-{self.slug}"

    @property
    def construct_id(self) -> str:
        """``reconciler_tick`` -> ``ReconcilerTick``."""
        return "".join(part.capitalize() for part in self.module.split("_"))


GATEWAY = FunctionSpec(
    "gateway",
    memory_mb=1024,
    # Stores and enqueues, then answers; far below API Gateway's 29 s limit.
    timeout=Duration.seconds(10),
    description="Cordum HTTP API (API Gateway REST proxy)",
)
SUBMIT = FunctionSpec(
    "submit",
    memory_mb=1024,
    # A batch of 10 with a safety check each, bounded by 2 s timeouts.
    timeout=Duration.seconds(30),
    description="Job requests from the submit queue: policy, routing, dispatch",
)
RESULT = FunctionSpec(
    "result",
    memory_mb=512,
    timeout=Duration.seconds(30),
    description="Job results and cancels from the result queue",
)
RECONCILER_TICK = FunctionSpec(
    "reconciler_tick",
    memory_mb=512,
    # Ticks twice per invocation (Cordum's 30 s cadence) and ends before the
    # next minute's invocation starts.
    timeout=Duration.seconds(55),
    description="Reconciler: times out stale SCHEDULED / DISPATCHED / RUNNING jobs",
    # The next schedule comes within a minute; a late retry only overlaps it.
    async_retries=0,
)
REPLAYER_TICK = FunctionSpec(
    "replayer_tick",
    memory_mb=512,
    timeout=Duration.seconds(55),
    description="Pending replayer: re-drives PENDING / SCHEDULED jobs past the dispatch timeout",
    async_retries=0,
)
SAGA_ROLLBACK = FunctionSpec(
    "saga_rollback",
    memory_mb=512,
    # Cordum bounds one rollback by 30 s; leave room for the safety checks.
    timeout=Duration.seconds(60),
    description="Saga rollback of a failed workflow (invoked asynchronously)",
)

ALL_FUNCTIONS = (GATEWAY, SUBMIT, RESULT, RECONCILER_TICK, REPLAYER_TICK, SAGA_ROLLBACK)

ARCHITECTURES = {"x86_64": lambda_.Architecture.X86_64, "arm64": lambda_.Architecture.ARM_64}


@dataclass(frozen=True)
class VpcPlacement:
    """Where functions go when the stack owns a VPC."""

    vpc: ec2.IVpc
    subnets: ec2.SubnetSelection
    security_group: ec2.ISecurityGroup


class CordumFunctions(Construct):
    """The layer and one function per FunctionSpec, keyed by module name."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layer_path: str,
        code_path: str,
        architecture: str,
        environment: dict[str, str],
        placement: VpcPlacement | None,
    ) -> None:
        super().__init__(scope, construct_id)
        arch = ARCHITECTURES[architecture]
        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            code=lambda_.Code.from_asset(layer_path),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[arch],
            description="cordum library and its pinned dependencies (layers/build.py)",
            removal_policy=RemovalPolicy.DESTROY,
        )
        code = lambda_.Code.from_asset(code_path)
        self.by_module: dict[str, lambda_.Function] = {}
        for spec in ALL_FUNCTIONS:
            log_group = logs.LogGroup(
                self,
                f"{spec.construct_id}Logs",
                log_group_name=f"/aws/lambda/{spec.function_name}",
                retention=LOG_RETENTION,
                removal_policy=RemovalPolicy.DESTROY,
            )
            fn = lambda_.Function(
                self,
                spec.construct_id,
                function_name=spec.function_name,
                description=spec.description,
                runtime=RUNTIME,
                architecture=arch,
                handler=f"{spec.module}.handler",
                code=code,
                layers=[self.layer],
                memory_size=spec.memory_mb,
                timeout=spec.timeout,
                retry_attempts=spec.async_retries,
                environment={**environment, "POWERTOOLS_SERVICE_NAME": spec.function_name},
                log_group=log_group,
                vpc=placement.vpc if placement else None,
                vpc_subnets=placement.subnets if placement else None,
                security_groups=[placement.security_group] if placement else None,
            )
            self.by_module[spec.module] = fn

    def __getitem__(self, spec: FunctionSpec) -> lambda_.Function:
        return self.by_module[spec.module]
