"""E2E fixtures: the stack `make up` deployed (endpoints from .cordum/)."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT", "DENIED", "OUTPUT_QUARANTINED"}


def _env_file() -> dict[str, str]:
    path = ROOT / ".cordum" / "local.env"
    values = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if "=" in line and not line.startswith("#"):
                k, _, v = line.partition("=")
                values[k] = v
    return values


def output_pending(job: dict) -> bool:
    """A SUCCEEDED job whose content scan has not decided yet: its result is not served
    until it has (milliseconds after the state is written)."""
    safety = job.get("output_safety") or {}
    return job.get("state") == "SUCCEEDED" and safety.get("phase") != "async"


class Stack:
    def __init__(self) -> None:
        env = {**_env_file(), **{k: v for k, v in os.environ.items() if k.startswith(
            ("CORDUM_", "LOCALSTACK_"))}}
        missing = [k for k in ("CORDUM_API_URL", "CORDUM_API_KEY", "CORDUM_APPROVER_KEY",
                               "LOCALSTACK_URL")
                   if not env.get(k)]
        if missing:
            pytest.fail(f"stack not up ({', '.join(missing)} unknown): run `make up` first")
        self.env = env
        self.api = env["CORDUM_API_URL"]
        self.key = env["CORDUM_API_KEY"]
        # A second admin of the tenant: the submitter (``key``) cannot decide its own jobs.
        self.approver_key = env["CORDUM_APPROVER_KEY"]
        self.tenant = env.get("CORDUM_TENANT_ID", "default")
        self.other_key = env.get("CORDUM_OTHER_TENANT_KEY", "")
        self.other_tenant = env.get("CORDUM_OTHER_TENANT_ID", "tenant-b")
        self.stream_url = env.get("CORDUM_STREAM_URL", "")
        self.localstack = env["LOCALSTACK_URL"]
        self.redis_url = os.environ.get("REDIS_URL") or env.get("REDIS_URL",
                                                                "redis://127.0.0.1:6379")
        self.nats_url = os.environ.get("NATS_URL") or env.get("NATS_URL",
                                                              "nats://127.0.0.1:4222")
        self.outputs = json.loads((ROOT / ".cordum" / "cdk-outputs.json").read_text())
        self.outputs = self.outputs.get("CordumServerless", self.outputs)

    def http(self, method: str, path: str, body=None, headers=None, raw: bytes | None = None):
        hdrs = {"X-API-Key": self.key, "X-Tenant-ID": self.tenant,
                "Content-Type": "application/json"}
        hdrs.update(headers or {})
        hdrs = {k: v for k, v in hdrs.items() if v is not None}
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.api + path, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, text = resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read().decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def wait_terminal(self, job_id: str, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        job: dict = {}
        while time.monotonic() < deadline:
            status, job = self.http("GET", f"/api/v1/jobs/{job_id}")
            if status == 200 and job.get("state") in TERMINAL and not output_pending(job):
                return job
            time.sleep(0.5)
        pytest.fail(f"job {job_id} not terminal after {timeout}s: {job}")

    def sqs(self):
        import boto3

        return boto3.client("sqs", endpoint_url=self.localstack, region_name="us-east-1",
                            aws_access_key_id="test", aws_secret_access_key="test")


@pytest.fixture(scope="session")
def stack() -> Stack:
    return Stack()


# The dashboard's browser tests (test_dashboard*_e2e.py): the console's origin, one
# Chromium per module, and a tab per test in which a CSP violation or an uncaught error
# is a failure, not a warning.


@pytest.fixture(scope="module")
def console(stack) -> str:
    url = stack.env.get("CORDUM_CONSOLE_URL", "")
    if not url:
        pytest.fail("CORDUM_CONSOLE_URL unknown: `make up` serves the dashboard")
    return url.rstrip("/")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is in the dev dependencies")
    from tests.e2e.browser import launch

    with sync_api.sync_playwright() as pw:
        chromium = launch(pw)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.on("console", lambda msg: errors.append(msg.text)
           if msg.type == "error" and "Content Security Policy" in msg.text else None)
    yield tab
    context.close()
    assert not errors, errors
