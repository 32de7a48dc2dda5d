"""Approvals API on the real Redis, NATS and safety kernel, with the real scheduler engine.

Jobs are gated the way production gates them: submitted through the API on a
topic the example policy sends to approval, then judged by the kernel (at
submit, or by the engine from the stored request).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import nats
import pytest

from cordum import config, protocol, runtime
from cordum.bus.publisher import NatsPublisher
from cordum.config import PoolsConfig, load_settings
from cordum.gateway.core import deps
from cordum.registry.reader import SnapshotReader
from cordum.safety.client import SafetyClient
from cordum.safety.policy_file import Policy
from cordum.scheduler.engine import Engine
from cordum.scheduler.strategy import LeastLoadedStrategy
from cordum.store.indexes import JobIndexes
from cordum.store.jobs import JobStore
from cordum.store.locks import JobLocks
from tests import helpers
from tests.conftest import NATS_URL, REDIS_URL

GATED_TOPIC = "job.echo.approval"
SUBMITTER, APPROVER, VIEWER, OUTSIDER = "sub-key", "appr-key", "view-key", "out-key"

class Api:
    """The gateway function with keys for one fresh tenant, plus what a test needs around it."""

    def __init__(self, unique: str, kernel: str, monkeypatch) -> None:
        self.unique = unique
        self.tenant = f"t-{unique}"
        self.other_tenant = f"o-{unique}"
        self.kernel = kernel
        self.monkeypatch = monkeypatch
        self.jobs: list[str] = []
        self.safety: list[SafetyClient] = []
        keys = [
            {"key": SUBMITTER, "tenant": self.tenant, "role": "admin", "principal_id": "alice"},
            {"key": APPROVER, "tenant": self.tenant, "role": "admin", "principal_id": "bob"},
            {"key": VIEWER, "tenant": self.tenant, "role": "user", "principal_id": "carol"},
            {"key": OUTSIDER, "tenant": self.other_tenant, "role": "admin",
             "principal_id": "dave"},
        ]
        monkeypatch.setenv("CORDUM_API_KEYS", json.dumps(keys))
        monkeypatch.setenv("REDIS_URL", REDIS_URL)
        monkeypatch.setenv("NATS_URL", NATS_URL)
        monkeypatch.setenv("CORDUM_RATE_LIMIT_RPS", "0")
        self.use_kernel(kernel)
        self.redis = runtime.redis_client()
        self.store = JobStore(self.redis)

    def use_kernel(self, addr: str) -> None:
        self.monkeypatch.setenv("SAFETY_KERNEL_ADDR", addr)
        self.monkeypatch.setenv("CORDUM_SAFETY_TIMEOUT_S", "1")
        config.settings.cache_clear()
        deps.reset()

    def call(self, method: str, path: str, body=None, key: str | None = APPROVER,
             query: dict | None = None) -> tuple[int, object, dict]:
        """The gateway's answer to a request with ``key``, in that key's tenant."""
        tenant = self.other_tenant if key == OUTSIDER else self.tenant
        return helpers.call(helpers.event(method, path, body, key=key, tenant=tenant,
                                          query=query))

    def engine(self, safety_addr: str | None = None, worker: str | None = None) -> Engine:
        """The scheduler's engine as the submit function wires it (kernel ``safety_addr``)."""
        snapshot_key = f"test:snapshot:{self.unique}"
        if worker is not None:
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            doc = {"captured_at": now, "writer_id": "t", "pools": {}, "topics": {},
                   "workers": [{"worker_id": worker, "pool": "default", "active_jobs": 0,
                                "max_parallel_jobs": 4}]}
            runtime.run(self.redis.set(snapshot_key, json.dumps(doc), ex=60))
        cfg = load_settings(env={"REDIS_URL": REDIS_URL, "NATS_URL": NATS_URL})
        self.safety.append(SafetyClient(safety_addr or self.kernel, 0.5))
        return Engine(
            store=self.store,
            registry=SnapshotReader(self.redis, key=snapshot_key, max_age_s=0),
            strategy=LeastLoadedStrategy(PoolsConfig(
                topics={GATED_TOPIC: ["default"], "job.default": ["default"]}, pools={})),
            safety=self.safety[-1],
            publisher=NatsPublisher(cfg),
            locks=JobLocks(self.redis),
        )

    def submit(self, topic: str = GATED_TOPIC, key: str = SUBMITTER) -> str:
        status, body, _ = self.call("POST", "/api/v1/jobs", {"topic": topic, "prompt": "hi"},
                                    key=key)
        assert status == 200, body
        self.jobs.append(body["job_id"])
        return body["job_id"]

    def gated(self, key: str = SUBMITTER) -> str:
        """A job of the tenant waiting in APPROVAL_REQUIRED, judged by the kernel."""
        job_id = self.submit(GATED_TOPIC, key)
        if self.meta(job_id)["state"] == "PENDING":  # not judged at submit: the engine does
            outcome = runtime.run(self.engine().handle_job_request(
                self.request(job_id), self.meta(job_id)["trace_id"]))
            assert outcome.action == "gated", outcome
        assert self.meta(job_id)["state"] == "APPROVAL_REQUIRED"
        return job_id

    def meta(self, job_id: str) -> dict[str, str]:
        return runtime.run(self.store.get(job_id))

    def request(self, job_id: str) -> protocol.JobRequest:
        req = runtime.run(JobIndexes(self.redis).get_request(job_id))
        assert req is not None
        return req

    def cleanup(self) -> None:
        async def forget() -> None:
            await helpers.forget_jobs(self.redis, self.jobs)
            await helpers.delete_keys(self.redis, f"*{self.unique}*")
            for client in self.safety:
                await client.aclose()

        runtime.run(forget())


