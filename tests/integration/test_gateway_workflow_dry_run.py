"""POST /api/v1/workflows/{id}/dry-run on the real Redis and the real safety kernel serving
the shipped config/safety.yaml (API Gateway proxy events into the gateway), and a
``?dry_run=true`` start.

The shipped policy allows ``job.default``, denies ``job.echo.denied``, throttles
``job.echo.throttled`` and holds the approval gate topic for a human
(``workflow-approval-gate``).
"""

from __future__ import annotations

from typing import Any

import pytest

from cordum import config, runtime
from cordum.gateway.workflows.dry_run import step_request
from cordum.workflow.definition import Workflow
from cordum.workflow.model import WorkflowRun
from tests.helpers import free_port
from tests.integration.workflow_api import OUTSIDER, VIEWER, WRITER, Api, world

FLOW = {
    "pay": {"type": "worker", "name": "Pay", "topic": "job.default"},
    "bad": {"type": "worker", "topic": "job.echo.denied", "depends_on": ["pay"]},
    "gated": {"type": "worker", "topic": "job.default", "policy_gate": "deny"},
    "review": {"type": "llm", "topic": "job.default", "policy_gate": "require_approval"},
    "review-bad": {"type": "worker", "topic": "job.echo.denied",
                   "policy_gate": "require_approval"},
    "slow": {"type": "http", "topic": "job.echo.throttled",
             "for_each": "input.items"},
    "ok": {"type": "approval", "name": "Sign off", "depends_on": ["pay"]},
    "shape": {"type": "transform", "input": {"n": "${input.n}"}},
    "wait": {"type": "delay", "delay_sec": 5},
}
EXPECTED = [
    ("pay", "Pay", "worker", "ALLOW", "Default topics for demos and integration tests.",
     "default-topic-allow"),
    ("bad", "", "worker", "DENY", "denied by example policy", "example-echo-denied"),
    ("gated", "", "worker", "DENY", "policy_gate deny", "policy_gate"),
    ("review", "", "llm", "REQUIRE_APPROVAL", "policy_gate require_approval", "policy_gate"),
    ("review-bad", "", "worker", "DENY", "denied by example policy", "example-echo-denied"),
    ("slow", "", "http", "THROTTLE", "throttled by example policy", "example-echo-throttled"),
    ("ok", "Sign off", "approval", "REQUIRE_APPROVAL",
     "A workflow approval step waits for a human decision.", "workflow-approval-gate"),
    ("shape", "", "transform", "N/A", "a transform step runs no job", ""),
    ("wait", "", "delay", "N/A", "a delay step runs no job", ""),
]
FIELDS = ("step_id", "step_name", "step_type", "decision", "reason", "rule_id")


@pytest.fixture
def api(unique, monkeypatch, kernel):
    for a in world(unique, monkeypatch):
        use_kernel(monkeypatch, kernel)
        yield a


def use_kernel(monkeypatch: pytest.MonkeyPatch, addr: str) -> None:
    monkeypatch.setenv("SAFETY_KERNEL_ADDR", addr)
    config.settings.cache_clear()


def keys_of(api: Api, pattern: str) -> set[bytes]:
    async def scan() -> set[bytes]:
        return {k async for k in api.redis.scan_iter(match=pattern, count=1000)}

    return runtime.run(scan())


def dry_run(api: Api, workflow_id: str, body: Any = None, **kw: Any) -> tuple[int, Any, dict]:
    return api.call("POST", f"/api/v1/workflows/{workflow_id}/dry-run", body, **kw)


def test_each_step_gets_the_kernels_decision_in_definition_order(api):
    workflow_id = api.saved(steps=FLOW)
    before = keys_of(api, f"*{api.unique}*")
    status, body, _ = dry_run(api, workflow_id, {"input": {"n": 1, "items": [1, 2]},
                                                 "environment": "staging"}, key=WRITER)
    assert status == 200, body
    assert body["workflow_id"] == workflow_id
    assert [tuple(s[f] for f in FIELDS) for s in body["steps"]] == EXPECTED
    # Nothing was made: no job, no run, no key of this test's, no dry-run job anywhere.
    assert keys_of(api, f"*{api.unique}*") == before
    assert keys_of(api, "*dry-run-*") == set()
    assert api.runner.started == []
    assert api.call("GET", "/api/v1/workflow-runs")[1]["items"] == []


def test_an_unreachable_kernel_makes_each_job_step_an_error_and_still_answers(api, monkeypatch):
    workflow_id = api.saved(steps=FLOW)
    use_kernel(monkeypatch, f"127.0.0.1:{free_port()}")
    status, body, _ = dry_run(api, workflow_id, {})
    assert status == 200, body
    decided = {s["step_id"]: (s["decision"], s["reason"]) for s in body["steps"]}
    assert list(decided) == [row[0] for row in EXPECTED]
    # Decided without the kernel: the deny gate and the steps that run no job.
    assert decided.pop("gated") == ("DENY", "policy_gate deny")
    assert decided.pop("shape")[0] == decided.pop("wait")[0] == "N/A"
    for step_id, (decision, reason) in decided.items():
        assert decision == "ERROR", step_id
        assert reason.startswith(("safety kernel error: UNAVAILABLE",
                                  "safety kernel circuit open")), (step_id, reason)
    use_kernel(monkeypatch, " ")  # an empty variable reads as the default address
    body = dry_run(api, workflow_id, {})[1]
    assert {(s["decision"], s["reason"]) for s in body["steps"] if s["step_id"] == "pay"} == \
        {("ERROR", "no safety kernel address configured")}


