"""The HTTP API: an API Gateway REST API (v1) proxying every path to the gateway.

REST (v1) rather than HTTP API (v2) because LocalStack emulates only v1, and
one stack deploys to both. Routing, auth and validation happen in the gateway
function, so the API is a plain proxy: ``ANY /`` and ``ANY /{proxy+}``.
"""

from __future__ import annotations

from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

STAGE_NAME = "prod"
"""Stage in the URL: ``https://<id>.execute-api.<region>.amazonaws.com/prod/api/v1/...``,
locally ``http://127.0.0.1:4566/restapis/<id>/prod/_user_request_/api/v1/...``."""

API_NAME = "cordum"


THROTTLE_RATE_RPS = 500
"""Steady requests per second the stage admits (all keys together)."""
THROTTLE_BURST = 1000
"""Requests the stage admits at once above the steady rate."""


class GatewayApi(Construct):
    """LambdaRestApi in proxy mode in front of the gateway function."""

    def __init__(self, scope: Construct, construct_id: str, *, gateway: lambda_.IFunction) -> None:
        super().__init__(scope, construct_id)
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
            ),
            # The account-wide logging role is an account setting, not this stack's.
            cloud_watch_role=False,
        )
        self.stage_name = STAGE_NAME
