"""The SafetyKernel client against the real kernel, behind the Redis circuit breaker."""

from __future__ import annotations

import asyncio
import importlib
from pathlib import Path

import grpc
import pytest
import redis.asyncio as aioredis

from cordum import protocol
from cordum.config import ConfigError
from cordum.safety.breaker import BreakerPolicy, CircuitBreaker, CircuitState
from cordum.safety.client import (
    CIRCUIT_OPEN_REASON,
    MAX_INPUT_CONTENT_BYTES,
    Decision,
    SafetyClient,
    check_request,
    decision_from_proto,
    redis_payload_reader,
    verdict_from_response,
)
from cordum.safety.failmode import FailMode, input_fail_mode
from cordum.safety.kernel import DEFAULT_TOPIC_RULE, serve
from cordum.safety.kernel_call import CHANNEL_OPTIONS
from cordum.safety.policy_file import Policy
from tests.conftest import REDIS_URL
from tests.helpers import free_port, serving_kernel

# Generated CAP modules resolve only once cordum.protocol has been imported.
safety_pb2 = importlib.import_module("cordum.agent.v1.safety_pb2")

CONFIG = Path(__file__).resolve().parents[2] / "config"
OPEN_S = 0.3


class CountingInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    """Counts the RPCs the client starts."""

    def __init__(self) -> None:
        self.calls = 0

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        self.calls += 1
        return await continuation(client_call_details, request)


@pytest.fixture
def harness(aloop, unique):
    addr = f"127.0.0.1:{free_port()}"
    policy = Policy(CONFIG / "safety.yaml")
    redis = aioredis.Redis.from_url(REDIS_URL)
    breaker = CircuitBreaker(redis, key_prefix=f"test:{unique}:",
                             policy=BreakerPolicy(open_duration_s=OPEN_S, op_timeout_s=1.0))
    counter = CountingInterceptor()
    client = SafetyClient(addr, 1.0, breaker=breaker, channel_factory=lambda a: (
        grpc.aio.insecure_channel(a, options=CHANNEL_OPTIONS, interceptors=[counter])))
    servers = [serve(addr, policy)]
    yield aloop, client, breaker, counter, servers, addr, policy
    for server in servers:
        server.stop(grace=0)
    aloop.run_until_complete(client.aclose())
    aloop.run_until_complete(redis.delete(breaker.key))
    aloop.run_until_complete(redis.aclose())


def job(unique: str = "x") -> protocol.JobRequest:
    return protocol.JobRequest(job_id=f"job-{unique}", topic="job.default", tenant_id="t1")


def test_allow_passes_through_with_rule_and_snapshot(harness):
    loop, client, breaker, counter, _, _, policy = harness

    verdict = loop.run_until_complete(client.check(job(), "t1"))
    state = loop.run_until_complete(breaker.state())

    assert verdict.decision is Decision.ALLOW
    assert verdict.rule_id == DEFAULT_TOPIC_RULE
    assert verdict.policy_snapshot == policy.snapshot
    assert verdict.constraints is None and verdict.approval_required is False
    assert counter.calls == 1
    assert state.state is CircuitState.CLOSED and state.failures == 0


def test_kernel_down_opens_the_circuit_and_a_restart_recovers(harness):
    loop, client, breaker, counter, servers, addr, policy = harness
    assert loop.run_until_complete(client.check(job(), "t1")).decision is Decision.ALLOW

    # Given the kernel stops
    servers.pop().stop(grace=0).wait()
    # When three checks fail
    failed = [loop.run_until_complete(client.check(job(), "t1")) for _ in range(3)]
    calls_before = counter.calls
    # Then the fourth is answered by the open circuit, without an RPC
    fourth = loop.run_until_complete(client.check(job(), "t1"))
    assert all(v.decision is Decision.UNAVAILABLE for v in failed)
    assert all(v.reason.startswith("safety kernel error: UNAVAILABLE") for v in failed), failed
    assert fourth.decision is Decision.UNAVAILABLE and fourth.reason == CIRCUIT_OPEN_REASON
    assert counter.calls == calls_before
    assert loop.run_until_complete(breaker.state()).state is CircuitState.OPEN

    # Given the kernel is back on the same port and the open window has passed
    servers.append(serve(addr, policy))
    # The open window runs on the Redis clock: only waiting moves it on.
    loop.run_until_complete(asyncio.sleep(OPEN_S + 0.05))
    # When two probe checks succeed, then the circuit is closed again
    first = loop.run_until_complete(client.check(job(), "t1"))
    half_open = loop.run_until_complete(breaker.state())
    second = loop.run_until_complete(client.check(job(), "t1"))
    closed = loop.run_until_complete(breaker.state())
    assert first.decision is second.decision is Decision.ALLOW, (first, second)
    assert half_open.state is CircuitState.HALF_OPEN
    assert (closed.state, closed.failures) == (CircuitState.CLOSED, 0)


