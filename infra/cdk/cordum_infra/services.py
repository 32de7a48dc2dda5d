"""The long-running services on ECS Fargate: the cluster, the bridge and the safety kernel.

Only the AWS stack runs them (a local stack starts both as host processes).
What the two services share (images, task definition, logs, rollout) is in
cordum_infra.fargate; each service is its own construct (cordum_infra.bridge,
cordum_infra.safety_kernel). The stack's TLS CA (:attr:`CordumServices.tls`) is
made here, on first use, for the kernel and any other server of the stack.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cordum_infra.bridge import BridgeService
from cordum_infra.cache_users import CacheUsers
from cordum_infra.fargate import Scaling, SharedServiceSettings, lambda_image, scale_on_cpu
from cordum_infra.kernel_tls import KernelTls
from cordum_infra.safety_kernel import KERNEL_PKI_DOCKERFILE, SafetyKernelService
from cordum_infra.settings import ContextError

BRIDGE_SCALING = Scaling(min_tasks=2, max_tasks=4, cpu_percent=60)
"""Two tasks, one per zone, at least. A forward waits mostly on SQS (BENCHMARKS.md:
about 34 ms of a 36 ms forward is the SendMessageBatch call), so CPU rises late;
60 % leaves room for the JetStream pulls and the SQS calls of a burst. Four tasks of
0.25 vCPU bound the cost at about $36 a month, twice the floor."""


class CordumServices(Construct):
    """The ECS cluster, the bridge and, unless the stack is given one, the safety kernel."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        bridge_security_group: ec2.ISecurityGroup,
        kernel_security_group: ec2.ISecurityGroup,
        redis_url: str,
        redis_users: CacheUsers | None,
        nats_url: str,
        submit_queue: sqs.IQueue,
        result_queue: sqs.IQueue,
        architecture: str,
        log_level: str,
        run_kernel: bool,
        cache_security_group: ec2.ISecurityGroup,
        safety_kernel_ca: str | None = None,
        policy_file: Path | None = None,
    ) -> None:
        """`safety_kernel_ca`: PEM of an outside kernel's CA (required without
        `run_kernel`); `policy_file`: the kernel's safety.yaml (required with it)."""
        super().__init__(scope, construct_id)
        self._architecture = architecture
        self._tls: KernelTls | None = None
        self.cluster = ecs.Cluster(
            self,
            "Cluster",
            vpc=vpc,
            container_insights_v2=ecs.ContainerInsights.ENABLED,
        )
        shared = SharedServiceSettings(
            cluster=self.cluster,
            subnets=subnets,
            architecture=architecture,
            log_level=log_level,
            redis_url=redis_url,
            redis_users=redis_users,
        )
        self.shared = shared
        """Cluster, subnets and settings every Fargate service of the stack runs with
        (the live event stream's too: cordum_infra.stream)."""
        self.kernel: SafetyKernelService | None = None
        if run_kernel:
            if policy_file is None:
                raise ContextError(
                    "the stack's safety kernel needs its policy file (context configDir "
                    "names the folder holding safety.yaml)"
                )
            self.kernel = SafetyKernelService(
                self,
                "SafetyKernel",
                shared=shared,
                vpc=vpc,
                security_group=kernel_security_group,
                cache_security_group=cache_security_group,
                tls=self.tls,
                policy_file=policy_file,
            )
            safety_kernel_ca = self.kernel.ca_pem
        if safety_kernel_ca is None:
            raise ContextError("an outside safety kernel needs its CA (context safetyKernelCa)")
        self.safety_kernel_ca: str = safety_kernel_ca
        """PEM of the CA every client of the kernel trusts."""
        self.bridge = BridgeService(
            self,
            "Bridge",
            shared=shared,
            security_group=bridge_security_group,
            nats_url=nats_url,
            submit_queue=submit_queue,
            result_queue=result_queue,
            safety_kernel_ca=safety_kernel_ca,
        )
        self.bridge_scaling = scale_on_cpu(self.bridge.service, BRIDGE_SCALING)

    @property
    def tls(self) -> KernelTls:
        """The stack's TLS CA and its issuer, made on first use: ``tls.leaf(id, names)``
        gives a server a certificate every client of the stack's CA trusts."""
        if self._tls is None:
            self._tls = KernelTls(
                self,
                "Tls",
                issuer_code=lambda_image(KERNEL_PKI_DOCKERFILE, self._architecture),
                architecture=self._architecture,
            )
        return self._tls
