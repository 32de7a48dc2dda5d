"""GET /api/v1/approvals/{job_id}/context on the real Redis, through the gateway function.

Jobs are stored as the engine and the approvals API leave them (meta, payload, request,
the tenant's per-state indexes), so each test states exactly what an approver is shown.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from google.protobuf import json_format

from cordum import protocol, runtime
from cordum.gateway.approvals import context_reads
from cordum.gateway.approvals.schemas import ApprovalContext
from cordum.gateway.core.times import rfc3339_us
from cordum.store.jobs import JobState, JobStore, NewJob
from cordum.store.results import decision_key
from tests import helpers
from tests.conftest import NATS_URL, REDIS_URL

APPROVER, SUBMITTER, OUTSIDER, VIEWER = "ctx-appr", "ctx-sub", "ctx-out", "ctx-view"
TOPIC = "job.ops.deploy"
CONSTRAINTS = {"budgets": {"maxRuntimeMs": "1000", "maxRetries": 3},
               "sandbox": {"isolated": True}}


class Env:
    def __init__(self, unique: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.unique = unique
        self.tenant = f"ctx-{unique}"
        self.other = f"ctxo-{unique}"
        self.jobs: list[str] = []
        monkeypatch.setenv("CORDUM_API_KEYS", json.dumps([
            {"key": APPROVER, "tenant": self.tenant, "role": "admin", "principal_id": "bob"},
            {"key": SUBMITTER, "tenant": self.tenant, "role": "admin",
             "principal_id": "alice"},
            {"key": VIEWER, "tenant": self.tenant, "role": "user", "principal_id": "carol"},
            {"key": OUTSIDER, "tenant": self.other, "role": "admin", "principal_id": "dave"},
        ]))
        monkeypatch.setenv("REDIS_URL", REDIS_URL)
        monkeypatch.setenv("NATS_URL", NATS_URL)
        monkeypatch.setenv("CORDUM_RATE_LIMIT_RPS", "0")
        monkeypatch.setenv("SAFETY_KERNEL_ADDR", f"127.0.0.1:{helpers.free_port()}")
        self.redis = runtime.redis_client()
        self.store = JobStore(self.redis)

    def job(self, name: str, *, state: JobState = JobState.APPROVAL_REQUIRED,
            topic: str = TOPIC, tenant: str | None = None, principal: str = "alice",
            meta: dict[str, str] | None = None, labels: dict[str, str] | None = None,
            payload: str | None = None, job_id: str | None = None,
            req: protocol.JobRequest | None = None) -> str:
        """A stored job; ``name`` tags it, ``job_id`` names it outright."""
        job_id = job_id or f"{name}-{self.unique}"
        tenant = tenant or self.tenant
        req = req or protocol.JobRequest()
        req.job_id, req.topic, req.tenant_id, req.principal_id = (job_id, topic, tenant,
                                                                  principal)
        req.labels.update(labels or {})
        fields = {"principal": principal, "labels": json.dumps(labels or {}),
                  "priority": "1", **(meta or {})}
        created = runtime.run(self.store.create(NewJob(
            job_id=job_id, trace_id=f"tr-{job_id}", tenant=tenant, topic=topic,
            context=payload if payload is not None else json.dumps({"prompt": "ship it"}),
            request=json_format.MessageToJson(req, indent=None),
            meta={k: v for k, v in fields.items() if v}, state=state)))
        assert created
        self.jobs.append(job_id)
        return job_id

    def context(self, job_id: str, key: str = APPROVER) -> tuple[int, Any]:
        tenant = self.other if key == OUTSIDER else self.tenant
        status, body, _ = helpers.call(helpers.event(
            "GET", f"/api/v1/approvals/{job_id}/context", key=key, tenant=tenant))
        return status, body

    def document(self, job_id: str) -> dict[str, Any]:
        """The 200 answer, checked against the documented schema as the OpenAPI run does."""
        status, body = self.context(job_id)
        assert status == 200, body
        ApprovalContext.model_validate_json(json.dumps(body), strict=True)
        return body


@pytest.fixture
def env(unique, monkeypatch):
    e = Env(unique, monkeypatch)
    with helpers.gateway_process():
        yield e

        async def forget() -> None:
            await helpers.forget_jobs(e.redis, e.jobs, tombstone=False)
            await helpers.delete_keys(e.redis, f"*{unique}*")

        runtime.run(forget())


def gated_meta(**extra: str) -> dict[str, str]:
    return {"safety_decision": "REQUIRE_APPROVAL", "safety_approval_required": "true",
            "safety_rule_id": "deploys-need-a-person", "safety_reason": "prod deploy",
            "safety_snapshot": "snap-7", "safety_constraints": json.dumps(CONSTRAINTS),
            "capability": "deploy", "risk_tags": json.dumps(["prod"]),
            "requires": json.dumps(["kubectl"]), **extra}


def now_us() -> int:
    return time.time_ns() // 1000


# ------------------------------------------------------------------ a policy-gated job


def test_a_policy_gated_job_has_every_section(env):
    deadline = now_us() + 90_000_000
    req = protocol.JobRequest()
    req.meta.capability = "deploy"
    req.meta.risk_tags.extend(["prod", "write"])
    req.meta.requires.append("kubectl")
    req.compensation.topic = "job.ops.undeploy"
    req.compensation.context_ptr = "redis://ctx:undo-1"
    labels = {"system:payments": "1", "target_system": "ledger", "namespace:prod": "1",
              "target_resource": "db/main", "rollback_hint": "helm rollback web 41",
              "team": "blue"}
    job_id = env.job("gated", meta=gated_meta(deadline_unix=str(deadline)), labels=labels,
                     payload=json.dumps({"prompt": "ship it", "version": "42"}), req=req)

    doc = env.document(job_id)

    assert not {"kind", "version", "workflow", "decision"} & doc.keys()  # no gate here
    approval = doc["approval"]
    assert {k: approval[k] for k in (
        "job_id", "state", "decision", "policy_snapshot", "policy_rule_id", "policy_reason",
        "constraints", "approval_required", "approval_ref", "approval_status")} == {
        "job_id": job_id, "state": "APPROVAL_REQUIRED", "decision": "REQUIRE_APPROVAL",
        "policy_snapshot": "snap-7", "policy_rule_id": "deploys-need-a-person",
        "policy_reason": "prod deploy", "constraints": CONSTRAINTS,
        "approval_required": True, "approval_ref": job_id, "approval_status": "pending"}
    assert not {"resolved_by", "resolved_at", "resolution", "workflow_id"} & approval.keys()
    assert approval["job_input"] == {"prompt": "ship it", "version": "42"}
    assert doc["policy_snapshot_summary"] == {
        "matched_rule": {"id": "deploys-need-a-person", "description": "prod deploy",
                         "decision": "REQUIRE_APPROVAL",
                         "constraints_summary": "max_retries=3, timeout=1000ms, sandboxed"},
        "policy_version": "snap-7"}
    assert doc["blast_radius"] == {
        "systems": ["ledger", "payments"], "namespaces": ["prod"], "resources": ["db/main"],
        "scope_description": f"Affects 2 system(s), 1 namespace(s), 1 resource(s) in "
                             f"tenant {env.tenant}"}
    assert doc["prior_approvals"] == []
    assert doc["rollback_hint"] == "helm rollback web 41"
    assert 80_000 < doc["time_remaining_ms"] <= 90_000
    assert doc["constraints"] == CONSTRAINTS
    assert doc["decision_summary"] == {
        "source": "policy_only", "title": "Approval required by rule deploys-need-a-person",
        "subject": f"Review {TOPIC}", "why": "prod deploy"}
    run = doc["what_will_run"]
    assert {k: run[k] for k in ("topic", "capability", "principal", "priority", "labels",
                                "labels_truncated")} == {
        "topic": TOPIC, "capability": "deploy", "principal": "alice", "priority": 1,
        "labels": labels, "labels_truncated": False}
    assert json.loads(run["input_preview"]) == {"prompt": "ship it", "version": "42"}
    assert (run["input_truncated"], run["input_withheld"], run["input_withheld_reason"]) == (
        False, False, None)
    assert "run_id" not in run
    assert doc["why_gated"] == {"rule_id": "deploys-need-a-person", "reason": "prod deploy",
                                "snapshot": "snap-7", "decision": "REQUIRE_APPROVAL",
                                "constraints": CONSTRAINTS}
    # The stored request speaks for risk (its meta), not the job's meta.
    assert doc["risk"] == {"risk_tags": ["prod", "write"], "requires": ["kubectl"],
                           "capability": "deploy"}
    assert doc["rollback"] == {"hint": "helm rollback web 41", "compensation": {
        "topic": "job.ops.undeploy", "context_ptr": "redis://ctx:undo-1"}}
    assert doc["time_left"]["expires_at"] == rfc3339_us(deadline)
    assert doc["time_left"]["remaining_ms"] == doc["time_remaining_ms"]


def test_a_job_without_labels_deadline_or_compensation_says_so(env):
    job_id = env.job("plain", meta=gated_meta())
    doc = env.document(job_id)
    assert doc["blast_radius"] == {"systems": [], "namespaces": [], "resources": [],
                                   "scope_description": f"Topic: {TOPIC}"}
    assert (doc["rollback_hint"], doc["time_remaining_ms"]) == (None, None)
    assert doc["rollback"] == {"hint": None, "compensation": None}
    assert doc["time_left"] == {"expires_at": None, "remaining_ms": None}
    # No request meta: risk comes from the job's meta.
    assert doc["risk"] == {"risk_tags": ["prod"], "requires": ["kubectl"],
                           "capability": "deploy"}


def test_a_passed_deadline_leaves_no_time_and_expires_the_approval(env):
    job_id = env.job("late", meta=gated_meta(deadline_unix=str(now_us() - 5_000_000)))
    doc = env.document(job_id)
    assert doc["time_remaining_ms"] == 0 and doc["time_left"]["remaining_ms"] == 0
    assert doc["approval"]["approval_status"] == "expired"


def test_a_decided_job_shows_its_resolution(env):
    decided_at = now_us() - 1_000_000
    approved = env.job("ok", state=JobState.SUCCEEDED, meta=gated_meta(
        approval_status="APPROVED", approved_by="bob", approval_reason="checked",
        approval_note="watch the canary", approval_decided_at=str(decided_at)))
    rejected = env.job("no", state=JobState.DENIED, meta=gated_meta(
        approval_status="REJECTED", approved_by="bob", approval_reason="too risky",
        approval_decided_at=str(decided_at)))
    never = env.job("free", state=JobState.SUCCEEDED, meta={"capability": "read"})

    approval = env.document(approved)["approval"]
    assert {k: approval[k] for k in ("approval_status", "resolved_by", "resolved_comment",
                                     "resolution", "resolved_at", "state")} == {
        "approval_status": "approved", "resolved_by": "bob",
        "resolved_comment": "watch the canary", "resolution": "checked",
        "resolved_at": decided_at, "state": "SUCCEEDED"}
    approval = env.document(rejected)["approval"]
    assert (approval["approval_status"], approval["resolution"]) == ("rejected", "too risky")
    approval = env.document(never)["approval"]
    assert (approval["approval_status"], approval["approval_required"]) == (None, False)


# ------------------------------------------------------------------ a workflow gate


def test_a_gate_job_keeps_its_document_and_names_its_run(env):
    run_id = f"run-{env.unique}"
    gate_doc = {"kind": "workflow_approval_context", "version": 1,
                "workflow": {"workflow_id": "wf-1", "workflow_name": "Payouts",
                             "run_id": run_id, "step_id": "gate"},
                "decision": {"amount": 7, "memo": "x" * 6000}}  # longer than the preview
    job_id = env.job("gate", job_id=f"{run_id}:gate@1", topic="job.cordum.approval-gate",
                     meta=gated_meta(), payload=json.dumps(gate_doc),
                     labels={"run_id": run_id, "step_id": "gate", "workflow_id": "wf-1"})

    doc = env.document(job_id)

    assert {k: doc[k] for k in ("kind", "version", "workflow", "decision")} == gate_doc
    approval = doc["approval"]
    assert (approval["workflow_id"], approval["workflow_run_id"],
            approval["workflow_step_id"]) == ("wf-1", run_id, "gate")
    run = doc["what_will_run"]
    assert (run["workflow_id"], run["run_id"], run["step_id"]) == ("wf-1", run_id, "gate")
    assert run["input_truncated"] is True  # the document whole, its preview cut
    assert doc["decision_summary"]["source"] == "workflow_payload"
    assert doc["decision_summary"]["title"] == "Workflow approval: Payouts, step gate"


def test_a_gate_without_its_document_still_answers(env):
    run_id = f"run-{env.unique}"
    job_id = env.job("bare-gate", job_id=f"{run_id}:gate@1", topic="sys.approval.gate",
                     meta=gated_meta(), payload="{}",
                     labels={"run_id": run_id, "step_id": "gate", "workflow_id": "wf-1"})
    doc = env.document(job_id)
    assert "kind" not in doc and doc["decision_summary"]["source"] == "policy_only"
    assert doc["approval"]["workflow_run_id"] == run_id


# ------------------------------------------------------------------ prior approvals


def decided(env: Env, name: str, at: int, status: str = "APPROVED", **kw: Any) -> str:
    state = JobState.DENIED if status == "REJECTED" else JobState.SUCCEEDED
    return env.job(name, state=state, meta=gated_meta(
        approval_status=status, approved_by=f"by-{name}", approval_decided_at=str(at)),
        **kw)


def test_prior_approvals_are_the_same_topic_submitter_and_tenant_newest_first(env):
    base = now_us() - 600_000_000
    # Stored in an order unlike their decisions: the list is by decision time.
    order = [5, 0, 11, 3, 8, 1, 10, 6, 2, 9, 4, 7]
    mine = {n: decided(env, f"mine{n}", base + n * 1_000_000,
                       "REJECTED" if n % 3 == 0 else "APPROVED") for n in order}
    decided(env, "other-principal", base + 50_000_000, principal="mallory")
    decided(env, "other-topic", base + 50_000_000, topic="job.ops.other")
    decided(env, "other-tenant", base + 50_000_000, tenant=env.other)
    env.job("undecided", state=JobState.SUCCEEDED, meta=gated_meta())
    env.job("waiting", meta=gated_meta())
    job_id = env.job("now", meta=gated_meta())

    priors = env.document(job_id)["prior_approvals"]

    newest = sorted(mine, reverse=True)[:10]
    assert len(priors) == 10
    assert [p["job_id"] for p in priors] == [mine[n] for n in newest]
    assert priors[0] == {"job_id": mine[11], "topic": TOPIC, "tenant": env.tenant,
                         "decision": "APPROVED", "resolved_by": "by-mine11",
                         "resolved_at": base + 11_000_000, "was_approved": True}
    assert [p["was_approved"] for p in priors] == [n % 3 != 0 for n in newest]


def test_prior_approvals_look_back_a_bounded_number_of_jobs(env, monkeypatch):
    monkeypatch.setattr(context_reads, "PRIOR_SCAN", 5)
    old = decided(env, "old", now_us() - 60_000_000)
    job_id = env.job("asking", meta=gated_meta())
    assert [p["job_id"] for p in env.document(job_id)["prior_approvals"]] == [old]
    for n in range(5):  # five later changes of the tenant's jobs push it out of reach
        env.job(f"later{n}", state=JobState.SUCCEEDED)
    assert env.document(job_id)["prior_approvals"] == []


def test_a_job_without_a_submitter_has_no_prior_approvals(env):
    decided(env, "anon-old", now_us() - 1_000_000, principal="")
    job_id = env.job("anon", meta=gated_meta(), principal="")
    assert env.document(job_id)["prior_approvals"] == []


# ------------------------------------------------------------------ who may read it


def test_another_tenants_job_answers_as_a_missing_one(env):
    theirs = env.job("theirs", tenant=env.other, meta=gated_meta())
    mine = env.job("mine", meta=gated_meta())
    foreign = env.context(theirs)
    missing = env.context(f"nothing-{env.unique}")
    assert foreign == missing
    assert missing[0] == 404 and missing[1]["error"] == "job not found"
    assert env.context(mine, key=OUTSIDER) == missing
    assert env.context(theirs, key=OUTSIDER)[0] == 200
    assert env.context(mine, key=VIEWER)[0] == 403  # approvals are for admins


# ------------------------------------------------------------------ the input


def test_a_long_input_is_cut_to_the_preview_bound(env):
    # Multi-byte characters across the cut: the preview keeps whole characters only.
    payload = json.dumps({"prompt": "é" * 5000}, ensure_ascii=False)
    size = len(payload.encode())
    job_id = env.job("long", meta=gated_meta(), payload=payload)
    doc = env.document(job_id)
    run = doc["what_will_run"]
    preview = run["input_preview"]
    assert (run["input_truncated"], run["input_size_bytes"]) == (True, size)
    assert payload.startswith(preview)
    assert context_reads.INPUT_PREVIEW_BYTES - 1 <= len(preview.encode()) \
        <= context_reads.INPUT_PREVIEW_BYTES
    assert doc["approval"]["job_input"] == preview  # not parsed: it is cut

    short = env.job("short", meta=gated_meta(), payload='{"prompt":"é"}')
    run = env.document(short)["what_will_run"]
    assert (run["input_preview"], run["input_truncated"]) == ('{"prompt":"é"}', False)


SECRET = "s3cr3t-token-value"


@pytest.mark.parametrize("case", ["quarantined", "output_redacted", "decision_quarantined",
                                  "policy_redaction"])
def test_a_redacted_or_quarantined_jobs_input_is_never_shown(env, case):
    meta = gated_meta()
    state = JobState.APPROVAL_REQUIRED
    if case == "quarantined":
        state = JobState.OUTPUT_QUARANTINED
    elif case == "output_redacted":
        state = JobState.SUCCEEDED
        meta["output_safety"] = json.dumps({"decision": "REDACT", "phase": "async",
                                            "quarantined": False})
    elif case == "policy_redaction":
        meta["safety_constraints"] = json.dumps({"redactionLevel": "strict"})
    job_id = env.job(f"hush-{case}", state=state, meta=meta,
                     payload=json.dumps({"prompt": f"use {SECRET}"}))
    if case == "decision_quarantined":
        runtime.run(env.redis.set(decision_key(job_id), json.dumps(
            {"decision": "QUARANTINE", "phase": "sync", "quarantined": True}), ex=60))

    status, body = env.context(job_id)

    assert status == 200
    assert SECRET not in json.dumps(body)
    run = body["what_will_run"]
    assert (run["input_preview"], run["input_withheld"]) == (None, True)
    assert run["input_withheld_reason"]
    assert body["approval"]["job_input"] is None


def test_a_withheld_gates_evaluated_input_is_left_out(env):
    run_id = f"run-{env.unique}"
    gate_doc = {"kind": "workflow_approval_context", "version": 1,
                "workflow": {"run_id": run_id, "step_id": "gate"},
                "decision": {"token": SECRET}}
    job_id = env.job("hush-gate", job_id=f"{run_id}:gate@1",
                     topic="job.cordum.approval-gate", payload=json.dumps(gate_doc),
                     meta=gated_meta(safety_constraints=json.dumps({"redactionLevel": "pii"})),
                     labels={"run_id": run_id, "step_id": "gate"})
    body = env.document(job_id)
    assert SECRET not in json.dumps(body)
    assert body["kind"] == "workflow_approval_context" and "decision" not in body


# ------------------------------------------------------------------ cordum-sdk


def test_cordum_sdk_parses_the_context(env):
    from cordum_sdk._generated.api.approvals import get_approval_context
    from cordum_sdk._generated.client import AuthenticatedClient
    from cordum_sdk._generated.models import GetApprovalContextResponse200

    from tests.integration.test_sdk_policies import loopback_gateway

    decided(env, "sdk-prior", now_us() - 2_000_000, status="REJECTED")
    job_id = env.job("sdk", meta=gated_meta(deadline_unix=str(now_us() + 60_000_000)),
                     labels={"target_system": "ledger", "rollback_hint": "revert"})
    with loopback_gateway() as url:
        client = AuthenticatedClient(base_url=url, token=APPROVER, prefix="",
                                     auth_header_name="X-API-Key")
        with client:
            resp = get_approval_context.sync_detailed(job_id, client=client,
                                                      x_tenant_id=env.tenant)
            missing = get_approval_context.sync_detailed(f"none-{env.unique}", client=client,
                                                         x_tenant_id=env.tenant)
    assert resp.status_code == 200
    parsed = resp.parsed
    assert isinstance(parsed, GetApprovalContextResponse200)
    assert parsed.approval["approval_status"] == "pending"
    assert parsed.approval["decision"] == "REQUIRE_APPROVAL"
    assert parsed.blast_radius.systems == ["ledger"]
    assert parsed.policy_snapshot_summary.matched_rule.constraints_summary == (
        "max_retries=3, timeout=1000ms, sandboxed")
    assert parsed.policy_snapshot_summary.policy_version == "snap-7"
    [prior] = parsed.prior_approvals
    assert (prior.decision, prior.was_approved, prior.resolved_by) == (
        "REJECTED", False, "by-sdk-prior")
    assert isinstance(prior.resolved_at, int)
    assert parsed.rollback_hint == "revert"
    assert isinstance(parsed.time_remaining_ms, int) and parsed.time_remaining_ms > 50_000
    assert parsed.constraints.to_dict() == CONSTRAINTS
    assert parsed["what_will_run"]["topic"] == TOPIC  # our sections ride along
    assert missing.status_code == 404 and missing.parsed is None
