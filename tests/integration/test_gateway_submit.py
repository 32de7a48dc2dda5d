"""POST /api/v1/jobs on the real Redis, NATS and safety kernel: the submit-time policy
check, idempotency keys, body limits, roles and per-key rate limiting.

Every test has its own tenant and API keys, and its own circuit-breaker key, so
a dead kernel here never opens the breaker a live stack on the same Redis uses.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from google.protobuf import json_format

from cordum import config, protocol, runtime
from cordum.approval import job_hash
from cordum.bus.streams import ensure_stream
from cordum.config import ConfigError
from cordum.gateway.core import ratelimit
from cordum.gateway.core.auth import Principal
from cordum.gateway.core.ratelimit import RateLimiter, RateLimitPolicy
from cordum.gateway.jobs import deps, submit_policy
from cordum.gateway.jobs.models import SubmitJobRequest
from cordum.gateway.jobs.service import JobService
from cordum.safety.client import Decision, SafetyVerdict
from cordum.safety.kernel_service import PolicyKernel
from cordum.safety.policy_file import Policy
from cordum.scheduler.engine import Engine
from cordum.store.idempotency import CLAIM_TTL_S, IdempotencyKeys
from cordum.store.jobs import META_TTL_S, JobState, JobStore
from cordum.store.ratelimit import KEY_PREFIX as RATE_KEY_PREFIX
from tests.conftest import NATS_URL, REDIS_URL
from tests.helpers import call, event, free_port, serving_kernel

EDGE_TOPIC = "job." + "a" * 252
"""The longest topic the body accepts (256 characters)."""

SAFETY_YAML = """\
default_decision: deny
rules:
  - id: submit-deny
    match: {topics: [job.submit.denied]}
    decision: deny
    reason: denied at submit
  - id: submit-throttle
    match: {topics: [job.submit.throttled]}
    decision: throttle
    reason: slow down
  - id: submit-review
    match: {topics: [job.submit.review]}
    decision: require_approval
    reason: a human must look
  - id: submit-constrained
    match: {topics: [job.submit.constrained]}
    decision: allow_with_constraints
    reason: within limits
    constraints: {budgets: {max_runtime_ms: 1000}}
  - id: submit-allow
    match: {topics: [job.default, job.submit.ok, EDGE_TOPIC]}
    decision: allow
