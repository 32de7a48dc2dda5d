"""The output policy service on a real grpc.server, and its client against it."""

from __future__ import annotations

import asyncio
import json
from concurrent import futures

import grpc
import pytest

from cordum.safety.failmode import FailMode
from cordum.safety.output_client import (
    OutputCheckRequest,
    OutputPolicyClient,
    output_fail_mode,
)
from cordum.safety.output_policy import REDACTED
from cordum.safety.output_service import add_output_policy_service
from cordum.safety.output_wire import (
    CHECK_CONTENT_METHOD,
    CHECK_META_METHOD,
    CHECK_RESULT_METHOD,
    OutputDecision,
)
from cordum.safety.policy_file import Policy
from tests.helpers import free_port, serving_kernel

SAFETY_YAML = """
default_decision: deny
rules:
  - {id: default-topic-allow, match: {topics: [job.default]}, decision: allow}
output_policy: {enabled: true, fail_mode: closed}
output_rules:
  - id: blocked-topic
    decision: quarantine
    reason: "blocked topic"
    match: {topics: [job.blocked.*]}
  - id: pii-topic
    decision: redact
    match: {topics: [job.pii.*]}
  - id: secret-scan
    decision: redact
    match: {content_patterns: ['sk-[a-z0-9]{8}']}
"""


@pytest.fixture
def served(tmp_path, aloop):
    path = tmp_path / "safety.yaml"
    path.write_text(SAFETY_YAML)
    policy = Policy(path, check_interval_s=0)
    addr = f"127.0.0.1:{free_port()}"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    add_output_policy_service(server, policy)
    assert server.add_insecure_port(addr)
    server.start()
    clients: list[OutputPolicyClient] = []

    def client(fail_mode=FailMode.CLOSED, target=addr) -> OutputPolicyClient:
        c = OutputPolicyClient(target, fail_mode=fail_mode)
        clients.append(c)
        return c

    yield aloop, client, policy, server, addr
    server.stop(grace=0)
    for c in clients:
        aloop.run_until_complete(c.aclose())


def req(topic="job.default", **kw) -> OutputCheckRequest:
    return OutputCheckRequest(job_id="job-1", topic=topic, tenant="t1", **kw)


def test_meta_allow_carries_the_policy_snapshot(served):
    loop, client, policy, *_ = served
    got = loop.run_until_complete(client().check_meta(req()))
    assert got.decision is OutputDecision.ALLOW and not got.skipped
    assert got.policy_snapshot == policy.snapshot


def test_meta_quarantine_names_rule_and_reason(served):
    loop, client, *_ = served
    got = loop.run_until_complete(client().check_meta(req("job.blocked.x")))
    assert (got.decision, got.rule_id, got.reason) == (
        OutputDecision.QUARANTINE, "blocked-topic", "blocked topic")


def test_content_redact_returns_the_redacted_text(served):
    loop, client, *_ = served
    c = client()
    meta = loop.run_until_complete(c.check_meta(req()))
    got = loop.run_until_complete(c.check_content(req(), "token sk-abcdef12 end"))
    assert meta.decision is OutputDecision.ALLOW  # content rules need content
    assert got.decision is OutputDecision.REDACT and got.rule_id == "secret-scan"
    assert got.redacted_content == f"token {REDACTED} end"


def test_topic_redact_is_seen_by_meta_and_materialized_by_content(served):
    loop, client, *_ = served
    c = client()
    meta = loop.run_until_complete(c.check_meta(req("job.pii.x")))
    got = loop.run_until_complete(c.check_content(req("job.pii.x"), "a name"))
    assert meta.decision is OutputDecision.REDACT and meta.redacted_content is None
    assert got.redacted_content == REDACTED


