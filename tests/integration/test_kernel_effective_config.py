"""The safety kernel applies a check's effective config after its policy, as Cordum's
kernel does: ``safety.denied_topics`` / ``allowed_topics`` (at the top or under
``data``) deny with rule ``effective-config``, globs matched as the policy's topic
lists are; an unreadable config restricts nothing; a cached decision is never changed
by one request's config."""

from __future__ import annotations

import importlib
import json

import grpc
import pytest

from cordum import protocol
from cordum.safety.client import EFFECTIVE_CONFIG_ENV, check_request
from cordum.safety.effective_config import (
    EFFECTIVE_CONFIG_RULE,
    MAX_EFFECTIVE_CONFIG_BYTES,
    parse_safety,
)
from cordum.safety.kernel import serve
from cordum.safety.kernel_service import PolicyKernel
from cordum.safety.policy_file import Policy
from cordum.store.config_docs import effective
from tests.helpers import free_port

safety_pb2 = importlib.import_module("cordum.agent.v1.safety_pb2")
safety_pb2_grpc = importlib.import_module("cordum.agent.v1.safety_pb2_grpc")

POLICY = """\
default_decision: deny
rules:
  - {id: allow-jobs, match: {topics: ["job.ok", "job.ok.*", "job.other"]}, decision: allow}
  - {id: review, match: {topics: [job.review]}, decision: require_approval, reason: look}
"""
DENY = safety_pb2.DECISION_TYPE_DENY
ALLOW = safety_pb2.DECISION_TYPE_ALLOW


@pytest.fixture
def stub(tmp_path):
    path = tmp_path / "safety.yaml"
    path.write_text(POLICY)
    kernel = PolicyKernel(Policy(path, check_interval_s=0), cache_ttl_s=60)
    addr = f"127.0.0.1:{free_port()}"
    server = serve(addr, kernel)
    channel = grpc.insecure_channel(addr)
    try:
        yield safety_pb2_grpc.SafetyKernelStub(channel)
    finally:
        channel.close()
        server.stop(grace=0)


def check(topic: str, effective_config: object = None, **kw):
    raw = b"" if effective_config is None else (
        effective_config if isinstance(effective_config, bytes)
        else json.dumps(effective_config).encode())
    return safety_pb2.PolicyCheckRequest(job_id="j1", topic=topic, tenant="t1",
                                         effective_config=raw, **kw)


def test_denied_topics_deny_with_the_effective_config_rule(stub):
    plain = stub.Check(check("job.ok.build"), timeout=5)
    denied = stub.Check(check("job.ok.build", {"safety": {"denied_topics": ["job.ok.*"]}}),
                        timeout=5)
    assert (plain.decision, plain.rule_id) == (ALLOW, "allow-jobs")
    assert (denied.decision, denied.rule_id) == (DENY, EFFECTIVE_CONFIG_RULE)
    assert denied.reason == "topic 'job.ok.build' denied by effective config"
    assert denied.policy_snapshot == plain.policy_snapshot
    # A topic the globs do not match keeps the policy's decision.
    other = stub.Check(check("job.other", {"safety": {"denied_topics": ["job.ok.*"]}}),
                       timeout=5)
    assert (other.decision, other.rule_id) == (ALLOW, "allow-jobs")


def test_allowed_topics_deny_every_other_topic(stub):
    cfg = {"safety": {"allowed_topics": ["job.ok"]}}
    inside = stub.Check(check("job.ok", cfg), timeout=5)
    outside = stub.Check(check("job.other", cfg), timeout=5)
    assert (inside.decision, inside.rule_id) == (ALLOW, "allow-jobs")
    assert (outside.decision, outside.rule_id) == (DENY, EFFECTIVE_CONFIG_RULE)
    assert outside.reason == "topic 'job.other' not allowed by effective config"
    # Denied and not allowed: the allow list's reason, as its check runs second.
    both = stub.Check(check("job.other", {"safety": {"denied_topics": ["job.*"],
                                                     "allowed_topics": ["job.ok"]}}),
                      timeout=5)
    assert both.reason == "topic 'job.other' not allowed by effective config"
    # An empty allow list allows what the policy allows.
    empty = stub.Check(check("job.other", {"safety": {"allowed_topics": []}}), timeout=5)
    assert empty.decision == ALLOW


