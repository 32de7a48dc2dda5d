"""Both output checks of a result in one kernel call (CheckResult), on the real Redis,
NATS and safety kernel: the same decisions as the two calls, one RPC instead of two,
and the two calls still made where one cannot do it (a result larger than the
prefetch, a kernel without the method)."""

from __future__ import annotations

import asyncio
import json
from concurrent import futures
from typing import Any

import grpc
import pytest

from cordum.safety.failmode import FailMode
from cordum.safety.output_client import OutputCheckRequest, OutputPolicyClient
from cordum.safety.output_service import OutputPolicyService
from cordum.safety.output_wire import (
    CHECK_CONTENT_METHOD,
    CHECK_META_METHOD,
    CHECK_RESULT_METHOD,
    SERVICE_NAME,
    OutputDecision,
    decode,
    encode,
)
from cordum.safety.policy_file import Policy
from cordum.scheduler.output_check import OutputChecker
from cordum.scheduler.output_prefetch import PREFETCH_BYTES
from tests.helpers import free_port, serving_kernel
from tests.integration.test_engine_output import SAFETY_YAML, close, make

PRIVATE_KEY = "-----BEGIN PRIVATE KEY----- MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"
CASES = [("job.default", "hello"), ("job.default", PRIVATE_KEY), ("job.blocked", "hello"),
         ("job.mask", "card 1234 ok"), ("job.mask", "no digits"), ("job.default", "")]


@pytest.fixture(scope="module")
def policy_path(tmp_path_factory):
    """test_engine_output's policy file, written once for the module."""
    path = tmp_path_factory.mktemp("one-call") / "safety.yaml"
    path.write_text(SAFETY_YAML)
    return path


@pytest.fixture(scope="module")
def kernel_addr(policy_path):
    with serving_kernel(policy_path) as addr:
        yield addr