@pytest.fixture
def api(unique, kernel, monkeypatch):
    a = Api(unique, kernel, monkeypatch)
    with helpers.gateway_process():
        yield a
        a.cleanup()


def subscribe(subject: str):
    async def go():
        nc = await nats.connect(NATS_URL)
        return nc, await nc.subscribe(subject)

    return runtime.run(go())


def next_for(sub, job_id: str, kind: str):
    """The next packet on ``sub`` about ``job_id`` (other tests publish on the same subject)."""
    async def go():
        while True:
            msg = await sub.next_msg(timeout=5)
            decoded = protocol.decode(msg.data)
            payload = getattr(decoded.packet, kind)
            if decoded.kind == kind and payload.job_id == job_id:
                return msg, decoded.packet

    return runtime.run(go())


def approve(api: Api, job_id: str, key: str = APPROVER, body=None):
    return api.call("POST", f"/api/v1/approvals/{job_id}/approve",
                    body if body is not None else {"reason": "looks fine", "note": "n1"}, key=key)


def reject(api: Api, job_id: str, key: str = APPROVER):
    return api.call("POST", f"/api/v1/approvals/{job_id}/reject", {"reason": "too risky"},
                    key=key)


# ------------------------------------------------------------------ access


def test_approvals_need_a_key_and_the_admin_role(api):
    job_id = api.gated()
    for method, path in [("GET", "/api/v1/approvals"),
                         ("POST", f"/api/v1/approvals/{job_id}/approve"),
                         ("POST", f"/api/v1/approvals/{job_id}/reject")]:
        status, err, _ = api.call(method, path, {"reason": "r"}, key=None)
        assert (status, err["code"]) == (401, "unauthorized")
        status, err, _ = api.call(method, path, {"reason": "r"}, key=VIEWER)
        assert (status, err["code"]) == (403, "forbidden")
    assert api.meta(job_id)["state"] == "APPROVAL_REQUIRED"


def test_other_tenant_gets_403_and_unknown_job_404(api):
    job_id = api.gated()
    for call in (approve, reject):
        status, err, _ = call(api, job_id, key=OUTSIDER)
        assert (status, err["code"]) == (403, "tenant_access_denied")
        status, err, _ = call(api, f"nope-{api.unique}")
        assert (status, err["code"]) == (404, "job_not_found")
    assert api.meta(job_id)["state"] == "APPROVAL_REQUIRED"
    _, page, _ = api.call("GET", "/api/v1/approvals", key=OUTSIDER)
    assert job_id not in [item["job"]["id"] for item in page["items"]]


@pytest.mark.parametrize(("body", "fragment"), [
    ({}, "reason is required"),
    ({"reason": "   "}, "reason"),
    ({"reason": 5}, "reason"),
    ("{nope", "not valid JSON"),
    (None, "body is required"),
])
def test_bad_body_is_400(api, body, fragment):
    job_id = api.gated()
    status, err, _ = api.call("POST", f"/api/v1/approvals/{job_id}/approve", body)
    assert status == 400 and fragment in err["error"], err
    assert api.meta(job_id)["state"] == "APPROVAL_REQUIRED"


