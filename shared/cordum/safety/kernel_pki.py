"""The stack's TLS certificates, issued at deploy time by CloudFormation custom resources
of the AWS stack: one persistent CA, and leaf certificates it signs.

The stack runs the kernel behind an internal Network Load Balancer (TCP pass-through)
and its clients refuse plaintext; the stack's own NATS nodes serve TLS the same way.
:func:`handler` is the Lambda of two resource types:

- ``Custom::CordumTlsCa`` (:data:`CA_RESOURCE_TYPE`): the CA. Create makes it once
  (:func:`new_authority`) and keeps certificate and key in the Secrets Manager secret
  ``CaSecretArn`` as ``{"cert": ..., "key": ...}``; it returns the CA certificate
  (``CaPem``, the clients' SAFETY_KERNEL_TLS_CA) and its ``CaSerial``. Create on a
  secret that already holds a CA and every Update keep that CA; an Update finding no
  CA there fails rather than make a new one (every client would stop trusting every
  server at once). The stack retains both, the resource and the secret.
- ``Custom::CordumTlsCertificate`` (:data:`LEAF_RESOURCE_TYPE`): a server certificate
  for ``DnsNames`` signed by that CA (:func:`issue_leaf`). Create / Update issue a new
  key and certificate into the secret ``SecretArn`` (ECS hands both to the server, as
  SAFETY_KERNEL_TLS_CERT / _KEY for the kernel) and return its ``Serial`` and the CA's
  ``CaPem``. Rotation (a new ``Generation``) re-issues the leaf alone: clients keep
  trusting the same CA, so no check fails TLS while the tasks roll.

Delete does nothing for either: the secrets are resources of the stack.

Runs as a Lambda container image (``docker/kernel-pki.Dockerfile``) holding this file
alone: standard library, ``cryptography`` and the image's boto3, no ``cordum``.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import logging
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("cordum.safety.kernel_pki")

CA_RESOURCE_TYPE = "Custom::CordumTlsCa"
LEAF_RESOURCE_TYPE = "Custom::CordumTlsCertificate"
CA_SECRET_PROPERTY = "CaSecretArn"
"""Both types: ARN of the secret holding the CA's ``{"cert", "key"}``."""
SECRET_PROPERTY = "SecretArn"
"""Leaf: ARN of the secret that receives the leaf's ``{"cert", "key"}``."""
DNS_NAMES_PROPERTY = "DnsNames"
"""Leaf: the names (or IP addresses) clients dial; ``*.zone`` wildcards allowed."""
CA_ATTRIBUTE = "CaPem"
CA_SERIAL_ATTRIBUTE = "CaSerial"
SERIAL_ATTRIBUTE = "Serial"
CERT_FIELD = "cert"
KEY_FIELD = "key"

VALID_DAYS = 3650
"""CA and leaves. Nothing re-issues a certificate on a timer (a deploy with a new
``Generation`` does), so a short life would add an outage date; a leaf is rotated
without any client noticing, which is the remedy for a leaked server key."""
CLOCK_SKEW = datetime.timedelta(minutes=5)
"""Validity starts this much before now, for clients whose clock runs behind."""
CA_NAME = "Cordum safety kernel CA"
LEAF_NAME = "cordum-safety-kernel"
"""Subject common names (the CA's kept from when it signed the kernel's certificate
alone; it signs the NATS nodes' too). The names clients dial go in the
subjectAltName (a load balancer's DNS name can be longer than the 64 characters a
common name may hold)."""

AWS_CONNECT_TIMEOUT_S = 5
AWS_READ_TIMEOUT_S = 10
AWS_MAX_ATTEMPTS = 3
"""Secrets Manager calls: at most 3 attempts of 15 s each. A leaf makes two calls
(about 100 s at worst with the retries' back-off) and the answer to CloudFormation
may take 30 s: inside the function's 3 minutes (cordum_infra.kernel_tls
ISSUER_TIMEOUT), so a stuck call ends in FAILED, not in silence."""


@dataclass(frozen=True, slots=True)
class Authority:
    """The CA: certificate and private key (PKCS#8), PEM."""

    cert_pem: str
    key_pem: str
    serial: str


@dataclass(frozen=True, slots=True)
class KernelCertificate:
    """A leaf and the CA that signed it: PEM text of each part."""

    ca_pem: str
    """The CA certificate clients trust (public)."""
    cert_pem: str
    """The server's certificate, signed by the CA, for the names."""
    key_pem: str
    """The server's private key (PKCS#8). Only ever stored in the leaf's secret."""
    serial: str
    """Serial number of the server's certificate, hex."""


def _name(common_name: str) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_usage(*, signs_certificates: bool) -> Any:
    from cryptography import x509

    return x509.KeyUsage(
        digital_signature=not signs_certificates, key_cert_sign=signs_certificates,
        crl_sign=signs_certificates, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, encipher_only=False,
        decipher_only=False)


def _pem_key(key: Any) -> str:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _validity(valid_days: int, now: datetime.datetime | None) -> tuple[Any, Any]:
    start = (now or datetime.datetime.now(datetime.UTC)) - CLOCK_SKEW
    return start, start + datetime.timedelta(days=valid_days)


