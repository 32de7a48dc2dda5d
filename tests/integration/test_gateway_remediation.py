"""POST /api/v1/jobs/{id}/remediate on the real Redis, NATS and safety kernel: a denied
job keeps the remediations its decision offered, and applying one submits a new job
through the whole submit path, linked to the original.

The gateway and its keys are those of the submit tests (``Gateway``), with a policy of
this module's own and keys that name their principals.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cordum import config, protocol, runtime
from cordum.bus.streams import ensure_stream
from cordum.gateway.jobs import deps
from cordum.safety.client import Decision, SafetyVerdict
from cordum.safety.kernel_service import PolicyKernel
from cordum.safety.policy_file import Policy
from cordum.scheduler.constraints import (
    MAX_REMEDIATION_SUMMARY,
    MAX_REMEDIATIONS,
    remediations_json,
    safety_meta,
)
from cordum.store.audit import parse_entry, stream_key
from tests.helpers import call, event, serving_kernel
from tests.integration.test_gateway_submit import Gateway

SAFETY_YAML = """\
default_decision: deny
rules:
  - id: remedy-deny
    match: {topics: [job.remedy.risky]}
    decision: deny
    reason: risky topic
    remediations:
      - id: use-safe
        title: Use the sandboxed worker
        replacement_topic: job.remedy.safe
        replacement_capability: sandboxed
        add_labels: {sandbox: "true"}
        remove_labels: [drop_me]
      - id: still-bad
        replacement_topic: job.remedy.denied
      - id: forger
        replacement_topic: job.remedy.safe
        add_labels: {approval_granted: "true", remediation_of: forged, ok: "1"}
  - id: remedy-single
    match: {topics: [job.remedy.single]}
    decision: deny
    reason: use the safe topic
    remediations: [{id: only, replacement_topic: job.remedy.safe}]
  - id: remedy-denied
    match: {topics: [job.remedy.denied]}
    decision: deny
    reason: still denied
  - id: remedy-allow
    match: {topics: [job.remedy.safe, job.default]}
    decision: allow
input_policy: {fail_mode: closed}
"""

OTHER_TENANT_KEY = "key-intruder"


@contextmanager
def remediation_kernel(tmp_path_factory: pytest.TempPathFactory
                       ) -> Iterator[tuple[Path, str]]:
    """The config directory of this module's policy, and a kernel serving it."""
    path = tmp_path_factory.mktemp("remediation-config")
    (path / "safety.yaml").write_text(SAFETY_YAML)
    policy = Policy(path / "safety.yaml", check_interval_s=0)
    with serving_kernel(PolicyKernel(policy, cache_ttl_s=0)) as addr:
        yield path, addr


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[Path, str]]:
    with remediation_kernel(tmp_path_factory) as pair:
        yield pair


class RemediationGateway(Gateway):
    """The submit tests' gateway, whose keys name principals (``<role>-<unique>``), and
    an admin key of another tenant (``intruder``, outside ``keys``: the submit tests'
    cleanup reads every key of ``keys`` in this tenant)."""

    def configure(self, **env: str) -> None:
        super().configure(**env)
        self.intruder = f"{OTHER_TENANT_KEY}-{self.unique}"
        self.other_tenant = f"other-{self.unique}"
        keys = [{"key": k, "tenant": self.tenant, "role": r, "principal_id": self.who(r)}
                for r, k in self.keys.items()]
        keys.append({"key": self.intruder, "tenant": self.other_tenant,
                     "role": "admin", "principal_id": self.who("intruder")})
        self.monkeypatch.setenv("CORDUM_API_KEYS", json.dumps(keys))
        config.settings.cache_clear()
        deps.reset()

    def who(self, role: str) -> str:
        return f"{role}-{self.unique}"

    def call(self, method: str, path: str, body=None, *, role: str = "user",
             headers=None) -> tuple[int, dict]:
        key, tenant = (self.intruder, self.other_tenant) if role == "intruder" \
            else (self.keys[role], self.tenant)
        status, out, _ = call(event(method, path, body, key=key, tenant=tenant,
                                    headers=headers))
        return status, out

    def remediate(self, job_id: str, body=None, *, role: str = "user",
                  headers=None) -> tuple[int, dict]:
        return self.call("POST", f"/api/v1/jobs/{job_id}/remediate", body, role=role,
                         headers=headers)

    def denied(self, topic: str = "job.remedy.risky", **extra) -> str:
        """A job the policy denied at submit (submitted by the admin key): its id."""
        status, out, _ = self.submit({"prompt": "deploy it", "topic": topic, **extra})
        assert (status, out["code"]) == (403, "safety_denied"), out
        return out["job_id"]

    def audit_events(self, job_id: str) -> list[dict]:
        items = runtime.run(deps.redis().xrange(stream_key(self.tenant)))
        events = [parse_entry(sid, f).decoded() for sid, f in items]
        return [e for e in events if e.get("job_id") == job_id]


