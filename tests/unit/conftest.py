"""Unit tests use no service: a connection to Redis or NATS (the ports of REDIS_URL and
NATS_URL, and their default ports) fails the test at once, so ``make test-unit`` passes
on a machine where neither runs."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest

SERVICE_PORTS = frozenset({6379, 4222} | {
    port for port in (urlsplit(os.environ.get(name, "")).port for name in ("REDIS_URL", "NATS_URL"))
    if port})


def _refusing(connect: Callable[[socket.socket, Any], Any]) -> Callable[..., Any]:
    def guarded(sock: socket.socket, address: Any) -> Any:
        if isinstance(address, tuple) and len(address) >= 2 and address[1] in SERVICE_PORTS:
            raise ConnectionRefusedError(
                f"a unit test uses no service: it connected to {address[0]}:{address[1]} "
                "(Redis or NATS); such a test belongs in tests/integration")
        return connect(sock, address)
    return guarded


@pytest.fixture(autouse=True)
def no_services(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _refusing(socket.socket.connect))
    monkeypatch.setattr(socket.socket, "connect_ex", _refusing(socket.socket.connect_ex))
