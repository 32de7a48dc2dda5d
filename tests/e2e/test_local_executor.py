"""LocalStack's Lambda service running functions through the cordum-local executor.

Needs a running LocalStack (``python localstack/launcher.py start``) at
LOCALSTACK_URL, default http://127.0.0.1:4566.
"""

from __future__ import annotations

import io
import json
import os
import time
import urllib.request
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

pytestmark = pytest.mark.e2e

LOCALSTACK_URL = os.environ.get("LOCALSTACK_URL", "http://127.0.0.1:4566")
ROLE = "arn:aws:iam::000000000000:role/lambda-role"

HANDLER = """
import importlib.util
import sys

import layer_greeting


def handler(event, context):
    print(f"cordum-e2e says {event.get('marker')}")
    if event.get("fail"):
        raise ValueError("the handler was told to fail")
    if event.get("sleep"):
        import time
        time.sleep(event["sleep"])
    result = {
        "sum": event["a"] + event["b"],
        "greeting": layer_greeting.greet("cordum"),
        "request_id": context.aws_request_id,
        "remaining_ms": context.get_remaining_time_in_millis(),
        "function_name": context.function_name,
        "host_modules": {
            name: importlib.util.find_spec(name) is not None for name in ("pytest", "yaml")
        },
        "executable": sys.executable,
    }
    if event.get("call_aws"):
        import boto3
        result["account"] = boto3.client("sts").get_caller_identity()["Account"]
    return result
"""

LAYER_MODULE = """
def greet(name):
    return f"hello {name} from the layer"
"""


