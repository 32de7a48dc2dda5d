"""The HTTP API: an API Gateway REST API (v1) proxying every path to the gateway.

REST (v1) rather than HTTP API (v2) because LocalStack emulates only v1, and
one stack deploys to both. Routing, auth and validation happen in the gateway
function, so the API is a plain proxy: ``ANY /`` and ``ANY /{proxy+}``, with
no CORS preflight (no OPTIONS method): Cordum's clients are programs, not
browser pages on another origin.

The stage throttles (``apiThrottleRate`` requests a second, ``apiThrottleBurst``
at once), writes one JSON access-log line per request to its own log group and
is traced with X-Ray. On AWS a WAF web ACL sits in front of the stage
(cordum_infra.waf: a rate limit per source address and AWS's managed rules), so
one client cannot take the whole stage throttle from every tenant; the local
shape has none (LocalStack has no WAFv2). API Gateway writes access logs
through the account's API Gateway CloudWatch role, an account-and-region
setting: the stack sets it (``apiGatewayLogRole``, on by default on AWS) or
relies on the one the account already has (``-c apiGatewayLogRole=false``).

On AWS the gateway reads its API keys from a Secrets Manager secret the
operator creates (``apiKeysSecret``: its name or complete ARN, default
``cordum/api-keys``); the stack names it and grants the gateway
``secretsmanager:GetSecretValue`` on it, and never sees a key.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from aws_cdk import RemovalPolicy
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct, IConstruct

from cordum_infra.settings import SECRET_ARN, ContextError
from cordum_infra.waf import ApiWebAcl, waf_rate_limit_from_context

if TYPE_CHECKING:
    from constructs import Node

STAGE_NAME = "prod"
"""Stage in the URL: ``https://<id>.execute-api.<region>.amazonaws.com/prod/api/v1/...``,
locally ``http://127.0.0.1:4566/restapis/<id>/prod/_user_request_/api/v1/...``."""

API_NAME = "cordum"


THROTTLE_RATE_CONTEXT = "apiThrottleRate"
THROTTLE_BURST_CONTEXT = "apiThrottleBurst"
DEFAULT_THROTTLE_RATE_RPS = 500
"""Steady requests per second the stage admits (all keys together): what the
gateway's default 100 instances serve at 200 ms a request."""
DEFAULT_THROTTLE_BURST = 1000
"""Requests the stage admits at once above the steady rate."""
MAX_THROTTLE_RATE_RPS = 10_000
MAX_THROTTLE_BURST = 5_000
"""API Gateway's default account-level throttle per region (10,000 a second, burst
5,000), which every stage of the account shares: a stage set above it is held to
it anyway. An account with a raised quota can ask AWS, then change these."""

API_KEYS_SECRET_CONTEXT = "apiKeysSecret"
"""Context key: name or complete ARN of the Secrets Manager secret of the keys."""
API_KEYS_SECRET_ENV = "CORDUM_API_KEYS_SECRET_ID"
API_KEYS_TTL_ENV = "CORDUM_API_KEYS_TTL_S"
API_KEYS_TTL_S = 300
"""How long a gateway container keeps the keys it read (cordum.gateway.core.auth). A
container reads the secret at its first request and then once per 5 minutes: a
cold-start storm of N containers costs N reads (1,000 containers: 1,000 reads,
then 3.3 a second), far under Secrets Manager's 10,000 GetSecretValue a second
(SSM's standard 40 a second throttled such a storm), and a rotated key takes
effect within 5 minutes without a redeploy."""
_SECRET_NAME = re.compile(r"^[A-Za-z0-9/_+=.@-]{1,512}$")

MAX_BODY_BYTES_ENV = "CORDUM_MAX_BODY_BYTES"
"""The gateway function's body limit variable (cordum.gateway.core.models)."""
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


