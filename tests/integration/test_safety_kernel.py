"""The SafetyKernel gRPC server on a free port, answering from a policy file."""

from __future__ import annotations

import importlib
import os
import time
from pathlib import Path

import grpc
import pytest

from cordum import protocol  # noqa: F401  (makes cordum.agent.v1 importable)
from cordum.safety.decision_cache import DecisionCache
from cordum.safety.kernel import serve
from cordum.safety.kernel_service import PolicyKernel, candidate_metadata
from cordum.safety.policy_file import Policy, snapshot_of
from tests.helpers import free_port

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
    time.sleep(0.01)  # some time passes, far less than the 60 s check interval
    assert policy.refresh().snapshot == policy.snapshot
    assert policy.snapshots == [policy.snapshot]


# -- every decision, with rule id, reason, snapshot and remediations ----------------

ALL_DECISIONS = """\
default_decision: allow
rules:
  - id: r-deny
    match: {topics: [job.deny]}
    decision: deny
    reason: denied here
    remediations:
      - {id: fix, title: Use the safe topic, summary: It is allowed,
         replacement_topic: job.safe, replacement_capability: read,
         add_labels: {reviewed: "yes"}, remove_labels: [danger]}
  - {id: r-approve, match: {topics: [job.approve]}, decision: require_approval,
     reason: ask a human, remediations: [{id: smaller, replacement_topic: job.small}]}
  - {id: r-constrained, match: {topics: [job.constrained]}, decision: allow_with_constraints,
     reason: sandboxed, constraints: {toolchain: {allowed_tools: [git]},
                                      diff: {max_files: 3, deny_path_globs: ['*.pem']}}}
  - {id: r-throttle, match: {topics: [job.throttle]}, decision: throttle, reason: later}
  - {id: r-allow, match: {topics: [job.allow]}, decision: allow, reason: fine}
  - {id: r-no-reason, match: {topics: [job.quiet]}, decision: deny}
tenants:
  locked: {allow_topics: [job.allow], deny_topics: [job.deny]}
"""


@pytest.mark.parametrize(("topic", "tenant", "decision", "rule_id", "reason"), [
    ("job.deny", "t1", "DENY", "r-deny", "denied here"),
    ("job.approve", "t1", "REQUIRE_HUMAN", "r-approve", "ask a human"),
    ("job.constrained", "t1", "ALLOW_WITH_CONSTRAINTS", "r-constrained", "sandboxed"),
    ("job.throttle", "t1", "THROTTLE", "r-throttle", "later"),
    ("job.allow", "t1", "ALLOW", "r-allow", "fine"),
    ("job.quiet", "t1", "DENY", "r-no-reason", "matched rule r-no-reason"),
    ("job.other", "t1", "ALLOW", "default", "no matching rule — default policy: allow"),
    ("job.deny", "locked", "DENY", "tenant:locked:deny_topics",
     "topic 'job.deny' denied by tenant 'locked' policy ('job.deny')"),
    ("job.other", "locked", "DENY", "tenant:locked:allow_topics",
     "topic 'job.other' not in tenant 'locked' allow_topics"),
    ("sys.destroy", "t1", "DENY", "kernel:unsupported-topic",
     "unsupported topic 'sys.destroy': only job.* is accepted"),
    ("", "t1", "DENY", "kernel:missing-topic", "missing topic"),
])
def test_every_decision_carries_rule_reason_and_snapshot(kernel_for, topic, tenant, decision,
                                                          rule_id, reason):
    stub, kernel, _ = kernel_for(ALL_DECISIONS, cache_ttl_s=0)

    resp = stub.Check(request(topic, tenant=tenant), timeout=5)

    assert safety_pb2.DecisionType.Name(resp.decision) == f"DECISION_TYPE_{decision}"
    assert (resp.rule_id, resp.reason) == (rule_id, reason)
    assert resp.policy_snapshot == kernel.policy.snapshot != ""


