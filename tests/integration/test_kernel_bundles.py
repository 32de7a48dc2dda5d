"""The safety kernel (in this process, over gRPC) putting policy bundles in force.

The bundles' document is written to the tests' own Redis database; the kernel hears
``sys.config.changed`` on the real NATS, or finds the change by its periodic read.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import grpc
import nats
import pytest
import redis

from cordum import protocol  # noqa: F401  (makes cordum.agent.v1 importable)
from cordum.config import load_settings
from cordum.safety.bundles import (
    CONFIG_CHANGED_SUBJECT,
    POLICY_DOC_KEY,
    Bundle,
    bundles_document,
    bundles_hash,
)
from cordum.safety.config_changes import ConfigChangeListener
from cordum.safety.kernel import serve
from cordum.safety.kernel_service import PolicyKernel
from cordum.safety.live_policy import BundleReload, LivePolicy, RedisPolicyDocs
from cordum.safety.policy_file import Policy, snapshot_of
from tests.conftest import NATS_URL, REDIS_URL
from tests.helpers import free_port

safety_pb2 = importlib.import_module("cordum.agent.v1.safety_pb2")
safety_pb2_grpc = importlib.import_module("cordum.agent.v1.safety_pb2_grpc")

BASE = """\
default_decision: deny
rules:
  - {id: allow-echo, match: {topics: [job.echo]}, decision: allow}
