"""Finding 1: an approval made of labels.

A submitter read the policy snapshot of their own gated job and sent the same
job again with ``approval_granted`` and ``approval_snapshot`` labels; the
replayer re-drove it and the engine's approval fast path dispatched it without
anyone approving. An approval is the record the approve endpoint writes in the
job's meta; labels, from the API or from the bus, never grant one.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cordum import config, protocol, runtime
from cordum.bus.publisher import NatsPublisher
from cordum.config import PoolsConfig, load_settings
from cordum.gateway.core import deps
from cordum.registry.reader import SnapshotReader
from cordum.safety.client import SafetyClient
from cordum.safety.policy_file import Policy
from cordum.scheduler.engine import Engine
from cordum.scheduler.replayer import PendingReplayer, ReplayerPolicy
from cordum.scheduler.strategy import LeastLoadedStrategy
from cordum.store.indexes import JobIndexes
from cordum.store.jobs import JobStore
from cordum.store.locks import JobLocks
from tests.conftest import NATS_URL, REDIS_URL
from tests.helpers import call, event, forget_jobs
from tests.security.conftest import ALICE, BOB, meta_of

CONFIG = Path(__file__).resolve().parents[2] / "config"
GATED_TOPIC = "job.echo.approval"
"""The example policy sends this topic to a human."""


class CountingKernel:
    """The real kernel behind a call counter: a fast path is a check not asked."""

    def __init__(self, addr: str) -> None:
        self.client = SafetyClient(addr, 1.0)
        self.calls = 0

    async def check(self, req: protocol.JobRequest, tenant: str):
        self.calls += 1
        return await self.client.check(req, tenant)


class Platform:
    """The scheduler as the submit and replayer functions wire it, with one live worker,
    over the real Redis, NATS and kernel; it only ever replays this test's jobs."""

    def __init__(self, unique: str, kernel_addr: str) -> None:
        self.unique = unique
        self.redis = runtime.redis_client()
        self.store = JobStore(self.redis)
        self.kernel = CountingKernel(kernel_addr)
        self.jobs: list[str] = []
        snapshot_key = f"test:snapshot:{unique}"
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        doc = {"captured_at": now, "writer_id": "t", "pools": {}, "topics": {},
               "workers": [{"worker_id": f"w-{unique}", "pool": "default", "active_jobs": 0,
                            "max_parallel_jobs": 4}]}
        runtime.run(self.redis.set(snapshot_key, json.dumps(doc), ex=120))
        cfg = load_settings(env={"REDIS_URL": REDIS_URL, "NATS_URL": NATS_URL})
        self.engine = Engine(
            store=self.store,
            registry=SnapshotReader(self.redis, key=snapshot_key, max_age_s=0),
            strategy=LeastLoadedStrategy(PoolsConfig(
                topics={GATED_TOPIC: ["default"], "job.default": ["default"]}, pools={})),
            safety=self.kernel,
            publisher=NatsPublisher(cfg),
            locks=JobLocks(self.redis),
        )

    def replay(self):
        """One replayer tick over this test's jobs (any age)."""
        own = set(self.jobs)

        class Own(JobIndexes):
            async def list_jobs_by_state(self, state, cutoff_us, limit=200, *, offset=0):
                ids = await super().list_jobs_by_state(state, cutoff_us, 100_000)
                return [i for i in ids if i in own][offset:offset + limit]

        replayer = PendingReplayer(self.engine, Own(self.redis),
                                   ReplayerPolicy(pending_age_s=0.0))
        return runtime.run(replayer.tick())

    def stored_request(self, job_id: str) -> protocol.JobRequest:
        req = runtime.run(JobIndexes(self.redis).get_request(job_id))
        assert req is not None
        return req

    def cleanup(self) -> None:
        async def forget() -> None:
            r = self.redis
            await forget_jobs(r, self.jobs)
            keys = await r.keys(f"*{self.unique}*")
            if keys:
                await r.delete(*keys)
            await self.kernel.client.aclose()

        runtime.run(forget())


@pytest.fixture
def platform(gateway, kernel, unique, monkeypatch):
    """The gateway with its submit-time policy on (the real kernel), and the scheduler."""
    monkeypatch.setenv("CORDUM_SUBMIT_POLICY_CHECK", "on")
    monkeypatch.setenv("SAFETY_KERNEL_ADDR", kernel)
    monkeypatch.setenv("CORDUM_SAFETY_TIMEOUT_S", "1")
    monkeypatch.setenv("CORDUM_RATE_LIMIT_RPS", "0")
    config.settings.cache_clear()
    deps.reset()
    p = Platform(unique, kernel)
    yield p
    p.cleanup()


def submit_gated(platform: Platform, prompt: str) -> str:
    status, body, _ = call(event("POST", "/api/v1/jobs", {"topic": GATED_TOPIC,
                                                          "prompt": prompt}, key=BOB))
    assert status == 200 and body["status"] == "approval_required", body
    platform.jobs.append(body["job_id"])
    return body["job_id"]


