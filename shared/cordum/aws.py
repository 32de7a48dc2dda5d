"""One builder of AWS clients, with one timeout policy for every caller.

botocore's defaults (60 s connect and read timeouts, several retries) would hold
a Lambda invocation, a key refresh or the bridge's forward for minutes while a
service is away; every caller here prefers failing fast and retrying on its own
terms (an SQS redelivery, the last keys kept, a NAK). boto3 is imported on first
use only: about 150 ms that a cold start need not pay when no AWS call is made.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping


@dataclass(frozen=True, slots=True)
class AwsTimeouts:
    """How long one AWS API call may take."""

    connect_s: float = 1.0
    """TCP and TLS connect, per attempt."""
    read_s: float = 3.0
    """Waiting for the answer, per attempt."""
    attempts: int = 2
    """Attempts in all (botocore's standard retry mode between them)."""


DEFAULT_TIMEOUTS = AwsTimeouts()


def region(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"


class _DropResponseBodies(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Response body")


def _hide_response_bodies() -> None:
    """botocore logs every response body at DEBUG: for SSM and Secrets Manager that is a
    secret (API keys, the Redis AUTH token), for SQS a job."""
    parsers = logging.getLogger("botocore.parsers")
    if not any(isinstance(f, _DropResponseBodies) for f in parsers.filters):
        parsers.addFilter(_DropResponseBodies())


def client(service: str, env: Mapping[str, str] | None = None, *,
           timeouts: AwsTimeouts = DEFAULT_TIMEOUTS) -> Any:
    """A boto3 client for ``service``; endpoints come from boto3's own variables
    (``AWS_ENDPOINT_URL``, ``AWS_ENDPOINT_URL_<SERVICE>``), which LocalStack uses."""
    import boto3
    from botocore.config import Config

    _hide_response_bodies()
    env = os.environ if env is None else env
    config = Config(connect_timeout=timeouts.connect_s, read_timeout=timeouts.read_s,
                    retries={"mode": "standard", "total_max_attempts": timeouts.attempts})
    endpoint = (env.get(f"AWS_ENDPOINT_URL_{service.upper().replace('-', '_')}")
                or env.get("AWS_ENDPOINT_URL") or None)
    return boto3.client(service, region_name=region(env), endpoint_url=endpoint, config=config)