def test_remediations_and_constraints_reach_the_wire_field_for_field(kernel_for):
    stub, _, _ = kernel_for(ALL_DECISIONS, cache_ttl_s=0)

    deny = stub.Check(request("job.deny"), timeout=5)
    approve = stub.Check(request("job.approve", job_id="ap-1"), timeout=5)
    constrained = stub.Check(request("job.constrained"), timeout=5)

    (rem,) = deny.remediations
    assert (rem.id, rem.title, rem.summary, rem.replacement_topic,
            rem.replacement_capability) == ("fix", "Use the safe topic", "It is allowed",
                                            "job.safe", "read")
    assert (dict(rem.add_labels), list(rem.remove_labels)) == ({"reviewed": "yes"}, ["danger"])
    assert not deny.HasField("constraints")
    assert [r.replacement_topic for r in approve.remediations] == ["job.small"]
    assert approve.approval_required and approve.approval_ref == "ap-1"
    c = constrained.constraints
    assert list(c.toolchain.allowed_tools) == ["git"]
    assert (c.diff.max_files, list(c.diff.deny_path_globs)) == (3, ["*.pem"])


# -- every request field reaches the match ------------------------------------------

@pytest.mark.parametrize(("match", "hit", "miss"), [
    ("{tenants: [acme]}", {"tenant": "acme"}, {"tenant": "beta"}),
    ("{tenants: [acme]}", {"tenant": "", "meta": {"tenant_id": "acme"}},
     {"tenant": "", "meta": {"tenant_id": "beta"}}),
    ("{topics: ['job.pay.*']}", {"topic": "job.pay.out"}, {"topic": "job.payout"}),
    ("{capabilities: [write]}", {"meta": {"capability": "write"}},
     {"meta": {"capability": "read"}}),
    ("{risk_tags: [pii]}", {"meta": {"risk_tags": ["x", "pii"]}}, {"meta": {"risk_tags": ["x"]}}),
    ("{requires: [gpu]}", {"meta": {"requires": ["gpu", "linux"]}},
     {"meta": {"requires": ["linux"]}}),
    ("{pack_ids: [bank]}", {"meta": {"pack_id": "bank"}}, {"meta": {"pack_id": "shop"}}),
    ("{actor_ids: [u1]}", {"meta": {"actor_id": "u1"}}, {"meta": {"actor_id": "u2"}}),
    ("{actor_types: [service]}", {"meta": {"actor_type": 2}}, {"meta": {"actor_type": 1}}),
    ("{labels: {env: prod}}", {"labels": {"env": "prod"}}, {"labels": {"env": "dev"}}),
    ("{label_allowlist: {region: [eu]}}", {"labels": {"region": "us"}},
     {"labels": {"region": "eu"}}),
    ("{label_threshold: {cost: 10}}", {"labels": {"cost": "11"}}, {"labels": {"cost": "9"}}),
])
def test_each_request_field_reaches_the_match(kernel_for, match, hit, miss):
    stub, _, _ = kernel_for(f"rules:\n  - {{id: m, match: {match}, decision: deny}}\n"
                            "default_decision: allow\n", cache_ttl_s=0)

    def build(fields):
        fields = {"topic": "job.x", "tenant": "t1", **fields}
        meta = fields.pop("meta", None)
        req = request(fields.pop("topic"), tenant=fields.pop("tenant"), **fields)
        if meta is not None:
            req.meta.CopyFrom(job_pb2.JobMetadata(**meta))
        return req

    assert stub.Check(build(hit), timeout=5).rule_id == "m"
    assert stub.Check(build(miss), timeout=5).rule_id == "default"


# -- hot reload ---------------------------------------------------------------------

def test_a_broken_file_repaired_later_is_picked_up(kernel_for):
    stub, kernel, path = kernel_for(CACHED_POLICY, cache_ttl_s=0)
    first = kernel.policy.snapshot

    bump(path, "rules: [unclosed\n")
    kept = stub.Check(request("job.ok"), timeout=5)
    path.unlink()
    gone = stub.Check(request("job.ok"), timeout=5)
    path.write_text(CACHED_POLICY.replace("allow-ok", "allow-ok-v2"))
    repaired = stub.Check(request("job.ok"), timeout=5)

    # A broken file and a missing file both keep the last good policy
    assert (kept.rule_id, kept.policy_snapshot) == ("allow-ok", first)
    assert (gone.rule_id, gone.policy_snapshot) == ("allow-ok", first)
    # And the repaired file is taken
    assert repaired.rule_id == "allow-ok-v2" and repaired.policy_snapshot != first