input_policy: {fail_mode: closed}
""".replace("EDGE_TOPIC", EDGE_TOPIC)


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("submit-config")
    (path / "safety.yaml").write_text(SAFETY_YAML)
    return path


@pytest.fixture(scope="module")
def kernel_addr(config_dir) -> Iterator[str]:
    policy = Policy(config_dir / "safety.yaml", check_interval_s=0)
    with serving_kernel(PolicyKernel(policy, cache_ttl_s=0)) as addr:
        yield addr


@dataclass
class Gateway:
    """The gateway on a tenant of its own, with one API key per role."""

    unique: str
    config_dir: Path
    kernel_addr: str
    monkeypatch: pytest.MonkeyPatch
    tenant: str = ""
    keys: dict[str, str] = field(default_factory=dict)
    services: list[JobService] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tenant = f"t-{self.unique}"
        self.keys = {role: f"key-{role}-{self.unique}"
                     for role in ("admin", "user", "jobs.write", "viewer")}
        self.breaker_prefix = f"test:{self.unique}:"

    def configure(self, **env: str) -> None:
        mp = self.monkeypatch
        mp.setenv("CORDUM_API_KEYS", json.dumps(
            [{"key": k, "tenant": self.tenant, "role": r} for r, k in self.keys.items()]))
        mp.setenv("REDIS_URL", REDIS_URL)
        mp.setenv("NATS_URL", NATS_URL)
        mp.setenv("SAFETY_KERNEL_ADDR", self.kernel_addr)
        mp.setenv("CORDUM_CONFIG_DIR", str(self.config_dir))
        for name in ("CORDUM_SUBMIT_POLICY_CHECK", "POLICY_CHECK_FAIL_MODE",
                     "CORDUM_MAX_BODY_BYTES", "CORDUM_RATE_LIMIT_RPS",
                     "CORDUM_RATE_LIMIT_BURST"):
            mp.delenv(name, raising=False)
        for name, value in env.items():
            mp.setenv(name, value)
        config.settings.cache_clear()
        deps.reset()

    def use_kernel(self, addr: str | None = None, **env: str) -> JobService:
        """Route submits through a service whose breaker key is this test's own."""
        cfg = config.load_settings(env={"REDIS_URL": REDIS_URL, "NATS_URL": NATS_URL,
                                        "CORDUM_CONFIG_DIR": str(self.config_dir)},
                                   safety_kernel_addr=self.kernel_addr if addr is None else addr)
        redis = deps.redis()
        policy = submit_policy.from_settings(cfg, redis, env=env,
                                             breaker_key_prefix=self.breaker_prefix)
        service = JobService(JobStore(redis), deps.publisher(), policy=policy, redis=redis)
        self.services.append(service)

        def jobs() -> JobService:
            return service

        jobs.cache_clear = lambda: None  # type: ignore[attr-defined]  (deps.reset() calls it)
        self.monkeypatch.setattr(deps, "jobs", jobs)
        return service

    def submit(self, body=None, *, role: str = "admin", headers=None,
               ) -> tuple[int, dict, dict[str, str]]:
        """POST /api/v1/jobs with the key of ``role``, in this gateway's tenant."""
        return call(event("POST", "/api/v1/jobs", body, key=self.keys[role], tenant=self.tenant,
                          headers=headers))

    # ------------------------------------------------------------ reading Redis

    def meta(self, job_id: str) -> dict[str, str]:
        raw = runtime.run(deps.redis().hgetall(f"job:meta:{job_id}"))
        return {k.decode(): v.decode() for k, v in raw.items()}

    def get(self, key: str) -> str | None:
        value = runtime.run(deps.redis().get(key))
        return None if value is None else value.decode()

    def stored_request(self, job_id: str) -> protocol.JobRequest:
        return json_format.Parse(self.get(f"job:req:{job_id}"), protocol.JobRequest(),
                                 ignore_unknown_fields=True)

    def tenant_jobs(self) -> set[str]:
        """Every job of this tenant in job:recent (ids are random; the tenant is ours)."""
        ids = [m.decode() for m in runtime.run(deps.redis().zrange("job:recent", 0, -1))]
        return {j for j in ids if self.meta(j).get("tenant") == self.tenant}

    def idempotency_key(self, key: str) -> str:
        return IdempotencyKeys.key(self.tenant, key)

    # ------------------------------------------------------------ the bus

    def subscribe(self, subject: str):
        async def sub():
            nc = await runtime.nats_client()
            return await nc.subscribe(subject)
        return runtime.run(sub())

    def job_ids_until(self, sub, sentinel: str, kind: str = "job_request") -> list[str]:
        """Job ids seen on ``sub`` up to and including ``sentinel`` (order is kept per
        connection: what was published before the sentinel arrives before it)."""
        async def read():
            seen = []
            while True:
                msg = await sub.next_msg(timeout=10)
                packet = protocol.BusPacket()
                try:
                    packet.ParseFromString(msg.data)
                except Exception:  # someone else's traffic on the subject
                    continue
                job_id = getattr(packet, kind).job_id
                seen.append(job_id)
                if job_id == sentinel:
                    return seen
        return runtime.run(read())

    # ------------------------------------------------------------ cleanup

    def cleanup(self) -> None:
        jobs = {job_id: self.meta(job_id) for job_id in self.tenant_jobs()}
        who = {key: deps.authenticator().authenticate({"x-api-key": key,
                                                       "x-tenant-id": self.tenant})
               for key in self.keys.values()}

        async def clean():
            r = deps.redis()
            for job_id, meta in jobs.items():
                await r.delete(f"job:meta:{job_id}", f"job:req:{job_id}", f"ctx:{job_id}",
                               f"job:events:{job_id}", f"dlq:entry:{job_id}",
                               f"job:decisions:{job_id}", f"trace:{meta.get('trace_id')}")
                for state in JobState:
                    await r.zrem(f"job:index:{state.value.lower()}", job_id)
                await r.zrem("job:recent", job_id)
                await r.zrem("dlq:index", job_id)
                await r.zrem("job:deadline", job_id)
            patterns = [f"job:idempotency:{self.tenant}:*", f"{self.breaker_prefix}*"]
            for key, principal in who.items():
                patterns.append(f"{RATE_KEY_PREFIX}"
                                f"{ratelimit.key_id(principal, {'x-api-key': key})}:*")
            for pattern in patterns:
                async for key in r.scan_iter(match=pattern):
                    await r.delete(key)
            await r.delete(f"job:tenant:active:{self.tenant}")
            for service in self.services:
                await service._policy.aclose()
        runtime.run(clean())