class Counting(OutputPolicyClient):
    """The real client, with the methods it called kept in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.methods: list[str] = []

    async def _rpc(self, method: str, body: dict[str, Any], timeout_s: float) -> Any:
        self.methods.append(method.rsplit("/", 1)[-1])
        return await super()._rpc(method, body, timeout_s)


def run_one(unique: str, addr: str, topic: str, output: str, *, combined: bool = True,
            output_addr: str | None = None) -> tuple[dict[str, str], list[str]]:
    """One job of ``topic`` dispatched and answered with ``output``: its meta and the
    output service methods its result called."""
    loop, h = make(unique, addr)
    client = Counting(output_addr or addr, fail_mode=FailMode.CLOSED)
    client.combined = combined
    h.rewire(output=OutputChecker(client, h.redis))
    try:
        loop.run_until_complete(h.dispatch(topic))
        outcome = loop.run_until_complete(h.engine.handle_result(
            loop.run_until_complete(h.succeed(output))))
        assert outcome.action == "recorded", outcome
        return loop.run_until_complete(h.meta()), client.methods
    finally:
        loop.run_until_complete(client.aclose())
        close(loop, h)


def decided(meta: dict[str, str], unique: str) -> tuple[Any, ...]:
    """What a result's checks leave on the job (its id taken out): the state, the
    served pointer and the decision record but its time."""
    record = json.loads(meta["output_safety"])
    return (meta["state"], meta["output_decision"],
            meta.get("result_ptr", "").replace(unique, "<id>"),
            *(record[k] for k in ("decision", "phase", "quarantined", "reason", "rule_id",
                                  "skipped")))


@pytest.mark.parametrize(("topic", "output"), CASES)
def test_one_call_decides_as_the_two_calls(kernel_addr, unique, topic, output):
    one, methods = run_one(f"{unique}a", kernel_addr, topic, output)
    two, classic = run_one(f"{unique}b", kernel_addr, topic, output, combined=False)
    assert decided(one, f"{unique}a") == decided(two, f"{unique}b")
    assert methods[0] == "CheckResult" and "CheckMeta" not in methods
    assert classic[:2] == ["CheckMeta", "CheckContent"] or classic == ["CheckMeta"]
    if one["output_decision"] == "ALLOW":
        assert methods == ["CheckResult"]  # was two calls
    assert one["state"] == ("OUTPUT_QUARANTINED" if PRIVATE_KEY in output
                            or topic == "job.blocked" else "SUCCEEDED")


def test_a_result_larger_than_the_prefetch_takes_the_two_calls(kernel_addr, unique):
    meta, methods = run_one(unique, kernel_addr, "job.default", "x" * (PREFETCH_BYTES + 1))
    assert methods == ["CheckMeta", "CheckContent"]
    assert (meta["state"], meta["output_decision"]) == ("SUCCEEDED", "ALLOW")


@pytest.fixture
def older_kernel(policy_path):
    """An output service of the release before CheckResult: CheckMeta and CheckContent."""
    service = OutputPolicyService(Policy(policy_path, check_interval_s=0))
    handlers = {
        "CheckMeta": grpc.unary_unary_rpc_method_handler(
            service.check_meta, request_deserializer=decode, response_serializer=encode),
        "CheckContent": grpc.unary_unary_rpc_method_handler(
            service.check_content, request_deserializer=decode, response_serializer=encode)}
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    addr = f"127.0.0.1:{free_port()}"
    assert server.add_insecure_port(addr)
    server.start()
    yield addr
    server.stop(grace=0)


def test_a_kernel_without_the_method_gets_the_two_calls(kernel_addr, older_kernel, unique):
    meta, methods = run_one(unique, kernel_addr, "job.default", PRIVATE_KEY,
                            output_addr=older_kernel)
    assert methods == ["CheckResult", "CheckMeta", "CheckContent"]
    assert meta["state"] == "OUTPUT_QUARANTINED"

    async def twice() -> tuple[list[str], Any]:
        client = Counting(older_kernel)
        req = OutputCheckRequest(job_id="j", topic="job.default")
        try:
            first = await client.check_result(req, "hello", timeout_s=2)
            again = await client.check_result(req, "hello", timeout_s=2)
            meta = await client.check_meta(req)  # the breaker counted no failure
            return client.methods, (first, again, client.combined, meta)
        finally:
            await client.aclose()

    methods, (first, again, combined, answer) = asyncio.run(twice())
    assert (first, again, combined) == (None, None, False)
    assert methods == ["CheckResult", "CheckMeta"]  # asked once, then not again
    assert answer.decision is OutputDecision.ALLOW and not answer.failed


def test_an_unreachable_kernel_answers_both_as_the_two_calls_fail():
    dead = f"127.0.0.1:{free_port()}"

    async def ask(mode: FailMode) -> tuple[Any, Any, Any, Any]:
        client = OutputPolicyClient(dead, fail_mode=mode)
        req = OutputCheckRequest(job_id="j", topic="job.default")
        try:
            answers = await client.check_result(req, "x", timeout_s=0.5)
            assert answers is not None
            meta, content = answers
            return meta, content, await client.check_meta(req), await client.check_content(
                req, "x", timeout_s=0.5)
        finally:
            await client.aclose()

    for mode, decision in ((FailMode.CLOSED, OutputDecision.QUARANTINE),
                           (FailMode.OPEN, OutputDecision.ALLOW)):
        meta, content, alone_meta, alone_content = asyncio.run(ask(mode))
        assert (meta.decision, meta.skipped, meta.failed) == (
            alone_meta.decision, alone_meta.skipped, alone_meta.failed) == (
            OutputDecision.ALLOW, True, True)
        assert (content.decision, content.failed, content.unavailable) == (
            alone_content.decision, alone_content.failed, alone_content.unavailable) == (
            decision, True, True)


def test_the_service_answers_meta_then_content_on_one_snapshot(policy_path):
    service = OutputPolicyService(Policy(policy_path, check_interval_s=0))
    base = {"job_id": "j", "tenant": "t", "content": PRIVATE_KEY}
    blocked = service.check_both({**base, "topic": "job.blocked"})
    assert blocked["meta"]["decision"] == "QUARANTINE" and blocked["content"] is None
    leak = service.check_both({**base, "topic": "job.default"})
    assert leak["meta"]["decision"] == "ALLOW"
    assert leak["content"] == service.check({**base, "topic": "job.default"},
                                            with_content=True)
    assert leak["content"]["decision"] == "QUARANTINE"
    assert leak["meta"]["policy_snapshot"] == leak["content"]["policy_snapshot"]


def test_the_method_names_are_the_service_s():
    assert {m.rsplit("/", 1)[-1] for m in (CHECK_META_METHOD, CHECK_CONTENT_METHOD,
                                           CHECK_RESULT_METHOD)} == {
        "CheckMeta", "CheckContent", "CheckResult"}
