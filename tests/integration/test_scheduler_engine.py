"""The submit and result paths of the scheduler's engine (cordum.scheduler.engine) on the
real Redis, NATS and safety kernel. (The workflow engine's are test_workflow_runs.py and
tests/unit/test_workflow_engine.py.)"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import nats
import pytest
import redis.asyncio as aioredis

from cordum import protocol
from cordum.bus.publisher import NatsPublisher
from cordum.bus.streams import ensure_stream
from cordum.config import PoolsConfig, load_settings
from cordum.errors import RetryAfter
from cordum.registry.reader import SnapshotReader
from cordum.safety.client import SafetyClient
from cordum.scheduler.backoff import BackoffPolicy
from cordum.scheduler.engine import Engine
from cordum.scheduler.errors import UnparseableRecord
from cordum.scheduler.strategy import LeastLoadedStrategy
from cordum.store.jobs import JobStore
from cordum.store.locks import JobLocks
from tests.conftest import NATS_URL, REDIS_URL
from tests.helpers import eventually, free_port


class Harness:
    def __init__(self, unique: str, kernel_addr: str) -> None:
        self.unique = unique
        self.worker_id = f"w-{unique}"
        self.snapshot_key = f"test:snapshot:{unique}"
        self.redis = aioredis.Redis.from_url(REDIS_URL)
        self.store = JobStore(self.redis)
        cfg = load_settings(env={"REDIS_URL": REDIS_URL, "NATS_URL": NATS_URL})
        self.publisher = NatsPublisher(cfg)
        self.wiring: dict[str, Any] = dict(
            store=self.store,
            registry=SnapshotReader(self.redis, key=self.snapshot_key, max_age_s=0),
            strategy=LeastLoadedStrategy(
                PoolsConfig(topics={"job.default": ["default"]}, pools={})),
            safety=SafetyClient(kernel_addr, 1.0),
            publisher=self.publisher,
            locks=JobLocks(self.redis),
            backoff=BackoffPolicy(),
        )
        self.engine = Engine(**self.wiring)

    def rewire(self, **changes: Any) -> None:
        """A new engine with some of its collaborators (or settings) replaced."""
        self.wiring.update(changes)
        self.engine = Engine(**self.wiring)

    async def add_worker(self) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        doc = {"captured_at": now, "writer_id": "t", "pools": {},
               "topics": {}, "workers": [{"worker_id": self.worker_id, "pool": "default",
                                          "active_jobs": 0, "max_parallel_jobs": 4}]}
        await self.redis.set(self.snapshot_key, json.dumps(doc), ex=60)

    def request(self, job_id: str | None = None) -> bytes:
        req = protocol.JobRequest(job_id=job_id or f"job-{self.unique}", topic="job.default",
                                  tenant_id=f"t-{self.unique}")
        return protocol.packet(trace_id=f"tr-{self.unique}", sender_id="test",
                               job_request=req).SerializeToString()

    def result(self, status=protocol.JobStatus.JOB_STATUS_SUCCEEDED) -> bytes:
        res = protocol.JobResult(job_id=f"job-{self.unique}", status=status,
                                 worker_id=self.worker_id,
                                 result_ptr=f"redis://res:job-{self.unique}")
        return protocol.packet(trace_id=f"tr-{self.unique}", sender_id=self.worker_id,
                               job_result=res).SerializeToString()

    async def state(self) -> str:
        return (await self.store.get(f"job-{self.unique}")).get("state", "")

    async def cleanup(self) -> None:
        keys = await self.redis.keys(f"*{self.unique}*")
        if keys:
            await self.redis.delete(*keys)
        await self.redis.aclose()


@pytest.fixture
def harness(unique, kernel):
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    h = Harness(unique, kernel)
    yield loop, h
    loop.run_until_complete(h.cleanup())
    from cordum import runtime

    loop.run_until_complete(runtime.aclose())
    loop.close()


def test_request_is_dispatched_to_the_worker_subject_and_recorded_running(harness):
    loop, h = harness

    async def scenario():
        await h.add_worker()
        nc = await nats.connect(NATS_URL)
        sub = await nc.subscribe(protocol.direct_subject(h.worker_id))
        outcome = await h.engine.handle_request(h.request())
        msg = await sub.next_msg(timeout=2)
        await nc.close()
        return outcome, protocol.decode(msg.data)

    outcome, decoded = loop.run_until_complete(scenario())
    assert outcome.action == "dispatched" and outcome.detail == h.worker_id
    assert decoded.kind == "job_request"
    assert decoded.packet.sender_id == protocol.SENDER_SCHEDULER
    assert decoded.packet.job_request.job_id == f"job-{h.unique}"
    meta = loop.run_until_complete(h.store.get(f"job-{h.unique}"))
    assert meta["state"] == "RUNNING" and meta["worker_id"] == h.worker_id
    assert meta["attempts"] == "1" and meta["safety_decision"] == "ALLOW"
    events = loop.run_until_complete(h.redis.lrange(f"job:events:job-{h.unique}", 0, -1))
    # Straight from the bus (no gateway): the job starts PENDING.
    assert [json.loads(e)["state"] for e in events] == [
        "PENDING", "SCHEDULED", "DISPATCHED", "RUNNING"]
    # RUNNING and the job lock's release are one script: the lock is gone with it.
    assert loop.run_until_complete(h.redis.exists(f"cordum:scheduler:job:job-{h.unique}")) == 0


def test_redelivered_request_of_a_running_job_is_a_no_op(harness):
    loop, h = harness

    async def scenario():
        await h.add_worker()
        first = await h.engine.handle_request(h.request())
        second = await h.engine.handle_request(h.request())
        return first, second

    first, second = loop.run_until_complete(scenario())
    assert first.action == "dispatched" and second.action == "noop"
    assert loop.run_until_complete(h.redis.llen(f"job:events:job-{h.unique}")) == 4


def test_no_live_worker_leaves_the_job_pending_and_counts_the_attempt(harness):
    loop, h = harness
    outcome = loop.run_until_complete(h.engine.handle_request(h.request()))
    assert (outcome.action, outcome.state) == ("waiting", "PENDING")
    assert "no workers" in outcome.detail
    meta = loop.run_until_complete(h.store.get(f"job-{h.unique}"))
    assert meta["state"] == "PENDING" and meta["attempts"] == "1"


def test_unreachable_kernel_fails_closed_with_retry(harness):
    loop, h = harness
    h.rewire(safety=SafetyClient(f"127.0.0.1:{free_port()}", 0.3))
    with pytest.raises(RetryAfter, match="safety unavailable"):
        loop.run_until_complete(h.engine.handle_request(h.request()))
    assert loop.run_until_complete(h.state()) == "PENDING"


def test_garbage_is_unparseable_and_invalid_request_is_dropped(harness):
    loop, h = harness
    with pytest.raises(UnparseableRecord):
        loop.run_until_complete(h.engine.handle_request(b"\xff\x00garbage"))
    bad = protocol.packet(trace_id="t", sender_id="s",
                          job_request=protocol.JobRequest(job_id="", topic="job.default"))
    outcome = loop.run_until_complete(h.engine.handle_request(bad.SerializeToString()))
    assert outcome.action == "dropped" and "job_id is empty" in outcome.detail


def test_result_records_terminal_state_once(harness):
    loop, h = harness

    async def scenario():
        await h.add_worker()
        await h.engine.handle_request(h.request())
        first = await h.engine.handle_result(h.result())
        # A duplicate or a late different result changes nothing.
        dup = await h.engine.handle_result(h.result(protocol.JobStatus.JOB_STATUS_FAILED))
        return first, dup

    first, dup = loop.run_until_complete(scenario())
    assert (first.action, first.state) == ("recorded", "SUCCEEDED")
    assert dup.action == "ignored"
    meta = loop.run_until_complete(h.store.get(f"job-{h.unique}"))
    assert meta["state"] == "SUCCEEDED"
    assert meta["result_ptr"] == f"redis://res:job-{h.unique}"


def test_retryable_failure_moves_to_retrying(harness):
    loop, h = harness

    async def scenario():
        await h.add_worker()
        await h.engine.handle_request(h.request())
        return await h.engine.handle_result(
            h.result(protocol.JobStatus.JOB_STATUS_FAILED_RETRYABLE))

    assert loop.run_until_complete(scenario()).state == "RETRYING"


class PolicyStandIn:
    """Cordum's test checker: sys.destroy -> DENY, sys.unavailable -> UNAVAILABLE,
    sys.approval.gate -> REQUIRE_APPROVAL, anything else ALLOW. Policy evaluation of
    the real kernel is not built yet; this stands in for the kernel port only."""

    def __init__(self) -> None:
        self.calls = 0

    async def check(self, req, tenant):
        from cordum.safety.client import Decision, SafetyVerdict

        self.calls += 1
        decision = {"sys.destroy": Decision.DENY, "sys.unavailable": Decision.UNAVAILABLE,
                    "sys.approval.gate": Decision.REQUIRE_APPROVAL}.get(req.topic,
                                                                        Decision.ALLOW)
        return SafetyVerdict(decision, f"stand-in {decision.value}", "stand-in", "snap-1")


class FailingPublisher:
    """A bus whose publishes to worker subjects always fail; DLQ publishes go through."""

    def __init__(self, real) -> None:
        self.real = real
        self.attempts = 0

    async def publish(self, subject, msg):
        if subject.startswith("worker."):
            self.attempts += 1
            raise RuntimeError("bus down")
        await self.real.publish(subject, msg)


def request_on(h, topic, job_id=None):
    req = protocol.JobRequest(job_id=job_id or f"job-{h.unique}", topic=topic,
                              tenant_id=f"t-{h.unique}")
    return protocol.packet(trace_id=f"tr-{h.unique}", sender_id="test",
                           job_request=req).SerializeToString()


async def listen(subject):
    """A connection subscribed to ``subject``; the server has the subscription on return,
    so nothing published from then on passes it by."""
    nc = await nats.connect(NATS_URL)
    sub = await nc.subscribe(subject)
    await nc.flush()
    return nc, sub


async def delivered(nc, sub):
    """The messages of ``sub`` published before this call by code that has returned.

    The engine's publishes are flushed (core NATS) or acknowledged (JetStream) before its
    call returns, so by then the server has queued them for us; one round trip on our own
    connection brings them in ahead of its answer. No waiting for stragglers: there are
    none to wait for.
    """
    await nc.flush()
    return [await sub.next_msg() for _ in range(sub.pending_msgs)]


async def collect(subject, coro):
    """Run ``coro``, and the packets published on ``subject`` while it ran."""
    nc, sub = await listen(subject)
    try:
        result = await coro
        seen = [protocol.decode(msg.data).packet for msg in await delivered(nc, sub)]
    finally:
        await nc.close()
    return result, seen


def dlq_packets_for(seen, job_id):
    return [p for p in seen if p.job_result.job_id == job_id]


def test_denied_job_goes_to_denied_with_one_dlq_entry_and_one_dlq_packet(harness):
    loop, h = harness
    h.rewire(safety=PolicyStandIn())
    job_id = f"job-{h.unique}"
    outcome, seen = loop.run_until_complete(
        collect(protocol.SUBJECT_DLQ, h.engine.handle_request(request_on(h, "sys.destroy"))))
    assert outcome.state == "DENIED"
    packets = dlq_packets_for(seen, job_id)
    assert len(packets) == 1 and packets[0].job_result.error_code == "safety_denied"
    assert packets[0].job_result.error_code_enum == 300
    entry = json.loads(loop.run_until_complete(h.redis.get(f"dlq:entry:{job_id}")))
    assert entry["reason_code"] == "safety_denied" and entry["last_state"] == "PENDING"
    loop.run_until_complete(h.redis.zrem("dlq:index", job_id))


def test_unavailable_kernel_retries_without_dlq_and_fail_open_dispatches(harness):
    loop, h = harness
    h.rewire(safety=PolicyStandIn())
    with pytest.raises(RetryAfter, match="safety unavailable"):
        loop.run_until_complete(h.engine.handle_request(request_on(h, "sys.unavailable")))
    assert loop.run_until_complete(h.state()) == "PENDING"
    assert loop.run_until_complete(h.redis.get(f"dlq:entry:job-{h.unique}")) is None
    # Fail-open: dispatched, and the job carries the bypass labels.
    h.rewire(input_fail_open=True,
             strategy=LeastLoadedStrategy(PoolsConfig(topics={"sys.unavailable": ["default"]})))
    loop.run_until_complete(h.add_worker())
    counter = "cordum:scheduler:input_fail_open_total"
    before = int(loop.run_until_complete(h.redis.get(counter)) or 0)
    outcome = loop.run_until_complete(h.engine.handle_request(request_on(h, "sys.unavailable")))
    assert outcome.action == "dispatched"
    # Counted where GET /api/v1/status reads it (other tests may count too: at least one).
    assert int(loop.run_until_complete(h.redis.get(counter)) or 0) >= before + 1


def test_require_approval_parks_the_job_without_dlq(harness):
    loop, h = harness
    h.rewire(safety=PolicyStandIn())
    outcome = loop.run_until_complete(h.engine.handle_request(request_on(h, "sys.approval.gate")))
    assert outcome.state == "APPROVAL_REQUIRED"
    assert loop.run_until_complete(h.state()) == "APPROVAL_REQUIRED"
    assert loop.run_until_complete(h.redis.get(f"dlq:entry:job-{h.unique}")) is None


@pytest.mark.parametrize(("attempts", "expected"), [(50, "FAILED"), (49, "PENDING")])
def test_retry_cap(harness, attempts, expected):
    loop, h = harness
    job_id = f"job-{h.unique}"

    async def scenario():
        await h.engine.handle_request(h.request())  # no worker: stays PENDING
        await h.redis.hset(f"job:meta:{job_id}", "attempts", attempts)
        return await collect(protocol.SUBJECT_DLQ, h.engine.handle_request(h.request()))

    outcome, seen = loop.run_until_complete(scenario())
    assert loop.run_until_complete(h.state()) == expected
    packets = dlq_packets_for(seen, job_id)
    if expected == "FAILED":
        assert len(packets) == 1
        assert packets[0].job_result.error_code == "max_scheduling_retries"
        loop.run_until_complete(h.redis.zrem("dlq:index", job_id))
    else:
        assert packets == [] and outcome.action == "waiting"
        meta = loop.run_until_complete(h.store.get(job_id))
        assert meta["attempts"] == "50"


def test_publish_failure_rolls_back_and_counts_attempts(harness):
    loop, h = harness
    h.rewire(publisher=FailingPublisher(h.publisher))
    loop.run_until_complete(h.add_worker())
    for _ in range(2):
        with pytest.raises(RetryAfter, match="dispatch to"):
            loop.run_until_complete(h.engine.handle_request(h.request()))
    meta = loop.run_until_complete(h.store.get(f"job-{h.unique}"))
    assert meta["state"] == "SCHEDULED" and meta["attempts"] == "4"


def test_state_read_error_does_not_dispatch(harness):
    """Case 17: the read of the job's state fails (it comes with the lock) -> retry,
    nothing dispatched, the stored state untouched."""
    loop, h = harness

    class ReadsTimeOut:
        def __init__(self, redis):
            self._redis = redis

        def register_script(self, text):
            script = self._redis.register_script(text)
            if "HGETALL" not in text:
                return script

            async def broken(**kwargs):
                raise ConnectionError("read timed out")

            return broken

        def __getattr__(self, name):
            return getattr(self._redis, name)

    loop.run_until_complete(h.add_worker())
    loop.run_until_complete(h.engine.handle_request(h.request()))  # RUNNING
    h.rewire(locks=JobLocks(ReadsTimeOut(h.redis)))
    with pytest.raises(RetryAfter):
        loop.run_until_complete(h.engine.handle_request(h.request()))
    assert loop.run_until_complete(h.state()) == "RUNNING"
    assert loop.run_until_complete(h.redis.llen(f"job:events:job-{h.unique}")) == 4


def test_same_request_twice_and_two_handlers_racing_dispatch_once(harness):
    loop, h = harness

    async def scenario():
        await h.add_worker()
        nc, sub = await listen(protocol.direct_subject(h.worker_id))
        outcomes = await asyncio.gather(h.engine.handle_request(h.request()),
                                        h.engine.handle_request(h.request()))
        again = await h.engine.handle_request(h.request())
        got = len(await delivered(nc, sub))
        await nc.close()
        return outcomes, again, got

    outcomes, again, got = loop.run_until_complete(scenario())
    assert sorted(o.action for o in outcomes) in (["dispatched", "noop"],)
    assert again.action == "noop" and got == 1


def test_same_failed_result_twice_gives_one_transition_and_one_dlq_entry(harness):
    loop, h = harness
    job_id = f"job-{h.unique}"

    async def scenario():
        await h.add_worker()
        await h.engine.handle_request(h.request())
        bad = h.result(protocol.JobStatus.JOB_STATUS_FAILED)
        first = await h.engine.handle_result(bad)
        second = await h.engine.handle_result(bad)
        return first, second

    (first, second), seen = loop.run_until_complete(
        collect(protocol.SUBJECT_DLQ, scenario()))
    assert (first.action, first.state, second.action) == ("recorded", "FAILED", "ignored")
    assert len(dlq_packets_for(seen, job_id)) == 1
    events = loop.run_until_complete(h.redis.lrange(f"job:events:{job_id}", 0, -1))
    assert [json.loads(e)["state"] for e in events].count("FAILED") == 1
    loop.run_until_complete(h.redis.zrem("dlq:index", job_id))


def test_retryable_result_has_no_dlq(harness):
    loop, h = harness
    job_id = f"job-{h.unique}"

    async def scenario():
        await h.add_worker()
        await h.engine.handle_request(h.request())
        return await h.engine.handle_result(
            h.result(protocol.JobStatus.JOB_STATUS_FAILED_RETRYABLE))

    outcome, seen = loop.run_until_complete(collect(protocol.SUBJECT_DLQ, scenario()))
    assert outcome.state == "RETRYING" and dlq_packets_for(seen, job_id) == []
    assert loop.run_until_complete(h.redis.get(f"dlq:entry:{job_id}")) is None


def test_cancel_from_the_bus_cancels_an_open_job_once(harness):
    loop, h = harness

    async def scenario():
        await h.add_worker()
        await h.engine.handle_request(h.request())
        cancel = protocol.packet(trace_id="t", sender_id="api-gateway",
                                 job_cancel=protocol.JobCancel(job_id=f"job-{h.unique}",
                                                               reason="by test"))
        first = await h.engine.handle_result(cancel.SerializeToString())
        late = await h.engine.handle_result(h.result())
        return first, late

    first, late = loop.run_until_complete(scenario())
    assert first.state == "CANCELLED" and late.action == "ignored"
    assert loop.run_until_complete(h.state()) == "CANCELLED"


def test_platform_notices_pass_the_worker_fence_and_copies_change_nothing(harness):
    """The API's cancel notice and the scheduler's gate result carry a worker_id that
    is no worker's: after the state they report, they are ignored quietly; the same
    on a job a worker still runs changes nothing."""
    from cordum.store.jobs import OPEN_STATES, JobState

    loop, h = harness
    job_id = f"job-{h.unique}"
    CANCELLED, SUCCEEDED = (protocol.JobStatus.JOB_STATUS_CANCELLED,  # noqa: N806
                            protocol.JobStatus.JOB_STATUS_SUCCEEDED)

    def notice(worker, status):
        res = protocol.JobResult(job_id=job_id, status=status, worker_id=worker)
        return protocol.packet(trace_id="t", sender_id=worker,
                               job_result=res).SerializeToString()

    async def scenario():
        await h.add_worker()
        await h.engine.handle_request(h.request())
        copies = [await h.engine.handle_result(notice("api-gateway", CANCELLED)),
                  await h.engine.handle_result(notice("cordum-scheduler", SUCCEEDED))]
        running = await h.state()
        # The API's cancel: CANCELLED stored first, then the notice on the result path.
        await h.store.transition(job_id, [JobState.CANCELLED], only_from=OPEN_STATES,
                                 fields={"failure_reason": "cancelled via api"})
        api = await h.engine.handle_result(notice("api-gateway", CANCELLED))
        late = await h.engine.handle_result(h.result())
        return copies, running, api, late

    copies, running, api, late = loop.run_until_complete(scenario())
    assert [o.action for o in copies] == ["ignored", "ignored"] and running == "RUNNING"
    assert api.action == "ignored" and late.action == "ignored"
    assert loop.run_until_complete(h.state()) == "CANCELLED"


class ScriptedKernel:
    """Answers each check with the next scripted verdict (the kernel port only)."""

    def __init__(self, *verdicts) -> None:
        self.verdicts = list(verdicts)
        self.calls = 0

    async def check(self, req, tenant):
        self.calls += 1
        return self.verdicts[min(self.calls, len(self.verdicts)) - 1]


def constraints(**budgets):
    from cordum.agent.v1 import safety_pb2

    c = safety_pb2.PolicyConstraints(redaction_level="strict")
    for k, v in budgets.items():
        setattr(c.budgets, k, v)
    return c


def test_allow_with_constraints_reaches_the_worker_in_env_and_budget(harness):
    from cordum.safety.client import Decision, SafetyVerdict

    loop, h = harness
    h.rewire(safety=ScriptedKernel(SafetyVerdict(
        Decision.ALLOW_WITH_CONSTRAINTS, "capped", "r1", "snap",
        constraints=constraints(max_runtime_ms=5000, max_retries=2))))

    async def scenario():
        await h.add_worker()
        nc = await nats.connect(NATS_URL)
        sub = await nc.subscribe(protocol.direct_subject(h.worker_id))
        await h.engine.handle_request(h.request())
        msg = await sub.next_msg(timeout=2)
        await nc.close()
        return protocol.decode(msg.data).packet.job_request

    req = loop.run_until_complete(scenario())
    assert req.budget.deadline_ms == 5000
    assert req.env["CORDUM_REDACTION_LEVEL"] == "strict" and req.env["CORDUM_MAX_RETRIES"] == "2"
    assert json.loads(req.env["CORDUM_POLICY_CONSTRAINTS"])["budgets"]["maxRuntimeMs"] == "5000"
    # The runtime cap became the job's deadline, which the reconciler scans.
    assert loop.run_until_complete(h.redis.zscore("job:deadline", f"job-{h.unique}")) is not None
    meta = loop.run_until_complete(h.store.get(f"job-{h.unique}"))
    assert meta["safety_decision"] == "ALLOW_WITH_CONSTRAINTS" and meta["deadline_unix"]


def test_policy_max_retries_fails_the_job(harness):
    from cordum.safety.client import Decision, SafetyVerdict

    loop, h = harness
    h.rewire(safety=ScriptedKernel(SafetyVerdict(
        Decision.ALLOW_WITH_CONSTRAINTS, "", "r1", "s", constraints=constraints(max_retries=1))))

    async def scenario():
        await h.engine.handle_request(h.request())  # no worker yet: PENDING, attempts 1
        await h.redis.hset(f"job:meta:job-{h.unique}", "attempts", 2)
        return await h.engine.handle_request(h.request())

    outcome = loop.run_until_complete(scenario())
    assert (outcome.state, outcome.detail) == ("FAILED", "max_retries_exceeded")
    loop.run_until_complete(h.redis.zrem("dlq:index", f"job-{h.unique}"))


def test_tenant_concurrency_limit_keeps_the_job_pending(harness):
    from cordum.safety.client import Decision, SafetyVerdict

    loop, h = harness
    h.rewire(safety=ScriptedKernel(SafetyVerdict(
        Decision.ALLOW_WITH_CONSTRAINTS, "", "r1", "s",
        constraints=constraints(max_concurrent_jobs=1))))
    tenant = f"t-{h.unique}"

    async def scenario():
        await h.add_worker()
        first = await h.engine.handle_request(request_on(h, "job.default", f"a-{h.unique}"))
        second = await h.engine.handle_request(request_on(h, "job.default", f"b-{h.unique}"))
        return first, second

    first, second = loop.run_until_complete(scenario())
    assert first.action == "dispatched"
    assert (second.action, second.state) == ("waiting", "PENDING")
    assert f"tenant {tenant} at its limit" in second.detail


def test_approved_job_skips_the_kernel_only_when_bound_to_hash_and_snapshot(harness):
    from cordum.safety.client import Decision, SafetyVerdict

    loop, h = harness
    kernel = ScriptedKernel(
        SafetyVerdict(Decision.REQUIRE_APPROVAL, "needs a human", "r-approve", "snap-A|1"),
        SafetyVerdict(Decision.REQUIRE_APPROVAL, "needs a human", "r-approve", "snap-A|1"),
    )
    h.rewire(safety=kernel)
    job_id = f"job-{h.unique}"

    def approved(extra_label=None):
        req = protocol.JobRequest(job_id=job_id, topic="job.default", tenant_id=f"t-{h.unique}")
        req.labels.update({"approval_granted": "true", "approval_snapshot": "snap-A|2"})
        if extra_label:
            req.labels["changed"] = extra_label
        return protocol.packet(trace_id="tr", sender_id="api-gateway-http",
                               job_request=req).SerializeToString()

    async def record(snapshot):
        # What the approve endpoint writes in the meta: the only approval there is.
        meta = await h.store.get(job_id)
        await h.redis.hset(f"job:meta:{job_id}", mapping={
            "approval_status": "APPROVED", "approval_policy_snapshot": snapshot,
            "approval_job_hash": meta["safety_job_hash"]})

    async def scenario():
        await h.add_worker()
        gated = await h.engine.handle_request(h.request())
        forged = await h.engine.handle_request(approved())  # labels, no record: re-check
        # Another file, or the same file with other bundles in force since the verdict
        # ("snap-A|1"): the approval was not for this policy, re-check.
        await record("snap-A|2")
        stale = await h.engine.handle_request(approved())
        await record("snap-A|1")
        tampered = await h.engine.handle_request(approved("x"))  # hash differs
        ok = await h.engine.handle_request(approved())
        return gated, forged, stale, tampered, ok

    gated, forged, stale, tampered, ok = loop.run_until_complete(scenario())
    assert gated.state == "APPROVAL_REQUIRED" and forged.state == "APPROVAL_REQUIRED"
    assert stale.state == "APPROVAL_REQUIRED" and tampered.state == "APPROVAL_REQUIRED"
    assert kernel.calls == 4  # the approved, bound request did not ask the kernel
    assert ok.action == "dispatched"
    meta = loop.run_until_complete(h.store.get(job_id))
    assert meta["safety_reason"] == "approval granted" and meta["state"] == "RUNNING"


def test_require_approval_keeps_the_stored_job_hash(harness):
    from cordum.safety.client import Decision, SafetyVerdict

    loop, h = harness
    h.rewire(safety=ScriptedKernel(SafetyVerdict(Decision.REQUIRE_APPROVAL, "", "r", "s")))
    job_id = f"job-{h.unique}"

    async def scenario():
        await h.engine.handle_request(h.request())
        await h.redis.hset(f"job:meta:{job_id}", "safety_job_hash", "pristine-gateway-hash-xyz")
        await h.redis.hset(f"job:meta:{job_id}", "state", "PENDING")
        await h.engine.handle_request(h.request())

    loop.run_until_complete(scenario())
    meta = loop.run_until_complete(h.store.get(job_id))
    assert meta["safety_job_hash"] == "pristine-gateway-hash-xyz"


def test_approval_gate_topic_completes_without_a_worker(harness):
    from cordum.approval import grant_record
    from cordum.safety.client import Decision, SafetyVerdict

    loop, h = harness
    # A gate job asks a human whatever the policy says of its topic: even a kernel
    # that allows it leaves it waiting for the approve endpoint's record.
    h.rewire(strategy=LeastLoadedStrategy(PoolsConfig(topics={})),
             safety=ScriptedKernel(SafetyVerdict(Decision.ALLOW, "allowed", "r", "s")))
    job_id = f"job-{h.unique}"
    gated = loop.run_until_complete(
        h.engine.handle_request(request_on(h, "job.cordum.approval-gate")))
    assert (gated.action, gated.state) == ("gated", "APPROVAL_REQUIRED")
    # Once approved (the record the approve endpoint writes), no worker runs it: the
    # scheduler completes it itself.
    meta = {k.decode(): v.decode() for k, v in
            loop.run_until_complete(h.redis.hgetall(f"job:meta:{job_id}")).items()}
    loop.run_until_complete(h.redis.hset(f"job:meta:{job_id}", mapping={
        **grant_record(meta, "workflow-gate"), "approved_by": "approver"}))
    outcome, seen = loop.run_until_complete(collect(
        protocol.SUBJECT_RESULT,
        h.engine.handle_request(request_on(h, "job.cordum.approval-gate"))))
    assert (outcome.action, outcome.state) == ("completed", "SUCCEEDED")
    results = [p for p in seen if p.job_result.job_id == job_id]
    assert len(results) == 1 and results[0].job_result.worker_id == "cordum-scheduler"
    # That result comes back on the result path: the worker fence lets it through.
    again = loop.run_until_complete(h.engine.handle_result(results[0].SerializeToString()))
    assert again.action == "ignored" and loop.run_until_complete(h.state()) == "SUCCEEDED"


def OwnJobs(redis, unique: str):  # noqa: N802 (stands in for the JobIndexes class)
    """The job indexes as one test sees them: its own jobs only. A replayer over the
    whole index would drive the jobs of a stack sharing this Redis with the test's
    engine (and fail them: its pools know only job.default)."""
    from cordum.store.indexes import JobIndexes

    class Own(JobIndexes):
        async def list_jobs_by_state(self, state, cutoff_us, limit=200, *, offset=0):
            ids = await super().list_jobs_by_state(state, cutoff_us, 100_000)
            return [i for i in ids if unique in i][offset:offset + limit]

    return Own(redis)


def test_a_lock_that_expires_mid_operation_lets_the_replayer_finish_the_job(harness):
    """Handler A takes the job lock, then stalls inside the safety check (a frozen
    container, say) past the lock's TTL. Nothing is killed. The replayer's run
    gets the lock once it has expired and dispatches the job; when A wakes up, the
    transition script sees the job has moved on and A dispatches nothing."""
    from cordum.safety.client import Decision, SafetyVerdict
    from cordum.scheduler.replayer import PendingReplayer, ReplayerPolicy
    from cordum.store.locks import LockPolicy

    loop, h = harness
    job_id = f"job-{h.unique}"
    woken = asyncio.Event()

    class StallingKernel:
        async def check(self, req, tenant):
            await woken.wait()
            return SafetyVerdict(Decision.ALLOW, "late", "r", "s")

    class FrozenRenewals:
        """A's Redis as seen from a frozen container: lock renewals do not go out."""

        def __init__(self, redis):
            self._redis = redis

        def register_script(self, text):
            script = self._redis.register_script(text)
            if "PEXPIRE" not in text.upper():
                return script

            async def frozen(**kwargs):
                await woken.wait()
                return await script(**kwargs)

            return frozen

        def __getattr__(self, name):
            return getattr(self._redis, name)

    short = LockPolicy(ttl_s=0.3, renew_every_s=0.1)
    stalled = Engine(store=h.store, registry=h.wiring["registry"], strategy=h.wiring["strategy"],
                     safety=StallingKernel(), publisher=h.publisher,
                     locks=JobLocks(FrozenRenewals(h.redis), short))
    replayer = PendingReplayer(h.engine, OwnJobs(h.redis, h.unique),
                               ReplayerPolicy(pending_age_s=0.0))

    async def scenario():
        await h.engine.handle_request(h.request())  # no worker yet: PENDING, request stored
        await h.add_worker()
        nc, sub = await listen(protocol.direct_subject(h.worker_id))
        a = asyncio.ensure_future(stalled.handle_request(h.request()))
        # A holds the lock (and then waits for the kernel until woken)
        await eventually(lambda: h.redis.exists(f"cordum:scheduler:job:{job_id}"))
        report = await replayer.tick()
        woken.set()
        a_outcome = await a
        # The replayer scans every PENDING job in this Redis; count ours.
        got = sum(protocol.decode(msg.data).packet.job_request.job_id == job_id
                  for msg in await delivered(nc, sub))
        await nc.close()
        return report, a_outcome, got

    report, a_outcome, got = loop.run_until_complete(scenario())
    assert sum(report.replayed.values()) >= 1
    assert loop.run_until_complete(h.state()) == "RUNNING"
    assert a_outcome.action == "noop" and got == 1