@pytest.fixture
def gw(unique, config_dir, kernel_addr, monkeypatch) -> Iterator[Gateway]:
    g = Gateway(unique, config_dir, kernel_addr, monkeypatch)
    g.configure()
    runtime.reset()
    runtime.run(ensure_stream(runtime.run(runtime.jetstream())))
    g.use_kernel()
    yield g
    g.cleanup()
    config.settings.cache_clear()
    deps.reset()
    runtime.reset()


def body(topic: str = "job.submit.ok", **extra) -> dict:
    return {"prompt": "hello", "topic": topic, **extra}


# ------------------------------------------------------------------ policy outcomes


@pytest.mark.parametrize("topic", ["job.submit.ok", "job.submit.constrained"])
def test_allowed_job_is_stored_pending_and_published(gw, topic):
    sub = gw.subscribe(protocol.SUBJECT_SUBMIT)

    status, out, headers = gw.submit(body(topic))

    assert status == 200, out
    assert set(out) == {"job_id", "trace_id"} and headers["X-Trace-Id"] == out["trace_id"]
    meta = gw.meta(out["job_id"])
    assert meta["state"] == "PENDING" and meta["topic"] == topic
    # The scheduler re-checks and records the decision at dispatch.
    assert "safety_decision" not in meta
    assert out["job_id"] in gw.job_ids_until(sub, out["job_id"])


def test_denied_job_is_stored_denied_with_its_dlq_entry_and_answers_403(gw):
    submits = gw.subscribe(protocol.SUBJECT_SUBMIT)
    dlq = gw.subscribe(protocol.SUBJECT_DLQ)

    status, out, headers = gw.submit(body("job.submit.denied"))

    assert status == 403, out
    job_id = out["job_id"]
    assert out == {"error": "denied at submit", "code": "safety_denied", "status": 403,
                   "job_id": job_id, "trace_id": out["trace_id"]}
    assert headers["X-Trace-Id"] == out["trace_id"]
    meta = gw.meta(job_id)
    assert meta["state"] == "DENIED" and meta["failure_reason"] == "denied at submit"
    assert (meta["safety_decision"], meta["safety_rule_id"]) == ("DENY", "submit-deny")
    assert meta["safety_job_hash"] == job_hash(gw.stored_request(job_id))
    entry = json.loads(gw.get(f"dlq:entry:{job_id}"))
    assert (entry["reason_code"], entry["status"], entry["topic"], entry["reason"]) == (
        "safety_denied", "DENIED", "job.submit.denied", "denied at submit")
    assert runtime.run(deps.redis().zscore("dlq:index", job_id)) is not None
    assert not runtime.run(deps.redis().sismember(f"job:tenant:active:{gw.tenant}", job_id))
    # The scheduler's DLQ notice went out; the job itself was never announced.
    assert job_id in gw.job_ids_until(dlq, job_id, kind="job_result")
    _, sentinel, _ = gw.submit(body())
    assert job_id not in gw.job_ids_until(submits, sentinel["job_id"])


