"""The kernel's policy from the stack's S3 object (cordum.safety.policy_source), against
S3 in moto: copied into the config dir before serving, retried while it may pass,
refused at once when it will not, and a kernel without it exits non-zero."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError
from moto import mock_aws

from cordum.safety import kernel, policy_source
from cordum.safety.policy_source import (
    MAX_POLICY_BYTES,
    POLICY_URI_ENV,
    PolicySourceError,
    fetch_policy,
    parse_policy_uri,
)
from tests.helpers import SHIPPED_POLICY

BUCKET = "cordum-policy-test"
KEY = "safety.yaml"
URI = f"s3://{BUCKET}/{KEY}"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client


class Flaky:
    """An S3 client whose first ``failures`` calls fail as a network error would."""

    def __init__(self, real: Any, failures: int) -> None:
        self.real, self.failures, self.calls = real, failures, 0

    def get_object(self, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise EndpointConnectionError(endpoint_url="https://s3.us-east-1.amazonaws.com")
        return self.real.get_object(**kwargs)


def test_the_object_is_copied_into_the_config_dir(s3: Any, tmp_path: Path) -> None:
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=SHIPPED_POLICY.read_bytes())
    dest = tmp_path / "config" / "safety.yaml"
    dest.parent.mkdir()
    dest.write_text("stale: baked into the image\n")

    # With the module's own client (its timeouts and single try per attempt)
    assert fetch_policy(URI, dest) == dest

    assert dest.read_bytes() == SHIPPED_POLICY.read_bytes()
    # And no temporary file is left beside it
    assert [p.name for p in dest.parent.iterdir()] == ["safety.yaml"]


def test_errors_that_may_pass_are_retried_with_a_doubling_back_off(
    s3: Any, tmp_path: Path,
) -> None:
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"rules: []\n")
    flaky, slept = Flaky(s3, failures=2), []

    fetch_policy(URI, tmp_path / "safety.yaml", client=flaky, sleep=slept.append)

    assert flaky.calls == 3
    assert slept == [1.0, 2.0]
    assert (tmp_path / "safety.yaml").read_bytes() == b"rules: []\n"


def test_the_tries_are_bounded(s3: Any, tmp_path: Path) -> None:
    flaky, slept = Flaky(s3, failures=100), []

    with pytest.raises(PolicySourceError) as raised:
        fetch_policy(URI, tmp_path / "safety.yaml", client=flaky, sleep=slept.append)

    assert flaky.calls == policy_source.FETCH_ATTEMPTS
    assert slept == [1.0, 2.0, 4.0]
    assert str(raised.value).startswith(f"{POLICY_URI_ENV}: cannot read {URI} after 4 tries")
    assert not (tmp_path / "safety.yaml").exists()


@pytest.mark.parametrize(("uri", "code"), [
    (f"s3://{BUCKET}/missing.yaml", "NoSuchKey"),
    ("s3://no-such-cordum-bucket/safety.yaml", "NoSuchBucket"),
])
def test_a_missing_object_fails_at_once(s3: Any, tmp_path: Path, uri: str, code: str) -> None:
    flaky, slept = Flaky(s3, failures=0), []

    with pytest.raises(PolicySourceError, match=code) as raised:
        fetch_policy(uri, tmp_path / "safety.yaml", client=flaky, sleep=slept.append)

    assert (flaky.calls, slept) == (1, [])
    assert uri in str(raised.value) and "tries" not in str(raised.value)


def test_an_oversized_object_is_no_policy(s3: Any, tmp_path: Path) -> None:
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"#" * (MAX_POLICY_BYTES + 1))
    flaky = Flaky(s3, failures=0)

    with pytest.raises(PolicySourceError, match="over the"):
        fetch_policy(URI, tmp_path / "safety.yaml", client=flaky, sleep=lambda _: None)
    assert flaky.calls == 1


@pytest.mark.parametrize("uri", [
    "https://bucket.s3.amazonaws.com/safety.yaml", "s3://bucket", "s3://bucket/",
    "s3:///safety.yaml", "s3://bucket/safety.yaml?versionId=1", "",
])
def test_only_an_s3_bucket_and_key_is_a_policy_uri(uri: str) -> None:
    with pytest.raises(PolicySourceError, match=POLICY_URI_ENV):
        parse_policy_uri(uri)


def test_a_policy_uri_names_its_bucket_and_key() -> None:
    where = parse_policy_uri("s3://cordum-policy/kernel/safety.yaml")
    assert (where.bucket, where.key, where.uri) == (
        "cordum-policy", "kernel/safety.yaml", "s3://cordum-policy/kernel/safety.yaml")


def test_a_kernel_that_cannot_read_its_policy_exits_before_serving(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    served: list[Any] = []
    monkeypatch.setattr(kernel, "serve", lambda *a, **k: served.append(a))
    monkeypatch.setattr(policy_source.time, "sleep", lambda _: None)
    monkeypatch.setenv("CORDUM_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv(POLICY_URI_ENV, f"s3://{BUCKET}/missing.yaml")

    with pytest.raises(SystemExit) as raised:
        kernel.main(["--addr", "127.0.0.1:0"])

    # Then the process exits with the reason (a non-zero status) and never serves
    assert str(raised.value).startswith(f"safety kernel: {POLICY_URI_ENV}: cannot read")
    assert served == []


def test_a_kernel_serves_the_policy_it_downloaded(
    s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=SHIPPED_POLICY.read_bytes())
    served: list[Any] = []

    def serve(addr: str, policy: Any, **_: Any) -> None:
        served.append(policy)
        raise SystemExit(0)  # stop before main waits for a signal

    monkeypatch.setattr(kernel, "serve", serve)
    monkeypatch.setenv("CORDUM_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv(POLICY_URI_ENV, URI)
    monkeypatch.delenv("REDIS_URL", raising=False)

    with pytest.raises(SystemExit):
        kernel.main(["--addr", "127.0.0.1:0"])

    (policy_kernel,) = served
    assert policy_kernel.policy.path == tmp_path / "safety.yaml"
    assert (tmp_path / "safety.yaml").read_bytes() == SHIPPED_POLICY.read_bytes()