def test_a_retrying_job_is_dispatched_again_by_the_replayer_as_another_attempt(harness):
    """A worker's FAILED_RETRYABLE leaves the job RETRYING; the replayer drives it again
    (the chaos suite found jobs left there for good after a Redis restart)."""
    from cordum.scheduler.replayer import PendingReplayer, ReplayerPolicy

    loop, h = harness
    job_id = f"job-{h.unique}"
    replayer = PendingReplayer(h.engine, OwnJobs(h.redis, h.unique),
                               ReplayerPolicy(pending_age_s=0.0, retry_age_s=0.0))

    async def scenario():
        await h.add_worker()
        await h.engine.handle_request(h.request())
        await h.engine.handle_result(h.result(protocol.JobStatus.JOB_STATUS_FAILED_RETRYABLE))
        before = await h.state()
        tried = int(await h.redis.hget(f"job:meta:{job_id}", "attempts") or 0)
        nc, sub = await listen(protocol.direct_subject(h.worker_id))
        report = await replayer.tick()
        got = sum(protocol.decode(msg.data).packet.job_request.job_id == job_id
                  for msg in await delivered(nc, sub))
        await nc.close()
        attempts = int(await h.redis.hget(f"job:meta:{job_id}", "attempts") or 0)
        return before, report, got, attempts - tried

    before, report, got, more_attempts = loop.run_until_complete(scenario())
    assert before == "RETRYING"
    assert report.replayed == {"RETRYING": 1} and got == 1
    assert loop.run_until_complete(h.state()) == "RUNNING"
    # The replay is one more attempt (toward max_scheduling_retries), counted once: by
    # its move into SCHEDULED, as in Cordum (only a replayed SCHEDULED job adds its own).
    assert more_attempts == 1