def test_the_snapshot_form_is_read_under_data(stub):
    snapshot = {"version": "system:1|org:0|team:0|workflow:0|step:0", "hash": "h",
                "data": {"safety": {"denied_topics": ["job.ok"]}}}
    answer = stub.Check(check("job.ok", snapshot), timeout=5)
    assert (answer.decision, answer.rule_id) == (DENY, EFFECTIVE_CONFIG_RULE)


def test_a_deny_replaces_an_approval_and_the_cached_answer_is_untouched(stub):
    gated = stub.Check(check("job.review"), timeout=5)
    assert gated.decision == safety_pb2.DECISION_TYPE_REQUIRE_HUMAN
    denied = stub.Check(check("job.review", {"safety": {"denied_topics": ["job.review"]}}),
                        timeout=5)
    assert (denied.decision, denied.rule_id) == (DENY, EFFECTIVE_CONFIG_RULE)
    assert not denied.approval_required and denied.approval_ref == ""
    again = stub.Check(check("job.review"), timeout=5)
    assert (again.decision, again.rule_id) == (gated.decision, "review")


def test_simulate_and_explain_apply_it_too(stub):
    cfg = {"safety": {"denied_topics": ["job.ok"]}}
    for call in (stub.Evaluate, stub.Simulate, stub.Explain):
        answer = call(check("job.ok", cfg), timeout=5)
        assert (answer.decision, answer.rule_id) == (DENY, EFFECTIVE_CONFIG_RULE), call


@pytest.mark.parametrize("raw", [
    b"not json",
    b"[1, 2]",
    json.dumps({"safety": {"denied_topics": "job.ok"}}).encode(),
    json.dumps({"safety": {"denied_topics": [1]}}).encode(),
    json.dumps({"safety": "off"}).encode(),
    b"[" * 100_000,
    json.dumps({"safety": {"denied_topics": ["job.ok"]},
                "pad": "x" * MAX_EFFECTIVE_CONFIG_BYTES}).encode(),
])
def test_an_unreadable_config_restricts_nothing(stub, raw):
    answer = stub.Check(check("job.ok", raw), timeout=5)
    assert (answer.decision, answer.rule_id) == (ALLOW, "allow-jobs")


def test_the_parse_is_bounded_and_reads_the_top_section_first():
    assert parse_safety(b"") is None
    big = b'{"safety":{"denied_topics":["job.ok"]}}' + b" " * MAX_EFFECTIVE_CONFIG_BYTES
    assert parse_safety(big) is None
    both = {"safety": {"denied_topics": ["a"]}, "data": {"safety": {"denied_topics": ["b"]}}}
    lists = parse_safety(json.dumps(both).encode())
    assert lists is not None and lists.denied == ("a",)


def test_the_config_services_snapshot_in_the_job_env_reaches_the_kernel(stub):
    team = json.dumps({"scope": "team", "scope_id": "blue", "revision": 2,
                       "data": {"safety": {"denied_topics": ["job.ok.*"]}}})
    snap = effective([None, None, team])
    job = protocol.JobRequest(job_id="j1", topic="job.ok.deploy",
                              env={EFFECTIVE_CONFIG_ENV: json.dumps(snap)})
    answer = stub.Check(check_request(job, "t1"), timeout=5)
    assert (answer.decision, answer.rule_id) == (DENY, EFFECTIVE_CONFIG_RULE)
    assert answer.reason == "topic 'job.ok.deploy' denied by effective config"
