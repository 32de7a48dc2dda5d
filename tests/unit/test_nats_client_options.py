"""What every NATS client of ours adds to its connect (cordum.runtime.nats_options):
the credentials named by NATS_CREDS_SECRET_ARN, in either form, and a TLS context
that trusts NATS_TLS_CA alone."""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import pytest

from cordum import runtime
from cordum.config import ConfigError, load_settings
from cordum.safety.kernel_pki import issue

ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:cordum/nats-AbCdEf"


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The secret's value as Secrets Manager would return it (no AWS call)."""
    store: dict[str, str] = {}
    monkeypatch.setattr(runtime, "_auth_tokens", store)
    return store


def test_a_json_secret_logs_in_with_its_user_and_password(secret: dict[str, str]) -> None:
    secret[ARN] = json.dumps({"username": "cordum", "password": "p4ssw0rd"})
    options = runtime.nats_options(load_settings(env={"NATS_CREDS_SECRET_ARN": ARN}))
    assert (options["user"], options["password"]) == ("cordum", "p4ssw0rd")
    assert "user_credentials" not in options and "tls" not in options


def test_a_creds_secret_is_handed_over_as_credentials(secret: dict[str, str]) -> None:
    secret[ARN] = "-----BEGIN NATS USER JWT-----\neyJ0\n------END NATS USER JWT------\n"
    options = runtime.nats_options(load_settings(env={"NATS_CREDS_SECRET_ARN": ARN}))
    assert "user_credentials" in options and "user" not in options


def test_a_json_secret_without_a_password_is_a_config_error(secret: dict[str, str]) -> None:
    secret[ARN] = json.dumps({"username": "cordum"})
    with pytest.raises(ConfigError, match='NATS_CREDS_SECRET_ARN: .*"password"'):
        runtime.nats_options(load_settings(env={"NATS_CREDS_SECRET_ARN": ARN}))


def test_the_ca_alone_is_trusted_and_the_name_checked(tmp_path: Path) -> None:
    ca = issue("nats-0.cordum.internal").ca_pem
    for value in (ca, str(tmp_path / "ca.pem")):
        (tmp_path / "ca.pem").write_text(ca)
        context = runtime.nats_options(load_settings(env={"NATS_TLS_CA": value}))["tls"]
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
        # one CA: the system store is not loaded next to it
        assert [c["subject"] for c in context.get_ca_certs()] == [
            ((("commonName", "Cordum safety kernel CA"),),)
        ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("/no/such/ca.pem", "NATS_TLS_CA: cannot read"),
        ("-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----", "no PEM certificate"),
        ("-----BEGIN CERTIFICATE-----\nbm90\n-----END CERTIFICATE-----", "not a usable CA"),
    ],
)
def test_a_bad_ca_is_a_config_error(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        runtime.nats_options(load_settings(env={"NATS_TLS_CA": value}))
