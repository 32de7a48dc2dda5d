"""Velocity windows shared by kernel replicas through the real Redis."""

from __future__ import annotations

import importlib
import logging
import time
from dataclasses import replace

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from cordum import protocol  # noqa: F401  (makes cordum.agent.v1 importable)
from cordum.config import ConfigError
from cordum.redis_acl import KERNEL, setuser_args
from cordum.safety.kernel_service import PolicyKernel
from cordum.safety.policy_file import Policy
from cordum.safety.velocity import (
    VELOCITY_KEY_PREFIX,
    RedisVelocityCounter,
    VelocityCounter,
    velocity_from_env,
)
from tests.conftest import ACL_REDIS_URL, REDIS_URL

safety_pb2 = importlib.import_module("cordum.agent.v1.safety_pb2")

POLICY = """\
default_decision: deny
rules:
  - id: busy
    match: {topics: [job.busy]}
    velocity: {max_requests: 2, window_seconds: 60, key: tenant}
    decision: throttle
    reason: slow down
  - id: quick
    match: {topics: [job.quick]}
    velocity: {max_requests: 1, window_seconds: 0.3, key: tenant}
    decision: throttle
  - {id: allow, match: {topics: ['job.*']}, decision: allow}
"""
THROTTLE = safety_pb2.DECISION_TYPE_THROTTLE
ALLOW = safety_pb2.DECISION_TYPE_ALLOW


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def shared(tmp_path, unique):
    """Two kernels (replicas) on one policy file, each with its own Redis client."""
    path = tmp_path / "safety.yaml"
    path.write_text(POLICY)
    prefix = f"test:{unique}:{VELOCITY_KEY_PREFIX}"
    clients = [redis.Redis.from_url(REDIS_URL) for _ in range(2)]
    kernels = [PolicyKernel(Policy(path, check_interval_s=0), cache_ttl_s=0,
                            velocity=RedisVelocityCounter(c, key_prefix=prefix))
               for c in clients]
    yield kernels, clients[0], prefix
    for key in clients[0].scan_iter(match=prefix + "*"):
        clients[0].delete(key)
    for c in clients:
        c.close()


def check(kernel: PolicyKernel, topic: str, job_id: str, tenant: str = "t1"):
    return kernel.decide(safety_pb2.PolicyCheckRequest(job_id=job_id, topic=topic,
                                                       tenant=tenant))


def test_two_replicas_share_one_window(shared):
    (a, b), r, prefix = shared

    # Given two requests counted on replica a and one on replica b
    first = check(a, "job.busy", "j1")
    second = check(b, "job.busy", "j2")
    third = check(a, "job.busy", "j3")
    # And a request of another tenant on b
    other = check(b, "job.busy", "j4", tenant="t2")

    # Then the third, wherever it lands, is over the limit of 2
    assert [first.decision, second.decision] == [ALLOW, ALLOW]
    assert (third.decision, third.rule_id, third.reason) == (THROTTLE, "busy", "slow down")
    assert other.decision == ALLOW
    # And the window is one sorted set in Redis holding the job ids
    members = r.zrange(prefix + "busy:t1", 0, -1)
    assert sorted(members) == [b"j1", b"j2", b"j3"]
    assert 0 < r.pttl(prefix + "busy:t1") <= 60_000


def test_a_job_checked_on_both_replicas_counts_once(shared):
    (a, b), _, _ = shared
    answers = [check(k, "job.busy", "same-job").decision for k in (a, b, a, b)]
    assert answers == [ALLOW] * 4
    assert check(b, "job.busy", "next").decision == ALLOW
    assert check(a, "job.busy", "third").decision == THROTTLE


def test_simulate_looks_at_the_shared_window_without_counting(shared):
    (a, b), r, prefix = shared
    check(a, "job.busy", "j1")
    check(a, "job.busy", "j2")
    request = safety_pb2.PolicyCheckRequest(job_id="j3", topic="job.busy", tenant="t1")

    # Two counted on a: a simulation on b is still within the limit (2/2)...
    simulated = b.Simulate(request, _NoMetadata())
    assert simulated.decision == ALLOW
    assert r.zcard(prefix + "busy:t1") == 2
    # ...and Explain on b says how full the shared window is
    explained = b.Explain(request, _NoMetadata())
    assert "busy: velocity 2/2 in 60s for tenant='t1', within limit" in explained.reason


def test_the_shared_window_slides(shared):
    (a, b), _, _ = shared
    assert check(a, "job.quick", "q1").decision == ALLOW
    assert check(b, "job.quick", "q2").decision == THROTTLE
    time.sleep(0.4)  # longer than the 0.3 s window: both requests have left it
    assert check(b, "job.quick", "q3").decision == ALLOW


def test_long_key_values_are_hashed(unique):
    r = redis.Redis.from_url(REDIS_URL)
    counter = RedisVelocityCounter(r, key_prefix=f"test:{unique}:")
    try:
        key = counter.key("rule", "x" * 500)
        assert key.startswith(f"test:{unique}:rule:sha256:") and len(key) < 120
        assert counter.record("rule", "x" * 500, "m1", 10) == 1
        assert counter.record("rule", "x" * 500, "m2", 10) == 2
        assert counter.peek("rule", "x" * 500, 10) == 2
        assert r.zcard(key) == 2
    finally:
        r.delete(counter.key("rule", "x" * 500))
        r.close()