def test_a_retrying_job_goes_again_after_the_retry_age_not_the_pending_age(harness):
    """A worker's retry is not a job left waiting: the next tick sends it again, even
    when PENDING jobs are only replayed after a long dispatch timeout."""
    from cordum.scheduler.replayer import PendingReplayer, ReplayerPolicy

    loop, h = harness
    slow = ReplayerPolicy(pending_age_s=3600.0, retry_age_s=0.0)
    replayer = PendingReplayer(h.engine, OwnJobs(h.redis, h.unique), slow)

    async def scenario():
        await h.add_worker()
        await h.engine.handle_request(h.request())
        await h.engine.handle_result(h.result(protocol.JobStatus.JOB_STATUS_FAILED_RETRYABLE))
        before = await h.state()
        report = await replayer.tick()
        return before, report, await h.state()

    before, report, after = loop.run_until_complete(scenario())
    assert before == "RETRYING" and report.replayed == {"RETRYING": 1} and after == "RUNNING"


def test_fatal_failure_in_a_workflow_publishes_the_recorded_compensation(harness):
    """Case 21: step 1 of wf succeeds (its compensation is recorded from the stored
    request), step 2 fails fatally -> the compensation job goes out on sys.job.submit."""
    from cordum.scheduler.saga import Saga
    from cordum.scheduler.saga_trigger import InProcessRollbackTrigger
    from cordum.store.indexes import JobIndexes
    from cordum.store.saga import recorded_key, stack_key

    loop, h = harness
    wf = f"wf-{h.unique}"
    saga = Saga(h.redis, h.publisher)
    h.rewire(saga=saga, rollback=InProcessRollbackTrigger(saga), requests=JobIndexes(h.redis))

    def step(n, with_compensation):
        req = protocol.JobRequest(job_id=f"s{n}-{h.unique}", topic="job.default",
                                  tenant_id=f"t-{h.unique}", workflow_id=wf)
        if with_compensation:
            req.compensation.topic = f"job.saga-test.undo-{h.unique}"
        return req

    def result(n, status):
        res = protocol.JobResult(job_id=f"s{n}-{h.unique}", status=status, worker_id=h.worker_id)
        return protocol.packet(trace_id="tr", sender_id=h.worker_id,
                               job_result=res).SerializeToString()

    async def scenario():
        # The submit stream exists wherever the bridge ran (a compensation is published
        # to it); on a fresh NATS this test may be the first to need it.
        nc = await nats.connect(NATS_URL)
        await ensure_stream(nc.jetstream())
        await nc.close()
        await h.add_worker()
        for n in (1, 2):
            pkt = protocol.packet(trace_id="tr", sender_id="test",
                                  job_request=step(n, n == 1)).SerializeToString()
            assert (await h.engine.handle_request(pkt)).action == "dispatched"
        await h.engine.handle_result(result(1, protocol.JobStatus.JOB_STATUS_SUCCEEDED))
        return await h.engine.handle_result(result(2, protocol.JobStatus.JOB_STATUS_FAILED_FATAL))

    outcome, seen = loop.run_until_complete(collect(protocol.SUBJECT_SUBMIT, scenario()))
    assert outcome.state == "FAILED"
    comps = [p.job_request for p in seen if p.job_request.labels.get("saga_workflow_id") == wf]
    assert len(comps) == 1
    comp = comps[0]
    assert comp.topic == f"job.saga-test.undo-{h.unique}" and comp.job_id.startswith("comp-")
    assert comp.priority == protocol.JobPriority.JOB_PRIORITY_CRITICAL
    assert comp.labels["saga_compensation"] == "true"
    tenant = f"t-{h.unique}"
    loop.run_until_complete(h.redis.delete(stack_key(tenant, wf), recorded_key(tenant, wf)))
    loop.run_until_complete(h.redis.zrem("dlq:index", f"s2-{h.unique}"))


