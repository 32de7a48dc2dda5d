"""The kernel certificate's custom resource: the certificate and key go to the Secrets
Manager secret (moto), the CA back to CloudFormation."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from cryptography import x509
from moto import mock_aws

from cordum.safety import kernel_pki
from cordum.safety.kernel_pki import handler

NLB = "CordumS-Servi-ABCDEFGHIJKL-0123456789abcdef.elb.eu-central-1.amazonaws.com"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        yield boto3.client("secretsmanager")


@pytest.fixture
def responses(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What the handler answers CloudFormation (the pre-signed URL cannot be reached here)."""
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(kernel_pki, "_respond", lambda event, body: sent.append(dict(body)))
    return sent


def _event(request_type: str, secret_arn: str, **extra: Any) -> dict[str, Any]:
    return {
        "RequestType": request_type,
        "ResponseURL": "https://cloudformation-custom-resource-response.example/x",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/CordumServerless/1",
        "RequestId": "req-1",
        "LogicalResourceId": "KernelTlsCertificate",
        "ResourceProperties": {"ServiceToken": "arn", "Host": NLB, "SecretArn": secret_arn,
                               "Generation": "1"},
        **extra,
    }


def test_create_puts_cert_and_key_in_the_secret_and_returns_the_ca(aws, responses) -> None:
    arn = aws.create_secret(Name="kernel-tls", SecretString="placeholder")["ARN"]

    handler(_event("Create", arn), None)

    (answer,) = responses
    assert answer["Status"] == "SUCCESS"
    assert (answer["StackId"], answer["RequestId"]) == (_event("Create", arn)["StackId"], "req-1")
    stored = json.loads(aws.get_secret_value(SecretId=arn)["SecretString"])
    assert set(stored) == {"cert", "key"}
    ca = x509.load_pem_x509_certificate(answer["Data"]["CaPem"].encode())
    cert = x509.load_pem_x509_certificate(stored["cert"].encode())
    cert.verify_directly_issued_by(ca)
    assert answer["Data"]["Serial"] == format(cert.serial_number, "x")
    assert answer["PhysicalResourceId"] == f"kernel-tls-{answer['Data']['Serial']}"
    # And the key goes to the secret only, never into the answer CloudFormation keeps
    assert "PRIVATE KEY" not in json.dumps(answer)


def test_update_issues_anew_and_delete_leaves_the_secret(aws, responses) -> None:
    arn = aws.create_secret(Name="kernel-tls", SecretString="placeholder")["ARN"]
    handler(_event("Create", arn), None)
    first = aws.get_secret_value(SecretId=arn)["SecretString"]

    handler(_event("Update", arn, PhysicalResourceId=responses[0]["PhysicalResourceId"]), None)
    handler(_event("Delete", arn, PhysicalResourceId=responses[1]["PhysicalResourceId"]), None)

    assert [r["Status"] for r in responses] == ["SUCCESS"] * 3
    assert responses[1]["Data"]["CaPem"] != responses[0]["Data"]["CaPem"]
    assert aws.get_secret_value(SecretId=arn)["SecretString"] != first
    assert responses[2]["PhysicalResourceId"] == responses[1]["PhysicalResourceId"]
    assert responses[2]["Data"] == {}


def test_a_failure_is_answered_as_failed(aws, responses) -> None:
    missing = "arn:aws:secretsmanager:us-east-1:123456789012:secret:nope-AbCdEf"

    handler(_event("Create", missing), None)

    (answer,) = responses
    assert answer["Status"] == "FAILED"
    assert "ResourceNotFoundException" in answer["Reason"]
    assert answer["PhysicalResourceId"] == "KernelTlsCertificate"
