"""Shared fixtures. Integration tests use the real Redis and NATS (REDIS_URL / NATS_URL),
on a Redis database of their own (``REDIS_URL`` here: tests/redis_db.py)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from tests import redis_db
from tests.helpers import serving_kernel

if TYPE_CHECKING:
    from tests.workflow_harness import WorkflowStack

SERVER_REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
"""The Redis server the tests use; they keep out of its db 0 (a local stack's)."""
ACL_REDIS_URL = redis_db.with_db(SERVER_REDIS_URL, 0)
"""For a client logging in as one of Cordum's ACL users, which may not SELECT (as on
ElastiCache, which has db 0 only): such a test touches only keys named after itself."""
NATS_URL = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")

# Property tests assert behaviour, not speed: hypothesis's timing checks (an example's
# 200 ms deadline, "input generation is slow") measure the machine, and a loaded CI
# machine (two cores beside LocalStack and Redis) trips them with a 1.5 s pause. A test
# that sets its own settings keeps them; what it leaves out comes from this profile.
settings.register_profile("cordum", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("cordum")


def __getattr__(name: str) -> str:
    # ``REDIS_URL``: the tests' own database, claimed (and emptied) on first use, so a
    # run of the unit tests alone claims nothing.
    if name == "REDIS_URL":
        return redis_db.claim(SERVER_REDIS_URL)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@pytest.fixture
def own_redis_env(monkeypatch: pytest.MonkeyPatch) -> str:
    """REDIS_URL in the environment is the tests' own database during the test: a client
    the runtime builds from the environment, or a process the test starts, uses it too.
    (The integration and security suites use it on every test.)"""
    url = redis_db.claim(SERVER_REDIS_URL)
    monkeypatch.setenv("REDIS_URL", url)
    return url


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture
def aloop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def kernel() -> Iterator[str]:
    """The address of a safety kernel serving the shipped config/safety.yaml, one per module."""
    with serving_kernel() as addr:
        yield addr


@pytest.fixture
def stack(kernel: str) -> Iterator[tuple[asyncio.AbstractEventLoop, WorkflowStack]]:
    """A workflow stack in this process (tests/workflow_harness.py) on its own loop, on
    the real Redis, NATS and safety kernel. (The e2e suite's ``stack`` is the deployed
    local stack instead: tests/e2e/conftest.py.)"""
    from cordum import runtime
    from tests.workflow_harness import WorkflowStack

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    s = WorkflowStack(kernel)
    loop.run_until_complete(s.start())
    yield loop, s
    loop.run_until_complete(s.close())
    loop.run_until_complete(runtime.aclose())
    loop.close()