def test_throttled_job_is_429_with_retry_after_30_and_nothing_is_stored(gw):
    submits = gw.subscribe(protocol.SUBJECT_SUBMIT)

    status, out, headers = gw.submit(body("job.submit.throttled"),
                                     headers={"Idempotency-Key": "throttled-once"})

    assert (status, out["code"], out["error"]) == (429, "safety_throttled", "slow down")
    assert headers["Retry-After"] == "30"
    assert gw.tenant_jobs() == set()
    # The key was given back: the same request may be sent again.
    assert gw.get(gw.idempotency_key("throttled-once")) is None
    _, sentinel, _ = gw.submit(body())
    assert gw.job_ids_until(submits, sentinel["job_id"])[-1:] == [sentinel["job_id"]]
    assert gw.tenant_jobs() == {sentinel["job_id"]}


class RefusingKernel:
    """Stands in for the kernel where a test must prove it is not asked."""

    calls = 0

    async def check(self, req, tenant):
        self.calls += 1
        return SafetyVerdict(Decision.DENY, "the kernel was asked")


def test_require_approval_stores_the_gated_job_as_the_engine_would(gw):
    submits = gw.subscribe(protocol.SUBJECT_SUBMIT)

    status, out, headers = gw.submit(body("job.submit.review", labels={"team": "blue"}))

    assert status == 200, out
    job_id = out["job_id"]
    assert out == {"job_id": job_id, "status": "approval_required",
                   "reason": "a human must look"}
    meta = gw.meta(job_id)
    assert headers["X-Trace-Id"] == meta["trace_id"]
    assert meta["state"] == "APPROVAL_REQUIRED"
    assert runtime.run(deps.redis().zscore("job:index:approval_required", job_id)) is not None
    assert json.loads(gw.get(f"ctx:{job_id}"))["prompt"] == "hello"
    stored = gw.stored_request(job_id)
    assert (meta["safety_decision"], meta["safety_reason"], meta["safety_rule_id"]) == (
        "REQUIRE_APPROVAL", "a human must look", "submit-review")
    assert meta["safety_approval_required"] == "true"
    assert meta["safety_approval_ref"] == job_id
    assert meta["safety_snapshot"] and int(meta["safety_checked_at"]) > 0
    assert meta["safety_job_hash"] == job_hash(stored)
    # Not announced: only an approval publishes it.
    _, sentinel, _ = gw.submit(body())
    assert job_id not in gw.job_ids_until(submits, sentinel["job_id"])

    # The engine's approval fast path accepts the stored record without asking the kernel.
    kernel = RefusingKernel()
    engine = Engine(store=JobStore(deps.redis()), registry=None, strategy=None,
                    safety=kernel, publisher=None)
    stored.labels.update({"approval_granted": "true",
                          "approval_snapshot": meta["safety_snapshot"]})
    # Once approved: the record the approve endpoint writes in the meta.
    approved = {**meta, "approval_status": "APPROVED",
                "approval_policy_snapshot": meta["safety_snapshot"],
                "approval_job_hash": meta["safety_job_hash"]}
    verdict, fields = runtime.run(engine.decide(stored, gw.tenant, approved))
    assert (verdict.decision, verdict.reason, kernel.calls) == (
        Decision.ALLOW, "approval granted", 0)
    assert fields["safety_job_hash"] == meta["safety_job_hash"]


def test_unreachable_kernel_fails_closed_with_503_and_stores_nothing(gw):
    gw.use_kernel(f"127.0.0.1:{free_port()}")

    status, out, headers = gw.submit(body(), headers={"Idempotency-Key": "k-closed"})

    assert (status, out["code"], out["status"]) == (503, "policy_unavailable", 503)
    assert "safety kernel error" in out["error"]
    assert out["unavailable"] == "safety-kernel"
    assert int(headers["Retry-After"]) > 0
    assert gw.tenant_jobs() == set()
    assert gw.get(gw.idempotency_key("k-closed")) is None


