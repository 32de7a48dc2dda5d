"""API keys read from their sources: a file, an SSM SecureString, a Secrets Manager
secret (moto), their refresh after the TTL, and the import cost without AWS sources."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from cordum.gateway.core.auth import (
    Authenticator,
    KeyConfigError,
    KeyLoader,
    KeyRefreshPolicy,
    KeySourceError,
    key_id,
)
from cordum.gateway.core.errors import GatewayError as ApiError

REGION = "eu-west-1"
PARAM = "/cordum/api-keys"
OLD_KEY = "sk-old-4f1c9a7be2d0"
NEW_KEY = "sk-new-8b2e6d0c1f3a"
SECRET_KEY = "sk-secret-77aa11bb22cc"


def test_keys_from_file_and_single_key(tmp_path):
    path = tmp_path / "keys"
    path.write_text("file-key")
    keys = KeyLoader({"CORDUM_API_KEY": "single", "CORDUM_API_KEYS_PATH": str(path)})()
    assert {k.key for k in keys} == {"single", "file-key"}


def test_missing_key_file_names_the_variable(tmp_path):
    with pytest.raises(KeySourceError, match="CORDUM_API_KEYS_PATH"):
        KeyLoader({"CORDUM_API_KEYS_PATH": str(tmp_path / "absent")})()


# --- AWS sources (moto) -------------------------------------------------------------------

@pytest.fixture
def aws(monkeypatch):
    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SSM", "AWS_ENDPOINT_URL_SECRETS_MANAGER"):
        monkeypatch.delenv(var, raising=False)
    with mock_aws():
        yield


@contextmanager
def unlogged():
    """Test set-up calls (which carry key values in botocore's debug logs) stay out of caplog."""
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def put_parameter(value: str) -> None:
    with unlogged():
        boto3.client("ssm", region_name=REGION).put_parameter(
            Name=PARAM, Value=value, Type="SecureString", Overwrite=True)


def create_secret(value: str) -> str:
    with unlogged():
        return boto3.client("secretsmanager", region_name=REGION).create_secret(
            Name=f"cordum-keys-{os.getpid()}", SecretString=value)["ARN"]


def entries(*keys: str, tenant: str = "acme") -> str:
    return json.dumps([{"key": k, "tenant": tenant, "role": "user"} for k in keys])


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def env_with(**extra: str) -> dict[str, str]:
    return {"AWS_REGION": REGION, **extra}


def status_for(auth: Authenticator, key: str) -> int:
    try:
        auth.authenticate({"x-api-key": key})
    except ApiError as exc:
        return exc.status
    return 200


def test_keys_from_an_ssm_secure_string(aws):
    put_parameter(entries(OLD_KEY))
    keys = KeyLoader(env_with(CORDUM_API_KEYS_SSM_PARAMETER=PARAM))()
    assert [(k.key, k.tenant, k.role) for k in keys] == [(OLD_KEY, "acme", "user")]


def test_keys_from_a_secrets_manager_secret(aws):
    arn = create_secret(entries(SECRET_KEY, tenant="globex"))
    keys = KeyLoader(env_with(CORDUM_API_KEYS_SECRET_ARN=arn))()
    assert [(k.key, k.tenant) for k in keys] == [(SECRET_KEY, "globex")]


def test_every_configured_source_adds_its_keys(aws):
    put_parameter(entries(OLD_KEY))
    arn = create_secret(entries(SECRET_KEY))
    keys = KeyLoader(env_with(CORDUM_API_KEYS_SSM_PARAMETER=PARAM, CORDUM_API_KEYS_SECRET_ARN=arn,
                              CORDUM_API_KEY="plain"))()
    assert {k.key for k in keys} == {OLD_KEY, SECRET_KEY, "plain"}


@pytest.mark.parametrize(("var", "value", "reason"), [
    ("CORDUM_API_KEYS_SSM_PARAMETER", "/absent", "ParameterNotFound"),
    ("CORDUM_API_KEYS_SECRET_ARN", "absent-secret", "ResourceNotFoundException"),
])
def test_unreadable_source_names_the_variable_and_the_aws_error(aws, var, value, reason):
    with pytest.raises(KeySourceError, match=f"{var}: {reason}"):
        KeyLoader(env_with(**{var: value}))()


def test_bad_document_in_a_source_names_that_source(aws):
    put_parameter('[{"tenant": "acme"}]')
    with pytest.raises(KeyConfigError, match="CORDUM_API_KEYS_SSM_PARAMETER entry 0 has no key"):
        KeyLoader(env_with(CORDUM_API_KEYS_SSM_PARAMETER=PARAM))()


def test_rotated_key_takes_effect_after_the_ttl(aws, caplog):
    caplog.set_level(logging.DEBUG)
    put_parameter(entries(OLD_KEY))
    clock = Clock()
    auth = Authenticator.from_env(env_with(CORDUM_API_KEYS_SSM_PARAMETER=PARAM,
                                           CORDUM_API_KEYS_TTL_S="60"), clock=clock)
    assert status_for(auth, OLD_KEY) == 200
    put_parameter(entries(NEW_KEY))
    # Within the TTL the container keeps the keys it read.
    clock.now += 59
    assert (status_for(auth, OLD_KEY), status_for(auth, NEW_KEY)) == (200, 401)
    clock.now += 1
    assert (status_for(auth, OLD_KEY), status_for(auth, NEW_KEY)) == (401, 200)
    assert auth.authenticate({"x-api-key": NEW_KEY}).key_id == key_id(NEW_KEY)
    assert OLD_KEY not in caplog.text and NEW_KEY not in caplog.text


def test_failed_refresh_keeps_the_last_keys_and_warns_without_values(aws, caplog):
    caplog.set_level(logging.DEBUG)
    arn = create_secret(entries(SECRET_KEY))
    clock = Clock()
    auth = Authenticator.from_env(env_with(CORDUM_API_KEYS_SECRET_ARN=arn), clock=clock)
    assert status_for(auth, SECRET_KEY) == 200
    # The secret now holds a broken document that quotes a key: still not logged.
    with unlogged():
        boto3.client("secretsmanager", region_name=REGION).put_secret_value(
            SecretId=arn, SecretString='[{"key": "' + NEW_KEY + '", ')
    clock.now += KeyRefreshPolicy().ttl_s
    assert status_for(auth, SECRET_KEY) == 200
    assert status_for(auth, NEW_KEY) == 401
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "CORDUM_API_KEYS_SECRET_ARN is not valid JSON" in warnings[0].getMessage()
    assert "keeping the 1 keys" in warnings[0].getMessage()
    # Retried after retry_s, not on every request; a good document is then taken.
    with unlogged():
        boto3.client("secretsmanager", region_name=REGION).put_secret_value(
            SecretId=arn, SecretString=entries(NEW_KEY))
    clock.now += KeyRefreshPolicy().retry_s - 1
    assert (status_for(auth, SECRET_KEY), status_for(auth, NEW_KEY)) == (200, 401)
    clock.now += 1
    assert (status_for(auth, SECRET_KEY), status_for(auth, NEW_KEY)) == (401, 200)
    for value in (SECRET_KEY, NEW_KEY):
        assert value not in caplog.text


def test_source_outage_on_refresh_keeps_the_last_keys(aws, caplog):
    caplog.set_level(logging.DEBUG)
    put_parameter(entries(OLD_KEY))
    clock = Clock()
    auth = Authenticator.from_env(env_with(CORDUM_API_KEYS_SSM_PARAMETER=PARAM), clock=clock)
    assert status_for(auth, OLD_KEY) == 200
    with unlogged():
        boto3.client("ssm", region_name=REGION).delete_parameter(Name=PARAM)
    clock.now += 301
    assert status_for(auth, OLD_KEY) == 200
    assert "CORDUM_API_KEYS_SSM_PARAMETER: ParameterNotFound" in caplog.text
    assert OLD_KEY not in caplog.text


def test_no_keys_ever_read_is_503_not_401(aws, caplog):
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    auth = Authenticator.from_env(env_with(CORDUM_API_KEYS_SSM_PARAMETER=PARAM), clock=clock)
    with pytest.raises(ApiError) as info:
        auth.authenticate({"x-api-key": OLD_KEY})
    assert (info.value.status, info.value.code) == (503, "keys_unavailable")
    assert "ParameterNotFound" in caplog.text
    put_parameter(entries(OLD_KEY))
    clock.now += KeyRefreshPolicy().retry_s
    assert status_for(auth, OLD_KEY) == 200
    assert OLD_KEY not in caplog.text


def test_boto3_is_not_imported_without_an_aws_source():
    # A fresh interpreter: this test process imported boto3 for moto already.
    code = (
        "import sys\n"
        "from cordum.gateway.core.auth import Authenticator\n"
        "auth = Authenticator.from_env({'CORDUM_API_KEYS': 'k'})\n"
        "assert auth.authenticate({'x-api-key': 'k'}).tenant == 'default'\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore')))\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(root / "shared")}, check=True)
    assert out.stdout.strip() == "[]"