def test_a_job_still_waiting_moves_to_the_young_end_of_its_index(harness):
    loop, h = harness
    job_id = f"job-{h.unique}"
    loop.run_until_complete(h.engine.handle_request(h.request()))  # no worker: PENDING
    loop.run_until_complete(h.redis.zadd("job:index:pending", {job_id: 1_000_000}, xx=True))
    outcome = loop.run_until_complete(h.engine.handle_request(h.request()))  # replayed
    assert outcome.action == "waiting"
    score = loop.run_until_complete(h.redis.zscore("job:index:pending", job_id))
    assert score > 10**15  # now, in microseconds: no longer at the head of the replayer's page


def test_no_worker_on_a_cached_snapshot_is_checked_on_a_fresh_read(harness):
    """A container that read the snapshot before a worker came online must not leave
    the next job waiting for the replayer: a miss is checked once on a fresh read."""
    loop, h = harness
    h.rewire(registry=SnapshotReader(h.redis, key=h.snapshot_key, max_age_s=60))
    first = loop.run_until_complete(h.engine.handle_request(request_on(h, "job.default",
                                                                       f"a-{h.unique}")))
    assert first.action == "waiting"  # no worker yet; the empty snapshot is now cached
    loop.run_until_complete(h.add_worker())
    second = loop.run_until_complete(h.engine.handle_request(h.request()))
    assert second.action == "dispatched" and second.detail == h.worker_id