def test_unreachable_kernel_fails_open_when_configured_and_labels_the_job(gw):
    gw.use_kernel(f"127.0.0.1:{free_port()}", POLICY_CHECK_FAIL_MODE="open")
    submits = gw.subscribe(protocol.SUBJECT_SUBMIT)

    status, out, _ = gw.submit(body(labels={"team": "blue"}))

    assert status == 200, out
    meta = gw.meta(out["job_id"])
    labels = json.loads(meta["labels"])
    assert meta["state"] == "PENDING"
    assert labels["safety_bypassed"] == "true" and labels["team"] == "blue"
    assert "safety kernel error" in labels["safety_bypass_reason"]
    assert gw.stored_request(out["job_id"]).labels["safety_bypassed"] == "true"
    assert out["job_id"] in gw.job_ids_until(submits, out["job_id"])


@pytest.mark.parametrize(("mode", "expected"), [("closed", 503), ("open", 200)])
def test_no_kernel_address_behaves_like_an_unreachable_kernel(gw, caplog, mode, expected):
    with caplog.at_level(logging.WARNING, logger="cordum.gateway.jobs.submit_policy"):
        gw.use_kernel("", POLICY_CHECK_FAIL_MODE=mode)
    assert [r for r in caplog.records if submit_policy.NO_KERNEL_REASON in r.getMessage()]

    status, out, _ = gw.submit(body())

    assert status == expected, out
    if expected == 503:
        assert submit_policy.NO_KERNEL_REASON in out["error"]
    else:
        labels = json.loads(gw.meta(out["job_id"])["labels"])
        assert labels["safety_bypass_reason"] == submit_policy.NO_KERNEL_REASON


def test_the_check_can_be_switched_off(gw, monkeypatch):
    # The process's own wiring (deps.jobs() from the environment), not the test's.
    monkeypatch.undo()
    gw.configure(CORDUM_SUBMIT_POLICY_CHECK="off")

    status, out, _ = gw.submit(body("job.submit.throttled"))

    assert status == 200, out
    assert gw.meta(out["job_id"])["state"] == "PENDING"


def test_the_switch_reads_on_off_and_fails_fast_on_anything_else():
    assert submit_policy.check_enabled({})
    assert submit_policy.check_enabled({"CORDUM_SUBMIT_POLICY_CHECK": "On"})
    assert not submit_policy.check_enabled({"CORDUM_SUBMIT_POLICY_CHECK": "false"})
    with pytest.raises(ConfigError, match="CORDUM_SUBMIT_POLICY_CHECK"):
        submit_policy.check_enabled({"CORDUM_SUBMIT_POLICY_CHECK": "maybe"})


# ------------------------------------------------------------------ idempotency


def test_a_repeated_key_answers_the_first_job_and_creates_nothing(gw):
    submits = gw.subscribe(protocol.SUBJECT_SUBMIT)
    key = {"Idempotency-Key": f"idem-{gw.unique}"}

    first = gw.submit(body(), headers=key)
    second = gw.submit(body(), headers=key)

    assert first[0] == second[0] == 200
    assert first[1] == second[1] and set(first[1]) == {"job_id", "trace_id"}
    job_id = first[1]["job_id"]
    assert gw.tenant_jobs() == {job_id}
    assert gw.meta(job_id)["idempotency_key"] == key["Idempotency-Key"]
    # Kept as long as the job's meta, no longer the short claim.
    ttl = runtime.run(deps.redis().ttl(gw.idempotency_key(key["Idempotency-Key"])))
    assert CLAIM_TTL_S < ttl <= META_TTL_S
    _, sentinel, _ = gw.submit(body())
    assert gw.job_ids_until(submits, sentinel["job_id"]).count(job_id) == 1


def test_the_header_key_wins_over_the_body_key(gw):
    first = gw.submit(body(idempotency_key="from-body"), headers={"Idempotency-Key": "hdr"})
    by_body = gw.submit(body(idempotency_key="from-body"))
    by_header = gw.submit(body(idempotency_key="other"), headers={"Idempotency-Key": "hdr"})

    assert first[1]["job_id"] == by_header[1]["job_id"]
    assert by_body[1]["job_id"] != first[1]["job_id"]
    assert gw.meta(first[1]["job_id"])["idempotency_key"] == "hdr"
    assert len(gw.tenant_jobs()) == 2


