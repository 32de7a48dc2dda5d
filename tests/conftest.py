"""Shared fixtures. Integration tests use the real Redis and NATS (REDIS_URL / NATS_URL)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator

import pytest

from tests.helpers import serving_kernel

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