# ------------------------------------------------------------------ list


def test_list_shows_the_tenants_waiting_jobs_newest_first_in_pages(api):
    mine = [api.gated() for _ in range(3)]
    foreign = api.gated(key=SUBMITTER)
    # Moved to another tenant: it must not be listed for this one.
    runtime.run(api.redis.hset(f"job:meta:{foreign}", "tenant", api.other_tenant))
    seen, cursor, pages = [], None, 0
    while True:
        query = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        status, page, _ = api.call("GET", "/api/v1/approvals", query=query)
        assert status == 200, page
        assert set(page) == {"items", "next_cursor"} and len(page["items"]) <= 2
        seen += page["items"]
        cursor, pages = page["next_cursor"], pages + 1
        if cursor is None:
            break
        assert isinstance(cursor, str) and cursor
    assert pages >= 2
    assert [item["job"]["id"] for item in seen] == list(reversed(mine))
    item = seen[0]
    assert item["job"]["state"] == "APPROVAL_REQUIRED" and item["job"]["tenant"] == api.tenant
    assert item["job"]["topic"] == GATED_TOPIC
    assert item["decision"] == "PENDING" and item["approval_required"] is True
    assert item["safety_decision"] == "REQUIRE_APPROVAL"
    assert item["policy_rule_id"] == "example-echo-approval"
    assert item["policy_snapshot"] == Policy(helpers.SHIPPED_POLICY).snapshot
    assert item["decided_at"] is None and item["decided_by"] is None
    for stamp in (item["requested_at"], item["job"]["updated_at"]):
        assert stamp.endswith("Z") and datetime.fromisoformat(stamp).tzinfo is not None
    # Approved jobs leave the list.
    assert approve(api, mine[0])[0] == 200
    _, page, _ = api.call("GET", "/api/v1/approvals", query={"limit": "50"})
    assert mine[0] not in [i["job"]["id"] for i in page["items"]]


def test_a_bad_cursor_is_400(api):
    status, err, _ = api.call("GET", "/api/v1/approvals", query={"cursor": "yesterday"})
    assert (status, err["code"]) == (400, "invalid_request")


# ------------------------------------------------------------------ approve


def test_approve_rewrites_the_request_and_the_engine_dispatches_it_without_the_kernel(api):
    job_id = api.gated()
    before = api.meta(job_id)
    nc, submits = subscribe(protocol.SUBJECT_SUBMIT)
    status, body, headers = approve(api, job_id)
    assert status == 200, body
    assert body == {"job_id": job_id, "trace_id": before["trace_id"]}
    assert headers["X-Trace-Id"] == before["trace_id"]

    meta = api.meta(job_id)
    assert meta["state"] == "PENDING"
    assert (meta["approval_status"], meta["approved_by"]) == ("APPROVED", "bob")
    assert (meta["approval_reason"], meta["approval_note"]) == ("looks fine", "n1")
    assert datetime.fromtimestamp(int(meta["approval_decided_at"]) / 1e6, tz=UTC)
    stored = api.request(job_id)
    assert stored.labels["approval_granted"] == "true"
    assert stored.labels["approval_snapshot"] == before["safety_snapshot"]
    assert stored.labels["approval_reason"] == "looks fine"
    assert stored.labels["approval_note"] == "n1"
    assert stored.labels["cordum.bus_msg_id"] == f"approval:{job_id}"
    assert "approval_granted" not in stored.meta.labels  # would change the job hash

    msg, packet = next_for(submits, job_id, "job_request")
    runtime.run(nc.close())
    assert msg.headers["Nats-Msg-Id"] == f"approval:{job_id}"
    assert packet.trace_id == before["trace_id"]
    assert packet.job_request.labels["approval_granted"] == "true"

    # The engine's check, on what was published and the approval recorded in the
    # job's meta; its kernel address answers nothing, so asking the kernel would fail.
    assert meta["approval_policy_snapshot"] == before["safety_snapshot"]
    assert meta["approval_job_hash"] == before["safety_job_hash"]
    worker = f"w-{api.unique}"
    engine = api.engine(safety_addr=f"127.0.0.1:{helpers.free_port()}", worker=worker)
    verdict, fields = runtime.run(engine.decide(packet.job_request, api.tenant, meta))
    assert (verdict.decision, verdict.reason) == ("ALLOW", "approval granted")
    assert fields["safety_job_hash"] == before["safety_job_hash"]
    # The whole request path: dispatched here, or (a scheduler of a running stack
    # consumes sys.job.submit too) already dispatched there, through the same path.
    outcome = runtime.run(engine.handle_request(msg.data))
    assert outcome.action in ("dispatched", "noop"), outcome
    meta = api.meta(job_id)
    assert meta["state"] in ("RUNNING", "SUCCEEDED")
    assert (meta["safety_decision"], meta["safety_reason"]) == ("ALLOW", "approval granted")


