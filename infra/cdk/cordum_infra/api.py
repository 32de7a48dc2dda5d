"""The HTTP API: an API Gateway REST API (v1) proxying every path to the gateway.

REST (v1) rather than HTTP API (v2) because LocalStack emulates only v1, and
one stack deploys to both. Routing, auth and validation happen in the gateway
function, so the API is a plain proxy: ``ANY /`` and ``ANY /{proxy+}``, with
no CORS preflight (no OPTIONS method): Cordum's clients are programs, not
browser pages on another origin.

The stage throttles, writes one JSON access-log line per request to its own
log group and is traced with X-Ray. API Gateway writes access logs through
the account's API Gateway CloudWatch role, an account-and-region setting: the
stack sets it (``apiGatewayLogRole``, on by default on AWS) or relies on the
one the account already has (``-c apiGatewayLogRole=false``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aws_cdk import RemovalPolicy
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct

from cordum_infra.settings import ContextError

if TYPE_CHECKING:
    from constructs import Node

STAGE_NAME = "prod"
"""Stage in the URL: ``https://<id>.execute-api.<region>.amazonaws.com/prod/api/v1/...``,
locally ``http://127.0.0.1:4566/restapis/<id>/prod/_user_request_/api/v1/...``."""

API_NAME = "cordum"


THROTTLE_RATE_RPS = 500
"""Steady requests per second the stage admits (all keys together)."""
THROTTLE_BURST = 1000
"""Requests the stage admits at once above the steady rate."""

MAX_BODY_BYTES_ENV = "CORDUM_MAX_BODY_BYTES"
"""The gateway function's body limit variable (cordum.gateway.models)."""
MAX_BODY_BYTES = 1024 * 1024
"""Largest request body the gateway accepts (413 in Cordum's error format above it).
API Gateway REST APIs take payloads up to 10 MB, a fixed quota no setting lowers,
so the limit that applies is this one, enforced by the function."""

ACCESS_LOG_RETENTION = logs.RetentionDays.THREE_MONTHS
"""Who called the API and what it answered, kept for a quarter."""
ACCESS_LOG_REMOVAL_POLICY = RemovalPolicy.RETAIN
"""The audit trail of API calls outlives the stack; its name is generated, so a
retained group never blocks a later deploy."""

ACCESS_LOG_FIELDS = {
    "requestId": apigateway.AccessLogField.context_request_id(),
    "ip": apigateway.AccessLogField.context_identity_source_ip(),
    "method": apigateway.AccessLogField.context_http_method(),
    "path": apigateway.AccessLogField.context_path(),
    "status": apigateway.AccessLogField.context_status(),
    "latency": apigateway.AccessLogField.context_response_latency(),
    "integrationLatency": apigateway.AccessLogField.context_integration_latency(),
    "responseLength": apigateway.AccessLogField.context_response_length(),
    "requestTime": apigateway.AccessLogField.context_request_time_epoch(),
    "userAgent": apigateway.AccessLogField.context_identity_user_agent(),
    "xrayTraceId": apigateway.AccessLogField.context_xray_trace_id(),
}
"""One JSON object per request. No header is logged: the API key travels in one."""

ACCOUNT_LOG_ROLE_CONTEXT = "apiGatewayLogRole"
"""Context key: ``true`` sets the account's API Gateway CloudWatch role, ``false``
leaves the account's own in place."""


def account_log_role_from_context(node: Node, *, default: bool) -> bool:
    """Whether the stack sets the account's API Gateway logging role."""
    value = node.try_get_context(ACCOUNT_LOG_ROLE_CONTEXT)
    if value is None or str(value).strip() == "":
        return default
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ContextError(f"context {ACCOUNT_LOG_ROLE_CONTEXT} must be true or false: {value}")
    return text == "true"


class GatewayApi(Construct):
    """LambdaRestApi in proxy mode in front of the gateway function."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        gateway: lambda_.Function,
        account_log_role: bool = False,
    ) -> None:
        """`account_log_role`: create the API Gateway CloudWatch role of the account
        and region (kept on ``cdk destroy``: other APIs may log through it)."""
        super().__init__(scope, construct_id)
        gateway.add_environment(MAX_BODY_BYTES_ENV, str(MAX_BODY_BYTES))
        self.access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            retention=ACCESS_LOG_RETENTION,
            removal_policy=ACCESS_LOG_REMOVAL_POLICY,
        )
        self.rest_api = apigateway.LambdaRestApi(
            self,
            "RestApi",
            rest_api_name=API_NAME,
            description="Cordum job API",
            handler=gateway,
            proxy=True,
            endpoint_types=[apigateway.EndpointType.REGIONAL],
            deploy_options=apigateway.StageOptions(
                stage_name=STAGE_NAME,
                # The stage's ceiling, in front of the gateway's per-key limit: a flood
                # is turned away by API Gateway before it costs an invocation.
                throttling_rate_limit=THROTTLE_RATE_RPS,
                throttling_burst_limit=THROTTLE_BURST,
                access_log_destination=apigateway.LogGroupLogDestination(self.access_logs),
                access_log_format=apigateway.AccessLogFormat.custom(
                    json.dumps(ACCESS_LOG_FIELDS, separators=(",", ":"))
                ),
                tracing_enabled=True,
            ),
            cloud_watch_role=account_log_role,
            cloud_watch_role_removal_policy=(
                RemovalPolicy.RETAIN if account_log_role else None
            ),
        )
        self.stage_name = STAGE_NAME
        self.log_role: IConstruct | None = (
            self.rest_api.node.find_child("CloudWatchRole") if account_log_role else None
        )
        """The account's API Gateway CloudWatch role, when this stack sets it."""
