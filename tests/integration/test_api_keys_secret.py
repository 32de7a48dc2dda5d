"""API keys from the Secrets Manager secret the AWS stack names (moto): by name or ARN in
CORDUM_API_KEYS_SECRET_ID, one read per container per CORDUM_API_KEYS_TTL_S, so a
cold-start storm costs one read per container and a rotated key takes effect within
the TTL."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import boto3
import pytest
from moto import mock_aws

from cordum.gateway.core.auth import (
    Authenticator,
    KeyLoader,
    KeyRefreshPolicy,
    KeyRing,
    KeySourceError,
)
from cordum.gateway.core.errors import GatewayError

REGION = "eu-west-1"
TTL_S = "300"
"""What the AWS stack sets (cordum_infra.api.API_KEYS_TTL_S)."""
OLD_KEY = "sk-old-5e2a9c1d7b3f"
NEW_KEY = "sk-new-0d4f8b6a2c1e"


@pytest.fixture
def secrets(monkeypatch) -> Any:
    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SECRETS_MANAGER"):
        monkeypatch.delenv(var, raising=False)
    with mock_aws():
        yield boto3.client("secretsmanager", region_name=REGION)


def entries(*keys: str) -> str:
    return json.dumps([{"key": k, "tenant": "acme", "role": "user"} for k in keys])


def put(client: Any, name: str, value: str) -> str:
    """Create or update the secret without the value reaching any log."""
    logging.disable(logging.CRITICAL)
    try:
        try:
            return str(client.create_secret(Name=name, SecretString=value)["ARN"])
        except client.exceptions.ResourceExistsException:
            return str(client.put_secret_value(SecretId=name, SecretString=value)["ARN"])
    finally:
        logging.disable(logging.NOTSET)


class Counting:
    """A Secrets Manager client that counts GetSecretValue calls."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls = 0

    def get_secret_value(self, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        return dict(self.client.get_secret_value(**kwargs))


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def stack_env(secret_id: str) -> dict[str, str]:
    """The gateway's variables on the AWS stack."""
    return {"AWS_REGION": REGION, "CORDUM_API_KEYS_SECRET_ID": secret_id,
            "CORDUM_API_KEYS_TTL_S": TTL_S}


def container(env: dict[str, str], client: Counting, clock: Clock) -> Authenticator:
    """One gateway container: its own key ring over the shared secret."""
    return Authenticator(KeyRing(KeyLoader(env, secrets=client), KeyRefreshPolicy.from_env(env),
                                 clock))


def status(auth: Authenticator, key: str) -> int:
    try:
        auth.authenticate({"x-api-key": key})
    except GatewayError as exc:
        return exc.status
    return 200


@pytest.mark.parametrize("by", ["name", "arn"])
def test_keys_from_the_secret_by_name_or_arn(secrets, by):
    name = f"cordum/api-keys-test-{os.getpid()}"
    arn = put(secrets, name, entries(OLD_KEY))
    keys = KeyLoader(stack_env(name if by == "name" else arn))()
    assert [(k.key, k.tenant) for k in keys] == [(OLD_KEY, "acme")]


def test_a_cold_start_storm_costs_one_read_per_container(secrets):
    name = "cordum/api-keys"
    put(secrets, name, entries(OLD_KEY))
    counting, clock = Counting(secrets), Clock()
    # Given 50 containers started at once, each serving 20 requests within the TTL
    containers = [container(stack_env(name), counting, clock) for _ in range(50)]
    for _ in range(20):
        for auth in containers:
            assert status(auth, OLD_KEY) == 200
        clock.now += 10
    # Then the secret was read once per container, not once per request
    assert counting.calls == 50
    # And once more per container after the TTL
    clock.now += 300
    for auth in containers:
        assert status(auth, OLD_KEY) == 200
    assert counting.calls == 100


def test_a_rotated_key_takes_effect_within_the_ttl(secrets):
    name = "cordum/api-keys"
    put(secrets, name, entries(OLD_KEY))
    counting, clock = Counting(secrets), Clock()
    auth = container(stack_env(name), counting, clock)
    assert status(auth, OLD_KEY) == 200
    # When the operator rotates the key
    put(secrets, name, entries(NEW_KEY))
    # Then the container keeps the old one until its TTL ends, and no longer
    clock.now += int(TTL_S) - 1
    assert (status(auth, OLD_KEY), status(auth, NEW_KEY)) == (200, 401)
    clock.now += 1
    assert (status(auth, OLD_KEY), status(auth, NEW_KEY)) == (401, 200)


def test_a_missing_secret_names_the_variable_and_never_a_key(secrets, caplog):
    caplog.set_level(logging.DEBUG)
    reason = "CORDUM_API_KEYS_SECRET_ID: ResourceNotFoundException"
    with pytest.raises(KeySourceError, match=reason):
        KeyLoader(stack_env("cordum/absent"))()
    # And a gateway without it answers 503 until it can read the keys
    auth = container(stack_env("cordum/absent"), Counting(secrets), Clock())
    assert status(auth, OLD_KEY) == 503


def test_both_secret_variables_add_their_keys(secrets):
    old_arn = put(secrets, "keys-by-arn", entries(OLD_KEY))
    put(secrets, "keys-by-id", entries(NEW_KEY))
    env = {**stack_env("keys-by-id"), "CORDUM_API_KEYS_SECRET_ARN": old_arn}
    assert {k.key for k in KeyLoader(env)()} == {OLD_KEY, NEW_KEY}