def test_wire_format_is_json(served):
    # Given a raw gRPC channel that speaks the documented JSON bodies
    loop, _, policy, _, addr = served
    with grpc.insecure_channel(addr) as channel:
        call = channel.unary_unary(CHECK_META_METHOD)
        body = json.dumps({"job_id": "j", "topic": "job.blocked.a", "tenant": "t"}).encode()
        answer = json.loads(call(body, timeout=5))
        # A body that is not a JSON object is INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as bad:
            call(b"[1]", timeout=5)
        with pytest.raises(grpc.RpcError) as wrong_type:
            call(json.dumps({"topic": "job.x", "size_bytes": "big"}).encode(), timeout=5)
        # ... and so is a field of the wrong type, on every method
        refused = []
        for method in (CHECK_CONTENT_METHOD, CHECK_RESULT_METHOD):
            with pytest.raises(grpc.RpcError) as err:
                channel.unary_unary(method)(
                    json.dumps({"topic": "job.x", "content": 5}).encode(), timeout=5)
            refused.append(err.value.code())
    assert answer == {"decision": "QUARANTINE", "reason": "blocked topic",
                      "rule_id": "blocked-topic", "policy_snapshot": policy.snapshot}
    assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert wrong_type.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert refused == [grpc.StatusCode.INVALID_ARGUMENT] * 2


def test_policy_reload_is_picked_up(served, tmp_path):
    loop, client, policy, *_ = served
    (tmp_path / "safety.yaml").write_text(SAFETY_YAML.replace("job.blocked.*", "job.default"))
    got = loop.run_until_complete(client().check_meta(req()))
    assert got.decision is OutputDecision.QUARANTINE


def test_kernel_down_meta_is_skipped_as_allow(served):
    loop, client, *_ = served
    dead = f"127.0.0.1:{free_port()}"
    got = loop.run_until_complete(client(target=dead).check_meta(req("job.blocked.x")))
    assert got.decision is OutputDecision.ALLOW and got.skipped and got.failed
    assert "UNAVAILABLE" in got.error


@pytest.mark.parametrize("mode, expected", [
    (FailMode.CLOSED, OutputDecision.QUARANTINE), (FailMode.OPEN, OutputDecision.ALLOW)])
def test_kernel_down_content_follows_fail_mode(served, mode, expected):
    loop, client, *_ = served
    dead = f"127.0.0.1:{free_port()}"
    got = loop.run_until_complete(
        client(mode, target=dead).check_content(req(), "x", timeout_s=1.0))
    assert got.decision is expected and got.failed


def test_client_recovers_after_the_kernel_restarts(served):
    # Given a client whose kernel went away
    loop, client, policy, server, addr = served
    c = client()
    server.stop(grace=0).wait()
    down = loop.run_until_complete(c.check_meta(req("job.blocked.x")))
    # When a kernel listens on the same address again
    server2 = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    add_output_policy_service(server2, policy)
    server2.add_insecure_port(addr)
    server2.start()
    try:
        up = loop.run_until_complete(c.check_meta(req("job.blocked.x")))
    finally:
        server2.stop(grace=0)
    # Then the rebuilt channel reaches it
    assert down.skipped
    assert up.decision is OutputDecision.QUARANTINE and not up.skipped


def test_fail_mode_env_wins_over_safety_yaml(tmp_path):
    (tmp_path / "safety.yaml").write_text("output_policy: {enabled: true, fail_mode: open}\n")
    assert output_fail_mode({}, tmp_path) is FailMode.OPEN
    assert output_fail_mode({"OUTPUT_POLICY_FAIL_MODE": "closed"}, tmp_path) is FailMode.CLOSED
    assert output_fail_mode({}, tmp_path / "missing") is FailMode.CLOSED


def test_the_safety_kernel_process_serves_the_output_policy_too(tmp_path):
    """The kernel's own server answers the output service from its policy file."""

    from cordum.safety.output_client import OutputCheckRequest, OutputPolicyClient

    path = tmp_path / "safety.yaml"
    path.write_text(
        "default_decision: allow\n"
        "output_policy: {enabled: true, fail_mode: closed}\n"
        "output_rules:\n"
        "  - id: no-secrets\n"
        "    decision: quarantine\n"
        "    reason: secret in output\n"
        "    match: {keywords: [BEGIN PRIVATE KEY]}\n")
    with serving_kernel(path) as addr:
        client = OutputPolicyClient(addr)
        loop = asyncio.new_event_loop()
        req = OutputCheckRequest(job_id="j1", topic="job.default", tenant="t")
        verdict = loop.run_until_complete(
            client.check_content(req, "-----BEGIN PRIVATE KEY-----", timeout_s=5))
        assert verdict.decision.value == "QUARANTINE" and verdict.rule_id == "no-secrets"
        loop.close()