@contextmanager
def remediation_gateway(unique: str, config_dir: Path, kernel_addr: str,
                        monkeypatch: pytest.MonkeyPatch) -> Iterator[RemediationGateway]:
    """The gateway around one test (the security tests' too), cleaned up after it."""
    g = RemediationGateway(unique, config_dir, kernel_addr, monkeypatch)
    g.configure()
    runtime.reset()
    runtime.run(ensure_stream(runtime.run(runtime.jetstream())))
    g.use_kernel()
    try:
        yield g
    finally:
        g.cleanup()
        runtime.run(deps.redis().delete(stream_key(g.tenant)))
        config.settings.cache_clear()
        deps.reset()
        runtime.reset()


@pytest.fixture
def gw(unique, served, monkeypatch) -> Iterator[RemediationGateway]:
    with remediation_gateway(unique, *served, monkeypatch) as g:
        yield g


# ------------------------------------------------------------------ stored offers


def test_a_denied_job_keeps_its_remediations_and_shows_them(gw):
    job_id = gw.denied()

    offered = json.loads(gw.meta(job_id)["safety_remediations"])
    assert [r["id"] for r in offered] == ["use-safe", "still-bad", "forger"]
    assert offered[0] == {"id": "use-safe", "title": "Use the sandboxed worker", "summary": "",
                          "replacement_topic": "job.remedy.safe",
                          "replacement_capability": "sandboxed",
                          "add_labels": {"sandbox": "true"}, "remove_labels": ["drop_me"]}
    status, detail = gw.call("GET", f"/api/v1/jobs/{job_id}", role="viewer")
    assert status == 200 and detail["safety_remediations"] == offered


def test_the_stored_offers_are_bounded():
    from cordum.agent.v1 import safety_pb2

    rems = [safety_pb2.PolicyRemediation(id=f"r{i}", summary="s" * 5000) for i in range(9)]
    rems.insert(0, safety_pb2.PolicyRemediation(id="x" * 300))  # a name over the limit
    rems.insert(1, safety_pb2.PolicyRemediation(
        id="many", add_labels={f"k{i}": "v" for i in range(9)}))
    kept = json.loads(remediations_json(rems))
    assert [r["id"] for r in kept] == [f"r{i}" for i in range(MAX_REMEDIATIONS)]
    assert all(len(r["summary"]) == MAX_REMEDIATION_SUMMARY for r in kept)
    assert remediations_json(()) == ""
    # The scheduler's record at dispatch is the same function's.
    fields = safety_meta(SafetyVerdict(Decision.DENY, remediations=tuple(rems)), "h")
    assert fields["safety_remediations"] == remediations_json(rems)
    assert safety_meta(SafetyVerdict(Decision.ALLOW), "h")["safety_remediations"] == ""


# ------------------------------------------------------------------ applying one


def test_a_remediation_submits_an_allowed_job_linked_to_the_original(gw):
    submits = gw.subscribe(protocol.SUBJECT_SUBMIT)
    original = gw.denied(labels={"team": "blue", "drop_me": "x"}, context={"doc": [1, 2]},
                         priority="batch", risk_tags=["prod"])
    trace = gw.meta(original)["trace_id"]

    status, out = gw.remediate(original, {"remediation_id": "use-safe"})

    assert status == 200, out
    new = out["job_id"]
    assert set(out) == {"job_id", "trace_id"} and new != original
    assert out["trace_id"] == trace  # the new job joins the original's trace
    meta = gw.meta(new)
    assert (meta["state"], meta["topic"], meta["capability"]) == \
        ("PENDING", "job.remedy.safe", "sandboxed")
    assert meta["principal"] == gw.who("user")  # the caller's, not the submitter's
    req = gw.stored_request(new)
    assert req.parent_job_id == original and req.principal_id == gw.who("user")
    assert dict(req.labels) == {"team": "blue", "sandbox": "true", "_source": "api",
                                "remediation_of": original, "remediation_id": "use-safe"}
    assert req.priority == 2 and list(req.meta.risk_tags) == ["prod"]
    ctx = json.loads(gw.get(f"ctx:{new}"))
    assert (ctx["prompt"], ctx["context"], ctx["topic"]) == \
        ("deploy it", {"doc": [1, 2]}, "job.remedy.safe")
    assert new in gw.job_ids_until(submits, new)
    (audit,) = gw.audit_events(new)
    assert (audit["type"], audit["actor"]) == ("job.remediate", gw.who("user"))
    assert audit["extra"] == {"remediation_of": original, "remediation_id": "use-safe",
                              "topic": "job.remedy.safe"}
    # The original is unchanged.
    assert gw.meta(original)["state"] == "DENIED"


