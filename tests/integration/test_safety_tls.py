"""TLS between the SafetyClient and the kernel, over real gRPC, with a CA made here."""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from cordum import protocol
from cordum.config import ConfigError
from cordum.safety.client import Decision, SafetyClient
from cordum.safety.kernel import DEFAULT_TOPIC_RULE, serve
from cordum.safety.kernel_service import PolicyKernel
from cordum.safety.policy_file import Policy
from cordum.safety.tls import (
    PLAINTEXT,
    ClientTLS,
    ServerTLS,
    client_tls_from_env,
    server_tls_from_env,
)
from tests.helpers import free_port, serving_kernel

CONFIG = Path(__file__).resolve().parents[2] / "config"


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_ca(cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def make_server_cert(ca_key, ca_cert) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name("safety-kernel"))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a kernel certificate it signed, and an unrelated CA, as PEM files."""
    d = tmp_path_factory.mktemp("pki")
    ca_key, ca_cert = make_ca("cordum test ca")
    cert, key = make_server_cert(ca_key, ca_cert)
    _, other_ca = make_ca("some other ca")
    files = {"ca": ca_cert.public_bytes(serialization.Encoding.PEM), "cert": cert, "key": key,
             "other_ca": other_ca.public_bytes(serialization.Encoding.PEM)}
    for name, data in files.items():
        (d / f"{name}.pem").write_bytes(data)
    return {name: d / f"{name}.pem" for name in files}


@pytest.fixture
def tls_kernel(pki):
    """A kernel serving TLS only, with the shipped policy."""
    with serving_kernel(PolicyKernel(Policy(CONFIG / "safety.yaml"), cache_ttl_s=0),
                        tls=ServerTLS.from_files(pki["cert"], pki["key"])) as addr:
        yield addr


def job() -> protocol.JobRequest:
    return protocol.JobRequest(job_id="job-tls", topic="job.default", tenant_id="t1")


def check(aloop, client: SafetyClient):
    try:
        return aloop.run_until_complete(client.check(job(), "t1"))
    finally:
        aloop.run_until_complete(client.aclose())


def test_client_trusting_the_ca_gets_decisions_over_tls(aloop, pki, tls_kernel):
    # Given a client whose environment names the kernel's CA
    client = SafetyClient(tls_kernel, 2.0,
                          tls=client_tls_from_env({"SAFETY_KERNEL_TLS_CA": str(pki["ca"]),
                                                   "SAFETY_KERNEL_TLS_REQUIRED": "true"}))
    # When it checks a job, then the kernel answers over TLS
    verdict = check(aloop, client)
    assert client.secure
    assert (verdict.decision, verdict.rule_id) == (Decision.ALLOW, DEFAULT_TOPIC_RULE)


def test_the_host_name_form_of_the_address_is_verified_too(aloop, pki, tls_kernel):
    port = tls_kernel.rsplit(":", 1)[1]
    client = SafetyClient(f"localhost:{port}", 2.0, tls=ClientTLS.from_ca_file(pki["ca"]))
    assert check(aloop, client).decision is Decision.ALLOW


def test_client_reads_the_ca_from_the_process_environment(aloop, pki, tls_kernel,
                                                          monkeypatch):
    monkeypatch.setenv("SAFETY_KERNEL_TLS_CA", str(pki["ca"]))
    client = SafetyClient(tls_kernel, 2.0)
    assert client.secure
    assert check(aloop, client).decision is Decision.ALLOW


def test_a_kernel_certificate_from_another_ca_is_refused(aloop, pki, tls_kernel):
    client = SafetyClient(tls_kernel, 1.0, tls=ClientTLS.from_ca_file(pki["other_ca"]))
    verdict = check(aloop, client)
    assert verdict.decision is Decision.UNAVAILABLE
    assert verdict.reason.startswith("safety kernel error: UNAVAILABLE")


def test_a_plaintext_client_cannot_talk_to_a_tls_kernel(aloop, tls_kernel):
    verdict = check(aloop, SafetyClient(tls_kernel, 1.0, tls=PLAINTEXT))
    assert verdict.decision is Decision.UNAVAILABLE


def test_without_tls_settings_the_client_speaks_plaintext(aloop):
    addr = f"127.0.0.1:{free_port()}"
    server = serve(addr, Policy(CONFIG / "safety.yaml"))
    try:
        client = SafetyClient(addr, 2.0, tls=client_tls_from_env({}))
        assert not client.secure
        assert check(aloop, client).decision is Decision.ALLOW
        explicit = SafetyClient(addr, 2.0,
                                tls=client_tls_from_env({"SAFETY_KERNEL_INSECURE": "true"}))
        assert check(aloop, explicit).decision is Decision.ALLOW
    finally:
        server.stop(grace=0)


def test_the_output_policy_service_is_served_over_tls_too(pki, tls_kernel):
    creds = grpc.ssl_channel_credentials(root_certificates=pki["ca"].read_bytes())
    with grpc.secure_channel(tls_kernel, creds) as channel:
        call = channel.unary_unary("/cordum.output.v1.OutputPolicy/CheckMeta")
        body = call(b'{"job_id": "j", "topic": "job.default"}', timeout=5)
    assert b'"decision"' in body


@pytest.mark.parametrize(("env", "message"), [
    ({"SAFETY_KERNEL_TLS_REQUIRED": "true"},
     "SAFETY_KERNEL_TLS_CA: required when SAFETY_KERNEL_TLS_REQUIRED is true"),
    ({"SAFETY_KERNEL_TLS_REQUIRED": "1", "SAFETY_KERNEL_INSECURE": "yes"},
     "SAFETY_KERNEL_INSECURE: plaintext is not allowed"),
    ({"SAFETY_KERNEL_TLS_REQUIRED": "sure"}, "SAFETY_KERNEL_TLS_REQUIRED: not a boolean"),
    ({"SAFETY_KERNEL_TLS_CA": "/nonexistent/ca.pem"}, "SAFETY_KERNEL_TLS_CA: cannot read"),
])
def test_a_bad_client_setting_fails_at_construction(env, message, monkeypatch):
    for name in ("SAFETY_KERNEL_TLS_CA", "SAFETY_KERNEL_TLS_REQUIRED", "SAFETY_KERNEL_INSECURE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=message):
        SafetyClient("127.0.0.1:1", 1.0)


def test_a_ca_file_without_a_certificate_is_refused(tmp_path, pki):
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="holds no PEM certificate"):
        client_tls_from_env({"SAFETY_KERNEL_TLS_CA": str(tmp_path / "ca.pem")})
    with pytest.raises(ConfigError, match="SAFETY_KERNEL_TLS_KEY: .* holds no PEM private key"):
        ServerTLS.from_files(pki["cert"], pki["cert"])


def test_server_settings_come_in_pairs(pki):
    assert server_tls_from_env({}) is None
    both = server_tls_from_env({"SAFETY_KERNEL_TLS_CERT": str(pki["cert"]),
                                "SAFETY_KERNEL_TLS_KEY": str(pki["key"])})
    assert both is not None and both.cert_chain == pki["cert"].read_bytes()
    with pytest.raises(ConfigError, match="SAFETY_KERNEL_TLS_KEY: must be set together with "
                                          "SAFETY_KERNEL_TLS_CERT"):
        server_tls_from_env({"SAFETY_KERNEL_TLS_CERT": str(pki["cert"])})
    with pytest.raises(ConfigError, match="SAFETY_KERNEL_TLS_CERT: must be set together"):
        server_tls_from_env({"SAFETY_KERNEL_TLS_KEY": str(pki["key"])})


def _kernel_process(addr: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    root = Path(__file__).resolve().parents[2]
    full = {**os.environ, "CORDUM_CONFIG_DIR": str(CONFIG),
            "PYTHONPATH": os.pathsep.join([str(root / "shared"), str(root)]), **env}
    for name in ("SAFETY_KERNEL_TLS_CERT", "SAFETY_KERNEL_TLS_KEY"):
        full.setdefault(name, "")
    return subprocess.Popen([sys.executable, "-m", "cordum.safety.kernel", "--addr", addr],
                            env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_the_kernel_process_serves_tls_from_its_environment(aloop, pki):
    # Given cordum-safety-kernel started with a certificate and key in its environment
    addr = f"127.0.0.1:{free_port()}"
    proc = _kernel_process(addr, {"SAFETY_KERNEL_TLS_CERT": str(pki["cert"]),
                                  "SAFETY_KERNEL_TLS_KEY": str(pki["key"])})
    try:
        creds = grpc.ssl_channel_credentials(root_certificates=pki["ca"].read_bytes())
        with grpc.secure_channel(addr, creds) as channel:
            # (waits for the process to be up; fails if it never serves TLS)
            grpc.channel_ready_future(channel).result(timeout=30)
        # When a client trusting the CA checks a job, then it is answered
        client = SafetyClient(addr, 2.0, tls=ClientTLS.from_ca_file(pki["ca"]))
        assert check(aloop, client).decision is Decision.ALLOW
        # And a plaintext client is not
        assert check(aloop, SafetyClient(addr, 1.0, tls=PLAINTEXT)).decision is \
            Decision.UNAVAILABLE
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_kernel_process_refuses_half_a_tls_setting(pki):
    proc = _kernel_process(f"127.0.0.1:{free_port()}",
                           {"SAFETY_KERNEL_TLS_CERT": str(pki["cert"])})
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert b"SAFETY_KERNEL_TLS_KEY: must be set together with SAFETY_KERNEL_TLS_CERT" in out