def stage_throttle_from_context(node: Node) -> tuple[float, int]:
    """(rate, burst) of the stage: ``apiThrottleRate`` (requests a second, > 0) and
    ``apiThrottleBurst`` (whole requests, >= 1), each within the account's default."""
    rate_text = _context_text(node, THROTTLE_RATE_CONTEXT)
    burst_text = _context_text(node, THROTTLE_BURST_CONTEXT)
    rate: float = DEFAULT_THROTTLE_RATE_RPS
    if rate_text is not None:
        try:
            rate = float(rate_text)
        except ValueError:
            rate = -1.0
        if not rate > 0 or rate == float("inf"):
            raise ContextError(
                f"context {THROTTLE_RATE_CONTEXT} must be a number of requests per second "
                f"> 0 (default {DEFAULT_THROTTLE_RATE_RPS}): {rate_text}"
            )
        if rate.is_integer():
            rate = int(rate)
    burst = DEFAULT_THROTTLE_BURST
    if burst_text is not None:
        if not burst_text.isdigit() or int(burst_text) < 1:
            raise ContextError(
                f"context {THROTTLE_BURST_CONTEXT} must be a whole number >= 1 of requests "
                f"(default {DEFAULT_THROTTLE_BURST}): {burst_text}"
            )
        burst = int(burst_text)
    if rate > MAX_THROTTLE_RATE_RPS:
        raise ContextError(
            f"context {THROTTLE_RATE_CONTEXT}: at most {MAX_THROTTLE_RATE_RPS}, API Gateway's "
            f"account-level limit per region, which holds the stage anyway: {rate_text}"
        )
    if burst > MAX_THROTTLE_BURST:
        raise ContextError(
            f"context {THROTTLE_BURST_CONTEXT}: at most {MAX_THROTTLE_BURST}, API Gateway's "
            f"account-level burst per region, which holds the stage anyway: {burst_text}"
        )
    return rate, burst


def api_keys_secret_from_context(node: Node, default: str) -> str:
    """The ``apiKeysSecret`` context value (a secret's name or complete ARN), else `default`."""
    value = _context_text(node, API_KEYS_SECRET_CONTEXT)
    if value is None:
        return default
    if value.startswith("arn:"):
        if SECRET_ARN.match(value):
            return value
    elif _SECRET_NAME.match(value):
        return value
    raise ContextError(
        f"context {API_KEYS_SECRET_CONTEXT} must be a secret's name (letters, digits and "
        "/_+=.@-) or its complete ARN (arn:<partition>:secretsmanager:<region>:<account>:"
        f"secret:<name>-<6 characters>), never the keys themselves: {value[:80]}"
    )


def grant_api_keys(gateway: lambda_.Function, secret: str) -> secretsmanager.ISecret:
    """Tell the gateway which secret holds its keys and how long to keep them, and let it
    read that secret (any version), nothing else."""
    if secret.startswith("arn:"):
        ref = secretsmanager.Secret.from_secret_complete_arn(gateway, "ApiKeysSecret", secret)
    else:
        ref = secretsmanager.Secret.from_secret_name_v2(gateway, "ApiKeysSecret", secret)
    gateway.add_environment(API_KEYS_SECRET_ENV, secret)
    gateway.add_environment(API_KEYS_TTL_ENV, str(API_KEYS_TTL_S))
    ref.grant_read(gateway)
    return ref


def _context_text(node: Node, key: str) -> str | None:
    value = node.try_get_context(key)
    if value is None or str(value).strip() == "":
        return None
    return str(value).strip()


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
        web_acl: bool = False,
    ) -> None:
        """`account_log_role`: create the API Gateway CloudWatch role of the account
        and region (kept on ``cdk destroy``: other APIs may log through it).
        `web_acl`: put the stage behind a WAF web ACL (AWS only)."""
        super().__init__(scope, construct_id)
        rate, burst = stage_throttle_from_context(self.node)
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
                throttling_rate_limit=rate,
                throttling_burst_limit=burst,
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
        self.web_acl: ApiWebAcl | None = None
        """The stage's web ACL (AWS), None on a local stack."""
        if web_acl:
            self.web_acl = ApiWebAcl(
                self,
                "WebAcl",
                stage=self.rest_api.deployment_stage,
                rate_limit=waf_rate_limit_from_context(self.node),
            )