def test_a_key_reused_with_another_request_is_409(gw):
    key = {"Idempotency-Key": "reused"}
    status, _, _ = gw.submit(body(), headers=key)
    assert status == 200

    status, out, _ = gw.submit(body(prompt="something else"), headers=key)

    assert (status, out) == (409, {"error": "idempotency key reused with a different request",
                                   "code": "IDEMPOTENCY_CONFLICT", "status": 409})
    assert len(gw.tenant_jobs()) == 1


def test_a_denied_job_keeps_its_key(gw):
    key = {"Idempotency-Key": "denied-once"}
    status, denied, _ = gw.submit(body("job.submit.denied"), headers=key)
    assert status == 403

    status, again, _ = gw.submit(body("job.submit.denied"), headers=key)

    assert (status, again) == (200, {"job_id": denied["job_id"], "trace_id": denied["trace_id"]})
    assert gw.tenant_jobs() == {denied["job_id"]}


def test_two_concurrent_submits_with_one_key_create_one_job(gw):
    service = deps.jobs()
    who = Principal(tenant=gw.tenant, role="admin", principal_id="")
    request = SubmitJobRequest.model_validate(body())

    async def both():
        return await asyncio.gather(
            service.submit(who, request, idempotency_key="raced"),
            service.submit(who, request, idempotency_key="raced"))

    one, two = runtime.run(both())

    assert (one.job_id, one.trace_id) == (two.job_id, two.trace_id)
    assert gw.tenant_jobs() == {one.job_id}


def test_an_idempotency_key_over_512_bytes_is_400(gw):
    key = "é" * 257  # 257 characters, 514 bytes

    status, out, _ = gw.submit(body(), headers={"Idempotency-Key": key})
    assert status == 400 and "Idempotency-Key" in out["error"]
    status, out, _ = gw.submit(body(idempotency_key=key))
    assert status == 400 and "idempotency_key" in out["error"]
    status, _, _ = gw.submit(body(), headers={"Idempotency-Key": "é" * 256})
    assert status == 200
    assert len(gw.tenant_jobs()) == 1


# ------------------------------------------------------------------ limits and roles


def test_a_body_over_the_limit_is_413(gw):
    big = body(prompt="x" * (1024 * 1024))
    status, out, _ = gw.submit(big)
    assert (status, out["code"], out["status"]) == (413, "payload_too_large", 413)

    gw.configure(CORDUM_MAX_BODY_BYTES="200")
    status, out, _ = gw.submit(body(prompt="x" * 200))
    assert (status, out["code"]) == (413, "payload_too_large")
    status, _, _ = gw.submit(body(prompt="x" * 50))
    assert status == 200
    assert len(gw.tenant_jobs()) == 1


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"prompt": "x" * 50_001}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"topic": "sys.job.submit"}, "topic"),
        ({"topic": "job." + "a" * 253}, "topic"),
        ({"labels": {f"k{i}": "v" for i in range(51)}}, "labels"),
        ({"labels": {"k" * 257: "v"}}, "labels"),
        ({"labels": {"k": "v" * 4097}}, "labels"),
        ({"labels": {"a\nb": "1"}}, "labels"),
        ({"tags": [f"t{i}" for i in range(51)]}, "tags"),
        ({"priority": "urgent"}, "priority"),
        ({"actor_type": "robot"}, "actor_type"),
        ({"max_output_tokens": -1}, "max_output_tokens"),
    ],
)
def test_each_body_rule_is_400_naming_the_field(gw, extra, fragment):
    status, out, _ = gw.submit(body(**extra))

    assert status == 400, out
    assert (out["code"], out["status"]) == ("invalid_request", 400)
    assert out["error"].startswith(fragment)
    assert gw.tenant_jobs() == set()


