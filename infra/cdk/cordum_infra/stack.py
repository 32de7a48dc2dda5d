"""The CordumServerless stack: wires the constructs together and exports outputs.

Flows (see DESIGN.md): REST API -> gateway; bridge -> submit queue -> submit
function; bridge -> result queue -> result function -> (async) saga-rollback;
EventBridge -> reconciler / replayer ticks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_cdk import ArnFormat, CfnOutput, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from cordum_infra.api import GatewayApi
from cordum_infra.assets import CONFIG_SUBDIR, stage_function_code
from cordum_infra.cache import RedisCache
from cordum_infra.functions import (
    ALL_FUNCTIONS,
    GATEWAY,
    RECONCILER_TICK,
    REPLAYER_TICK,
    RESULT,
    SAGA_ROLLBACK,
    SUBMIT,
    CordumFunctions,
    VpcPlacement,
)
from cordum_infra.network import Network
from cordum_infra.queues import JobQueue
from cordum_infra.schedules import TickSchedules

if TYPE_CHECKING:
    from cordum_infra.settings import StackSettings

STACK_NAME = "CordumServerless"

API_KEYS_PARAMETER = "/cordum/api-keys"
"""SSM parameter (SecureString) holding CORDUM_API_KEYS on AWS. Created by the
operator, not by the stack, so the keys never pass through a template."""

METRICS_NAMESPACE = "Cordum"


class CordumServerlessStack(Stack):
    """Everything Cordum runs on AWS except the bridge and the safety kernel."""

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: StackSettings, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.settings = settings

        placement: VpcPlacement | None = None
        if settings.creates_cache:
            network = Network(self, "Network")
            self.cache: RedisCache | None = RedisCache(
                self,
                "Cache",
                vpc=network.vpc,
                subnets=network.private_subnets,
                client_security_group=network.functions_security_group,
            )
            redis_url = self.cache.url
            placement = VpcPlacement(
                vpc=network.vpc,
                subnets=network.private_subnets,
                security_group=network.functions_security_group,
            )
        else:
            self.cache = None
            assert settings.redis_url is not None
            redis_url = settings.redis_url

        self.submit_queue = JobQueue(self, "SubmitQueue", consumer_timeout=SUBMIT.timeout)
        self.result_queue = JobQueue(self, "ResultQueue", consumer_timeout=RESULT.timeout)

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
                "SAFETY_KERNEL_ADDR": settings.safety_kernel_addr,
                "OUTPUT_POLICY_ENABLED": "true" if settings.output_policy else "false",
                # Relative: resolved against LAMBDA_TASK_ROOT, where the code asset lands.
                "CORDUM_CONFIG_DIR": CONFIG_SUBDIR,
                "POWERTOOLS_LOG_LEVEL": settings.log_level,
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
                "SUBMIT_QUEUE_URL": self.submit_queue.queue.queue_url,
                "RESULT_QUEUE_URL": self.result_queue.queue.queue_url,
            },
            placement=placement,
        )
        gateway = self.functions[GATEWAY]
        submit = self.functions[SUBMIT]
        result = self.functions[RESULT]
        saga_rollback = self.functions[SAGA_ROLLBACK]

        self.submit_queue.feed(submit)
        self.result_queue.feed(result)

        # FAILED_FATAL in a workflow: the result function hands the rollback to
        # its own invocation instead of leaving work running after it returns.
        saga_rollback.grant_invoke(result)
        result.add_environment("SAGA_ROLLBACK_FUNCTION", saga_rollback.function_name)

        if settings.api_keys is not None:
            gateway.add_environment("CORDUM_API_KEYS", settings.api_keys)
        else:
            gateway.add_environment("CORDUM_API_KEYS_SSM_PARAMETER", API_KEYS_PARAMETER)
            gateway.add_to_role_policy(
                iam.PolicyStatement(
                    actions=["ssm:GetParameter"],
                    resources=[
                        self.format_arn(
                            service="ssm",
                            resource="parameter",
                            resource_name=API_KEYS_PARAMETER.lstrip("/"),
                            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
                        )
                    ],
                )
            )

        self.api = GatewayApi(self, "Api", gateway=gateway)
        self.schedules = TickSchedules(
            self,
            "Schedules",
            ticks={
                "Reconciler": self.functions[RECONCILER_TICK],
                "Replayer": self.functions[REPLAYER_TICK],
            },
        )
        self._outputs(redis_url)

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