def test_the_replayer_tick_run_twice_dispatches_a_waiting_job_once(harness):
    """Deliver twice, for the replayer-tick function: two ticks at once (two
    invocations overlapping) and a third after them hand the same waiting job to
    the engine; it reaches its worker exactly once."""
    from cordum.scheduler.replayer import PendingReplayer, ReplayerPolicy

    loop, h = harness
    job_id = f"job-{h.unique}"

    def replayer():
        return PendingReplayer(h.engine, OwnJobs(h.redis, h.unique),
                               ReplayerPolicy(pending_age_s=0.0))

    async def scenario():
        await h.engine.handle_request(h.request())  # no worker yet: PENDING, request stored
        assert await h.state() == "PENDING"
        await h.add_worker()
        nc, sub = await listen(protocol.direct_subject(h.worker_id))
        reports = await asyncio.gather(replayer().tick(), replayer().tick())
        reports.append(await replayer().tick())
        # The replayer scans every waiting job in this Redis; count ours.
        got = sum(protocol.decode(msg.data).packet.job_request.job_id == job_id
                  for msg in await delivered(nc, sub))
        await nc.close()
        return reports, got

    reports, got = loop.run_until_complete(scenario())
    assert sum(sum(r.replayed.values()) for r in reports) >= 1
    assert loop.run_until_complete(h.state()) == "RUNNING"
    assert got == 1
    events = loop.run_until_complete(h.redis.lrange(f"job:events:{job_id}", 0, -1))
    assert [json.loads(e)["state"] for e in events].count("DISPATCHED") == 1


