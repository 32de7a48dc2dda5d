"""The stack's certificate custom resources against Secrets Manager (moto): the CA is
made once and kept, a leaf is signed by it into its own secret, a rotation re-issues
the leaf under the same CA, and every failure is answered to CloudFormation."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from cryptography import x509
from moto import mock_aws

from cordum.safety import kernel_pki
from cordum.safety.kernel_pki import CA_RESOURCE_TYPE, LEAF_RESOURCE_TYPE, handler

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


@pytest.fixture
def secrets(aws: Any) -> dict[str, str]:
    """The CA's and a leaf's secrets as the stack creates them: a generated placeholder."""
    return {name: aws.create_secret(Name=name, SecretString="generated-placeholder")["ARN"]
            for name in ("ca", "kernel", "nats")}


def _event(request_type: str, kind: str, props: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "RequestType": request_type,
        "ResourceType": kind,
        "ResponseURL": "https://cloudformation-custom-resource-response.example/x",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/CordumServerless/1",
        "RequestId": "req-1",
        "LogicalResourceId": "ServicesTlsCa" if kind == CA_RESOURCE_TYPE else "KernelCertificate",
        "ResourceProperties": {"ServiceToken": "arn", **props},
        **extra,
    }


def _ca(request_type: str, secrets: dict[str, str], **extra: Any) -> dict[str, Any]:
    return _event(request_type, CA_RESOURCE_TYPE, {"CaSecretArn": secrets["ca"]}, **extra)


def _leaf(request_type: str, secrets: dict[str, str], name: str = "kernel",
          dns: list[str] | None = None, generation: str = "1", **extra: Any) -> dict[str, Any]:
    return _event(request_type, LEAF_RESOURCE_TYPE, {
        "CaSecretArn": secrets["ca"], "CaSerial": "x", "SecretArn": secrets[name],
        "DnsNames": dns or [NLB], "Generation": generation}, **extra)


def _stored(aws: Any, arn: str) -> dict[str, str]:
    return dict(json.loads(aws.get_secret_value(SecretId=arn)["SecretString"]))


def _cert(pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem.encode())


def test_the_ca_is_made_once_into_its_secret_and_kept(aws, responses, secrets) -> None:
    handler(_ca("Create", secrets), None)
    made = responses[-1]
    kept_secret = aws.get_secret_value(SecretId=secrets["ca"])["SecretString"]
    # Then the CA and its key are in the CA's secret, and the answer holds the CA only
    assert made["Status"] == "SUCCESS"
    stored = _stored(aws, secrets["ca"])
    assert stored["cert"] == made["Data"]["CaPem"]
    assert "PRIVATE KEY" in stored["key"] and "PRIVATE KEY" not in json.dumps(made)
    assert made["Data"]["CaSerial"] == format(_cert(stored["cert"]).serial_number, "x")
    assert made["PhysicalResourceId"] == f"tls-ca-{made['Data']['CaSerial']}"

    # When CloudFormation updates the resource, or retries its create
    handler(_ca("Update", secrets, PhysicalResourceId=made["PhysicalResourceId"]), None)
    handler(_ca("Create", secrets), None)

    # Then the same CA is answered and the secret is not written again
    for answer in responses[1:]:
        assert answer["Status"] == "SUCCESS"
        assert answer["Data"] == made["Data"]
        assert answer["PhysicalResourceId"] == made["PhysicalResourceId"]
    assert aws.get_secret_value(SecretId=secrets["ca"])["SecretString"] == kept_secret


def test_an_update_never_replaces_a_lost_ca(aws, responses, secrets) -> None:
    # Given a CA secret that holds no CA (overwritten by hand)
    handler(_ca("Update", secrets, PhysicalResourceId="tls-ca-1"), None)

    (answer,) = responses
    # Then the update fails instead of making a CA no client trusts
    assert answer["Status"] == "FAILED"
    assert "no CA certificate" in answer["Reason"]
    assert aws.get_secret_value(SecretId=secrets["ca"])["SecretString"] == "generated-placeholder"


def test_a_leaf_is_signed_by_the_kept_ca_and_rotates_under_it(aws, responses, secrets) -> None:
    handler(_ca("Create", secrets), None)
    ca = _cert(responses[0]["Data"]["CaPem"])

    handler(_leaf("Create", secrets), None)
    issued = responses[-1]
    first = _stored(aws, secrets["kernel"])
    # Then the leaf's certificate and key are in its own secret, signed by the CA
    assert issued["Status"] == "SUCCESS"
    assert set(first) == {"cert", "key"}
    cert = _cert(first["cert"])
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [NLB.lower()]
    assert issued["Data"] == {"CaPem": responses[0]["Data"]["CaPem"],
                              "Serial": format(cert.serial_number, "x")}
    assert "PRIVATE KEY" not in json.dumps(issued)

    # When the leaf is rotated (a new generation)
    handler(_leaf("Update", secrets, generation="2",
                  PhysicalResourceId=issued["PhysicalResourceId"]), None)
    rotated = responses[-1]

    # Then a new key and certificate replace the old, signed by the same CA, whose
    # certificate (what clients trust) is unchanged
    second = _stored(aws, secrets["kernel"])
    assert second["key"] != first["key"] and rotated["Data"]["Serial"] != issued["Data"]["Serial"]
    _cert(second["cert"]).verify_directly_issued_by(ca)
    assert rotated["Data"]["CaPem"] == issued["Data"]["CaPem"]
    assert _stored(aws, secrets["ca"])["cert"] == responses[0]["Data"]["CaPem"]


def test_other_servers_get_leaves_from_the_same_ca(aws, responses, secrets) -> None:
    handler(_ca("Create", secrets), None)
    handler(_leaf("Create", secrets, name="nats", dns=["*.cordum.internal", "10.0.0.5"]), None)

    ca = _cert(responses[0]["Data"]["CaPem"])
    cert = _cert(_stored(aws, secrets["nats"])["cert"])
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["*.cordum.internal"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["10.0.0.5"]


def test_delete_leaves_both_secrets(aws, responses, secrets) -> None:
    handler(_ca("Create", secrets), None)
    handler(_leaf("Create", secrets), None)
    before = {n: aws.get_secret_value(SecretId=a)["SecretString"] for n, a in secrets.items()}

    handler(_leaf("Delete", secrets, PhysicalResourceId=responses[1]["PhysicalResourceId"]), None)
    handler(_ca("Delete", secrets, PhysicalResourceId=responses[0]["PhysicalResourceId"]), None)

    assert [r["Status"] for r in responses] == ["SUCCESS"] * 4
    assert responses[2]["Data"] == responses[3]["Data"] == {}
    assert {n: aws.get_secret_value(SecretId=a)["SecretString"]
            for n, a in secrets.items()} == before


@pytest.mark.parametrize("event", [
    pytest.param(lambda s: _leaf("Create", s), id="leaf before its CA"),
    pytest.param(lambda s: _ca("Create", {**s, "ca": s["ca"][:-6] + "nopeAb"}), id="no secret"),
    pytest.param(lambda s: {**_ca("Create", s), "ResourceType": "Custom::Other"}, id="type"),
])
def test_a_failure_is_answered_as_failed(aws, responses, secrets, event) -> None:
    handler(event(secrets), None)

    (answer,) = responses
    assert answer["Status"] == "FAILED"
    assert answer["Reason"]
    assert answer["PhysicalResourceId"] in ("ServicesTlsCa", "KernelCertificate")
