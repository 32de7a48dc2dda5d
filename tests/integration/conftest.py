"""Fixtures the workflow integration tests share."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.workflow_harness import WorkflowStack


@pytest.fixture
def stack(kernel: str) -> Iterator[tuple[asyncio.AbstractEventLoop, WorkflowStack]]:
    """A workflow stack in this process (tests/workflow_harness.py) on its own loop."""
    from cordum import runtime

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    s = WorkflowStack(kernel)
    loop.run_until_complete(s.start())
    yield loop, s
    loop.run_until_complete(s.close())
    loop.run_until_complete(runtime.aclose())
    loop.close()
