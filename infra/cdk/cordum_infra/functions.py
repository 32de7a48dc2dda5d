"""The Lambda functions, their shared layer and their code asset.

Every function runs the same code asset (the thin handler modules plus
``config/``) on top of the one ``cordum`` layer; the handler is
``<module>.handler``. Each function writes to its own log group (created by
the stack, so it has a retention and goes away with the stack) and is traced
with X-Ray. Functions and log groups are named after the stack
(``<stack>-gateway``, ``/aws/lambda/<stack>-gateway``), so two stacks of
different names live side by side in one account and region.

Fan-out is bounded so that the functions' Redis connections stay within what the
cache node takes: the queue pollers by their MaximumConcurrency
(cordum_infra.queues), the gateway by reserved concurrency on AWS
(``gatewayReservedConcurrency``, default DEFAULT_GATEWAY_RESERVED_CONCURRENCY;
``none`` reserves nothing), the ticks by their schedule (one invocation a
minute, each shorter than a minute).

Context ``reservedConcurrency`` (optional) reserves concurrency per function,
a JSON object keyed by module or function slug, e.g.
``-c 'reservedConcurrency={"submit": 50, "gateway": 200}'``; for the gateway it
wins over ``gatewayReservedConcurrency``. Other functions reserve none and share
the account's unreserved pool.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from cordum_infra.settings import ContextError

RUNTIME = lambda_.Runtime.PYTHON_3_12
"""Must match the interpreter layers/build.py builds the layer for."""

LOG_RETENTION = logs.RetentionDays.ONE_MONTH
"""Function logs are kept 30 days: long enough to follow a job's history back
from a late complaint, short enough that idle logs cost little."""

LOG_REMOVAL_POLICY = RemovalPolicy.DESTROY
"""The log groups carry their function's name (``/aws/lambda/<stack>-<function>``):
one retained after ``cdk destroy`` would make the next deploy of the stack fail on
the name."""

FUNCTION_ENV = {"PYDANTIC_DISABLE_PLUGINS": "1"}
"""Set on every function. No pydantic plugin is installed, and with this the library
does not import pydantic's plugin discovery at all (cordum/__init__.py): about 15 ms
of each cold start. tests/bench/bench_cold_start.py imports the functions with it."""

TRACING = lambda_.Tracing.ACTIVE
"""X-Ray: Lambda samples invocations (1 a second, then 5 %) and records each
sampled invocation's init, run and AWS calls."""

RESERVED_CONCURRENCY_CONTEXT = "reservedConcurrency"
"""Context key: JSON object, function (module or slug) -> reserved concurrency."""

GATEWAY_RESERVED_CONTEXT = "gatewayReservedConcurrency"
"""Context key: the gateway's reserved concurrency on AWS, a whole number or ``none``."""

REDIS_CONNECTIONS_PER_INSTANCE = 10
"""Redis connections one function instance holds at most in practice: a batch of
10 records is handled concurrently, one connection each (the gateway serves one
request at a time, with a few reads in parallel). The client pool's hard cap is
20 (cordum.runtime.FUNCTION_MAX_CONNECTIONS)."""

FUNCTION_CONNECTION_BUDGET = 2000
"""Redis connections the stack's functions may hold together on the default node
(cache.t4g.small: 2 vCPUs, 1.37 GiB). ElastiCache takes 65,000 clients, but each
TLS connection costs the single command thread a handshake (about 1 to 2 ms of
CPU) and some 50 KB of buffers: a cold-start storm of 2,000 is seconds of CPU and
about 100 MB, while the 10,000 to 20,000 of 1,000 unbounded instances would stall
the node. The bridge, the kernel and the workers come on top (their pools are
bounded by cordum.runtime.SERVICE_MAX_CONNECTIONS). A larger node may take more:
raise queueConcurrency and gatewayReservedConcurrency with cacheNodeType."""

DEFAULT_GATEWAY_RESERVED_CONCURRENCY = 100
"""The gateway's instances on AWS. One instance serves one request at a time;
at the stage's default 500 requests a second, 100 instances serve requests that
take up to 200 ms on average (a request takes about 20 to 50 ms when Redis and
the kernel answer promptly). Reserved concurrency is also a guarantee: other
functions of the account cannot starve the API. It needs 100 + 100 of the
account's quota (Lambda keeps 100 unreserved): an account whose quota is still
the new-account 10 must ask for more, or deploy with
``gatewayReservedConcurrency=none``."""