def test_unreachable_kernel_fails_fast_within_the_deadline(aloop):
    client = SafetyClient(f"127.0.0.1:{free_port()}", 0.5)
    try:
        verdict = aloop.run_until_complete(asyncio.wait_for(client.check(job(), "t"), 1.0))
    finally:
        aloop.run_until_complete(client.aclose())
    assert verdict.decision is Decision.UNAVAILABLE
    assert verdict.reason.startswith("safety kernel error:")


def test_decision_mapping_unknown_means_deny():
    assert decision_from_proto(safety_pb2.DECISION_TYPE_UNSPECIFIED) is Decision.DENY
    assert decision_from_proto(99) is Decision.DENY
    assert decision_from_proto(safety_pb2.DECISION_TYPE_ALLOW) is Decision.ALLOW
    assert decision_from_proto(safety_pb2.DECISION_TYPE_DENY) is Decision.DENY
    assert decision_from_proto(safety_pb2.DECISION_TYPE_REQUIRE_HUMAN) is \
        Decision.REQUIRE_APPROVAL
    assert decision_from_proto(safety_pb2.DECISION_TYPE_THROTTLE) is Decision.THROTTLE
    assert decision_from_proto(safety_pb2.DECISION_TYPE_ALLOW_WITH_CONSTRAINTS) is \
        Decision.ALLOW_WITH_CONSTRAINTS


def test_verdict_carries_constraints_approval_and_remediations():
    resp = safety_pb2.PolicyCheckResponse(
        decision=safety_pb2.DECISION_TYPE_ALLOW_WITH_CONSTRAINTS, reason="r", rule_id="rule-1",
        policy_snapshot="snap|1", approval_required=True, approval_ref="ap-1",
        constraints=safety_pb2.PolicyConstraints(
            budgets=safety_pb2.BudgetConstraints(max_runtime_ms=500, max_retries=2),
            redaction_level="high"),
        remediations=[safety_pb2.PolicyRemediation(id="fix-1", replacement_topic="job.safe")])

    verdict = verdict_from_response(resp)

    assert verdict.decision is Decision.ALLOW_WITH_CONSTRAINTS
    assert (verdict.reason, verdict.rule_id, verdict.policy_snapshot) == ("r", "rule-1", "snap|1")
    assert verdict.constraints.budgets.max_runtime_ms == 500
    assert verdict.constraints.redaction_level == "high"
    assert verdict.approval_required is True and verdict.approval_ref == "ap-1"
    assert [r.id for r in verdict.remediations] == ["fix-1"]


def test_check_request_is_built_from_the_job():
    req = protocol.JobRequest(
        job_id="j1", topic="job.default", tenant_id="ignored-here", priority=2,
        principal_id="p1", memory_id="m1", labels={"k": "v"},
        env={"CORDUM_EFFECTIVE_CONFIG": '{"a":1}', "other": "x"},
        budget=protocol.job_pb2.Budget(deadline_ms=1000),
        meta=protocol.job_pb2.JobMetadata(capability="cap", risk_tags=["net"]))

    out = check_request(req, "tenant-a")

    assert (out.job_id, out.topic, out.tenant, out.priority) == ("j1", "job.default",
                                                                 "tenant-a", 2)
    assert (out.principal_id, out.memory_id, dict(out.labels)) == ("p1", "m1", {"k": "v"})
    assert out.effective_config == b'{"a":1}'
    assert out.budget.deadline_ms == 1000
    assert out.meta.capability == "cap" and list(out.meta.risk_tags) == ["net"]
    bare = check_request(protocol.JobRequest(job_id="j2", topic="job.default"), "t")
    assert not bare.HasField("budget") and not bare.HasField("meta")
    assert bare.effective_config == b""


def test_input_fail_mode_env_wins_over_safety_yaml(tmp_path):
    (tmp_path / "safety.yaml").write_text("input_policy: {fail_mode: open}\n")
    assert input_fail_mode({}, tmp_path) is FailMode.OPEN
    assert input_fail_mode({"POLICY_CHECK_FAIL_MODE": "closed"}, tmp_path) is FailMode.CLOSED
    assert input_fail_mode({"POLICY_CHECK_FAIL_MODE": " OPEN "}, CONFIG) is FailMode.OPEN
    assert input_fail_mode({}, CONFIG) is FailMode.CLOSED
    assert input_fail_mode({}, tmp_path / "missing") is FailMode.CLOSED
    (tmp_path / "safety.yaml").write_text("default_decision: deny\n")
    assert input_fail_mode({}, tmp_path) is FailMode.CLOSED
    with pytest.raises(ConfigError, match="POLICY_CHECK_FAIL_MODE"):
        input_fail_mode({"POLICY_CHECK_FAIL_MODE": "opne"}, tmp_path)
    (tmp_path / "safety.yaml").write_text("input_policy: {fail_mode: sometimes}\n")
    with pytest.raises(ConfigError, match="input_policy.fail_mode"):
        input_fail_mode({}, tmp_path)


