"""The one AWS client builder: one timeout policy, endpoints from boto3's variables."""

from __future__ import annotations

import logging

import pytest

from cordum import aws


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials in the environment: without them botocore asks the EC2 metadata
    service (a network call) while it builds a client."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


def test_every_client_fails_fast():
    client = aws.client("sqs", {"AWS_REGION": "eu-west-1"})
    config = client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (1.0, 3.0)
    assert config.retries["total_max_attempts"] == 2
    assert client.meta.region_name == "eu-west-1"


def test_the_service_endpoint_wins_over_the_general_one():
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:4566",
           "AWS_ENDPOINT_URL_SECRETSMANAGER": "http://127.0.0.1:4599"}
    assert aws.client("secretsmanager", env).meta.endpoint_url == "http://127.0.0.1:4599"
    assert aws.client("sqs", env).meta.endpoint_url == "http://127.0.0.1:4566"


def test_response_bodies_never_reach_the_debug_log():
    aws.client("ssm", {})
    record = logging.LogRecord("botocore.parsers", logging.DEBUG, __file__, 1,
                               "Response body:\n%r", ("secret",), None)
    assert not logging.getLogger("botocore.parsers").filter(record)
