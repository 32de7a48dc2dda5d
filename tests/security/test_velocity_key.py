"""A velocity rule keyed on a request field limits requests that leave the field out.

Leaving ``actor_id`` (or a label) out of a request must not step around a rate limit
keyed on it: such requests share one window instead of skipping the rule.
"""

from __future__ import annotations

import importlib
import uuid

import pytest
import redis

from cordum import protocol  # noqa: F401  (makes cordum.agent.v1 importable)
from cordum.safety.kernel_service import PolicyKernel
from cordum.safety.matching import PolicyInput
from cordum.safety.policy_document import DecisionKind
from cordum.safety.policy_file import Policy, parse_policy
from cordum.safety.velocity import VELOCITY_KEY_PREFIX, RedisVelocityCounter, VelocityCounter
from tests.conftest import REDIS_URL

safety_pb2 = importlib.import_module("cordum.agent.v1.safety_pb2")
THROTTLE = safety_pb2.DECISION_TYPE_THROTTLE
ALLOW = safety_pb2.DECISION_TYPE_ALLOW


def throttle_on(key: str) -> str:
    return ("default_decision: allow\nrules:\n  - id: per-actor\n"
            "    match: {topics: ['job.*']}\n"
            f"    velocity: {{max_requests: 2, window_seconds: 60, key: '{key}'}}\n"
            "    decision: throttle\n    reason: slow down\n")


@pytest.mark.parametrize(("key", "given"), [
    ("actor_id", {}),
    ("tenant:actor_id", {"tenant": "t1"}),
    ("labels.session", {"labels": {"other": "x"}}),
    ("pack_id:capability", {"pack_id": "p"}),
])
def test_requests_without_the_key_part_share_one_window(key, given):
    policy = parse_policy(throttle_on(key).encode(), "test.yaml")
    counter = VelocityCounter()
    seen = [policy.evaluate(PolicyInput(topic="job.x", job_id=f"j{i}", **given),
                            velocity=counter).decision for i in range(3)]
    assert seen == [DecisionKind.ALLOW, DecisionKind.ALLOW, DecisionKind.THROTTLE]


def test_kernel_throttles_requests_without_actor_id(tmp_path):
    path = tmp_path / "safety.yaml"
    path.write_text(throttle_on("actor_id"))
    prefix = f"test:{uuid.uuid4().hex}:{VELOCITY_KEY_PREFIX}"
    client = redis.Redis.from_url(REDIS_URL)
    kernel = PolicyKernel(Policy(path, check_interval_s=0), cache_ttl_s=0,
                          velocity=RedisVelocityCounter(client, key_prefix=prefix))
    try:
        answers = [kernel.decide(safety_pb2.PolicyCheckRequest(
            job_id=f"j{i}", topic="job.x", tenant="t1")).decision for i in range(3)]
        assert answers == [ALLOW, ALLOW, THROTTLE]
        # A request that names its actor still has a window of its own.
        named = kernel.decide(safety_pb2.PolicyCheckRequest(
            job_id="n1", topic="job.x", tenant="t1",
            meta={"actor_id": "alice"}))
        assert named.decision == ALLOW
    finally:
        for k in client.scan_iter(match=prefix + "*"):
            client.delete(k)
        client.close()