# -- decision cache -----------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cache_with_clock(kernel: PolicyKernel, ttl_s: float) -> Clock:
    clock = Clock()
    kernel.cache = DecisionCache(ttl_s, clock=clock)
    return clock


def test_decision_cache_entries_expire(kernel_for):
    stub, kernel, _ = kernel_for(CACHED_POLICY, cache_ttl_s=5)
    clock = cache_with_clock(kernel, 5)
    assert kernel.cache is not None

    stub.Check(request("job.ok", job_id="a"), timeout=5)
    clock.now += 4.9
    stub.Check(request("job.ok", job_id="b"), timeout=5)
    assert kernel.cache.hits == 1
    clock.now += 0.2  # 5.1 s after it was stored
    stub.Check(request("job.ok", job_id="c"), timeout=5)

    assert kernel.cache.hits == 1
    assert len(kernel.cache) == 1  # stored again by the miss


def test_a_reload_empties_the_decision_cache(kernel_for):
    # Given a cached allow for job.ok
    stub, kernel, path = kernel_for(CACHED_POLICY, cache_ttl_s=60)
    stub.Check(request("job.ok", job_id="a"), timeout=5)
    assert stub.Check(request("job.ok", job_id="b"), timeout=5).rule_id == "allow-ok"
    assert kernel.cache is not None and kernel.cache.hits == 1

    # When the file changes to deny job.ok
    bump(path, "default_decision: deny\nrules:\n"
               "  - {id: deny-ok, match: {topics: [job.ok]}, decision: deny}\n")
    after = stub.Check(request("job.ok", job_id="c"), timeout=5)

    # Then the cached answer is not served: the new policy decides
    assert (after.decision, after.rule_id) == (safety_pb2.DECISION_TYPE_DENY, "deny-ok")
    assert after.policy_snapshot == kernel.policy.snapshot
    assert kernel.cache.hits == 1
    assert len(kernel.cache) == 1  # only the new policy's answer


def test_velocity_and_throttle_decisions_are_never_cached(kernel_for):
    # Given a policy with a velocity rule on job.busy and a plain throttle rule
    stub, kernel, _ = kernel_for(POLICY + "  - {id: later, match: {topics: [job.later]}, "
                                          "decision: throttle}\n", cache_ttl_s=60)
    assert kernel.cache is not None

    busy = [stub.Check(request("job.busy", job_id=f"v{i}"), timeout=5).decision
            for i in range(3)]
    later = [stub.Check(request("job.later", job_id=f"l{i}"), timeout=5).rule_id
             for i in range(2)]
    assert kernel.cache.hits == 0 and len(kernel.cache) == 0

    # While a request no velocity rule looks at is cached in the same policy
    stub.Check(request("job.ok", job_id="o1"), timeout=5)
    stub.Check(request("job.ok", job_id="o2"), timeout=5)

    assert busy == [safety_pb2.DECISION_TYPE_ALLOW] + [safety_pb2.DECISION_TYPE_THROTTLE] * 2
    assert later == ["later", "later"]
    assert kernel.cache.hits == 1


def test_cache_key_covers_the_fields_that_decide(kernel_for):
    stub, kernel, _ = kernel_for("default_decision: deny\nrules:\n"
                                 "  - {id: pii, match: {risk_tags: [pii]}, decision: deny}\n"
                                 "  - {id: rest, match: {topics: ['job.*']}, decision: allow}\n",
                                 cache_ttl_s=60)
    plain = request("job.x", job_id="a")
    tagged = request("job.x", job_id="b", meta=job_pb2.JobMetadata(risk_tags=["pii"]))

    assert stub.Check(plain, timeout=5).rule_id == "rest"
    assert stub.Check(tagged, timeout=5).rule_id == "pii"
    assert stub.Check(request("job.x", job_id="c", labels={"k": "v"}), timeout=5).rule_id == \
        "rest"
    assert kernel.cache is not None and kernel.cache.hits == 0