def test_approve_twice_answers_already_approved(api):
    job_id = api.gated()
    assert approve(api, job_id)[0] == 200
    record = ("approval_status", "approved_by", "approval_reason", "approval_decided_at")
    decided = [api.meta(job_id)[name] for name in record]
    status, body, _ = approve(api, job_id, body={"reason": "again"})
    assert status == 200
    assert body["status"] == "already_approved" and body["job_id"] == job_id
    assert body["decided_by"] == "bob"
    assert [api.meta(job_id)[name] for name in record] == decided  # nothing rewritten
    status, err, _ = reject(api, job_id)
    assert (status, err["code"]) == (409, "approval_already_resolved")


def test_the_submitter_cannot_approve_or_reject_their_own_job(api):
    job_id = api.gated(key=SUBMITTER)
    assert api.meta(job_id)["principal"] == "alice"
    for call in (approve, reject):
        status, err, _ = call(api, job_id, key=SUBMITTER)
        assert (status, err["code"]) == (403, "self_approval_denied")
    assert api.meta(job_id)["state"] == "APPROVAL_REQUIRED"


def test_the_list_tells_each_caller_whether_they_may_decide(api):
    # The submitter sees their own job as not theirs to decide, with the reason; the
    # approver sees it as decidable. Who submitted comes from the job's meta (the key's
    # identity at submit), never from anything in the request.
    job_id = api.gated(key=SUBMITTER)

    def item_for(key):
        status, page, _ = api.call("GET", "/api/v1/approvals", key=key, query={"limit": "50"})
        assert status == 200, page
        return next(i for i in page["items"] if i["job"]["id"] == job_id)

    own = item_for(SUBMITTER)
    assert own["may_decide"] is False
    assert "submitted" in own["may_not_decide_reason"]
    other = item_for(APPROVER)
    assert other["may_decide"] is True and other["may_not_decide_reason"] is None
    assert approve(api, job_id, key=SUBMITTER)[0] == 403
    assert approve(api, job_id)[0] == 200


def test_a_busy_job_lock_is_409_retryable(api):
    job_id = api.gated()
    lease = runtime.run(JobLocks(api.redis).acquire(job_id))
    try:
        status, err, headers = approve(api, job_id)
    finally:
        runtime.run(lease.release())
    assert status == 409
    assert err["code"] == "approval_retryable_lock" and err["retryable"] is True
    assert int(headers["Retry-After"]) >= 1
    assert api.meta(job_id)["state"] == "APPROVAL_REQUIRED"
    assert approve(api, job_id)[0] == 200  # free again


def test_a_request_changed_since_the_verdict_is_409_stale_request(api):
    from google.protobuf import json_format

    job_id = api.gated()
    req = api.request(job_id)
    req.labels["target"] = "production"
    runtime.run(api.store.put_request(job_id, json_format.MessageToJson(req, indent=None)))
    status, err, _ = approve(api, job_id)
    assert (status, err["code"]) == (409, "approval_stale_request")
    assert api.meta(job_id)["state"] == "APPROVAL_REQUIRED"
    assert "approval_granted" not in api.request(job_id).labels


def test_a_policy_changed_since_the_verdict_is_409_stale_snapshot(api, tmp_path):
    job_id = api.gated()
    changed = tmp_path / "safety.yaml"
    changed.write_text(helpers.SHIPPED_POLICY.read_text().replace(
        "approval required by example policy", "approval required by the new policy"))
    with helpers.serving_kernel(changed) as addr:
        api.use_kernel(addr)
        status, err, _ = approve(api, job_id)
    assert (status, err["code"]) == (409, "approval_stale_snapshot")
    assert api.meta(job_id)["state"] == "APPROVAL_REQUIRED"


def test_an_unreachable_kernel_skips_only_the_drift_check(api):
    job_id = api.gated()
    api.use_kernel(f"127.0.0.1:{helpers.free_port()}")
    status, body, _ = approve(api, job_id)
    assert status == 200, body
    assert api.meta(job_id)["state"] == "PENDING"