def bus_packet(req: protocol.JobRequest) -> bytes:
    return protocol.packet(trace_id=f"tr-{req.job_id}", sender_id="producer",
                           job_request=req).SerializeToString()


def test_finding_1_a_resubmit_with_approval_labels_is_not_an_approval(platform):
    # Given bob's gated job, whose policy snapshot bob can read
    prompt = f"wire the money {platform.unique}"
    first = submit_gated(platform, prompt)
    status, detail, _ = call(event("GET", f"/api/v1/jobs/{first}", key=BOB))
    assert status == 200, detail
    snapshot = detail["safety_snapshot"]
    assert snapshot and detail["state"] == "APPROVAL_REQUIRED"

    # When bob submits the same job carrying the approval the platform would write
    status, body, _ = call(event("POST", "/api/v1/jobs", {
        "topic": GATED_TOPIC, "prompt": prompt,
        "labels": {"approval_granted": "true", "approval_snapshot": snapshot}}, key=BOB))
    if status == 200:
        # Accepted: drive it on as the platform does, through the replayer and engine.
        forged = body["job_id"]
        platform.jobs.append(forged)
        report = platform.replay()
        meta = meta_of(forged)
        # Then it still waits for a human: nobody approved it
        assert meta["state"] == "APPROVAL_REQUIRED", (meta, report.as_dict())
        assert meta.get("safety_reason") != "approval granted"

    # Then the submit is refused before anything is stored
    assert status == 400, body
    assert body == {"error": body["error"], "code": "reserved_label", "status": 400}
    assert meta_of(first)["state"] == "APPROVAL_REQUIRED"


def test_a_bus_request_with_approval_labels_for_a_gated_unapproved_job_is_checked(platform):
    # Given bob's job gated by the kernel at submit: REQUIRE_APPROVAL, no approval
    job_id = submit_gated(platform, f"delete prod {platform.unique}")
    meta = meta_of(job_id)
    assert meta["safety_decision"] == "REQUIRE_APPROVAL" and not meta.get("approval_status")
    # When a producer publishes its request on sys.job.submit with approval labels
    req = platform.stored_request(job_id)
    req.labels.update({"approval_granted": "true",
                       "approval_snapshot": meta["safety_snapshot"]})
    outcome = runtime.run(platform.engine.handle_request(bus_packet(req)))
    # Then the kernel is asked and the job stays gated
    assert platform.kernel.calls == 1, outcome
    assert (outcome.action, outcome.state) == ("gated", "APPROVAL_REQUIRED"), outcome
    meta = meta_of(job_id)
    assert meta["state"] == "APPROVAL_REQUIRED"
    assert meta["safety_reason"] != "approval granted"


def test_a_new_bus_job_with_approval_labels_never_approves_itself(platform):
    # Given a request published on the bus for a new job id, approval labels and all
    job_id = f"bus-{platform.unique}"
    platform.jobs.append(job_id)
    snapshot = Policy(CONFIG / "safety.yaml").snapshot
    req = protocol.JobRequest(job_id=job_id, topic=GATED_TOPIC, tenant_id="default",
                              env={"tenant_id": "default"},
                              labels={"approval_granted": "true",
                                      "approval_snapshot": snapshot})
    # When the engine takes it: the kernel judges it
    first = runtime.run(platform.engine.handle_request(bus_packet(req)))
    assert (first.action, first.state) == ("gated", "APPROVAL_REQUIRED"), first
    assert platform.kernel.calls == 1
    # And when the replayer ticks and the packet is delivered again
    report = platform.replay()
    again = runtime.run(platform.engine.handle_request(bus_packet(req)))
    # Then the job is still waiting for a human, judged by the kernel each time
    assert report.replayed.get("APPROVAL_REQUIRED", 0) == 0, report.as_dict()
    assert report.not_approved == 1, report.as_dict()
    assert (again.action, again.state) == ("gated", "APPROVAL_REQUIRED"), again
    assert platform.kernel.calls == 2
    meta = meta_of(job_id)
    assert meta["state"] == "APPROVAL_REQUIRED"
    assert meta["safety_reason"] != "approval granted"


def test_the_principal_of_a_bus_job_cannot_approve_it(platform):
    # Given a gated job that came over the bus for principal "alice" (a workflow's
    # approval gate: the run's starter is its principal)
    job_id = f"bus-owner-{platform.unique}"
    platform.jobs.append(job_id)
    req = protocol.JobRequest(job_id=job_id, topic=GATED_TOPIC, tenant_id="default",
                              principal_id="alice", env={"tenant_id": "default"})
    first = runtime.run(platform.engine.handle_request(bus_packet(req)))
    assert (first.action, first.state) == ("gated", "APPROVAL_REQUIRED"), first
    # When alice approves it herself
    status, body, _ = call(event("POST", f"/api/v1/approvals/{job_id}/approve",
                                 {"reason": "mine"}, key=ALICE))
    # Then it is refused: the job's submitter is recorded from the bus request too
    assert (status, body["code"]) == (403, "self_approval_denied"), body
    assert meta_of(job_id)["state"] == "APPROVAL_REQUIRED"