class _NoMetadata:
    """The part of a gRPC servicer context the kernel reads, for direct calls."""

    def invocation_metadata(self):
        return ()


class FlakyRedis:
    """The real Redis, whose script calls fail while ``down`` is set."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.down = True

    def register_script(self, text: str):
        script = self.client.register_script(text)

        def run(**kw):
            if self.down:
                raise redis.ConnectionError("connection refused")
            return script(**kw)

        return run


def test_redis_down_falls_back_to_this_process_and_comes_back(unique, caplog):
    # Given a counter whose Redis is down
    r = redis.Redis.from_url(REDIS_URL)
    flaky = FlakyRedis(r)
    clock = Clock()
    prefix = f"test:{unique}:"
    counter = RedisVelocityCounter(flaky, key_prefix=prefix, retry_interval_s=1.0, clock=clock)
    try:
        # When requests are counted, then the in-process windows count them, with a warning
        with caplog.at_level(logging.WARNING, logger="cordum.safety.velocity"):
            counts = [counter.record("r", "t1", f"j{i}", 60) for i in range(3)]
        assert counts == [1, 2, 3]
        assert counter.degraded
        warnings = [rec for rec in caplog.records if "redis unavailable" in rec.getMessage()]
        assert len(warnings) == 1
        assert counter.peek("r", "t1", 60) == 3

        # When Redis is back but the retry interval has not passed, the fallback still counts
        flaky.down = False
        assert counter.record("r", "t1", "j3", 60) == 4
        assert r.exists(prefix + "r:t1") == 0

        # After it, Redis counts again
        clock.now += 1.5
        assert counter.record("r", "t1", "j4", 60) == 1
        assert not counter.degraded
        assert r.zcard(prefix + "r:t1") == 1
    finally:
        r.delete(prefix + "r:t1")
        r.close()


def test_an_unreachable_redis_never_fails_a_check(tmp_path):
    # Given a kernel whose Redis refuses connections
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2,
                       retry=Retry(NoBackoff(), 0))
    path = tmp_path / "safety.yaml"
    path.write_text(POLICY)
    velocity = RedisVelocityCounter(dead)
    kernel = PolicyKernel(Policy(path), cache_ttl_s=0, velocity=velocity)
    try:
        answers = [check(kernel, "job.busy", f"j{i}").decision for i in range(3)]
    finally:
        dead.close()
    # Then its limits hold per process
    assert answers == [ALLOW, ALLOW, THROTTLE]
    assert velocity.degraded


def test_velocity_from_env():
    assert isinstance(velocity_from_env({}), VelocityCounter)
    shared = velocity_from_env({"REDIS_URL": REDIS_URL})
    assert isinstance(shared, RedisVelocityCounter)
    assert shared.key_prefix == "cordum:safety:velocity:"
    with pytest.raises(ConfigError, match="REDIS_URL"):
        velocity_from_env({"REDIS_URL": "http://localhost:6379"})


def test_velocity_from_env_logs_in_as_the_kernels_user(unique):
    # Given the kernel's ACL user (cordum.redis_acl.KERNEL's rules) under a name of
    # this test's own, as ElastiCache and the local stack create it (on db 0: the user
    # may not SELECT another)
    admin = redis.Redis.from_url(ACL_REDIS_URL)
    name, password = f"test-kernel-{unique}", f"pw-{unique}-0123456789"
    admin.execute_command("ACL", "SETUSER", *setuser_args(replace(KERNEL, name=name), password))
    try:
        env = {"REDIS_URL": ACL_REDIS_URL, "REDIS_USERNAME": name, "REDIS_AUTH_TOKEN": password}
        # When the kernel counts with REDIS_USERNAME and REDIS_AUTH_TOKEN (its ECS task's)
        shared = velocity_from_env(env)
        assert isinstance(shared, RedisVelocityCounter)
        counts = [shared.record(f"rule-{unique}", "tenant-a", f"j{i}", 60.0) for i in range(2)]
        # Then the windows are counted in Redis, as that user, not in the process
        assert counts == [1, 2]
        assert not shared.degraded
        assert admin.keys(f"{VELOCITY_KEY_PREFIX}*{unique}*")
        # And Redis saw that user connect (not the default user with a password)
        assert f"user={name} " in admin.execute_command("CLIENT", "LIST").decode()
        # And a wrong password for it is refused: the in-process windows count instead
        refused = velocity_from_env({**env, "REDIS_AUTH_TOKEN": "wrong-password-0123456"})
        refused.record(f"rule-{unique}", "tenant-a", "j9", 60.0)
        assert refused.degraded
    finally:
        admin.execute_command("ACL", "DELUSER", name)
        for key in admin.scan_iter(f"{VELOCITY_KEY_PREFIX}*{unique}*"):
            admin.delete(key)
        admin.close()