def test_approved_worker_job_without_a_snapshot_is_checked_and_dispatched(harness):
    """Case 22 (TestApprovedWorkerJobNotAutoCompleted): an ordinary topic with
    approval_granted but no approval_snapshot gets the full safety check and is
    dispatched to a worker: not SUCCEEDED, no synthetic result."""
    from cordum.safety.client import Decision, SafetyVerdict

    loop, h = harness
    kernel = ScriptedKernel(SafetyVerdict(Decision.ALLOW, "allowed", "r-allow", "snap-A|1"))
    h.rewire(safety=kernel)
    job_id = f"job-{h.unique}"
    req = protocol.JobRequest(job_id=job_id, topic="job.default", tenant_id=f"t-{h.unique}")
    req.labels["approval_granted"] = "true"

    async def scenario():
        await h.add_worker()
        nc, results = await listen(protocol.SUBJECT_RESULT)
        outcome = await h.engine.handle_request(protocol.packet(
            trace_id="tr", sender_id="api-gateway-http", job_request=req).SerializeToString())
        synthetic = [res for res in (protocol.decode(msg.data).packet.job_result
                                     for msg in await delivered(nc, results))
                     if res.job_id == job_id]
        await nc.close()
        return outcome, synthetic

    outcome, synthetic = loop.run_until_complete(scenario())
    assert kernel.calls == 1  # the full check: an approval without a snapshot binds nothing
    assert outcome.action == "dispatched" and outcome.state == "RUNNING"
    meta = loop.run_until_complete(h.store.get(job_id))
    assert meta["state"] == "RUNNING" and meta["safety_reason"] == "allowed"
    assert synthetic == []


