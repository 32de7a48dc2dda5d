"""Saga record and rollback on the real Redis and NATS.

Compensation jobs are published on sys.job.submit (captured by the CORDUM_JOBS
stream). Each test uses its own workflow id and topics under
``job.saga-test.<unique>``, which no pool serves, watches the subject with a
core subscription filtered by the workflow label, and deletes its messages
from the stream afterwards.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

import nats
import pytest
import redis.asyncio as aioredis

from cordum import protocol
from cordum.bus.publisher import NatsPublisher, PublishError
from cordum.bus.streams import ensure_stream
from cordum.config import load_settings
from cordum.safety.client import Decision, SafetyVerdict
from cordum.scheduler.compensation import InvalidCompensation
from cordum.scheduler.saga import (
    FOREIGN_COMPENSATION,
    INVALID_COMPENSATION,
    SAGA_SENDER,
    UNMARSHAL_FAILED,
    CompensationPublishError,
    Saga,
    SagaPolicy,
)
from cordum.store.saga import lock_key, recorded_key, saga_key, stack_key
from tests.conftest import NATS_URL, REDIS_URL
from tests.helpers import drop_from_stream

CRITICAL = protocol.JobPriority.JOB_PRIORITY_CRITICAL
WEEK_S = 7 * 24 * 3600


class Checker:
    """Safety stand-in: a fixed decision, optionally after a pause."""

    def __init__(self, decision: Decision, pause_s: float = 0.0) -> None:
        self.decision = decision
        self.pause_s = pause_s
        self.checked: list[tuple[str, str]] = []

    async def check(self, req: protocol.JobRequest, tenant: str) -> SafetyVerdict:
        self.checked.append((req.job_id, tenant))
        await asyncio.sleep(self.pause_s)  # the stand-in's latency, as a slow kernel's
        return SafetyVerdict(self.decision, "stand-in")


class FailingPublisher:
    """Publishes the first ``ok`` compensation jobs for real, then fails."""

    def __init__(self, real: NatsPublisher, ok: int) -> None:
        self._real = real
        self._ok = ok

    async def publish_durable(self, subject, msg, *, msg_id):
        if self._ok <= 0:
            raise PublishError(f"publish {subject}: stand-in failure")
        self._ok -= 1
        await self._real.publish_durable(subject, msg, msg_id=msg_id)

    async def publish(self, subject, msg):
        await self._real.publish(subject, msg)


class Env:
    def __init__(self, unique: str) -> None:
        self.unique = unique
        self.wf = f"wf-saga-{unique}"
        self.tenant = f"t-{unique}"
        self.redis = aioredis.Redis.from_url(REDIS_URL)
        self.publisher = NatsPublisher(load_settings(env={"REDIS_URL": REDIS_URL,
                                                         "NATS_URL": NATS_URL}))
        self.nc: Any = None
        self.first_seq = 0
        self.stream = ""

    def saga(self, **kw) -> Saga:
        kw.setdefault("publisher", self.publisher)
        return Saga(self.redis, **kw)

    def topic(self, name: str) -> str:
        return f"job.saga-test.{self.unique}.{name}"

    def step(self, job: str, undo: str = "undo", **kw) -> protocol.JobRequest:
        req = protocol.JobRequest(job_id=f"{job}-{self.unique}", topic=self.topic("do"),
                                  workflow_id=self.wf, tenant_id=self.tenant, **kw)
        req.compensation.topic = self.topic(undo)
        return req

    async def start(self) -> None:
        self.nc = await nats.connect(NATS_URL)
        js = self.nc.jetstream()
        self.stream = await ensure_stream(js)
        self.first_seq = (await js.stream_info(self.stream)).state.last_seq + 1

    async def watch(self, subject: str):
        sub = await self.nc.subscribe(subject)
        # The server knows the subscription before anything is published.
        await self.nc.flush()
        return sub

    async def ours(self, sub) -> list[protocol.BusPacket]:
        """Packets of this workflow published on ``sub`` by the calls made so far.

        Every publish was acknowledged (JetStream) or flushed (core NATS) before its call
        returned: the server has queued them for us, and one round trip on this
        connection brings them in ahead of its answer.
        """
        await self.nc.flush()
        out: list[protocol.BusPacket] = []
        for _ in range(sub.pending_msgs):
            packet = protocol.decode((await sub.next_msg()).data).packet
            kind = packet.WhichOneof("payload")
            if kind == "job_request" and \
                    packet.job_request.labels.get("saga_workflow_id") == self.wf:
                out.append(packet)
            elif kind == "job_result" and self.wf in packet.job_result.error_message:
                out.append(packet)
        return out

    async def stack(self) -> list[Any]:
        return await self.redis.lrange(stack_key(self.tenant, self.wf), 0, -1)

    async def cleanup(self) -> None:
        if self.nc is not None:
            await drop_from_stream(
                self.nc.jetstream(), self.stream, self.first_seq,
                lambda packet: packet.job_request.labels.get("saga_workflow_id") == self.wf)
            await self.nc.close()
        keys = await self.redis.keys(f"saga:*:{self.wf}:*")
        if keys:
            await self.redis.delete(*keys)
        await self.redis.aclose()


@pytest.fixture
def env(unique):
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    e = Env(unique)
    loop.run_until_complete(e.start())
    yield loop, e
    loop.run_until_complete(e.cleanup())
    from cordum import runtime

    loop.run_until_complete(runtime.aclose())
    loop.close()


# ---------------------------------------------------------------- record (case 26)


def test_record_stores_the_template_with_overrides_and_merged_maps(env):
    loop, e = env
    base = e.step("job-1", env={"base": "1", "shared": "base"}, labels={"k": "v"},
                  priority=protocol.JobPriority.JOB_PRIORITY_BATCH, step_index=2)
    base.meta.capability = "cap-base"
    base.meta.idempotency_key = "base-idem"
    base.meta.risk_tags.extend(["r1"])
    base.compensation.env.update({"undo": "1", "shared": "undo"})
    base.compensation.labels.update({"undo": "1"})
    base.compensation.meta.idempotency_key = "comp-idem"
    base.compensation.context_ptr = "redis://ctx:undo"
    base.compensation.budget.deadline_ms = 5000

    async def scenario():
        pushed = await e.saga().record_compensation(base)
        return pushed, await e.stack()

    pushed, stack = loop.run_until_complete(scenario())
    assert pushed is True and len(stack) == 1
    tmpl = protocol.JobRequest()
    tmpl.ParseFromString(stack[0])
    assert not tmpl.HasField("compensation")
    assert tmpl.job_id == ""
    assert tmpl.parent_job_id == base.job_id
    assert tmpl.workflow_id == e.wf
    assert tmpl.topic == e.topic("undo")
    assert tmpl.priority == CRITICAL
    assert tmpl.context_ptr == "redis://ctx:undo"
    assert tmpl.budget.deadline_ms == 5000
    assert tmpl.tenant_id == base.tenant_id and tmpl.step_index == 2
    assert dict(tmpl.env) == {"base": "1", "undo": "1", "shared": "undo"}
    assert dict(tmpl.labels) == {"k": "v", "undo": "1"}
    assert tmpl.meta.capability == "cap-base"
    assert tmpl.meta.idempotency_key == "comp-idem"
    assert list(tmpl.meta.risk_tags) == ["r1"]


def test_record_generates_the_idempotency_key_when_the_compensation_has_none(env):
    loop, e = env
    base = e.step("job-1")
    base.meta.capability = "cap-base"
    base.meta.idempotency_key = "base-idem"

    loop.run_until_complete(e.saga().record_compensation(base))
    tmpl = protocol.JobRequest()
    tmpl.ParseFromString(loop.run_until_complete(e.stack())[0])
    seed = f"{e.wf}|{base.job_id}|{e.topic('undo')}|cap-base"
    assert tmpl.meta.idempotency_key.startswith("saga:")
    assert tmpl.meta.idempotency_key != "base-idem"
    assert tmpl.meta.idempotency_key == "saga:" + hashlib.sha256(seed.encode()).digest()[
        :16].hex()


def test_record_skips_compensation_jobs_steps_without_compensation_or_workflow(env):
    loop, e = env
    saga = e.saga()
    comp_label = e.step("job-1", labels={"saga_compensation": "true"})
    comp_env = e.step("job-2", env={"saga_compensation": "1"})
    no_comp = protocol.JobRequest(job_id=f"job-3-{e.unique}", topic="job.x", workflow_id=e.wf)
    no_wf = e.step("job-4")
    no_wf.workflow_id = ""
    flag_false = e.step("job-5", labels={"saga_compensation": "false"})
    wf_label = e.step("job-6", labels={"workflow_id": e.wf})
    wf_label.workflow_id = ""

    async def scenario():
        results = [await saga.record_compensation(r)
                   for r in (comp_label, comp_env, no_comp, no_wf, flag_false, wf_label)]
        return results, await e.stack()

    results, stack = loop.run_until_complete(scenario())
    # A workflow_id label makes no saga step: labels are the client's to write.
    assert results == [False, False, False, False, True, False]
    parents = [protocol.JobRequest.FromString(raw).parent_job_id for raw in stack]
    assert parents == [flag_false.job_id]


def test_recording_the_same_step_twice_stacks_it_once(env):
    loop, e = env
    saga = e.saga()
    base = e.step("job-1")

    async def scenario():
        first = await saga.record_compensation(base)
        second = await saga.record_compensation(base)
        return first, second, await e.stack()

    first, second, stack = loop.run_until_complete(scenario())
    assert (first, second, len(stack)) == (True, False, 1)


def test_record_without_compensation_topic_is_invalid(env):
    loop, e = env
    base = e.step("job-1")
    base.compensation.topic = "  "
    with pytest.raises(InvalidCompensation, match="compensation topic required"):
        loop.run_until_complete(e.saga().record_compensation(base))
    assert loop.run_until_complete(e.stack()) == []


@pytest.mark.parametrize("claim", ["tenant_id", "env", "meta"])
def test_record_refuses_a_compensation_naming_another_tenant(env, claim):
    loop, e = env
    base = e.step("job-1")
    if claim == "tenant_id":
        base.compensation.tenant_id = "someone-else"
    elif claim == "env":
        base.compensation.env["tenant_id"] = "someone-else"
    else:
        base.compensation.meta.tenant_id = "someone-else"
    with pytest.raises(InvalidCompensation, match="someone-else"):
        loop.run_until_complete(e.saga().record_compensation(base))
    assert loop.run_until_complete(e.stack()) == []


def test_record_stacks_under_the_stored_tenant_and_workflow(env):
    loop, e = env
    base = e.step("job-1")
    base.tenant_id = ""  # the stored tenant stands for a request that names none
    base.workflow_id = ""

    async def scenario():
        pushed = await e.saga().record_compensation(base, tenant=e.tenant, workflow_id=e.wf)
        return pushed, await e.stack()

    pushed, stack = loop.run_until_complete(scenario())
    assert pushed is True and len(stack) == 1
    assert protocol.JobRequest.FromString(stack[0]).tenant_id == e.tenant


def test_saga_keys_name_the_tenant_and_never_meet_another_tenants():
    assert stack_key("acme", "wf-1") == "saga:acme:wf-1:stack"
    assert lock_key("acme", "wf-1") == "saga:acme:wf-1:lock"
    assert recorded_key("acme", "wf-1") == "saga:acme:wf-1:recorded"
    assert saga_key("a:b", "c", "stack") != saga_key("a", "b:c", "stack")
    assert saga_key("a%3Ab", "c", "stack") != saga_key("a:b", "c", "stack")


def test_stack_key_expires_and_each_push_refreshes_it(env):
    loop, e = env
    saga = e.saga()

    async def scenario():
        await saga.record_compensation(e.step("job-1"))
        await e.redis.expire(stack_key(e.tenant, e.wf), 100)
        await saga.record_compensation(e.step("job-2"))
        return (await e.redis.ttl(stack_key(e.tenant, e.wf)),
                await e.redis.ttl(recorded_key(e.tenant, e.wf)))

    stack_ttl, recorded_ttl = loop.run_until_complete(scenario())
    assert WEEK_S - 10 < stack_ttl <= WEEK_S
    assert WEEK_S - 10 < recorded_ttl <= WEEK_S


# ---------------------------------------------------------------- rollback (case 27)


def test_rollback_publishes_the_compensation_job_on_submit(env):
    loop, e = env
    checker = Checker(Decision.ALLOW)
    saga = e.saga(safety=checker)
    step = e.step("job-1", undo="undo")
    step.compensation.topic = f"saga-test.{e.unique}.bare"  # no "job." prefix

    async def scenario():
        await saga.record_compensation(step)
        sub = await e.watch(protocol.SUBJECT_SUBMIT)
        report = await saga.rollback(e.tenant, e.wf, deadline=time.monotonic() + 10)
        return report, await e.ours(sub), await e.stack(), \
            await e.redis.exists(lock_key(e.tenant, e.wf))

    report, packets, stack, locked = loop.run_until_complete(scenario())
    assert report.complete and report.acquired and len(report.dispatched) == 1
    assert len(packets) == 1
    packet = packets[0]
    req = packet.job_request
    assert req.job_id.startswith("comp-") and req.job_id == report.dispatched[0]
    assert req.topic == f"job.saga-test.{e.unique}.bare"
    assert req.priority == CRITICAL
    assert req.labels["saga_compensation"] == "true"
    assert req.labels["is_compensation"] == "true"
    assert req.labels["saga_workflow_id"] == e.wf
    assert req.env["saga_compensation"] == "true"
    assert req.env["saga_workflow_id"] == e.wf
    assert req.parent_job_id == step.job_id
    # What a CAP worker checks before it takes a packet.
    decoded = protocol.decode(packet.SerializeToString())
    assert decoded.kind == "job_request"
    assert packet.trace_id == req.job_id and packet.sender_id == SAGA_SENDER
    assert packet.protocol_version == 1
    protocol.validate_job_request(req)
    assert checker.checked == [(req.job_id, step.tenant_id)]
    assert stack == [] and not locked


def test_safety_deny_skips_the_compensation_and_empties_the_stack(env):
    loop, e = env
    saga = e.saga(safety=Checker(Decision.DENY))

    async def scenario():
        await saga.record_compensation(e.step("job-1"))
        sub = await e.watch(protocol.SUBJECT_SUBMIT)
        report = await saga.rollback(e.tenant, e.wf)
        return report, await e.ours(sub), await e.redis.exists(stack_key(e.tenant, e.wf))

    report, packets, exists = loop.run_until_complete(scenario())
    assert packets == []
    assert report.complete and report.denied == 1 and report.dispatched == []
    assert not exists


def test_safety_unavailable_still_dispatches(env):
    loop, e = env
    saga = e.saga(safety=Checker(Decision.UNAVAILABLE))

    async def scenario():
        await saga.record_compensation(e.step("job-1"))
        sub = await e.watch(protocol.SUBJECT_SUBMIT)
        report = await saga.rollback(e.tenant, e.wf)
        return report, await e.ours(sub)

    report, packets = loop.run_until_complete(scenario())
    assert len(report.dispatched) == 1 and len(packets) == 1


def test_unparseable_entry_goes_to_the_dlq_and_the_rollback_goes_on(env):
    loop, e = env
    saga = e.saga()

    async def scenario():
        await saga.record_compensation(e.step("job-1"))
        await e.redis.lpush(stack_key(e.tenant, e.wf), b"\x0a\xff\xff")  # truncated field 1
        dlq = await e.watch(protocol.SUBJECT_DLQ)
        submit = await e.watch(protocol.SUBJECT_SUBMIT)
        report = await saga.rollback(e.tenant, e.wf)
        return report, await e.ours(dlq), await e.ours(submit)

    report, dlq, submitted = loop.run_until_complete(scenario())
    assert report.complete and report.broken == 1 and len(report.dispatched) == 1
    assert len(dlq) == 1 and len(submitted) == 1
    packet = dlq[0]
    res = packet.job_result
    assert res.error_code == UNMARSHAL_FAILED
    assert res.status == protocol.JobStatus.JOB_STATUS_FAILED_FATAL
    assert packet.trace_id.startswith("saga-unmarshal-")
    assert packet.sender_id == SAGA_SENDER
    protocol.decode(packet.SerializeToString())
    protocol.validate_job_result(res)


def test_entry_without_topic_goes_to_the_dlq(env):
    loop, e = env
    saga = e.saga()
    broken = protocol.JobRequest(workflow_id=e.wf, tenant_id=e.tenant)

    async def scenario():
        await e.redis.lpush(stack_key(e.tenant, e.wf), broken.SerializeToString())
        dlq = await e.watch(protocol.SUBJECT_DLQ)
        report = await saga.rollback(e.tenant, e.wf)
        return report, await e.ours(dlq)

    report, dlq = loop.run_until_complete(scenario())
    assert report.complete and report.broken == 1
    assert [p.job_result.error_code for p in dlq] == [INVALID_COMPENSATION]


def test_an_entry_of_another_tenant_is_never_published(env):
    loop, e = env
    saga = e.saga()
    foreign = protocol.JobRequest(topic=e.topic("undo"), workflow_id=e.wf,
                                  tenant_id="someone-else")

    async def scenario():
        await saga.record_compensation(e.step("job-2"))
        await e.redis.lpush(stack_key(e.tenant, e.wf), foreign.SerializeToString())
        dlq = await e.watch(protocol.SUBJECT_DLQ)
        submit = await e.watch(protocol.SUBJECT_SUBMIT)
        report = await saga.rollback(e.tenant, e.wf)
        return report, await e.ours(dlq), await e.ours(submit)

    report, dlq, submitted = loop.run_until_complete(scenario())
    assert report.complete and report.broken == 1 and len(report.dispatched) == 1
    assert [p.job_result.error_code for p in dlq] == [FOREIGN_COMPENSATION]
    assert [p.job_request.tenant_id for p in submitted] == [e.tenant]


def test_a_rollback_reads_only_its_own_tenants_stack(env):
    loop, e = env
    saga = e.saga()

    async def scenario():
        await saga.record_compensation(e.step("job-1"))
        sub = await e.watch(protocol.SUBJECT_SUBMIT)
        report = await saga.rollback(f"other-{e.unique}", e.wf)
        return report, await e.ours(sub), await e.stack()

    report, packets, stack = loop.run_until_complete(scenario())
    assert report.complete and report.dispatched == [] and packets == []
    assert len(stack) == 1


def test_rollback_runs_compensations_newest_first(env):
    loop, e = env
    saga = e.saga()

    async def scenario():
        for n in (1, 2, 3):
            await saga.record_compensation(e.step(f"job-{n}", undo=f"undo{n}"))
        sub = await e.watch(protocol.SUBJECT_SUBMIT)
        report = await saga.rollback(e.tenant, e.wf)
        return report, await e.ours(sub)

    report, packets = loop.run_until_complete(scenario())
    assert len(report.dispatched) == 3
    assert [p.job_request.topic for p in packets] == [e.topic("undo3"), e.topic("undo2"),
                                                       e.topic("undo1")]
    assert [p.job_request.job_id for p in packets] == report.dispatched


def test_a_held_lock_makes_the_rollback_a_noop(env):
    loop, e = env
    saga = e.saga()

    async def scenario():
        await saga.record_compensation(e.step("job-1"))
        await e.redis.set(lock_key(e.tenant, e.wf), "1", ex=30)
        report = await saga.rollback(e.tenant, e.wf)
        return report, await e.stack(), await e.redis.exists(lock_key(e.tenant, e.wf))

    report, stack, locked = loop.run_until_complete(scenario())
    assert report.acquired is False and report.dispatched == []
    assert len(stack) == 1
    assert locked  # the holder's lock is left alone


def test_two_concurrent_rollbacks_dispatch_each_compensation_once(env):
    loop, e = env
    # The pause keeps the first rollback inside its lock while the second arrives.
    saga = e.saga(safety=Checker(Decision.ALLOW, pause_s=0.2))
    other = e.saga(safety=Checker(Decision.ALLOW, pause_s=0.2))

    async def scenario():
        for n in (1, 2):
            await saga.record_compensation(e.step(f"job-{n}", undo=f"undo{n}"))
        sub = await e.watch(protocol.SUBJECT_SUBMIT)
        reports = await asyncio.gather(saga.rollback(e.tenant, e.wf),
                                       other.rollback(e.tenant, e.wf))
        return reports, await e.ours(sub)

    reports, packets = loop.run_until_complete(scenario())
    assert sorted(r.acquired for r in reports) == [False, True]
    assert sum(len(r.dispatched) for r in reports) == 2
    assert len(packets) == 2


def test_publish_failure_keeps_the_popped_entry_and_the_rest(env):
    loop, e = env
    saga = e.saga(publisher=FailingPublisher(e.publisher, ok=1))

    async def scenario():
        for n in (1, 2, 3):
            await saga.record_compensation(e.step(f"job-{n}", undo=f"undo{n}"))
        before = await e.stack()
        sub = await e.watch(protocol.SUBJECT_SUBMIT)
        with pytest.raises(CompensationPublishError) as info:
            await saga.rollback(e.tenant, e.wf)
        return before, info.value, await e.stack(), await e.ours(sub), \
            await e.redis.exists(lock_key(e.tenant, e.wf))

    before, error, after, packets, locked = loop.run_until_complete(scenario())
    assert [p.job_request.topic for p in packets] == [e.topic("undo3")]
    # undo2 failed: back on top, byte for byte, with undo1 below it.
    assert after == before[1:]
    assert error.report.stopped == "publish failed" and error.report.remaining == 2
    assert not error.report.complete
    assert not locked

    # Run again with a working publisher: it resumes where it stopped.
    async def resume():
        sub = await e.watch(protocol.SUBJECT_SUBMIT)
        report = await e.saga().rollback(e.tenant, e.wf)
        return report, await e.ours(sub)

    report, packets = loop.run_until_complete(resume())
    assert report.complete
    assert [p.job_request.topic for p in packets] == [e.topic("undo2"), e.topic("undo1")]


def test_a_passed_deadline_leaves_the_stack_for_the_next_run(env):
    loop, e = env
    saga = e.saga()

    async def scenario():
        for n in (1, 2):
            await saga.record_compensation(e.step(f"job-{n}", undo=f"undo{n}"))
        report = await saga.rollback(e.tenant, e.wf, deadline=time.monotonic())
        return report, await e.stack(), await e.redis.exists(lock_key(e.tenant, e.wf))

    report, stack, locked = loop.run_until_complete(scenario())
    assert report.stopped == "deadline" and report.remaining == 2 and not report.complete
    assert report.dispatched == [] and len(stack) == 2 and not locked


def test_a_check_that_outlasts_the_deadline_puts_the_entry_back(env):
    loop, e = env
    saga = e.saga(safety=Checker(Decision.ALLOW, pause_s=2.0))

    async def scenario():
        await saga.record_compensation(e.step("job-1"))
        before = await e.stack()
        sub = await e.watch(protocol.SUBJECT_SUBMIT)
        report = await saga.rollback(e.tenant, e.wf, deadline=time.monotonic() + 1.3)
        return report, before, await e.stack(), await e.ours(sub)

    report, before, after, packets = loop.run_until_complete(scenario())
    assert report.stopped == "deadline" and report.remaining == 1
    assert report.dispatched == [] and packets == []
    assert after == before


def test_empty_stack_rolls_back_nothing(env):
    loop, e = env
    report = loop.run_until_complete(e.saga().rollback(e.tenant, e.wf))
    assert report.complete and report.acquired and report.dispatched == []


def test_policy_rejects_a_lock_too_short_for_a_step():
    with pytest.raises(ValueError):
        SagaPolicy(lock_ttl_s=4, store_timeout_s=2.0)