def test_limits_at_their_edge_are_accepted(gw):
    edge = body(prompt="é" * 50_000,  # characters (runes), not bytes
                topic=EDGE_TOPIC,
                labels={"k" * 256: "v" * 4096, **{f"k{i}": "v" for i in range(49)}},
                tags=[f"t{i}" for i in range(50)])

    status, out, _ = gw.submit(edge)

    assert status == 200, out
    assert len(gw.stored_request(out["job_id"]).labels) == 51  # 50 + _source


@pytest.mark.parametrize(("role", "expected"),
                         [("admin", 200), ("user", 200), ("jobs.write", 200), ("viewer", 403)])
def test_submit_needs_a_submitting_role(gw, role, expected):
    status, out, _ = gw.submit(body(), role=role)

    assert status == expected, out
    if expected == 403:
        assert out == {"error": "forbidden", "code": "forbidden", "status": 403}
        assert gw.tenant_jobs() == set()


# ------------------------------------------------------------------ rate limiting


def test_requests_over_the_burst_are_429_per_key(gw):
    # 0.01 requests/s: a window of 300 s, so the burst alone decides here.
    gw.configure(CORDUM_RATE_LIMIT_RPS="0.01", CORDUM_RATE_LIMIT_BURST="3")

    answers = [gw.submit(body())[0] for _ in range(3)]
    status, out, headers = gw.submit(body())

    assert answers == [200, 200, 200]
    assert (status, out) == (429, {"error": "rate limited", "code": "rate_limited",
                                   "status": 429})
    assert int(headers["Retry-After"]) >= 1
    assert len(gw.tenant_jobs()) == 3
    # Another key has its own counter.
    assert gw.submit(body(), role="user")[0] == 200


@pytest.fixture
def limiter_redis(aloop, unique):
    redis = aioredis.Redis.from_url(REDIS_URL)
    yield aloop, redis, f"test-{unique}"
    async def clean():
        async for key in redis.scan_iter(match=f"{RATE_KEY_PREFIX}test-{unique}:*"):
            await redis.delete(key)
        await redis.aclose()
    aloop.run_until_complete(clean())


def test_the_window_slides(limiter_redis):
    loop, redis, key = limiter_redis
    now = [1000.0]  # window 2 s (burst 2, 1 request/s): 1000.0 starts a window
    limiter = RateLimiter(redis, RateLimitPolicy(rate_per_s=1, burst=2), clock=lambda: now[0])

    first = [loop.run_until_complete(limiter.admit(key)) for _ in range(3)]
    assert [d.allowed for d in first] == [True, True, False]
    # Nothing more until this window's count (3) weighs <= 2 in the next: 1/3 into it,
    # 2 s + 0.67 s from the start, so 3 whole seconds.
    assert first[2].retry_after_s == 3
    now[0] = 1002.0  # next window: 3 * (1 - 0) + 1 > 2
    assert not loop.run_until_complete(limiter.admit(key)).allowed
    now[0] = 1003.5  # 3 * (1 - 0.75) + 2 = 2.75: still over; the weight keeps sliding
    assert not loop.run_until_complete(limiter.admit(key)).allowed
    now[0] = 1006.0  # two windows on: the old counts are gone
    assert loop.run_until_complete(limiter.admit(key)).allowed


def test_an_unreachable_redis_lets_requests_through_with_a_warning(aloop, caplog):
    redis = aioredis.Redis.from_url("redis://127.0.0.1:1")
    limiter = RateLimiter(redis, RateLimitPolicy(rate_per_s=1, burst=1))
    ratelimit._last_warning = float("-inf")

    with caplog.at_level(logging.WARNING, logger="cordum.gateway.core.ratelimit"):
        decisions = [aloop.run_until_complete(limiter.admit("k")) for _ in range(3)]

    assert all(d.allowed for d in decisions)
    assert len([r for r in caplog.records if "not limited" in r.getMessage()]) == 1
    aloop.run_until_complete(redis.aclose())


