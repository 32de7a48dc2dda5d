"""The scheduler's output checks against the real service and real Redis."""

from __future__ import annotations

import json
from concurrent import futures

import grpc
import pytest
import redis.asyncio as aioredis

from cordum import protocol
from cordum.safety.failmode import FailMode
from cordum.safety.output_client import OutputPolicyClient
from cordum.safety.output_policy import REDACTED
from cordum.safety.output_service import add_output_policy_service
from cordum.safety.output_wire import OutputDecision
from cordum.safety.policy_file import Policy
from cordum.scheduler.output_check import REDACTED_TTL_S, OutputChecker
from cordum.store.results import DECISION_TTL_S, decision_key, redacted_key
from tests.conftest import REDIS_URL
from tests.helpers import free_port

SAFETY_YAML = """
output_policy: {enabled: true, fail_mode: closed}
output_rules:
  - {id: blocked, decision: quarantine, reason: "blocked topic", match: {topics: [job.blocked]}}
  - {id: denied, decision: deny, match: {topics: [job.denied]}}
  - {id: mask, decision: redact, match: {topics: [job.mask*], content_patterns: ['\\d{4}']}}
  - {id: pii, decision: redact, match: {topics: [job.pii, job.mask-pii]}}
  - {id: leak, decision: quarantine, match: {keywords: [BEGIN PRIVATE KEY]}}
"""


@pytest.fixture
def env(tmp_path, aloop, unique):
    path = tmp_path / "safety.yaml"
    path.write_text(SAFETY_YAML)
    addr = f"127.0.0.1:{free_port()}"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    add_output_policy_service(server, Policy(path))
    server.add_insecure_port(addr)
    server.start()
    redis = aioredis.Redis.from_url(REDIS_URL)
    client = OutputPolicyClient(addr, fail_mode=FailMode.CLOSED)
    checker = OutputChecker(client, redis)
    job_id = f"test-out-{unique}"
    yield aloop, checker, redis, job_id, server
    aloop.run_until_complete(redis.delete(protocol.result_key(job_id), redacted_key(job_id),
                                          decision_key(job_id)))
    aloop.run_until_complete(client.aclose())
    aloop.run_until_complete(redis.aclose())
    server.stop(grace=0)


def result(loop, redis, job_id: str, body: bytes) -> protocol.JobResult:
    key = protocol.result_key(job_id)
    loop.run_until_complete(redis.set(key, body, ex=60))
    return protocol.JobResult(job_id=job_id, status=protocol.JobStatus.JOB_STATUS_SUCCEEDED,
                              result_ptr=protocol.pointer(key))


def record(loop, redis, job_id: str) -> dict:
    return json.loads(loop.run_until_complete(redis.get(decision_key(job_id))))


@pytest.mark.parametrize("topic, decision", [
    ("job.blocked", OutputDecision.QUARANTINE), ("job.denied", OutputDecision.DENY)])
def test_sync_quarantine_and_deny_quarantine_and_are_recorded(env, topic, decision):
    loop, checker, redis, job_id, _ = env
    res = result(loop, redis, job_id, b"fine")

    verdict = loop.run_until_complete(checker.sync_check(res, topic, "t1"))

    assert verdict.quarantine and verdict.decision is decision
    assert verdict.result_ptr == res.result_ptr
    doc = record(loop, redis, job_id)
    assert doc["decision"] == decision.value and doc["phase"] == "sync"
    assert doc["quarantined"] is True and doc["reason"]
    ttl = loop.run_until_complete(redis.ttl(decision_key(job_id)))
    assert DECISION_TTL_S - 10 < ttl <= DECISION_TTL_S


def test_sync_allow_keeps_the_result(env):
    loop, checker, redis, job_id, _ = env
    res = result(loop, redis, job_id, b"BEGIN PRIVATE KEY")  # content rules wait for async

    verdict = loop.run_until_complete(checker.sync_check(res, "job.default", "t1"))

    assert verdict.decision is OutputDecision.ALLOW and not verdict.quarantine
    assert verdict.result_ptr == res.result_ptr
    assert record(loop, redis, job_id)["decision"] == "ALLOW"


