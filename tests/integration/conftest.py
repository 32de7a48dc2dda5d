"""The integration suite's fixtures beyond tests/conftest.py."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _own_redis(own_redis_env: str) -> None:
    """Every test on the tests' own Redis database (tests/conftest.py)."""