def new_authority(*, valid_days: int = VALID_DAYS,
                  now: datetime.datetime | None = None) -> Authority:
    """A new self-signed CA (ECDSA P-256) that signs leaves and no other CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _validity(valid_days, now)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(CA_NAME)).issuer_name(_name(CA_NAME))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs_certificates=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    return Authority(cert_pem=cert.public_bytes(serialization.Encoding.PEM).decode(),
                     key_pem=_pem_key(key), serial=format(cert.serial_number, "x"))


def load_authority(secret_string: str) -> Authority:
    """The CA kept in its secret; ValueError when the value holds no CA and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        doc = json.loads(secret_string)
        cert = x509.load_pem_x509_certificate(str(doc[CERT_FIELD]).encode())
        key = serialization.load_pem_private_key(str(doc[KEY_FIELD]).encode(), password=None)
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"the CA secret holds no CA certificate and key ({exc})") from None
    if not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
        raise ValueError("the CA secret holds a certificate that is no CA")
    if key.public_key() != cert.public_key():
        raise ValueError("the CA secret's key does not match its certificate")
    return Authority(cert_pem=str(doc[CERT_FIELD]), key_pem=str(doc[KEY_FIELD]),
                     serial=format(cert.serial_number, "x"))


def _san(name: str) -> Any:
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def issue_leaf(authority: Authority, names: Sequence[str], *, valid_days: int = VALID_DAYS,
               now: datetime.datetime | None = None) -> KernelCertificate:
    """A server key and certificate for ``names`` (lower-cased) signed by ``authority``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    cleaned = [n.strip().lower() for n in names if n.strip()]
    if not cleaned:
        raise ValueError(f"{DNS_NAMES_PROPERTY}: no name to issue the certificate for")
    ca_cert = x509.load_pem_x509_certificate(authority.cert_pem.encode())
    ca_key = serialization.load_pem_private_key(authority.key_pem.encode(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _validity(valid_days, now)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(LEAF_NAME)).issuer_name(ca_cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False), critical=True)
        # Client use too: a NATS cluster node presents its leaf on the routes it dials,
        # and a server refuses a route certificate without it.
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                              ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([_san(n) for n in cleaned]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return KernelCertificate(
        ca_pem=authority.cert_pem,
        cert_pem=cert.public_bytes(serialization.Encoding.PEM).decode(),
        key_pem=_pem_key(key), serial=format(cert.serial_number, "x"))


def issue(host: str, *, valid_days: int = VALID_DAYS,
          now: datetime.datetime | None = None) -> KernelCertificate:
    """A new CA and a certificate for ``host`` signed by it (tests, outside kernels)."""
    if not host.strip():
        raise ValueError("Host: empty")
    authority = new_authority(valid_days=valid_days, now=now)
    return issue_leaf(authority, [host], valid_days=valid_days, now=now)


def secret_value(issued: KernelCertificate | Authority) -> str:
    """The secret's JSON document; ECS reads each field into its own variable."""
    return json.dumps({CERT_FIELD: issued.cert_pem, KEY_FIELD: issued.key_pem})


def _ca(request_type: str, props: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    """The CA resource: kept if its secret holds one, made on Create otherwise."""
    arn = str(props[CA_SECRET_PROPERTY])
    try:
        authority = load_authority(_get_secret(arn))
        log.info("keeping CA %s", authority.serial)
    except ValueError:
        if request_type != "Create":
            raise
        authority = new_authority()
        _put_secret(arn, secret_value(authority))
        log.info("made CA %s", authority.serial)
    data = {CA_ATTRIBUTE: authority.cert_pem, CA_SERIAL_ATTRIBUTE: authority.serial}
    return f"tls-ca-{authority.serial}", data


def _leaf(props: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    """A leaf resource: a new key and certificate from the CA kept in its secret."""
    authority = load_authority(_get_secret(str(props[CA_SECRET_PROPERTY])))
    names = props[DNS_NAMES_PROPERTY]
    issued = issue_leaf(authority, [names] if isinstance(names, str) else list(names))
    _put_secret(str(props[SECRET_PROPERTY]), secret_value(issued))
    log.info("issued certificate %s for %s (CA %s)", issued.serial, names, authority.serial)
    return f"tls-cert-{issued.serial}", {CA_ATTRIBUTE: issued.ca_pem,
                                        SERIAL_ATTRIBUTE: issued.serial}


def handler(event: Mapping[str, Any], context: Any) -> None:
    """CloudFormation custom resource entry point; always answers, SUCCESS or FAILED
    (an unanswered request would hold the deployment until the resource's timeout)."""
    physical_id = str(event.get("PhysicalResourceId") or event["LogicalResourceId"])
    data: dict[str, str] = {}
    request_type = str(event["RequestType"])
    try:
        if request_type in ("Create", "Update"):
            props = event["ResourceProperties"]
            kind = event.get("ResourceType")
            if kind == CA_RESOURCE_TYPE:
                physical_id, data = _ca(request_type, props)
            elif kind == LEAF_RESOURCE_TYPE:
                physical_id, data = _leaf(props)
            else:
                raise ValueError(f"ResourceType: {kind!r} is not one this function serves")
        status, reason = "SUCCESS", "done"
    except Exception as exc:  # reported to CloudFormation, which fails the deployment
        log.exception("%s %s failed", event.get("ResourceType"), request_type)
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


def _secrets() -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client("secretsmanager", config=Config(
        connect_timeout=AWS_CONNECT_TIMEOUT_S, read_timeout=AWS_READ_TIMEOUT_S,
        retries={"max_attempts": AWS_MAX_ATTEMPTS, "mode": "standard"}))


def _get_secret(secret_arn: str) -> str:
    return str(_secrets().get_secret_value(SecretId=secret_arn).get("SecretString") or "")


def _put_secret(secret_arn: str, value: str) -> None:
    _secrets().put_secret_value(SecretId=secret_arn, SecretString=value)


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