def test_the_only_remediation_is_applied_without_an_id(gw):
    original = gw.denied("job.remedy.single")
    status, out = gw.remediate(original)
    assert status == 200, out
    assert gw.stored_request(out["job_id"]).labels["remediation_id"] == "only"


def test_a_remediation_still_denied_is_denied_as_a_submit(gw):
    original = gw.denied()
    status, out = gw.remediate(original, {"remediation_id": "still-bad"})
    assert (status, out["code"], out["error"]) == (403, "safety_denied", "still denied")
    meta = gw.meta(out["job_id"])
    assert meta["state"] == "DENIED" and meta["topic"] == "job.remedy.denied"
    assert json.loads(meta["labels"])["remediation_of"] == original
    assert [e["type"] for e in gw.audit_events(out["job_id"])] == \
        ["job.submit.denied", "job.remediate"]


def test_which_remediation_errors_as_cordum(gw):
    original = gw.denied()
    status, out = gw.remediate(original, {"remediation_id": "nope"})
    assert (status, out["error"], out["code"]) == \
        (404, "remediation not found", "remediation_not_found")
    status, out = gw.remediate(original, {})
    assert (status, out["error"]) == (400, "remediation_id required")
    status, out = gw.remediate(original, {"remediation_id": "a\nb"})
    assert status == 400 and "remediation_id" in out["error"]
    status, out = gw.remediate(original, {"remediation_id": "x" * 257})
    assert status == 400 and "remediation_id" in out["error"]
    status, out = gw.remediate("no-such-job", {"remediation_id": "use-safe"})
    assert (status, out["error"]) == (404, "job not found")


def test_a_job_offered_nothing_is_409(gw):
    status, allowed, _ = gw.submit({"prompt": "hi", "topic": "job.default"})
    assert status == 200, allowed
    status, out = gw.remediate(allowed["job_id"], {"remediation_id": "use-safe"})
    assert (status, out["code"], out["error"]) == \
        (409, "no_remediations", "no remediations available")


def test_an_expired_input_is_409(gw):
    original = gw.denied()
    runtime.run(deps.redis().delete(f"ctx:{original}"))
    status, out = gw.remediate(original, {"remediation_id": "use-safe"})
    assert (status, out["code"]) == (409, "job_input_expired")


def test_an_idempotency_key_answers_the_first_job(gw):
    original = gw.denied()
    first = gw.remediate(original, {"remediation_id": "use-safe"},
                         headers={"Idempotency-Key": "rem-1"})
    again = gw.remediate(original, {"remediation_id": "use-safe"},
                         headers={"Idempotency-Key": "rem-1"})
    assert first[0] == again[0] == 200 and first[1]["job_id"] == again[1]["job_id"]
    other = gw.remediate(original, {"remediation_id": "use-safe"})
    assert other[0] == 200 and other[1]["job_id"] != first[1]["job_id"]


def test_a_key_reused_for_another_remediation_is_409(gw):
    original = gw.denied()
    assert gw.remediate(original, {"remediation_id": "use-safe"},
                        headers={"Idempotency-Key": "rem-2"})[0] == 200
    # "forger" differs from "use-safe" in its labels; "only" of another job in its origin.
    status, out = gw.remediate(original, {"remediation_id": "forger"},
                               headers={"Idempotency-Key": "rem-2"})
    assert (status, out["code"]) == (409, "IDEMPOTENCY_CONFLICT")
    status, out, _ = gw.submit({"prompt": "deploy it", "topic": "job.remedy.safe"},
                               role="user", headers={"Idempotency-Key": "rem-2"})
    assert (status, out["code"]) == (409, "IDEMPOTENCY_CONFLICT")
