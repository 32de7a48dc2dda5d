"""The SafetyKernel client against the real kernel, behind the Redis circuit breaker."""

from __future__ import annotations

import asyncio
import importlib
import socket
from pathlib import Path

import grpc
import pytest
import redis.asyncio as aioredis

from cordum import protocol
from cordum.config import ConfigError
from cordum.safety.breaker import BreakerPolicy, CircuitBreaker, CircuitState
from cordum.safety.client import (
    CIRCUIT_OPEN_REASON,
    Decision,
    SafetyClient,
    check_request,
    decision_from_proto,
    verdict_from_response,
)
from cordum.safety.failmode import FailMode, input_fail_mode
from cordum.safety.kernel import ALLOW_ALL_RULE, Policy, serve
from tests.conftest import REDIS_URL

# Generated CAP modules resolve only once cordum.protocol has been imported.
safety_pb2 = importlib.import_module("cordum.agent.v1.safety_pb2")

CONFIG = Path(__file__).resolve().parents[2] / "config"
OPEN_S = 0.3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        grpc.aio.insecure_channel(a, interceptors=[counter])))
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
    assert verdict.rule_id == ALLOW_ALL_RULE
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
    loop.run_until_complete(asyncio.sleep(OPEN_S + 0.05))
    # When two probe checks succeed, then the circuit is closed again
    first = loop.run_until_complete(client.check(job(), "t1"))
    half_open = loop.run_until_complete(breaker.state())
    second = loop.run_until_complete(client.check(job(), "t1"))
    closed = loop.run_until_complete(breaker.state())
    assert first.decision is second.decision is Decision.ALLOW
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