def test_sync_redact_stores_the_redacted_result_with_ttl(env):
    # Given a topic redact rule (seen by meta) and a pattern rule ahead of it for content
    loop, checker, redis, job_id, _ = env
    res = result(loop, redis, job_id, b"card 1234 and 5678")

    verdict = loop.run_until_complete(checker.sync_check(res, "job.mask-pii", "t1"))

    assert verdict.decision is OutputDecision.REDACT and not verdict.quarantine
    assert verdict.result_ptr == protocol.pointer(redacted_key(job_id))
    stored = loop.run_until_complete(redis.get(redacted_key(job_id)))
    assert stored.decode() == f"card {REDACTED} and {REDACTED}"
    ttl = loop.run_until_complete(redis.ttl(redacted_key(job_id)))
    assert REDACTED_TTL_S - 10 < ttl <= REDACTED_TTL_S
    assert record(loop, redis, job_id)["redacted_ptr"] == verdict.result_ptr


def test_sync_redact_whole_content_when_the_rule_has_no_pattern(env):
    loop, checker, redis, job_id, _ = env
    res = result(loop, redis, job_id, b"Jane Doe")

    verdict = loop.run_until_complete(checker.sync_check(res, "job.pii", "t1"))

    assert verdict.decision is OutputDecision.REDACT
    assert loop.run_until_complete(redis.get(redacted_key(job_id))) == REDACTED.encode()


def test_sync_redact_of_a_missing_result_quarantines(env):
    loop, checker, redis, job_id, _ = env
    res = protocol.JobResult(job_id=job_id, result_ptr=protocol.pointer("res:nothing-here"))

    verdict = loop.run_until_complete(checker.sync_check(res, "job.pii", "t1"))

    assert verdict.quarantine and "redaction failed" in verdict.reason
    assert loop.run_until_complete(redis.exists(redacted_key(job_id))) == 0


def test_async_content_quarantine_and_allow(env):
    loop, checker, redis, job_id, _ = env
    res = result(loop, redis, job_id, b"-----BEGIN PRIVATE KEY-----")

    bad = loop.run_until_complete(
        checker.async_check(job_id, "job.default", "t1", res.result_ptr))
    assert bad.quarantine and bad.rule_id == "leak" and bad.phase == "async"
    assert record(loop, redis, job_id)["phase"] == "async"

    loop.run_until_complete(redis.set(protocol.result_key(job_id), b"harmless"))
    ok = loop.run_until_complete(
        checker.async_check(job_id, "job.default", "t1", res.result_ptr))
    assert ok.decision is OutputDecision.ALLOW and not ok.quarantine


def test_async_redact_by_content_pattern_stores_the_redacted_result(env):
    loop, checker, redis, job_id, _ = env
    res = result(loop, redis, job_id, b"pin 4321")

    sync = loop.run_until_complete(checker.sync_check(res, "job.mask", "t1"))
    late = loop.run_until_complete(checker.async_check(job_id, "job.mask", "t1", res.result_ptr))

    assert sync.decision is OutputDecision.ALLOW  # the pattern needs the content
    assert late.decision is OutputDecision.REDACT and not late.quarantine
    assert late.result_ptr == protocol.pointer(redacted_key(job_id))
    assert loop.run_until_complete(redis.get(redacted_key(job_id))) == f"pin {REDACTED}".encode()


def test_kernel_down_sync_allows_and_async_holds(env):
    loop, checker, redis, job_id, server = env
    res = result(loop, redis, job_id, b"x")
    server.stop(grace=0).wait()

    sync = loop.run_until_complete(checker.sync_check(res, "job.blocked", "t1"))
    late = loop.run_until_complete(
        checker.async_check(job_id, "job.default", "t1", res.result_ptr, timeout_s=1.0))

    assert sync.decision is OutputDecision.ALLOW and sync.skipped and not sync.quarantine
    # No kernel, no decision: the output is held (unserved), not quarantined, and the
    # record stays the sync one.
    assert late.held and not late.quarantine and late.skipped
    stored = record(loop, redis, job_id)
    assert stored["skipped"] is True and stored["phase"] == "sync"
