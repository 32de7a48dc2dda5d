"""The deploy-time issuer of the safety kernel's TLS certificate (cordum.safety.kernel_pki).

The custom resource that stores it in Secrets Manager (moto):
tests/integration/test_kernel_pki_resource.py.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import urllib.request

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from cordum.safety import kernel_pki
from cordum.safety.kernel_pki import KernelCertificate, issue, secret_value

NLB = "CordumS-Servi-ABCDEFGHIJKL-0123456789abcdef.elb.eu-central-1.amazonaws.com"


def _load(issued: KernelCertificate) -> tuple[x509.Certificate, x509.Certificate]:
    return (x509.load_pem_x509_certificate(issued.ca_pem.encode()),
            x509.load_pem_x509_certificate(issued.cert_pem.encode()))


def test_the_kernel_certificate_is_signed_by_the_ca_for_the_load_balancers_name() -> None:
    issued = issue(NLB)
    ca, cert = _load(issued)
    # Then the certificate names the host (lower case) in its subjectAltName only
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [NLB.lower()]
    assert len(NLB) > 64  # longer than a common name may be
    # And it is a server certificate signed by the CA
    cert.verify_directly_issued_by(ca)
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    # (and a client one: a NATS node presents its certificate on the routes it dials)
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    assert format(cert.serial_number, "x") == issued.serial
    # And the CA signs that one certificate level and no other CA
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert (constraints.ca, constraints.path_length) == (True, 0)
    # And the key is the certificate's, P-256, unencrypted PKCS#8
    assert issued.key_pem.startswith("-----BEGIN PRIVATE KEY-----")
    key = serialization.load_pem_private_key(issued.key_pem.encode(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
    assert key.public_key() == cert.public_key()
    # And the CA text holds no key
    assert "PRIVATE KEY" not in issued.ca_pem


def test_every_issue_makes_a_new_ca() -> None:
    first, second = issue("kernel.internal"), issue("kernel.internal")

    assert first.ca_pem != second.ca_pem and first.serial != second.serial
    # (same subject names: only the signature tells them apart)
    with pytest.raises(InvalidSignature):
        _load(second)[1].verify_directly_issued_by(_load(first)[0])


def test_an_ip_address_host_goes_in_as_an_ip_san() -> None:
    _, cert = _load(issue("10.0.0.11"))
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.11")]


def test_validity_starts_before_now_and_lasts_the_configured_days() -> None:
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    _, cert = _load(issue("kernel.internal", valid_days=30, now=now))
    assert cert.not_valid_before_utc == now - kernel_pki.CLOCK_SKEW
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == datetime.timedelta(days=30)


def test_an_empty_host_is_refused() -> None:
    with pytest.raises(ValueError, match="Host"):
        issue("  ")


def test_the_answer_is_put_to_the_presigned_https_url(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[urllib.request.Request] = []

    class Answered:
        def __enter__(self) -> Answered:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def read(self) -> bytes:
            return b""

    def urlopen(request: urllib.request.Request, timeout: float) -> Answered:
        seen.append(request)
        return Answered()

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    kernel_pki._respond({"ResponseURL": "https://s3.example/presigned?sig=1"}, {"Status": "X"})

    (request,) = seen
    assert request.get_method() == "PUT"
    assert request.full_url == "https://s3.example/presigned?sig=1"
    assert request.get_header("Content-type") == ""
    assert json.loads(request.data) == {"Status": "X"}  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="https"):
        kernel_pki._respond({"ResponseURL": "file:///etc/passwd"}, {"Status": "X"})


def test_secret_value_is_the_json_ecs_reads_by_field() -> None:
    issued = KernelCertificate(ca_pem="ca", cert_pem="c", key_pem="k", serial="1")
    assert json.loads(secret_value(issued)) == {"cert": "c", "key": "k"}


def test_a_kept_authority_loads_back_and_signs_new_leaves() -> None:
    authority = kernel_pki.new_authority()
    loaded = kernel_pki.load_authority(secret_value(authority))
    assert loaded == authority

    first = kernel_pki.issue_leaf(loaded, ["kernel.internal"])
    second = kernel_pki.issue_leaf(loaded, ["kernel.internal"])

    # Then both leaves verify against the one CA clients hold, with their own keys
    ca = x509.load_pem_x509_certificate(authority.cert_pem.encode())
    for leaf in (first, second):
        x509.load_pem_x509_certificate(leaf.cert_pem.encode()).verify_directly_issued_by(ca)
        assert leaf.ca_pem == authority.cert_pem
    assert first.key_pem != second.key_pem and first.serial != second.serial


@pytest.mark.parametrize(("value", "why"), [
    ("generated-placeholder", "no CA certificate"),
    (json.dumps({"cert": issue("kernel.internal").cert_pem,
                 "key": issue("kernel.internal").key_pem}), "no CA"),
    (json.dumps({"cert": kernel_pki.new_authority().cert_pem,
                 "key": kernel_pki.new_authority().key_pem}), "does not match"),
])
def test_a_secret_without_a_usable_ca_is_refused(value: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        kernel_pki.load_authority(value)


def test_a_leaf_names_every_host_and_address_it_is_issued_for() -> None:
    leaf = kernel_pki.issue_leaf(kernel_pki.new_authority(), [" *.Cordum.Internal ", "10.0.0.5"])
    cert = x509.load_pem_x509_certificate(leaf.cert_pem.encode())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["*.cordum.internal"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.5")]
    with pytest.raises(ValueError, match="DnsNames"):
        kernel_pki.issue_leaf(kernel_pki.new_authority(), [" "])