MAX_NAME_LENGTH = 64
"""Lambda's limit on a function name."""


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
    def service_name(self) -> str:
        """POWERTOOLS_SERVICE_NAME: ``cordum-<slug>`` in every stack, so logs and
        metrics keep one name per function whatever the stack is called."""
        return f"cordum-{self.slug}"

    def function_name(self, stack_name: str) -> str:
        """``<stack>-<slug>``: unique per stack, readable in the console and logs."""
        return f"{stack_name}-{self.slug}"

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
    # Retries, event age and the failure destination: cordum_infra.saga.
)

WORKFLOW = FunctionSpec(
    "workflow",
    memory_mb=1024,
    # A batch of up to 10 run events, each applied under its run lock (which may be
    # busy for a moment) with Redis writes, step jobs published and acked by
    # JetStream, and follow-up events queued: room for slow hops, and the queues'
    # visibility timeouts (6 x this) stay within minutes.
    timeout=Duration.seconds(60),
    description="Workflow run events and timers from the workflow queues: advance runs",
)
WORKFLOW_TICK = FunctionSpec(
    "workflow_tick",
    memory_mb=512,
    # Ticks every few seconds, bounded by the remaining time, and ends before the
    # next minute's invocation starts.
    timeout=Duration.seconds(55),
    description="Workflow reconciler: lost results, stuck approvals, due timers, run timeouts",
    async_retries=0,
)

AUDIT_TICK = FunctionSpec(
    "audit_tick",
    memory_mb=512,
    # Ticks every 15 s (outboxes drained, chains exported to S3, Redis trimmed),
    # bounded by the remaining time, and ends before the next minute's invocation.
    timeout=Duration.seconds(55),
    description="Audit tick: drains audit outboxes, exports the chains to S3, trims Redis",
    async_retries=0,
)
"""Its bucket, grants and S3 egress: cordum_infra.audit_export."""

ALL_FUNCTIONS = (
    GATEWAY,
    SUBMIT,
    RESULT,
    RECONCILER_TICK,
    REPLAYER_TICK,
    SAGA_ROLLBACK,
    WORKFLOW,
    WORKFLOW_TICK,
    AUDIT_TICK,
)

TICK_FUNCTIONS = (RECONCILER_TICK, REPLAYER_TICK, WORKFLOW_TICK, AUDIT_TICK)
"""Run once a minute by EventBridge, each shorter than a minute: one instance each."""

ARCHITECTURES = {"x86_64": lambda_.Architecture.X86_64, "arm64": lambda_.Architecture.ARM_64}

STACK_NAME_CONTEXT = "stackName"
"""Context key: the CloudFormation stack's name (default CordumServerless)."""
MAX_STACK_NAME_LENGTH = MAX_NAME_LENGTH - 1 - max(len(spec.slug) for spec in ALL_FUNCTIONS)
"""48: the longest stack name whose function names (``<stack>-reconciler-tick``)
stay within Lambda's 64 characters."""
_STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]*$")


def stack_name_from_context(value: object, default: str) -> str:
    """The ``stackName`` context value (CloudFormation's rules, short enough that every
    function name derived from it fits), else `default`."""
    if value is None or str(value).strip() == "":
        return default
    name = str(value).strip()
    if not _STACK_NAME.match(name):
        raise ContextError(
            f"context {STACK_NAME_CONTEXT} must start with a letter and hold only letters, "
            f"digits and hyphens (CloudFormation's rule): {name!r}"
        )
    if len(name) > MAX_STACK_NAME_LENGTH:
        raise ContextError(
            f"context {STACK_NAME_CONTEXT}: at most {MAX_STACK_NAME_LENGTH} characters, so "
            f"that every function name (<stack>-reconciler-tick) fits Lambda's "
            f"{MAX_NAME_LENGTH}: {name!r} has {len(name)}"
        )
    return name