def _zip(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def _client(service: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=LOCALSTACK_URL,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


@pytest.fixture(scope="module")
def lambda_client() -> Any:
    try:
        with urllib.request.urlopen(f"{LOCALSTACK_URL}/_localstack/health", timeout=3):
            pass
    except OSError as exc:
        pytest.fail(
            f"LocalStack not reachable at {LOCALSTACK_URL} ({exc}); "
            "start it with `python localstack/launcher.py start`"
        )
    return _client("lambda")


@dataclass(frozen=True)
class DeployedFunction:
    name: str
    layer_arn: str


@pytest.fixture(scope="module")
def function(lambda_client: Any) -> Iterator[DeployedFunction]:
    suffix = uuid.uuid4().hex[:8]
    name = f"cordum-e2e-executor-{suffix}"
    layer = lambda_client.publish_layer_version(
        LayerName=f"cordum-e2e-layer-{suffix}",
        Content={"ZipFile": _zip({"python/layer_greeting.py": LAYER_MODULE})},
        CompatibleRuntimes=["python3.12"],
    )
    try:
        lambda_client.create_function(
            FunctionName=name,
            Runtime="python3.12",
            Role=ROLE,
            Handler="app.handler",
            Code={"ZipFile": _zip({"app.py": HANDLER})},
            Layers=[layer["LayerVersionArn"]],
            Timeout=3,
        )
        lambda_client.get_waiter("function_active_v2").wait(FunctionName=name)
        yield DeployedFunction(name, layer["LayerVersionArn"])
    finally:
        _delete_quietly(lambda_client.delete_function, FunctionName=name)
        _delete_quietly(
            lambda_client.delete_layer_version,
            LayerName=layer["LayerArn"],
            VersionNumber=layer["Version"],
        )
        _delete_quietly(_client("logs").delete_log_group, logGroupName=f"/aws/lambda/{name}")


def _delete_quietly(call: Any, **kwargs: Any) -> None:
    try:
        call(**kwargs)
    except Exception:  # cleanup of what a failed test may never have created
        pass


def _invoke(lambda_client: Any, name: str, event: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    response = lambda_client.invoke(FunctionName=name, Payload=json.dumps(event).encode())
    return response, json.loads(response["Payload"].read())


def test_direct_invoke_returns_what_the_handler_computed(
    lambda_client: Any, function: DeployedFunction
) -> None:
    response, body = _invoke(lambda_client, function.name, {"a": 2, "b": 40, "call_aws": True})

    assert "FunctionError" not in response
    assert body["sum"] == 42
    # a real LambdaContext, fed by the Runtime API headers
    assert body["function_name"] == function.name
    assert 0 < body["remaining_ms"] <= 3000
    uuid.UUID(body["request_id"])
    # the runtime's own interpreter, not LocalStack's
    assert "3.12" in body["executable"]
    # boto3 inside the function reaches LocalStack (AWS_ENDPOINT_URL)
    assert body["account"] == "000000000000"


def test_each_invocation_gets_its_own_request_id(
    lambda_client: Any, function: DeployedFunction
) -> None:
    bodies = [_invoke(lambda_client, function.name, {"a": 1, "b": 1})[1] for _ in range(2)]

    ids = {body["request_id"] for body in bodies}

    assert len(ids) == 2


def test_layer_module_is_importable(lambda_client: Any, function: DeployedFunction) -> None:
    _, body = _invoke(lambda_client, function.name, {"a": 0, "b": 0})

    assert body["greeting"] == "hello cordum from the layer"


def test_host_site_packages_are_not_importable(
    lambda_client: Any, function: DeployedFunction
) -> None:
    # Both are installed where this test runs (pytest, pyyaml as a project dependency).
    _, body = _invoke(lambda_client, function.name, {"a": 0, "b": 0})

    assert body["host_modules"] == {"pytest": False, "yaml": False}


def test_handler_exception_is_a_function_error(
    lambda_client: Any, function: DeployedFunction
) -> None:
    response, body = _invoke(lambda_client, function.name, {"a": 0, "b": 0, "fail": True})

    assert response["FunctionError"] == "Unhandled"
    assert body["errorType"] == "ValueError"
    assert body["errorMessage"] == "the handler was told to fail"
    assert any("app.py" in line for line in body["stackTrace"])


def test_timeout_is_reported_and_the_next_invoke_gets_a_fresh_runtime(
    lambda_client: Any, function: DeployedFunction
) -> None:
    started = time.monotonic()
    response, body = _invoke(lambda_client, function.name, {"a": 0, "b": 0, "sleep": 10})
    elapsed = time.monotonic() - started

    assert response["FunctionError"] == "Unhandled"
    assert body["errorType"] == "Sandbox.Timedout"
    assert "Task timed out after 3.00 seconds" in body["errorMessage"]
    assert elapsed < 8

    response, body = _invoke(lambda_client, function.name, {"a": 1, "b": 2})
    assert "FunctionError" not in response
    assert body["sum"] == 3


def test_print_output_reaches_cloudwatch_logs(
    lambda_client: Any, function: DeployedFunction
) -> None:
    marker = uuid.uuid4().hex
    _invoke(lambda_client, function.name, {"a": 0, "b": 0, "marker": marker})
    logs = _client("logs")

    messages: list[str] = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            events = logs.filter_log_events(logGroupName=f"/aws/lambda/{function.name}")
            messages = [event["message"] for event in events["events"]]
        except logs.exceptions.ResourceNotFoundException:
            messages = []
        if any(marker in message for message in messages):
            break
        time.sleep(0.5)

    assert any(f"cordum-e2e says {marker}" in message for message in messages)
    assert any(message.startswith("REPORT RequestId:") for message in messages)


def test_import_error_in_the_handler_module_is_a_function_error(lambda_client: Any) -> None:
    name = f"cordum-e2e-broken-{uuid.uuid4().hex[:8]}"
    lambda_client.create_function(
        FunctionName=name,
        Runtime="python3.12",
        Role=ROLE,
        Handler="broken.handler",
        Code={"ZipFile": _zip({"broken.py": "import not_a_module_anywhere\n"})},
    )
    try:
        lambda_client.get_waiter("function_active_v2").wait(FunctionName=name)

        response, body = _invoke(lambda_client, name, {})

        assert response["FunctionError"] == "Unhandled"
        assert body["errorType"] == "Runtime.ImportModuleError"
        assert "not_a_module_anywhere" in body["errorMessage"]
    finally:
        _delete_quietly(lambda_client.delete_function, FunctionName=name)
        _delete_quietly(_client("logs").delete_log_group, logGroupName=f"/aws/lambda/{name}")


def test_unsupported_runtime_fails_with_a_clear_reason(lambda_client: Any) -> None:
    name = f"cordum-e2e-node-{uuid.uuid4().hex[:8]}"
    lambda_client.create_function(
        FunctionName=name,
        Runtime="nodejs20.x",
        Role=ROLE,
        Handler="index.handler",
        Code={"ZipFile": _zip({"index.js": "exports.handler = async () => 1;\n"})},
    )
    try:
        config: dict[str, Any] = {}
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            config = lambda_client.get_function_configuration(FunctionName=name)
            if config["State"] != "Pending":
                break
            time.sleep(0.2)

        assert config["State"] == "Failed"
        assert "nodejs20.x" in config["StateReason"]
        assert "cordum-local" in config["StateReason"]
    finally:
        _delete_quietly(lambda_client.delete_function, FunctionName=name)