def test_a_job_ids_stored_tenant_and_topic_bind_every_later_request(harness):
    """A request for a stored job with another tenant or topic is refused (to the
    queue's DLQ) without touching the job; the job's own re-sent request still runs."""
    loop, h = harness
    job_id = f"job-{h.unique}"
    other_tenant = protocol.JobRequest(job_id=job_id, topic="job.default",
                                       tenant_id=f"other-{h.unique}")
    other_topic = protocol.JobRequest(job_id=job_id, topic=f"job.other-{h.unique}",
                                      tenant_id=f"t-{h.unique}")

    async def scenario():
        await h.engine.handle_request(h.request())  # no worker yet: PENDING, request stored
        before = (await h.store.get(job_id), await h.redis.get(f"job:req:{job_id}"))
        await h.add_worker()
        for req in (other_tenant, other_topic):
            with pytest.raises(UnparseableRecord, match="another tenant or topic"):
                await h.engine.handle_request(protocol.packet(
                    trace_id="tr", sender_id="test", job_request=req).SerializeToString())
        after = (await h.store.get(job_id), await h.redis.get(f"job:req:{job_id}"))
        return before, after, await h.engine.handle_request(h.request())

    before, after, own = loop.run_until_complete(scenario())
    assert after == before
    assert own.action == "dispatched"