def gateway_reservation(value: object) -> int | None:
    """The ``gatewayReservedConcurrency`` context value: None (the default), ``none``
    (no reservation) or a whole number >= 1."""
    if value is None or str(value).strip() == "":
        return DEFAULT_GATEWAY_RESERVED_CONCURRENCY
    text = str(value).strip().lower()
    if text == "none":
        return None
    if not text.isdigit() or int(text) < 1:
        raise ContextError(
            f"context {GATEWAY_RESERVED_CONTEXT} must be a whole number >= 1, or none to "
            f"reserve nothing (default {DEFAULT_GATEWAY_RESERVED_CONCURRENCY}): {value}"
        )
    return int(text)


def parse_reserved_concurrency(value: object) -> dict[str, int]:
    """Module name -> reserved concurrency, from the ``reservedConcurrency`` context.

    `value` is the context value: None (no reservations), a JSON object as text
    (``-c`` on the command line) or a mapping (``cdk.json``). Keys are handler
    modules (``reconciler_tick``) or slugs (``reconciler-tick``); values are
    whole numbers >= 1 (0 would stop the function: remove it instead).
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ContextError(
                f"context {RESERVED_CONCURRENCY_CONTEXT} must be a JSON object, "
                f'e.g. {{"submit": 50}}: {exc}'
            ) from exc
    if not isinstance(value, Mapping):
        raise ContextError(
            f"context {RESERVED_CONCURRENCY_CONTEXT} must be a JSON object of function -> number"
        )
    by_name = {spec.module: spec for spec in ALL_FUNCTIONS}
    by_name.update({spec.slug: spec for spec in ALL_FUNCTIONS})
    reserved: dict[str, int] = {}
    for key, count in value.items():
        spec = by_name.get(str(key))
        if spec is None:
            known = ", ".join(f.slug for f in ALL_FUNCTIONS)
            raise ContextError(
                f"context {RESERVED_CONCURRENCY_CONTEXT}: unknown function {key!r} (one of {known})"
            )
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ContextError(
                f"context {RESERVED_CONCURRENCY_CONTEXT}: {key} must be a whole number >= 1, "
                f"got {count!r}"
            )
        reserved[spec.module] = count
    return reserved


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
        reserved_concurrency: Mapping[str, int] | None = None,
        reserve_gateway: bool = False,
    ) -> None:
        """`reserved_concurrency` (module -> count) wins over the context key.
        `reserve_gateway`: reserve the gateway's concurrency (gatewayReservedConcurrency)
        unless reservedConcurrency names the gateway."""
        super().__init__(scope, construct_id)
        if reserved_concurrency is None:
            reserved_concurrency = parse_reserved_concurrency(
                self.node.try_get_context(RESERVED_CONCURRENCY_CONTEXT)
            )
        reserved = dict(reserved_concurrency)
        if reserve_gateway and GATEWAY.module not in reserved:
            count = gateway_reservation(self.node.try_get_context(GATEWAY_RESERVED_CONTEXT))
            if count is not None:
                reserved[GATEWAY.module] = count
        stack_name = Stack.of(self).stack_name
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
        self.log_groups: dict[str, logs.LogGroup] = {}
        for spec in ALL_FUNCTIONS:
            log_group = logs.LogGroup(
                self,
                f"{spec.construct_id}Logs",
                log_group_name=f"/aws/lambda/{spec.function_name(stack_name)}",
                retention=LOG_RETENTION,
                removal_policy=LOG_REMOVAL_POLICY,
            )
            fn = lambda_.Function(
                self,
                spec.construct_id,
                function_name=spec.function_name(stack_name),
                description=spec.description,
                runtime=RUNTIME,
                architecture=arch,
                handler=f"{spec.module}.handler",
                code=code,
                layers=[self.layer],
                memory_size=spec.memory_mb,
                timeout=spec.timeout,
                retry_attempts=spec.async_retries,
                environment={**environment, **FUNCTION_ENV,
                             "POWERTOOLS_SERVICE_NAME": spec.service_name},
                log_group=log_group,
                tracing=TRACING,
                reserved_concurrent_executions=reserved.get(spec.module),
                vpc=placement.vpc if placement else None,
                vpc_subnets=placement.subnets if placement else None,
                security_groups=[placement.security_group] if placement else None,
            )
            self.by_module[spec.module] = fn
            self.log_groups[spec.module] = log_group

    def __getitem__(self, spec: FunctionSpec) -> lambda_.Function:
        return self.by_module[spec.module]
