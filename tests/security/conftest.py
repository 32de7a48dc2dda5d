"""Security tests: each one is an exploit that once worked, kept as a test.

The gateway is driven in-process with API Gateway proxy events (``tests.helpers``), on
the real Redis and NATS, with three keys: ``alice`` (admin) and ``bob`` (user) in tenant
``default``, ``carol`` (admin) in tenant ``acme``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from cordum import config, runtime
from cordum.gateway.core import deps
from tests import helpers
from tests.conftest import NATS_URL, REDIS_URL

ALICE = "alice-key-0123456789"
BOB = "bob-key-0123456789"
CAROL = "carol-key-0123456789"
KEYS = [
    {"key": ALICE, "tenant": "default", "role": "admin", "principal_id": "alice"},
    {"key": BOB, "tenant": "default", "role": "user", "principal_id": "bob"},
    {"key": CAROL, "tenant": "acme", "role": "admin", "principal_id": "carol"},
]


def configure(monkeypatch: pytest.MonkeyPatch, keys: list[dict[str, str]] | None = None,
              **env: str) -> None:
    monkeypatch.setenv("CORDUM_API_KEYS", json.dumps(KEYS if keys is None else keys))
    monkeypatch.delenv("CORDUM_API_KEY", raising=False)
    monkeypatch.setenv("REDIS_URL", REDIS_URL)
    monkeypatch.setenv("NATS_URL", NATS_URL)
    monkeypatch.setenv("CORDUM_STORE_TIMEOUT_S", "0.5")
    monkeypatch.setenv("CORDUM_PUBLISH_TIMEOUT_S", "0.5")
    monkeypatch.setenv("CORDUM_SUBMIT_POLICY_CHECK", "off")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config.settings.cache_clear()
    deps.reset()
    runtime.reset()


@pytest.fixture(autouse=True)
def _own_redis(own_redis_env: str) -> None:
    """Every test on the tests' own Redis database (tests/conftest.py)."""


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch):
    """The gateway with the three keys, submit-time policy off (tests turn it on); the jobs
    it accepted through ``helpers.call`` are forgotten after the test."""
    configure(monkeypatch)
    helpers.CREATED.clear()
    with helpers.gateway_process():
        yield
        runtime.run(helpers.forget_jobs(runtime.redis_client(), helpers.CREATED))
        helpers.CREATED.clear()


@pytest.fixture(scope="module")
def output_kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A safety kernel (with its output policy service) serving the output rules of the
    result-path tests on a free port."""
    from tests.security.result_path import SAFETY_YAML

    path = tmp_path_factory.mktemp("output-policy") / "safety.yaml"
    path.write_text(SAFETY_YAML)
    with helpers.serving_kernel(path) as addr:
        yield addr


def meta_of(job_id: str) -> dict[str, str]:
    raw = runtime.run(runtime.redis_client().hgetall(f"job:meta:{job_id}"))
    return {k.decode(): v.decode() for k, v in raw.items()}
