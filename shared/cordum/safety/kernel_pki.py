"""The safety kernel's TLS certificate, issued at deploy time by a CloudFormation custom
resource of the AWS stack.

The stack runs the kernel behind an internal Network Load Balancer (TCP pass-through)
and its clients refuse plaintext. :func:`handler` is the custom resource's Lambda:

- Create / Update: a fresh CA and a kernel key and certificate signed by it, for the
  load balancer's name (:func:`issue`). The certificate and key go into the Secrets
  Manager secret the stack made for them, as ``{"cert": ..., "key": ...}`` (ECS hands
  both to the kernel as SAFETY_KERNEL_TLS_CERT / SAFETY_KERNEL_TLS_KEY); the CA
  certificate is returned as the attribute ``CaPem`` (the functions and the bridge get
  it as SAFETY_KERNEL_TLS_CA) with the kernel certificate's ``Serial``.
- Delete: nothing; the secret is a resource of the stack and goes with it.

The CA's private key is never stored: nothing can sign another certificate that the
clients trust. A new certificate (a new load balancer name, or a rotation through the
resource's ``Generation`` property) therefore comes with a new CA.

Runs as a Lambda container image (``docker/kernel-pki.Dockerfile``) holding this file
alone: standard library, ``cryptography`` and the image's boto3, no ``cordum``.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import logging
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("cordum.safety.kernel_pki")

HOST_PROPERTY = "Host"
"""Resource property: the DNS name (or IP address) clients put in SAFETY_KERNEL_ADDR."""
SECRET_PROPERTY = "SecretArn"
"""Resource property: ARN of the secret that receives ``{"cert", "key"}``."""
CA_ATTRIBUTE = "CaPem"
SERIAL_ATTRIBUTE = "Serial"
CERT_FIELD = "cert"
KEY_FIELD = "key"

VALID_DAYS = 3650
"""Both certificates. Trust is pinned to one deployment's CA, whose key is gone once
the certificate is signed, so a short life would add an outage date and no safety;
rotate by changing the resource's ``Generation``."""
CLOCK_SKEW = datetime.timedelta(minutes=5)
"""Validity starts this much before now, for clients whose clock runs behind."""
CA_NAME = "Cordum safety kernel CA"
KERNEL_NAME = "cordum-safety-kernel"
"""Subject common names. The host goes in the subjectAltName (a load balancer's DNS
name can be longer than the 64 characters a common name may hold)."""


@dataclass(frozen=True, slots=True)
class KernelCertificate:
    """What :func:`issue` makes: PEM text of each part."""

    ca_pem: str
    """The CA certificate clients trust (public)."""
    cert_pem: str
    """The kernel's certificate, signed by the CA, for the host."""
    key_pem: str
    """The kernel's private key (PKCS#8). Only ever stored in the secret."""
    serial: str
    """Serial number of the kernel's certificate, hex."""


def issue(host: str, *, valid_days: int = VALID_DAYS,
          now: datetime.datetime | None = None) -> KernelCertificate:
    """A new CA and a kernel certificate for ``host`` signed by it (ECDSA P-256)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    host = host.strip().lower()
    if not host:
        raise ValueError(f"{HOST_PROPERTY}: empty")
    try:
        san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        san = x509.DNSName(host)
    start = (now or datetime.datetime.now(datetime.UTC)) - CLOCK_SKEW
    end = start + datetime.timedelta(days=valid_days)

    def name(common_name: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    def key_usage(*, signs_certificates: bool) -> x509.KeyUsage:
        return x509.KeyUsage(
            digital_signature=not signs_certificates, key_cert_sign=signs_certificates,
            crl_sign=signs_certificates, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name(CA_NAME)).issuer_name(name(CA_NAME))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        # path_length=0: the CA signs the kernel's certificate and no other CA.
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(key_usage(signs_certificates=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    kernel_key = ec.generate_private_key(ec.SECP256R1())
    kernel_cert = (
        x509.CertificateBuilder()
        .subject_name(name(KERNEL_NAME)).issuer_name(ca_cert.subject)
        .public_key(kernel_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(key_usage(signs_certificates=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([san]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return KernelCertificate(
        ca_pem=ca_cert.public_bytes(pem).decode(),
        cert_pem=kernel_cert.public_bytes(pem).decode(),
        key_pem=kernel_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()).decode(),
        serial=format(kernel_cert.serial_number, "x"),
    )


def secret_value(issued: KernelCertificate) -> str:
    """The secret's JSON document; ECS reads each field into its own variable."""
    return json.dumps({CERT_FIELD: issued.cert_pem, KEY_FIELD: issued.key_pem})


def handler(event: Mapping[str, Any], context: Any) -> None:
    """CloudFormation custom resource entry point; always answers, SUCCESS or FAILED
    (an unanswered request would hold the deployment for an hour)."""
    physical_id = str(event.get("PhysicalResourceId") or event["LogicalResourceId"])
    data: dict[str, str] = {}
    try:
        if event["RequestType"] in ("Create", "Update"):
            props = event["ResourceProperties"]
            issued = issue(str(props[HOST_PROPERTY]))
            _put_secret(str(props[SECRET_PROPERTY]), secret_value(issued))
            physical_id = f"kernel-tls-{issued.serial}"
            data = {CA_ATTRIBUTE: issued.ca_pem, SERIAL_ATTRIBUTE: issued.serial}
            log.info("issued kernel certificate %s for %s", issued.serial, props[HOST_PROPERTY])
        status, reason = "SUCCESS", "done"
    except Exception as exc:  # reported to CloudFormation, which fails the deployment
        log.exception("kernel certificate: %s failed", event.get("RequestType"))
        status, reason = "FAILED", f"{type(exc).__name__}: {exc}"[:400]
    _respond(event, {
        "Status": status,
        "Reason": reason,
        "PhysicalResourceId": physical_id,
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
        "Data": data,
    })


def _put_secret(secret_arn: str, value: str) -> None:
    import boto3

    boto3.client("secretsmanager").put_secret_value(SecretId=secret_arn, SecretString=value)


def _respond(event: Mapping[str, Any], body: Mapping[str, Any]) -> None:
    url = str(event["ResponseURL"])
    if not url.startswith("https://"):
        raise ValueError("ResponseURL: CloudFormation answers through a pre-signed https URL")
    payload = json.dumps(body).encode()
    # The pre-signed S3 URL is signed for an empty content type.
    request = urllib.request.Request(
        url, data=payload, method="PUT",
        headers={"Content-Type": "", "Content-Length": str(len(payload))})
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (https URL from CloudFormation)
        response.read()
