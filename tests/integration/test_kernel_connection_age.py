"""The kernel's gRPC server ends each client connection after a maximum age (so that
clients spread over tasks added later), with a grace that covers the longest check,
over a real server and channel."""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc

from cordum.safety import kernel
from cordum.safety.client import SafetyClient
from cordum.safety.kernel import serve, server_options
from cordum.safety.output_client import CONTENT_TIMEOUT_S, META_TIMEOUT_S, REDACT_TIMEOUT_S
from cordum.safety.policy_file import Policy
from tests.helpers import SHIPPED_POLICY, free_port


def test_the_server_ages_connections_with_a_grace_for_the_longest_check() -> None:
    options = dict(server_options())
    # Then gRPC ends every connection after the age, and lets calls on it finish
    assert options["grpc.max_connection_age_ms"] == kernel.MAX_CONNECTION_AGE_S * 1000
    grace_s = options["grpc.max_connection_age_grace_ms"] / 1000
    # within a grace no shorter than any deadline a client gives a call
    check_timeout_s = inspect.signature(SafetyClient).parameters["timeout_s"].default
    assert grace_s >= max(CONTENT_TIMEOUT_S, REDACT_TIMEOUT_S, META_TIMEOUT_S, check_timeout_s)
    # And the metadata bounds stay
    assert options["grpc.max_metadata_size"] == options["grpc.absolute_max_metadata_size"]


@contextmanager
def _server(**age: float) -> Iterator[str]:
    addr = f"127.0.0.1:{free_port()}"
    server = serve(addr, Policy(SHIPPED_POLICY), options=server_options(**age))
    try:
        yield addr
    finally:
        server.stop(grace=0)


def _states(addr: str, watch_s: float) -> list[grpc.ChannelConnectivity]:
    """A client channel's connectivity states from its first connect over `watch_s`."""
    states: list[grpc.ChannelConnectivity] = []
    channel = grpc.insecure_channel(addr)
    try:
        channel.subscribe(states.append, try_to_connect=True)
        grpc.channel_ready_future(channel).result(timeout=5)
        time.sleep(watch_s)
    finally:
        channel.close()
    return states


def test_a_connection_older_than_the_age_is_closed_by_the_server() -> None:
    with _server(max_connection_age_s=0.3, max_connection_age_grace_s=0.5) as addr:
        states = _states(addr, watch_s=2.0)
    # Then the channel, once ready, is sent away (GOAWAY) and goes idle: its next call
    # opens a new connection, which a load balancer may send to another task
    ready = states.index(grpc.ChannelConnectivity.READY)
    assert grpc.ChannelConnectivity.IDLE in states[ready:]


def test_a_connection_younger_than_the_age_stays() -> None:
    with _server() as addr:
        states = _states(addr, watch_s=1.0)
    assert states[-1] is grpc.ChannelConnectivity.READY