# -- the payload, for risk tags derived by the kernel --------------------------------

DERIVING = """\
default_decision: deny
risk_tag_derivers:
  - topics: [job.bank.transfer]
    amount_thresholds: [{below: 1000, tag: standard}, {tag: high_value}]
rules:
  - {id: big, match: {risk_tags: [high_value]}, decision: require_approval}
  - {id: small, match: {risk_tags: [standard]}, decision: allow}
"""


@pytest.fixture
def deriving_kernel(tmp_path):
    path = tmp_path / "safety.yaml"
    path.write_text(DERIVING)
    with serving_kernel(path) as addr:
        yield addr


def transfer(unique: str, **labels: str) -> protocol.JobRequest:
    return protocol.JobRequest(
        job_id=f"job-{unique}", topic="job.bank.transfer", tenant_id="t1",
        context_ptr=protocol.pointer(protocol.context_key(f"job-{unique}")), labels=labels,
        meta=protocol.job_pb2.JobMetadata(risk_tags=["standard"]))


def test_the_kernel_derives_risk_tags_from_the_payload_read_by_the_client(aloop, unique,
                                                                         deriving_kernel):
    redis = aioredis.Redis.from_url(REDIS_URL)
    client = SafetyClient(deriving_kernel, 2.0, payload_reader=redis_payload_reader(redis))
    small, big = transfer(f"{unique}-s"), transfer(f"{unique}-b")
    # A client-made label claiming a small amount is not passed on
    spoofed = transfer(f"{unique}-x", **{"_content.payload_json": '{"amount": 1}'})
    keys = [protocol.context_key(j.job_id) for j in (small, big, spoofed)]

    async def scenario():
        await redis.set(keys[0], b'{"amount": 999}')
        await redis.set(keys[1], b'{"amount": 1000}')
        await redis.set(keys[2], b'{"amount": 5000}')
        return [await client.check(j, "t1") for j in (small, big, spoofed)]

    try:
        verdicts = aloop.run_until_complete(scenario())
    finally:
        aloop.run_until_complete(redis.delete(*keys))
        aloop.run_until_complete(client.aclose())
        aloop.run_until_complete(redis.aclose())
    assert [(v.decision, v.rule_id) for v in verdicts] == [
        (Decision.ALLOW, "small"), (Decision.REQUIRE_APPROVAL, "big"),
        (Decision.REQUIRE_APPROVAL, "big")]


def test_without_a_payload_the_derived_tag_is_the_highest(aloop, unique, deriving_kernel):
    async def failing_reader(ptr: str) -> bytes | None:
        raise ConnectionError("store down")

    breaker = CircuitBreaker(None, policy=BreakerPolicy(fail_threshold=1))
    no_reader = SafetyClient(deriving_kernel, 2.0)
    broken = SafetyClient(deriving_kernel, 2.0, payload_reader=failing_reader, breaker=breaker)
    try:
        verdicts = [aloop.run_until_complete(c.check(transfer(unique), "t1"))
                    for c in (no_reader, broken)]
        state = aloop.run_until_complete(breaker.state())
    finally:
        for c in (no_reader, broken):
            aloop.run_until_complete(c.aclose())
    assert [(v.decision, v.rule_id) for v in verdicts] == [
        (Decision.REQUIRE_APPROVAL, "big")] * 2
    # The store's failure is not the kernel's: a one-failure breaker stays closed
    assert (state.state, state.failures) == (CircuitState.CLOSED, 0)


def test_check_request_sends_the_payload_as_cordum_does():
    req = protocol.JobRequest(job_id="j1", topic="job.x",
                              labels={"content_type": "application/json",
                                      "_content.payload_json": "forged", "_content.x": "y",
                                      "k": "v"})

    bare = check_request(req, "t")
    small = check_request(req, "t", payload=b'{"amount": 3}')
    large = check_request(req, "t", payload=b"x" * (64 * 1024 + 1))
    huge = check_request(req, "t", payload=b"y" * (MAX_INPUT_CONTENT_BYTES + 10))
    binary = check_request(req, "t", payload=b"\xff\xfe")

    assert dict(bare.labels) == {"content_type": "application/json", "k": "v"}
    assert bare.input_content == b"" and bare.input_size_bytes == 0
    assert small.input_content == b'{"amount": 3}' and small.input_size_bytes == 13
    assert small.input_content_type == "application/json"
    assert small.labels["_content.payload_json"] == '{"amount": 3}'
    assert "_content.payload_json" not in large.labels
    assert len(large.input_content) == 64 * 1024 + 1
    assert len(huge.input_content) == MAX_INPUT_CONTENT_BYTES
    assert huge.input_size_bytes == MAX_INPUT_CONTENT_BYTES + 10
    assert "_content.payload_json" not in binary.labels and binary.input_content == b"\xff\xfe"