def test_the_limiter_is_off_at_rate_zero_and_rejects_bad_settings():
    assert not ratelimit.policy_from_env({"CORDUM_RATE_LIMIT_RPS": "0"}).enabled
    assert ratelimit.policy_from_env({}) == RateLimitPolicy(rate_per_s=50, burst=100)
    with pytest.raises(ConfigError, match="CORDUM_RATE_LIMIT_BURST"):
        ratelimit.policy_from_env({"CORDUM_RATE_LIMIT_BURST": "0"})
    with pytest.raises(ConfigError, match="CORDUM_RATE_LIMIT_RPS"):
        ratelimit.policy_from_env({"CORDUM_RATE_LIMIT_RPS": "fast"})


def test_counters_are_named_by_a_digest_of_the_key_never_the_key():
    who = Principal(tenant="t", role="admin", principal_id="")
    name = ratelimit.key_id(who, {"x-api-key": "secret-key"})
    assert "secret" not in name
    assert name == ratelimit.key_id(who, {"authorization": "Bearer secret-key"})
    assert name == hashlib.sha256(b"secret-key").hexdigest()[:32]


# ------------------------------------------------------------------ Redis round trips


class CountingRedis(aioredis.Redis):
    """Counts the commands sent outside pipelines (scripts included: EVALSHA)."""

    commands: list[str]

    async def execute_command(self, *args, **options):
        self.commands.append(str(args[0]))
        return await super().execute_command(*args, **options)


def test_an_allowed_submit_costs_one_redis_call_and_a_key_two_more(gw):
    from cordum.gateway.jobs import submit_reads
    from cordum.safety.breaker import BreakerPolicy, CircuitBreaker
    from cordum.safety.client import SafetyClient

    redis = CountingRedis.from_url(REDIS_URL)
    redis.commands = []
    # A breaker that keeps reusing its clean admission, so the count is the service's own.
    breaker = CircuitBreaker(redis, key_prefix=gw.breaker_prefix,
                             policy=BreakerPolicy(clean_reuse_s=3600))
    policy = submit_policy.SubmitPolicy(SafetyClient(gw.kernel_addr, breaker=breaker),
                                        fail_open=False)
    service = JobService(JobStore(redis), deps.publisher(), policy=policy, redis=redis)
    gw.services.append(service)
    who = Principal(tenant=gw.tenant, role="admin", principal_id="")
    request = SubmitJobRequest.model_validate(body())

    # What the route read in the rate limiter's round trip: no config document, no
    # registration of the topic (submit_reads).
    planned = submit_reads.plan(gw.tenant, body())
    read = (planned, [None] * len(planned.keys))
    runtime.run(service.submit(who, request, read=read))  # warms breaker and script cache
    redis.commands.clear()
    runtime.run(service.submit(who, request, read=read))
    plain = list(redis.commands)
    redis.commands.clear()
    runtime.run(service.submit(who, request, idempotency_key="counted", read=read))
    keyed = list(redis.commands)
    redis.commands.clear()
    runtime.run(service.submit(who, request))  # the context not read yet: one MGET more
    unread = list(redis.commands)
    runtime.run(redis.aclose())

    assert plain == ["EVALSHA"]
    assert keyed == ["SET", "EVALSHA", "EXPIRE"]
    assert unread == ["MGET", "EVALSHA"]


def test_a_gated_job_with_a_deadline_has_it_from_its_submit(gw):
    # The approval context counts down to it while the job waits for a person (the
    # scheduler, which sets it otherwise, does not see the job before the approval).
    before = time.time_ns() // 1000
    status, out, _ = gw.submit(body("job.submit.review", deadline_ms=600_000))
    after = time.time_ns() // 1000
    assert status == 200 and out["status"] == "approval_required", out
    deadline = int(gw.meta(out["job_id"])["deadline_unix"])
    assert before + 600_000_000 <= deadline <= after + 600_000_000
    # Without a deadline, none is invented.
    _, plain, _ = gw.submit(body("job.submit.review"))
    assert "deadline_unix" not in gw.meta(plain["job_id"])
