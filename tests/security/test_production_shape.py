"""The AWS shape of the stack: the safety kernel speaks TLS, shares velocity through
Redis, and no API key is written into a template.

- The kernel on Fargate used to listen in plaintext and get no REDIS_URL, so every
  check crossed the VPC readable and alterable, and every task counted velocity
  windows on its own (N tasks let N times a limit through).
- ``-c apiKeys=...`` used to be accepted for an AWS stack, writing the keys into the
  template and the gateway's plain environment.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from cordum.safety.client import Decision, SafetyClient
from cordum.safety.kernel_service import PolicyKernel
from cordum.safety.policy_file import Policy
from cordum.safety.tls import client_tls_from_env, server_tls_from_env
from cordum.safety.velocity import velocity_from_env
from tests.helpers import SHIPPED_POLICY, serving_kernel
from tests.infra.test_synth import (
    CDK_DIR,
    LOCAL_REDIS,
    _context,
    _functions,
    _resources,
    _stack,
    inputs,  # noqa: F401  (the module fixture: stand-in layer, handlers, config)
)
from tests.integration.test_safety_tls import check, pki  # noqa: F401

cdk = pytest.importorskip("aws_cdk")
from aws_cdk.assertions import Template  # noqa: E402
from cordum_infra.settings import ContextError, StackSettings  # noqa: E402
from cordum_infra.stack import STACK_NAME  # noqa: E402

AWS_NATS = "tls://10.0.0.10:4222"
NATS_CREDS = "arn:aws:secretsmanager:us-east-1:123456789012:secret:cordum/nats-AbCdEf"
KERNEL_CONTAINER = "safety-kernel"
BRIDGE_CONTAINER = "bridge"


@pytest.fixture(scope="module")
def aws(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    """Given the AWS shape as `cdk deploy` makes it: no redisUrl, no safetyKernelAddr."""
    tmp = tmp_path_factory.mktemp("aws-production")
    context = _context(inputs, natsUrl=AWS_NATS, natsCredentialsSecretArn=NATS_CREDS)
    _, stack = _stack(inputs, tmp, context)
    template = Template.from_stack(stack)
    return {"json": template.to_json(), "stack": stack}


def _containers(tpl: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        container["Name"]: container
        for task in _resources(tpl, "AWS::ECS::TaskDefinition").values()
        for container in task["Properties"]["ContainerDefinitions"]
    }


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["Name"]: item["Value"] for item in container.get("Environment", [])}


def _secrets(container: dict[str, Any]) -> dict[str, Any]:
    return {item["Name"]: item["ValueFrom"] for item in container.get("Secrets", [])}


def test_kernel_serves_tls_from_secrets_and_counts_velocity_in_the_stacks_redis(
    aws: dict[str, Any],
) -> None:
    tpl, stack = aws["json"], aws["stack"]
    kernel = _containers(tpl)[KERNEL_CONTAINER]
    env, secrets = _env(kernel), _secrets(kernel)
    # Then ECS hands the kernel its certificate and key from Secrets Manager
    assert {"SAFETY_KERNEL_TLS_CERT", "SAFETY_KERNEL_TLS_KEY"} <= set(secrets)
    assert not {"SAFETY_KERNEL_TLS_CERT", "SAFETY_KERNEL_TLS_KEY"} & set(env)
    # And no private key is anywhere in the template
    assert "PRIVATE KEY" not in json.dumps(tpl)
    # And the kernel counts velocity in the stack's Redis, over TLS, as its own user
    assert env["REDIS_URL"] == stack.resolve(stack.cache.url)
    assert json.dumps(env["REDIS_URL"]).startswith('{"Fn::Join": ["", ["rediss://"')
    assert env["REDIS_USERNAME"] == "cordum-kernel"
    secret = {"Ref": stack.resolve(
        stack.get_logical_id(stack.cache.users.secret("kernel").node.default_child))}
    assert secrets["REDIS_AUTH_TOKEN"] == {"Fn::Join": ["", [secret, ":password::"]]}


def test_every_function_and_the_bridge_refuse_a_plaintext_kernel(aws: dict[str, Any]) -> None:
    tpl = aws["json"]
    clients = {f"function {m}": p["Environment"]["Variables"] for m, p in _functions(tpl).items()}
    clients["bridge"] = _env(_containers(tpl)[BRIDGE_CONTAINER])
    from cordum_infra.functions import ALL_FUNCTIONS

    assert len(clients) == len(ALL_FUNCTIONS) + 1
    for name, env in clients.items():
        # Then each one requires TLS and is given the CA to verify the kernel with
        assert env.get("SAFETY_KERNEL_TLS_REQUIRED") == "true", name
        assert env.get("SAFETY_KERNEL_TLS_CA"), name
        assert "SAFETY_KERNEL_INSECURE" not in env, name


def test_an_outside_kernel_on_aws_needs_the_ca_to_verify_it(inputs: dict[str, Path]) -> None:  # noqa: F811
    # Given an AWS stack told to use a kernel it does not run, and no CA for it
    app = cdk.App(context=_context(inputs, natsUrl=AWS_NATS, natsCredentialsSecretArn=NATS_CREDS,
                                   safetyKernelAddr="kernel.example.internal:50051"))
    # Then the settings are refused instead of leaving the clients in plaintext
    with pytest.raises(ContextError, match="safetyKernelCa"):
        StackSettings.from_context(app.node)


def _synth(inputs: dict[str, Path], tmp: Path, **context: str) -> subprocess.CompletedProcess[str]:  # noqa: F811
    env = {
        **os.environ,
        "CDK_CONTEXT_JSON": json.dumps(_context(inputs, nag="false", **context)),
        "CDK_OUTDIR": str(tmp),
    }
    return subprocess.run([sys.executable, "app.py"], cwd=CDK_DIR, env=env,
                          capture_output=True, text=True)


def test_aws_shape_refuses_api_keys_in_the_template(
    inputs: dict[str, Path], tmp_path: Path  # noqa: F811
) -> None:
    keys = json.dumps([{"key": "literal-key-0123456789", "tenant": "default"}])
    # When `cdk deploy` (no redisUrl) is given apiKeys
    proc = _synth(inputs, tmp_path / "aws", natsUrl=AWS_NATS, natsCredentialsSecretArn=NATS_CREDS,
                  apiKeys=keys)
    # Then the synth stops with a reason that says where the keys belong
    assert proc.returncode == 1, "the AWS stack synthesized with literal API keys"
    assert "apiKeys" in proc.stderr and "Secrets Manager secret cordum/api-keys" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "aws" / f"{STACK_NAME}.template.json").exists()
    # While the LocalStack shape (redisUrl) still takes them
    proc = _synth(inputs, tmp_path / "local", natsUrl=AWS_NATS, redisUrl=LOCAL_REDIS, apiKeys=keys)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tpl = json.loads((tmp_path / "local" / f"{STACK_NAME}.template.json").read_text())
    assert _functions(tpl)["gateway"]["Environment"]["Variables"]["CORDUM_API_KEYS"] == keys


def test_kernel_and_clients_take_their_pem_from_the_variables(aloop, pki: dict[str, Path]) -> None:  # noqa: F811
    # Given the PEM text itself in the variables, as ECS secrets and Lambda env carry it
    server_env = {"SAFETY_KERNEL_TLS_CERT": pki["cert"].read_text(),
                  "SAFETY_KERNEL_TLS_KEY": pki["key"].read_text()}
    client_env = {"SAFETY_KERNEL_TLS_CA": pki["ca"].read_text(),
                  "SAFETY_KERNEL_TLS_REQUIRED": "true"}
    with serving_kernel(PolicyKernel(Policy(SHIPPED_POLICY)),
                        tls=server_tls_from_env(server_env)) as addr:
        client = SafetyClient(addr.replace("127.0.0.1", "localhost"), 2.0,
                              tls=client_tls_from_env(client_env))
        # Then the client verifies the kernel and gets its decision over TLS
        assert client.secure
        assert check(aloop, client).decision is Decision.ALLOW


def test_kernel_velocity_authenticates_to_the_stacks_redis() -> None:
    # Given a Redis stand-in that records what a client sends first
    received = bytearray()
    got = threading.Event()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def accept() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(2)
            try:
                received.extend(conn.recv(65536))
            finally:
                got.set()

    threading.Thread(target=accept, daemon=True).start()
    token = "auth-token-9f8e7d6c5b4a"
    env = {"REDIS_URL": f"redis://127.0.0.1:{listener.getsockname()[1]}",
           "REDIS_AUTH_TOKEN": token}
    try:
        # When the kernel's velocity windows count a request
        windows = velocity_from_env(env)
        windows.record("rule", "key", "member", 60.0)
        assert got.wait(5)
    finally:
        listener.close()
    # Then the first thing they send is AUTH with the token ECS gave the kernel
    assert b"AUTH" in bytes(received).upper() and token.encode() in bytes(received)