def test_an_unknown_or_foreign_workflow_is_404_and_a_bad_body_400(api):
    workflow_id = api.saved(steps=FLOW)
    not_found = (404, {"error": "workflow not found", "code": "not_found", "status": 404})
    assert dry_run(api, api.wf_id("none"), {})[:2] == not_found
    assert dry_run(api, workflow_id, {}, key=OUTSIDER)[:2] == not_found
    assert dry_run(api, workflow_id, {}, key=VIEWER)[0] == 403
    for body, message in (("[]", "request body must be a JSON object"),
                          ("{", "request body is not valid JSON"),
                          ({"input": 5}, "input: Input should be a valid dictionary")):
        status, answer, _ = dry_run(api, workflow_id, body)
        assert (status, answer["error"]) == (400, message), body
    # No body, an empty one, null fields, an environment object (cordum-sdk's form).
    for body in (None, {}, {"input": None, "environment": None},
                 {"environment": {"name": "prod"}}):
        assert dry_run(api, workflow_id, body)[0] == 200, body


def test_the_request_asked_about_is_the_one_the_engine_would_publish():
    wf = Workflow.model_validate({"id": "wf1", "team_id": "blue", "steps": {
        "work": {"type": "worker", "timeout_sec": 30,
                 "route_labels": {"region": "${input.region}", "tier": "gold",
                                  "from": "${steps.prior.output.x}"},
                 "meta": {"capability": "pay", "risk_tags": ["money"], "requires": ["gpu"],
                          "pack_id": "pk", "actor_id": "bot"}},
        "gate": {"type": "approval"}}})
    stand_in = WorkflowRun(id="dry-run-x", workflow_id="wf1", org_id="acme",
                           team_id="blue", triggered_by="ada", dry_run=True)
    scope = {"input": {"region": "eu"}, "ctx": {}, "steps": {}}
    req = step_request(wf, "work", wf.steps["work"], stand_in, scope, "staging")
    assert (req.topic, req.tenant_id, req.principal_id, req.priority) == \
        ("job.workflow.wf1", "acme", "ada", 2)
    assert dict(req.labels) == {"region": "eu", "tier": "gold", "workflow_id": "wf1",
                                "step_id": "work", "_source": "workflow"}
    assert dict(req.env) == {"workflow_id": "wf1", "step_id": "work", "tenant_id": "acme",
                             "team_id": "blue", "dry_run": "true", "environment": "staging"}
    assert (req.meta.capability, list(req.meta.risk_tags), list(req.meta.requires),
            req.meta.pack_id, req.meta.actor_id, req.meta.tenant_id) == \
        ("pay", ["money"], ["gpu"], "pk", "bot", "acme")
    assert req.budget.deadline_ms == 30_000 and req.job_id == "dry-run-x:work@1"
    gate = step_request(wf, "gate", wf.steps["gate"], stand_in, scope, "")
    assert (gate.topic, gate.priority, gate.labels["gate_type"]) == \
        ("job.cordum.approval-gate", 1, "workflow_approval")
    assert "environment" not in gate.env


# --------------------------------------------------------------------------- ?dry_run


def test_a_dry_run_start_makes_a_run_marked_dry(api):
    workflow_id = api.saved()
    path = f"/api/v1/workflows/{workflow_id}/runs"
    for value in ("true", "", "1"):
        status, body, headers = api.call("POST", path, {"n": 1}, query={"dry_run": value})
        assert status == 200 and headers["X-Trace-Id"] == body["run_id"], body
        run = api.call("GET", f"/api/v1/workflow-runs/{body['run_id']}")[1]
        assert (run["dry_run"], run["labels"], run["metadata"], run["status"]) == \
            (True, {"dry_run": "true"}, {"dry_run": "true"}, "pending"), value
    real = api.start(workflow_id, {"n": 1}, query={"dry_run": "false"})
    assert api.run(real).dry_run is False and api.run(real).labels == {}
    assert [r.dry_run for r in api.runner.started] == [True, True, True, False]


def test_a_dry_run_start_and_a_real_one_are_different_requests(api):
    workflow_id = api.saved()
    path = f"/api/v1/workflows/{workflow_id}/runs"
    key = {"Idempotency-Key": f"dry-{api.unique}"}
    dry = api.start(workflow_id, {"n": 2}, query={"dry_run": "true"}, headers=key)
    assert api.start(workflow_id, {"n": 2}, query={"dry_run": "true"}, headers=key) == dry
    status, body, _ = api.call("POST", path, {"n": 2}, headers=key)
    assert (status, body["code"]) == (409, "RUN_IDEMPOTENCY_CONFLICT")
    assert len(api.runner.started) == 1