"""
DENY_ECHO = Bundle("secops/no-echo", "rules:\n  - {id: no-echo, match: {topics: [job.echo]},"
                                     " decision: deny, reason: echo is off}\n")
ASK_ECHO = Bundle("secops/ask-echo", "rules:\n  - {id: ask-echo, match: {topics: [job.echo]},"
                                     " decision: require_approval}\n")
IN_FORCE_WITHIN_S = 5.0
"""The bound the kernel promises between a change and its decisions."""

log = logging.getLogger(__name__)


def request(topic: str = "job.echo", job_id: str = "job-1"):
    return safety_pb2.PolicyCheckRequest(job_id=job_id, topic=topic, tenant="t1")


@pytest.fixture
def store() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    client.delete(POLICY_DOC_KEY)
    yield client
    client.delete(POLICY_DOC_KEY)
    client.close()


def write(store: redis.Redis, *bundles: Bundle, revision: int = 1) -> bytes:
    doc = bundles_document({b.id: b for b in bundles}, revision=revision,
                           updated_at="2026-11-27T02:00:00Z")
    data = json.dumps(doc).encode()
    store.set(POLICY_DOC_KEY, data)
    return data


def announce() -> None:
    async def publish() -> None:
        nc = await nats.connect(NATS_URL)
        await nc.publish(CONFIG_CHANGED_SUBJECT, b'{"scope":"system","scope_id":"policy"}')
        await nc.flush()
        await nc.close()

    asyncio.run(publish())


class Kernel:
    """A kernel on a free port: the file, the bundles in Redis, optionally NATS."""

    def __init__(self, tmp_path: Any, store: redis.Redis, *, interval_s: float,
                 nats_url: str | None) -> None:
        self.path = tmp_path / "safety.yaml"
        self.path.write_text(BASE)
        self.live = LivePolicy(Policy(self.path, check_interval_s=0), RedisPolicyDocs(store),
                               reload=BundleReload(interval_s=interval_s))
        self.live.start()
        self.listener: ConfigChangeListener | None = None
        if nats_url is not None:
            cfg = load_settings(env={"REDIS_URL": REDIS_URL, "NATS_URL": nats_url})
            self.listener = ConfigChangeListener(cfg, self.live.notify)
            self.listener.start()
        # A cache long enough to outlive every test: only a snapshot change empties it.
        self.service = PolicyKernel(self.live, cache_ttl_s=60)
        addr = f"127.0.0.1:{free_port()}"
        self.server = serve(addr, self.service)
        self.channel = grpc.insecure_channel(addr)
        self.stub = safety_pb2_grpc.SafetyKernelStub(self.channel)

    def close(self) -> None:
        self.channel.close()
        self.server.stop(grace=0)
        if self.listener is not None:
            self.listener.close()
        self.live.close()

    def check(self, job_id: str = "job-1") -> Any:
        return self.stub.Check(request(job_id=job_id), timeout=5)

    def snapshots(self) -> list[str]:
        return list(self.stub.ListSnapshots(safety_pb2.ListSnapshotsRequest(),
                                            timeout=5).snapshots)

    def until(self, rule_id: str, *, within_s: float = IN_FORCE_WITHIN_S) -> tuple[Any, float]:
        """The first Check answered by ``rule_id``, and how long it took to come."""
        start = time.monotonic()
        while True:
            resp = self.check(job_id=f"job-{time.monotonic_ns()}")
            elapsed = time.monotonic() - start
            if resp.rule_id == rule_id:
                return resp, elapsed
            if elapsed > within_s:
                pytest.fail(f"{rule_id} not in force after {elapsed:.1f}s "
                            f"(still {resp.rule_id}, {resp.policy_snapshot})")
            time.sleep(0.02)


@pytest.fixture
def kernel_with(tmp_path, store):
    kernels: list[Kernel] = []

    def start(*, interval_s: float = 2.0, nats_url: str | None = None) -> Kernel:
        kernel = Kernel(tmp_path, store, interval_s=interval_s, nats_url=nats_url)
        kernels.append(kernel)
        return kernel

    yield start
    for kernel in kernels:
        kernel.close()


def test_a_bundle_is_in_force_soon_after_its_change_message(kernel_with, store):
    # Given a kernel that would not read the bundles on its own for a minute
    kernel = kernel_with(interval_s=60, nats_url=NATS_URL)
    assert kernel.listener is not None and kernel.listener.subscribed.wait(5)
    base = snapshot_of(BASE.encode())
    before = kernel.check()
    again = kernel.check()
    assert (before.rule_id, before.policy_snapshot) == ("allow-echo", base)
    assert again.rule_id == "allow-echo" and kernel.service.cache is not None
    assert kernel.service.cache.hits >= 1  # the allow is served from the cache

    # When a bundle denying echo is written and announced
    write(store, DENY_ECHO)
    announce()

    # Then the deny is in force well within the bound, under the combined snapshot,
    # and the cached allow is never served again
    resp, elapsed = kernel.until("no-echo")
    log.warning("bundle in force %.3fs after its message", elapsed)
    combined = f"{base}|{bundles_hash({DENY_ECHO.id: DENY_ECHO})}"
    assert elapsed < IN_FORCE_WITHIN_S
    assert (resp.decision, resp.reason, resp.policy_snapshot) == (
        safety_pb2.DECISION_TYPE_DENY, "echo is off", combined)
    assert kernel.check().rule_id == "no-echo"
    assert kernel.snapshots() == [combined, base]


def test_without_a_message_the_periodic_read_finds_the_change(kernel_with, store):
    # Given a kernel without NATS, reading every 2 s
    kernel = kernel_with(interval_s=2.0)
    assert kernel.check().rule_id == "allow-echo"

    # When a bundle is written and nothing is announced
    write(store, DENY_ECHO)

    # Then the periodic read puts it in force within the bound
    resp, elapsed = kernel.until("no-echo")
    log.warning("bundle in force %.3fs after its write (periodic read)", elapsed)
    assert elapsed < IN_FORCE_WITHIN_S
    assert resp.policy_snapshot.endswith(bundles_hash({DENY_ECHO.id: DENY_ECHO}))


def test_the_decision_cache_never_answers_from_an_older_snapshot(kernel_with, store):
    kernel = kernel_with(interval_s=60)
    cache = kernel.service.cache
    assert cache is not None
    kernel.check()
    kernel.check()
    assert (cache.hits, len(cache)) == (1, 1)

    write(store, ASK_ECHO)
    assert kernel.live.check() is True  # what the message or the timer would do

    resp = kernel.check(job_id="job-after")
    assert (resp.rule_id, resp.approval_ref) == ("ask-echo", "job-after")
    assert cache.hits == 1  # the old allow was not served
    assert len(cache) == 1  # and is gone: only the new answer is stored


def test_rollback_restores_the_old_snapshot(kernel_with, store):
    kernel = kernel_with(interval_s=60, nats_url=NATS_URL)
    assert kernel.listener is not None and kernel.listener.subscribed.wait(5)
    first = write(store, ASK_ECHO, revision=1)
    announce()
    asked, _ = kernel.until("ask-echo")

    write(store, ASK_ECHO, DENY_ECHO, revision=2)
    announce()
    denied, _ = kernel.until("no-echo")
    assert denied.policy_snapshot != asked.policy_snapshot

    # When the earlier document is written back (a rollback)
    store.set(POLICY_DOC_KEY, first)
    announce()

    # Then the earlier snapshot, and its decisions, are in force again
    back, elapsed = kernel.until("ask-echo")
    assert back.policy_snapshot == asked.policy_snapshot
    assert kernel.snapshots()[:2] == [asked.policy_snapshot, denied.policy_snapshot]
    log.warning("rollback in force %.3fs after its message", elapsed)


def test_disabling_every_bundle_returns_to_the_base_snapshot(kernel_with, store):
    kernel = kernel_with(interval_s=60)
    write(store, DENY_ECHO)
    kernel.live.check()
    assert kernel.check().rule_id == "no-echo"

    write(store, Bundle(DENY_ECHO.id, DENY_ECHO.content, enabled=False), revision=2)
    kernel.live.check()

    resp = kernel.check(job_id="job-2")
    assert (resp.rule_id, resp.policy_snapshot) == ("allow-echo", snapshot_of(BASE.encode()))


def test_a_base_file_change_keeps_the_bundles(kernel_with, store):
    kernel = kernel_with(interval_s=60)
    write(store, DENY_ECHO)
    kernel.live.check()
    new_base = BASE + "  - {id: allow-other, match: {topics: [job.other]}, decision: allow}\n"

    kernel.path.write_text(new_base)
    st = kernel.path.stat()
    os.utime(kernel.path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))

    resp = kernel.check(job_id="job-2")
    assert resp.rule_id == "no-echo"
    assert resp.policy_snapshot == (f"{snapshot_of(new_base.encode())}|"
                                    f"{bundles_hash({DENY_ECHO.id: DENY_ECHO})}")


class Switchable:
    """The real store, or an unreachable one (a Redis on a port nobody listens on)."""

    def __init__(self, store: redis.Redis) -> None:
        self.up = RedisPolicyDocs(store)
        self.down = RedisPolicyDocs(redis.Redis(host="127.0.0.1", port=free_port(),
                                                socket_connect_timeout=0.2))
        self.reachable = True

    def read(self) -> bytes | None:
        return (self.up if self.reachable else self.down).read()


def test_redis_out_of_reach_keeps_the_last_good_policy(tmp_path, store, caplog):
    path = tmp_path / "safety.yaml"
    path.write_text(BASE)
    docs = Switchable(store)
    write(store, DENY_ECHO)
    live = LivePolicy(Policy(path, check_interval_s=0), docs)
    in_force = live.snapshot
    assert in_force.endswith(bundles_hash({DENY_ECHO.id: DENY_ECHO}))

    docs.reachable = False
    with caplog.at_level(logging.INFO, logger="cordum.safety.kernel"):
        changed = [live.check() for _ in range(3)]
        assert changed == [False, False, False]
        assert live.snapshot == in_force  # the bundles stay in force
        assert caplog.text.count("policy bundles unreadable") == 1  # once per outage

        docs.reachable = True
        write(store, ASK_ECHO, revision=2)
        assert live.check() is True
    assert "policy bundles readable again" in caplog.text
    assert live.refresh().snapshot.endswith(bundles_hash({ASK_ECHO.id: ASK_ECHO}))


def test_a_document_that_is_not_json_keeps_the_last_good_bundles(tmp_path, store, caplog):
    path = tmp_path / "safety.yaml"
    path.write_text(BASE)
    write(store, DENY_ECHO)
    live = LivePolicy(Policy(path, check_interval_s=0), RedisPolicyDocs(store))
    in_force = live.snapshot

    store.set(POLICY_DOC_KEY, b"{not json")
    assert (live.check(), live.check()) == (False, False)

    assert live.snapshot == in_force
    assert caplog.text.count("is not JSON") == 1


def test_nats_out_of_reach_leaves_the_periodic_read(tmp_path, store, caplog):
    kernel_path = tmp_path / "safety.yaml"
    kernel_path.write_text(BASE)
    live = LivePolicy(Policy(kernel_path, check_interval_s=0), RedisPolicyDocs(store),
                      reload=BundleReload(interval_s=0.5))
    live.start()
    cfg = load_settings(env={"REDIS_URL": REDIS_URL,
                             "NATS_URL": f"nats://127.0.0.1:{free_port()}"})
    listener = ConfigChangeListener(cfg, live.notify)
    try:
        with caplog.at_level(logging.INFO, logger="cordum.safety.kernel"):
            started = time.monotonic()
            listener.start()  # does not wait for NATS
            assert time.monotonic() - started < 5
            write(store, DENY_ECHO)
            deadline = time.monotonic() + IN_FORCE_WITHIN_S
            while "no-echo" not in {r.id for r in live.refresh().document.rules}:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            time.sleep(2.5)  # several failed attempts
        assert caplog.text.count("NATS unreachable") == 1
    finally:
        listener.close()
        live.close()
