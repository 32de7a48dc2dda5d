"""The CordumServerless stack: wires the constructs together and exports outputs.

Flows (drawn in docs/architecture.md): REST API -> gateway; bridge -> submit queue -> submit
function; bridge -> result queue -> result function -> (async) saga-rollback;
gateway / submit / result -> workflow queues -> workflow function; EventBridge ->
reconciler / replayer / workflow ticks. AWS with streamCertificateArn: clients ->
internet-facing load balancer -> the live event stream (cordum_infra.stream), which
reads NATS and Redis. Browsers -> CloudFront (cordum_infra.web_console) -> bucket, API, stream.

One piece on purpose: every construct lives in a module of its own, and this file only
makes them in the order they depend on each other and hands each the others' outputs
(functions to queues, ticks, the API, the audit bucket); split, that order would be
spread over files that must be read together anyway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from cordum_infra.api import (
    GatewayApi,
    account_log_role_from_context,
    api_keys_secret_from_context,
    grant_api_keys,
)
from cordum_infra.artifacts import ArtifactBucket
from cordum_infra.assets import CONFIG_SUBDIR, stage_function_code
from cordum_infra.audit_export import AuditExport
from cordum_infra.cache import AUTH_SECRET_ENV, RedisCache
from cordum_infra.cache_config import JOB_RETENTION_ENV
from cordum_infra.capacity_alarms import CapacityTargets
from cordum_infra.fargate import SERVICE_TASKS
from cordum_infra.functions import (
    ALL_FUNCTIONS,
    AUDIT_TICK,
    GATEWAY,
    RECONCILER_TICK,
    REPLAYER_TICK,
    RESULT,
    SAGA_ROLLBACK,
    STACK_NAME_CONTEXT,
    SUBMIT,
    WORKFLOW,
    WORKFLOW_TICK,
    CordumFunctions,
    VpcPlacement,
    stack_name_from_context,
)
from cordum_infra.nats import NatsCredentials
from cordum_infra.nats_cluster import NatsCluster
from cordum_infra.network import Network
from cordum_infra.observability import Observability
from cordum_infra.queues import JobQueue
from cordum_infra.safety_kernel import TLS_CA_ENV, tls_client_env
from cordum_infra.saga import SagaRollbackInvoke
from cordum_infra.schedules import TickSchedules
from cordum_infra.services import CordumServices
from cordum_infra.settings import API_KEYS_SECRET, NATS_NAMESPACE
from cordum_infra.stream import StreamService
from cordum_infra.stream_wiring import add_stream, stream_outputs
from cordum_infra.web_console import add_web_console
from cordum_infra.workflow import connect_workflow

if TYPE_CHECKING:
    from cordum_infra.settings import StackSettings

STACK_NAME = "CordumServerless"

METRICS_NAMESPACE = "Cordum"


class CordumServerlessStack(Stack):
    """Everything Cordum runs on AWS; a local stack leaves out the VPC, the cache,
    the bridge and the safety kernel (run as host processes there)."""

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: StackSettings, **kwargs: Any
    ) -> None:
        # Context stackName: a second stack in the account and region, its own names.
        kwargs.setdefault("stack_name", stack_name_from_context(
            scope.node.try_get_context(STACK_NAME_CONTEXT), construct_id))
        super().__init__(scope, construct_id, **kwargs)
        self.settings = settings

        placement: VpcPlacement | None = None
        if settings.creates_cache:
            network = Network(
                self,
                "Network",
                egress=settings.egress,
                placement=settings.network,
                nats_url=settings.nats_url,
                kernel_addr=settings.safety_kernel_addr,
                stream=settings.runs_stream,
            )
            self.network: Network | None = network
            self.cache: RedisCache | None = RedisCache(
                self,
                "Cache",
                vpc=network.vpc,
                subnets=network.private_subnets,
                security_group=network.cache_security_group,
                config=settings.cache,
            )
            redis_url = self.cache.url
            placement = VpcPlacement(
                vpc=network.vpc,
                subnets=network.private_subnets,
                security_group=network.functions_security_group,
            )
        else:
            self.network = None
            self.cache = None
            assert settings.redis_url is not None
            redis_url = settings.redis_url

        self.submit_queue = JobQueue(self, "SubmitQueue", consumer_timeout=SUBMIT.timeout)
        self.result_queue = JobQueue(self, "ResultQueue", consumer_timeout=RESULT.timeout)
        self.workflow_queue = JobQueue(
            self, "WorkflowQueue", consumer_timeout=WORKFLOW.timeout, fifo=True
        )
        self.workflow_timer_queue = JobQueue(
            self, "WorkflowTimerQueue", consumer_timeout=WORKFLOW.timeout
        )

        # AWS only: the bridge and (unless an address is given) the safety kernel on
        # Fargate, and with natsCluster (devNats) a NATS cluster (node) for them and
        # the functions.
        self.services: CordumServices | None = None
        self.nats: NatsCluster | None = None
        nats_credentials: NatsCredentials | None = None
        safety_kernel_addr = settings.safety_kernel_addr
        if self.network is not None and self.cache is not None:
            self.services = CordumServices(
                self,
                "Services",
                vpc=self.network.vpc,
                subnets=self.network.private_subnets,
                bridge_security_group=self.network.bridge_security_group,
                kernel_security_group=self.network.kernel_security_group,
                redis_url=redis_url,
                redis_users=self.cache.users,
                nats_url=settings.nats_url,
                submit_queue=self.submit_queue.queue,
                result_queue=self.result_queue.queue,
                architecture=settings.architecture,
                log_level=settings.log_level,
                run_kernel=settings.runs_safety_kernel,
                cache_security_group=self.network.cache_security_group,
                safety_kernel_ca=settings.safety_kernel_ca,
                policy_file=settings.config_dir / "safety.yaml",
            )
            if self.services.kernel is not None:
                safety_kernel_addr = self.services.kernel.address
                # Its tasks pull their image and write logs: through the endpoints.
                self.network.allow_aws_apis(self.services.kernel.task_security_group)
            if settings.nats_nodes:
                # One certificate for every node's name (a wildcard under the
                # namespace), from the stack's CA, which signs the kernel's too.
                nats_tls = self.services.tls.leaf(
                    "Nats", [f"*.{NATS_NAMESPACE}"], generation_context="natsTlsGeneration"
                )
                self.nats = NatsCluster(
                    self,
                    "Nats",
                    cluster=self.services.cluster,
                    vpc=self.network.vpc,
                    subnets=self.network.private_subnets,
                    clients=[
                        self.network.functions_security_group,
                        self.network.bridge_security_group,
                        *filter(None, [self.network.stream_security_group]),
                    ],
                    architecture=settings.architecture,
                    tls_secret=nats_tls.secret,
                    ca_pem=nats_tls.ca_pem,
                    tls_serial=nats_tls.serial,
                    nodes=settings.nats_nodes,
                    allow_aws_apis=self.network.allow_aws_apis,
                )
                for service in self.nats.services:
                    # No node starts before the secret holds its certificate, and
                    # CloudFormation starts the bridge once every node runs.
                    service.node.add_dependency(nats_tls.resource)
                    self.services.bridge.service.node.add_dependency(service)
                # The job stream the bridge creates keeps a copy on every node: a
                # node lost (or replaced by a deploy) loses no job.
                self.services.bridge.container.add_environment(
                    "JOB_STREAM_REPLICAS", str(settings.nats_nodes)
                )
                nats_credentials = NatsCredentials(
                    self, "NatsCredentials", secret=self.nats.credentials, ca_pem=self.nats.ca_pem
                )
            elif settings.nats_credentials_secret_arn is not None:
                nats_credentials = NatsCredentials(
                    self, "NatsCredentials", secret_arn=settings.nats_credentials_secret_arn,
                    ca_pem=settings.nats_ca,
                )
        assert safety_kernel_addr is not None
        # AWS: the kernel is reached over TLS only, verified against its CA. A local
        # stack speaks plaintext to its host kernel unless given a CA.
        kernel_tls: dict[str, str] = {}
        if self.services is not None:
            kernel_tls = tls_client_env(self.services.safety_kernel_ca)
        elif settings.safety_kernel_ca is not None:
            kernel_tls = {TLS_CA_ENV: settings.safety_kernel_ca}

        code_dir = stage_function_code(
            settings.functions_dir,
            settings.config_dir,
            settings.code_staging_dir,
            [spec.module for spec in ALL_FUNCTIONS],
        )
        self.functions = CordumFunctions(
            self,
            "Functions",
            layer_path=str(settings.layer_path),
            code_path=str(code_dir),
            architecture=settings.architecture,
            environment={
                "REDIS_URL": redis_url,
                "NATS_URL": settings.nats_url,
                "SAFETY_KERNEL_ADDR": safety_kernel_addr,
                **kernel_tls,
                "OUTPUT_POLICY_ENABLED": "true" if settings.output_policy else "false",
                JOB_RETENTION_ENV: str(settings.cache.job_retention_s),
                # Relative: resolved against LAMBDA_TASK_ROOT, where the code asset lands.
                "CORDUM_CONFIG_DIR": CONFIG_SUBDIR,
                "POWERTOOLS_LOG_LEVEL": settings.log_level,
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
                "SUBMIT_QUEUE_URL": self.submit_queue.queue.queue_url,
                "RESULT_QUEUE_URL": self.result_queue.queue.queue_url,
            },
            placement=placement,
            # AWS: the gateway's instances bounded (and guaranteed); local: as before.
            reserve_gateway=settings.creates_cache,
        )
        gateway = self.functions[GATEWAY]
        submit = self.functions[SUBMIT]
        result = self.functions[RESULT]
        saga_rollback = self.functions[SAGA_ROLLBACK]

        self.submit_queue.feed(submit)
        self.result_queue.feed(result)
        connect_workflow(
            self.functions, events=self.workflow_queue, timers=self.workflow_timer_queue
        )

        if self.cache is not None:
            # Every function talks to Redis as the functions' user: each reads that
            # user's login once per container.
            functions_login = self.cache.users.secret("functions")
            for fn in self.functions.by_module.values():
                fn.add_environment(AUTH_SECRET_ENV, functions_login.secret_arn)
                functions_login.grant_read(fn)

        if nats_credentials is not None and self.services is not None:
            for fn in self.functions.by_module.values():
                nats_credentials.grant_function(fn)
            nats_credentials.grant_container(self.services.bridge.container)

        # FAILED_FATAL in a workflow: the result function hands the rollback to
        # its own invocation instead of leaving work running after it returns.
        self.saga = SagaRollbackInvoke(
            self, "SagaRollback", result=result, saga_rollback=saga_rollback
        )

        api_keys_secret: str | None = None
        if settings.api_keys is not None:
            gateway.add_environment("CORDUM_API_KEYS", settings.api_keys)
        else:
            api_keys_secret = api_keys_secret_from_context(self.node, API_KEYS_SECRET)
            grant_api_keys(gateway, api_keys_secret)

        self.api = GatewayApi(
            self,
            "Api",
            gateway=gateway,
            # The account's API Gateway logging role: LocalStack needs none.
            account_log_role=account_log_role_from_context(
                self.node, default=settings.creates_cache
            ),
            # AWS: a WAF web ACL on the stage; LocalStack has no WAFv2.
            web_acl=settings.creates_cache,
        )
        self.schedules = TickSchedules(
            self,
            "Schedules",
            ticks={
                "Reconciler": self.functions[RECONCILER_TICK],
                "Replayer": self.functions[REPLAYER_TICK],
                "Workflow": self.functions[WORKFLOW_TICK],
                "Audit": self.functions[AUDIT_TICK],
            },
        )
        # The audit bucket (Object Lock) and the audit tick's access to it.
        self.audit = AuditExport(
            self, "AuditExport", function=self.functions[AUDIT_TICK], placement=placement,
            local=not settings.creates_cache, readers=(self.functions[GATEWAY],),
            signers=tuple(self.functions.by_module.values()))
        if self.network is not None and self.audit.s3_security_group is not None:
            self.network.allow_aws_apis(self.audit.s3_security_group, images=True)
        # The artifacts bucket (large artifacts) and the gateway's grant to sign for it.
        self.artifacts = ArtifactBucket(self, "Artifacts", gateway=self.functions[GATEWAY],
                                        local=not settings.creates_cache)
        # AWS with a certificate: the live event stream behind its load balancer.
        self.stream: StreamService | None = None
        if self.services is not None and self.network is not None:
            self.stream = add_stream(
                self, settings, services=self.services, network=self.network,
                api_keys_secret=api_keys_secret, nats_credentials=nats_credentials,
                nats=self.nats, metrics_namespace=METRICS_NAMESPACE)
        # AWS: the capacity alarms, and an alarm topic unless alarmTopicArn names one.
        capacity: CapacityTargets | None = None
        if self.cache is not None:
            kernel = self.services.kernel if self.services is not None else None
            capacity = CapacityTargets(
                functions={spec.construct_id: self.functions[spec] for spec in ALL_FUNCTIONS},
                queues={"Submit": self.submit_queue.queue, "Result": self.result_queue.queue},
                stage=self.api.rest_api.deployment_stage,
                access_logs=self.api.access_logs,
                replication_group=self.cache.replication_group,
                kernel_target_group=kernel.target_group if kernel is not None else None,
                kernel_tasks=SERVICE_TASKS,
            )
        self.observability = Observability(
            self,
            "Observability",
            namespace=METRICS_NAMESPACE,
            create_topic=settings.creates_cache,
            capacity=capacity,
            functions={spec.construct_id: self.functions[spec] for spec in ALL_FUNCTIONS},
            dead_letter_queues={
                "Submit": self.submit_queue.dlq,
                "Result": self.result_queue.dlq,
                "Workflow": self.workflow_queue.dlq,
                "WorkflowTimer": self.workflow_timer_queue.dlq,
                "Tick": self.schedules.dlq,
                "SagaRollback": self.saga.dlq,
            },
            replication_group=self.cache.replication_group if self.cache else None,
            # Only a bridge on ECS reports its lag to CloudWatch; a local one runs on
            # the host and would leave the alarm without data, so always firing.
            bridge=self.services is not None,
            stream=(
                self.stream.alarm_targets(self.services.cluster.cluster_name)
                if self.stream is not None and self.services is not None else None
            ),
        )
        self._outputs(redis_url)
        if self.observability.alarm_topic is not None:
            CfnOutput(
                self,
                "AlarmTopicArn",
                value=self.observability.alarm_topic.topic_arn,
                description="SNS topic every alarm notifies (ALARM and OK): subscribe to it",
            )
        if self.services is not None:
            CfnOutput(
                self,
                "SafetyKernelAddr",
                value=safety_kernel_addr,
                description="host:port of the safety kernel the functions call",
            )
            CfnOutput(
                self,
                "ServicesClusterName",
                value=self.services.cluster.cluster_name,
                description="ECS cluster of the bridge and the safety kernel",
            )
        if self.stream is not None:
            stream_outputs(self, self.stream)
        # AWS: the console on CloudFront (a local stack's console server serves it itself).
        self.console = add_web_console(self, settings, api=self.api, stream=self.stream)

    def _outputs(self, redis_url: str) -> None:
        api = self.api.rest_api
        values = {
            "ApiUrl": (api.url, "Stage URL of the REST API"),
            "RestApiId": (api.rest_api_id, "REST API id (LocalStack URLs are built from it)"),
            "StageName": (self.api.stage_name, "REST API stage"),
            "SubmitQueueUrl": (self.submit_queue.queue.queue_url, "Bridge -> submit function"),
            "ResultQueueUrl": (self.result_queue.queue.queue_url, "Bridge -> result function"),
            "SubmitDlqUrl": (self.submit_queue.dlq.queue_url, "Dead letters of the submit queue"),
            "ResultDlqUrl": (self.result_queue.dlq.queue_url, "Dead letters of the result queue"),
            "WorkflowQueueUrl": (
                self.workflow_queue.queue.queue_url,
                "Workflow run events (FIFO, one message group per run) -> workflow function",
            ),
            "WorkflowTimerQueueUrl": (
                self.workflow_timer_queue.queue.queue_url,
                "Workflow timers (delayed messages) -> workflow function",
            ),
            "WorkflowDlqUrl": (
                self.workflow_queue.dlq.queue_url,
                "Dead letters of the workflow queue (FIFO)",
            ),
            "WorkflowTimerDlqUrl": (
                self.workflow_timer_queue.dlq.queue_url,
                "Dead letters of the workflow timer queue",
            ),
            "SagaRollbackDlqUrl": (
                self.saga.dlq.queue_url,
                "Saga rollback events Lambda gave up on (invocation records)",
            ),
            "RedisUrl": (redis_url, "Redis the functions use (the bridge needs the same)"),
            "LayerArn": (self.functions.layer.layer_version_arn, "cordum layer version"),
        }
        for spec in ALL_FUNCTIONS:
            values[f"{spec.construct_id}FunctionName"] = (
                self.functions[spec].function_name,
                f"Lambda function {spec.module}",
            )
        for key, (value, description) in values.items():
            CfnOutput(self, key, value=value, description=description)