# -- Simulate and Explain with a candidate policy -----------------------------------

CANDIDATE = """\
default_decision: deny
rules:
  - {id: candidate-deny, match: {topics: [job.ok]}, decision: deny, reason: not any more}
"""


def test_simulate_answers_from_a_candidate_without_loading_it(kernel_for):
    # Given a kernel that allows job.ok
    stub, kernel, _ = kernel_for(CACHED_POLICY, cache_ttl_s=0)
    loaded = kernel.policy.snapshot

    # When a candidate policy that denies it is simulated
    resp = stub.Simulate(request("job.ok"), metadata=candidate_metadata(CANDIDATE), timeout=5)

    # Then the answer is the candidate's, under the candidate's snapshot
    assert (resp.decision, resp.rule_id, resp.reason) == (
        safety_pb2.DECISION_TYPE_DENY, "candidate-deny", "not any more")
    assert resp.policy_snapshot == snapshot_of(CANDIDATE.encode()) != loaded
    # And the loaded policy is unchanged
    check = stub.Check(request("job.ok"), timeout=5)
    assert (check.rule_id, check.policy_snapshot) == ("allow-ok", loaded)
    assert list(stub.ListSnapshots(safety_pb2.ListSnapshotsRequest(), timeout=5).snapshots) == [
        loaded]


def test_explain_answers_from_a_candidate(kernel_for):
    stub, _, _ = kernel_for(CACHED_POLICY, cache_ttl_s=0)
    candidate = CANDIDATE + "  - {id: also-ok, match: {topics: [job.ok]}, decision: allow}\n"

    resp = stub.Explain(request("job.ok"), metadata=candidate_metadata(candidate), timeout=5)

    assert resp.rule_id == "candidate-deny"
    assert resp.reason.startswith("decided by candidate-deny: deny (not any more)")
    # The allow matched too, and lost to the deny (deny wins, whatever the order).
    assert "also matched: also-ok (allow)" in resp.reason


def test_a_large_candidate_is_accepted(kernel_for):
    stub, _, _ = kernel_for(CACHED_POLICY, cache_ttl_s=0)
    padding = "".join(f"# padding line {i:05d} of a long policy file\n" for i in range(1000))

    resp = stub.Simulate(request("job.ok"), metadata=candidate_metadata(CANDIDATE + padding),
                         timeout=5)

    assert len(CANDIDATE + padding) > 32 * 1024
    assert resp.rule_id == "candidate-deny"


def test_a_broken_candidate_is_invalid_argument(kernel_for):
    stub, kernel, _ = kernel_for(CACHED_POLICY, cache_ttl_s=0)

    with pytest.raises(grpc.RpcError) as err:
        stub.Simulate(request("job.ok"),
                      metadata=candidate_metadata("rules: [{id: a, decision: maybe}]"),
                      timeout=5)

    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith("candidate policy: rules[0] (id 'a').decision")
    assert stub.Check(request("job.ok"), timeout=5).rule_id == "allow-ok"


def test_explain_covers_gates_other_rules_and_the_default(kernel_for):
    stub, _, _ = kernel_for(ALL_DECISIONS, cache_ttl_s=0)

    gated = stub.Explain(request("job.other", tenant="locked"), timeout=5)
    fallen = stub.Explain(request("job.none"), timeout=5)
    first = stub.Explain(request("job.deny"), timeout=5)

    assert gated.reason.startswith("decided by tenant:locked:allow_topics: deny")
    assert "rules not evaluated: the tenant's topic lists decide before the rules" in \
        gated.reason
    assert fallen.rule_id == "default"
    assert "r-allow: topic 'job.none' matches none of ['job.allow']" in fallen.reason
    # Every rule is tried: those after the deciding one are reported as not matching.
    assert "not matched: r-approve: topic 'job.deny' matches none of" in first.reason
