"""The SafetyKernel gRPC server on a free port, answering from a policy file."""

from __future__ import annotations

import importlib
import os
import socket
import time
from pathlib import Path

import grpc
import pytest

from cordum import protocol  # noqa: F401  (makes cordum.agent.v1 importable)
from cordum.safety.kernel import Policy, PolicyKernel, serve

job_pb2 = importlib.import_module("cordum.agent.v1.job_pb2")
safety_pb2 = importlib.import_module("cordum.agent.v1.safety_pb2")
safety_pb2_grpc = importlib.import_module("cordum.agent.v1.safety_pb2_grpc")

POLICY = """\
default_decision: deny
rules:
  - id: deny-danger
    match: {topics: [job.danger]}
    decision: deny
    reason: too dangerous
    remediations: [{id: safer, replacement_topic: job.safe}]
  - id: needs-approval
    match: {topics: [job.review]}
    decision: require_approval
    reason: a human must look
  - id: rate-limited
    match: {topics: [job.busy]}
    velocity: {max_requests: 1, window_seconds: 60, key: tenant}
    decision: throttle
    reason: slow down
  - id: sandboxed
    match: {topics: [job.sandboxed]}
    decision: allow_with_constraints
    constraints:
      budgets: {max_runtime_ms: 1000, max_retries: 1}
      sandbox: {isolated: true}
      redaction_level: strict
  - id: allow-rest
    match: {topics: [job.ok, job.busy]}
    decision: allow
"""
CACHED_POLICY = """\
default_decision: deny
rules:
  - {id: allow-ok, match: {topics: [job.ok]}, decision: allow}
  - {id: review, match: {topics: [job.review]}, decision: require_approval}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bump(path: Path, text: str) -> None:
    """Rewrite the file and move its mtime on, so coarse clocks still see a change."""
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))


@pytest.fixture
def kernel_for(tmp_path):
    servers = []
    channels = []

    def start(text: str = POLICY, **kwargs):
        path = tmp_path / "safety.yaml"
        path.write_text(text)
        kernel = PolicyKernel(Policy(path, check_interval_s=0), **kwargs)
        addr = f"127.0.0.1:{free_port()}"
        servers.append(serve(addr, kernel))
        channel = grpc.insecure_channel(addr)
        channels.append(channel)
        return safety_pb2_grpc.SafetyKernelStub(channel), kernel, path

    yield start
    for channel in channels:
        channel.close()
    for server in servers:
        server.stop(grace=0)


def request(topic: str, job_id: str = "job-1", tenant: str = "t1", **kw):
    return safety_pb2.PolicyCheckRequest(job_id=job_id, topic=topic, tenant=tenant, **kw)


def test_check_answers_each_decision(kernel_for):
    stub, kernel, _ = kernel_for(cache_ttl_s=0)

    allow = stub.Check(request("job.ok"), timeout=5)
    deny = stub.Check(request("job.danger"), timeout=5)
    approval = stub.Check(request("job.review", job_id="job-r"), timeout=5)
    fallthrough = stub.Check(request("job.unknown"), timeout=5)

    assert (allow.decision, allow.rule_id) == (safety_pb2.DECISION_TYPE_ALLOW, "allow-rest")
    assert allow.policy_snapshot == kernel.policy.snapshot
    assert (deny.decision, deny.reason, deny.rule_id) == (
        safety_pb2.DECISION_TYPE_DENY, "too dangerous", "deny-danger")
    assert [r.replacement_topic for r in deny.remediations] == ["job.safe"]
    assert approval.decision == safety_pb2.DECISION_TYPE_REQUIRE_HUMAN
    assert approval.approval_required and approval.approval_ref == "job-r"
    assert (fallthrough.decision, fallthrough.rule_id) == (safety_pb2.DECISION_TYPE_DENY,
                                                           "default")


def test_check_throttles_above_the_velocity_limit(kernel_for):
    stub, _, _ = kernel_for(cache_ttl_s=0)

    first = stub.Check(request("job.busy", job_id="b1"), timeout=5)
    second = stub.Check(request("job.busy", job_id="b2"), timeout=5)
    other_tenant = stub.Check(request("job.busy", job_id="b3", tenant="t2"), timeout=5)

    assert first.decision == safety_pb2.DECISION_TYPE_ALLOW
    assert (second.decision, second.rule_id, second.reason) == (
        safety_pb2.DECISION_TYPE_THROTTLE, "rate-limited", "slow down")
    assert other_tenant.decision == safety_pb2.DECISION_TYPE_ALLOW


def test_check_carries_constraints(kernel_for):
    stub, _, _ = kernel_for(cache_ttl_s=0)

    resp = stub.Evaluate(request("job.sandboxed"), timeout=5)

    assert resp.decision == safety_pb2.DECISION_TYPE_ALLOW_WITH_CONSTRAINTS
    c = resp.constraints
    assert (c.budgets.max_runtime_ms, c.budgets.max_retries) == (1000, 1)
    assert c.sandbox.isolated and c.redaction_level == "strict"


def test_meta_fields_reach_the_policy(kernel_for):
    stub, _, _ = kernel_for(
        "rules:\n  - {id: human-writes, match: {actor_types: [human], capabilities: [write],"
        " tenants: [acme]}, decision: require_approval}\n", cache_ttl_s=0)
    meta = job_pb2.JobMetadata(tenant_id="acme", actor_type=job_pb2.ACTOR_TYPE_HUMAN,
                               capability="write")

    resp = stub.Check(request("job.x", tenant="", meta=meta), timeout=5)

    assert resp.rule_id == "human-writes"


def test_simulate_does_not_count_velocity(kernel_for):
    stub, _, _ = kernel_for(cache_ttl_s=0)

    simulated = [stub.Simulate(request("job.busy", job_id=f"s{i}"), timeout=5).decision
                 for i in range(3)]
    real = stub.Check(request("job.busy", job_id="c1"), timeout=5)

    assert simulated == [safety_pb2.DECISION_TYPE_ALLOW] * 3
    assert real.decision == safety_pb2.DECISION_TYPE_ALLOW


def test_explain_says_which_rule_matched_and_why_others_did_not(kernel_for):
    stub, _, _ = kernel_for(cache_ttl_s=0)

    resp = stub.Explain(request("job.sandboxed"), timeout=5)

    assert resp.rule_id == "sandboxed"
    assert resp.reason.startswith("decided by sandboxed: allow_with_constraints")
    assert "deny-danger: topic 'job.sandboxed' matches none of ['job.danger']" in resp.reason
    assert "needs-approval:" in resp.reason and "rate-limited:" in resp.reason


def test_hot_reload_takes_a_good_file_and_keeps_it_when_the_next_is_broken(kernel_for, caplog):
    # Given a kernel serving the first policy
    stub, kernel, path = kernel_for(cache_ttl_s=0)
    first = kernel.policy.snapshot
    assert stub.Check(request("job.new"), timeout=5).decision == safety_pb2.DECISION_TYPE_DENY

    # When the file changes to a good policy allowing job.new
    bump(path, POLICY + "  - {id: allow-new, match: {topics: [job.new]}, decision: allow}\n")
    reloaded = stub.Check(request("job.new"), timeout=5)

    # Then the next call answers from it, under a new snapshot
    assert (reloaded.decision, reloaded.rule_id) == (safety_pb2.DECISION_TYPE_ALLOW, "allow-new")
    second = reloaded.policy_snapshot
    assert second != first
    assert list(stub.ListSnapshots(safety_pb2.ListSnapshotsRequest(), timeout=5).snapshots) == [
        second, first]

    # When the file is then broken
    bump(path, "rules: [{id: x, decision: maybe}]\n")
    with caplog.at_level("ERROR", logger="cordum.safety.kernel"):
        kept = stub.Check(request("job.new"), timeout=5)

    # Then the last good policy stays in force and the failure is logged with the field
    assert (kept.rule_id, kept.policy_snapshot) == ("allow-new", second)
    assert any("policy reload failed" in r.getMessage() and "decision" in r.getMessage()
               for r in caplog.records)
    snaps = stub.ListSnapshots(safety_pb2.ListSnapshotsRequest(), timeout=5).snapshots
    assert snaps[0] == second


def test_decision_cache_hit(kernel_for):
    # Given a kernel with a decision cache and a policy without velocity rules
    stub, kernel, _ = kernel_for(CACHED_POLICY, cache_ttl_s=30)

    # When the same request is checked twice (different jobs, same fields)
    first = stub.Check(request("job.review", job_id="a"), timeout=5)
    second = stub.Check(request("job.review", job_id="b"), timeout=5)

    # Then the second is answered from the cache, with its own approval_ref
    assert kernel.cache is not None and kernel.cache.hits == 1
    assert (first.rule_id, second.rule_id) == ("review", "review")
    assert (first.approval_ref, second.approval_ref) == ("a", "b")
    # And a different request is not a hit
    stub.Check(request("job.ok"), timeout=5)
    assert kernel.cache.hits == 1


def test_cache_is_bypassed_while_velocity_rules_exist(kernel_for):
    stub, kernel, _ = kernel_for(cache_ttl_s=30)

    answers = [stub.Check(request("job.busy", job_id=f"v{i}"), timeout=5).decision
               for i in range(2)]

    assert answers == [safety_pb2.DECISION_TYPE_ALLOW, safety_pb2.DECISION_TYPE_THROTTLE]
    assert kernel.cache is not None and kernel.cache.hits == 0


def test_shipped_policy_allows_demo_topics(kernel_for):
    shipped = Path(__file__).resolve().parents[2] / "config" / "safety.yaml"
    stub, _, _ = kernel_for(shipped.read_text(), cache_ttl_s=0)

    decisions = {t: stub.Check(request(t), timeout=5) for t in
                 ("job.default", "job.echo", "job.echo.denied", "job.echo.approval")}

    assert decisions["job.default"].decision == safety_pb2.DECISION_TYPE_ALLOW
    assert decisions["job.echo"].decision == safety_pb2.DECISION_TYPE_ALLOW
    assert decisions["job.echo.denied"].reason == "denied by example policy"
    assert decisions["job.echo.approval"].decision == safety_pb2.DECISION_TYPE_REQUIRE_HUMAN


def test_reload_is_rate_limited_by_check_interval(tmp_path):
    path = tmp_path / "safety.yaml"
    path.write_text(CACHED_POLICY)
    policy = Policy(path, check_interval_s=60)
    bump(path, "default_decision: allow\n")
    time.sleep(0.01)
    assert policy.refresh().snapshot == policy.snapshot
    assert policy.snapshots == [policy.snapshot]