def test_the_replayer_does_not_apply_a_stored_request_of_another_tenant(harness):
    """A job:req that names another tenant than the job's meta is not replayed."""
    from google.protobuf import json_format

    from cordum.scheduler.replayer import PendingReplayer, ReplayerPolicy

    loop, h = harness
    job_id = f"job-{h.unique}"

    async def scenario():
        await h.engine.handle_request(h.request())  # no worker yet: PENDING, request stored
        forged = protocol.JobRequest(job_id=job_id, topic="job.default",
                                     tenant_id=f"other-{h.unique}")
        await h.store.put_request(job_id, json_format.MessageToJson(forged, indent=None))
        before = await h.store.get(job_id)
        await h.add_worker()
        report = await PendingReplayer(h.engine, OwnJobs(h.redis, h.unique),
                                       ReplayerPolicy(pending_age_s=0.0)).tick()
        return before, report, await h.store.get(job_id)

    before, report, after = loop.run_until_complete(scenario())
    assert report.failed == 1 and not report.replayed
    assert after == before and after["tenant"] == f"t-{h.unique}"


def test_the_workflow_id_is_the_fields_and_is_fixed_at_the_jobs_first_sight(harness):
    loop, h = harness

    def request(job_id, **kw):
        req = protocol.JobRequest(job_id=job_id, topic="job.default",
                                  tenant_id=f"t-{h.unique}", **kw)
        return protocol.packet(trace_id="tr", sender_id="test",
                               job_request=req).SerializeToString()

    async def scenario():
        # No worker yet: the first request leaves its job PENDING, to be sent again.
        await h.engine.handle_request(request(f"a-{h.unique}", workflow_id=f"wf1-{h.unique}"))
        await h.add_worker()
        await h.engine.handle_request(request(f"a-{h.unique}", workflow_id=f"wf2-{h.unique}"))
        await h.engine.handle_request(request(f"b-{h.unique}",
                                              labels={"workflow_id": f"wf1-{h.unique}"}))
        return (await h.store.get(f"a-{h.unique}"), await h.store.get(f"b-{h.unique}"))

    first, labelled = loop.run_until_complete(scenario())
    assert first["state"] == "RUNNING" and first["workflow_id"] == f"wf1-{h.unique}"
    assert labelled["state"] == "RUNNING" and "workflow_id" not in labelled
