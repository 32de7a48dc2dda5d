"""Shared fixtures. Integration tests use the real Redis and NATS (REDIS_URL / NATS_URL)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.helpers import serving_kernel

if TYPE_CHECKING:
    from tests.workflow_harness import WorkflowStack

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
NATS_URL = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")


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