def test_jobs_not_waiting_for_approval_are_409(api):
    from google.protobuf import json_format

    from cordum.store.jobs import NewJob

    # Stored, not announced: nothing schedules it meanwhile.
    open_job = f"open-{api.unique}"
    req = protocol.JobRequest(job_id=open_job, topic="job.default", tenant_id=api.tenant)
    assert runtime.run(api.store.create(NewJob(
        job_id=open_job, trace_id=f"tr-{open_job}", tenant=api.tenant, topic=req.topic,
        context="{}", request=json_format.MessageToJson(req), meta={"principal": "alice"})))
    api.jobs.append(open_job)
    status, err, _ = approve(api, open_job)
    assert (status, err["code"]) == (409, "approval_not_actionable")
    assert api.call("POST", f"/api/v1/jobs/{open_job}/cancel", key=SUBMITTER)[0] == 200
    for call in (approve, reject):
        status, err, _ = call(api, open_job)
        assert (status, err["code"]) == (409, "approval_terminal_run")


# ------------------------------------------------------------------ reject


def test_reject_denies_the_job_with_a_dlq_entry_and_a_dlq_notice(api):
    job_id = api.gated()
    trace = api.meta(job_id)["trace_id"]
    nc, dlq = subscribe(protocol.SUBJECT_DLQ)
    status, body, _ = reject(api, job_id)
    assert (status, body) == (200, {"job_id": job_id})
    meta = api.meta(job_id)
    assert meta["state"] == "DENIED"
    assert (meta["approval_status"], meta["approved_by"]) == ("REJECTED", "bob")
    assert meta["failure_reason"] == "too risky"
    entry = json.loads(runtime.run(api.redis.get(f"dlq:entry:{job_id}")))
    assert entry["reason_code"] == "approval_rejected" and entry["status"] == "DENIED"
    assert entry["last_state"] == "APPROVAL_REQUIRED" and entry["topic"] == GATED_TOPIC
    assert runtime.run(api.redis.zscore("dlq:index", job_id)) is not None

    _, packet = next_for(dlq, job_id, "job_result")
    runtime.run(nc.close())
    res = packet.job_result
    assert res.status == protocol.JobStatus.JOB_STATUS_DENIED
    assert (res.error_code, res.error_message) == ("approval_rejected", "too risky")
    assert res.error_code_enum == 300 and packet.trace_id == trace

    status, body, _ = reject(api, job_id)
    assert status == 200 and body["status"] == "already_rejected"
    status, err, _ = approve(api, job_id)
    assert (status, err["code"]) == (409, "approval_already_resolved")
    # The rejected job is in the tenant's DLQ, under Cordum's reason code.
    _, entries, _ = api.call("GET", "/api/v1/dlq")
    assert [e["reason_code"] for e in entries if e["job_id"] == job_id] == ["approval_rejected"]


def test_rejecting_a_workflow_gate_also_reports_on_the_result_path(api):
    from google.protobuf import json_format

    from cordum.approval import job_hash
    from cordum.store.jobs import JobState, NewJob

    # Stored as the engine leaves a gate job the policy gated: APPROVAL_REQUIRED
    # with its safety record.
    job_id = f"gate-{api.unique}"
    req = protocol.JobRequest(job_id=job_id, topic="job.cordum.approval-gate",
                              tenant_id=api.tenant, env={"tenant_id": api.tenant})
    meta = {"safety_decision": "REQUIRE_APPROVAL", "safety_approval_required": "true",
            "safety_job_hash": job_hash(req), "principal": "alice"}
    job = NewJob(job_id=job_id, trace_id=f"tr-{job_id}", tenant=api.tenant,
                 topic=req.topic, context="{}", request=json_format.MessageToJson(req),
                 meta=meta, state=JobState.APPROVAL_REQUIRED)
    assert runtime.run(api.store.create(job))
    api.jobs.append(job_id)
    nc, results = subscribe(protocol.SUBJECT_RESULT)
    status, body, _ = reject(api, job_id)
    assert (status, body) == (200, {"job_id": job_id})
    msg, packet = next_for(results, job_id, "job_result")
    runtime.run(nc.close())
    assert msg.headers["Nats-Msg-Id"] == f"approval-reject:{job_id}"
    assert packet.job_result.status == protocol.JobStatus.JOB_STATUS_DENIED
    assert packet.job_result.error_code == "approval_rejected"
    assert api.meta(job_id)["state"] == "DENIED"
