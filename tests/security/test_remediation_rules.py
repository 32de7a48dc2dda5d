"""Applying a remediation submits a job: each test is an attempt to use it for more than
the caller may do. Another tenant's job answers as a missing one; a read-only key
submits nothing; the links to the original are the platform's, never a caller's or a
policy author's; the new job is the caller's, whatever the body says.

On the real Redis, NATS and safety kernel (the policy and gateway of
tests/integration/test_gateway_remediation.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from google.protobuf import json_format

from cordum import runtime
from cordum.gateway.jobs import deps
from tests.integration.test_gateway_remediation import (
    RemediationGateway,
    remediation_gateway,
    remediation_kernel,
)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with remediation_kernel(tmp_path_factory) as pair:
        yield pair


@pytest.fixture
def gw(unique, served, monkeypatch) -> Iterator[RemediationGateway]:
    with remediation_gateway(unique, *served, monkeypatch) as g:
        yield g


def test_another_tenants_job_answers_as_a_missing_one(gw):
    original = gw.denied()
    before = gw.tenant_jobs()
    status, out = gw.remediate(original, {"remediation_id": "use-safe"}, role="intruder")
    missing = gw.remediate("no-such-job", {"remediation_id": "use-safe"}, role="intruder")
    assert (status, out) == missing == (404, {"error": "job not found", "code": "job_not_found",
                                              "status": 404})
    assert gw.tenant_jobs() == before


@pytest.mark.parametrize("role, expected", [("viewer", 403), ("user", 200),
                                            ("jobs.write", 200), ("admin", 200)])
def test_only_submitting_roles_remediate(gw, role, expected):
    original = gw.denied()
    status, out = gw.remediate(original, {"remediation_id": "use-safe"}, role=role)
    assert status == expected, out
    if status == 200:
        assert gw.meta(out["job_id"])["principal"] == gw.who(role)


@pytest.mark.parametrize("label", ["remediation_of", "remediation_id", "Remediation_Of"])
def test_a_caller_cannot_forge_the_links(gw, label):
    status, out, _ = gw.submit({"prompt": "hi", "topic": "job.default",
                                "labels": {label: "job-of-someone-else"}})
    assert (status, out["code"]) == (400, "reserved_label")


def test_a_policy_cannot_mint_reserved_labels_through_a_remediation(gw):
    original = gw.denied(labels={"team": "blue"})
    status, out = gw.remediate(original, {"remediation_id": "forger"})
    assert status == 200, out
    labels = dict(gw.stored_request(out["job_id"]).labels)
    assert labels["remediation_of"] == original and labels["remediation_id"] == "forger"
    assert "approval_granted" not in labels and labels["ok"] == "1"
    assert json.loads(gw.meta(out["job_id"])["labels"]) == labels


def test_the_new_job_is_the_callers_whatever_the_body_says(gw):
    original = gw.denied()  # submitted by the admin key
    assert gw.meta(original)["principal"] == gw.who("admin")
    status, out = gw.remediate(original, {"remediation_id": "use-safe",
                                          "principal_id": gw.who("admin"),
                                          "tenant_id": "other", "labels": {"x": "y"}})
    assert status == 200, out
    meta, req = gw.meta(out["job_id"]), gw.stored_request(out["job_id"])
    assert meta["principal"] == req.principal_id == gw.who("user")
    assert meta["tenant"] == req.tenant_id == gw.tenant
    assert "x" not in req.labels


def test_reserved_labels_of_the_original_are_not_carried_over(gw):
    """An approval or bypass mark the original carried grants the new job nothing."""
    original = gw.denied(labels={"team": "blue"})
    req = gw.stored_request(original)
    req.labels["approval_granted"] = "true"
    req.labels["safety_bypassed"] = "true"
    runtime.run(deps.redis().set(f"job:req:{original}", json_format.MessageToJson(req)))
    status, out = gw.remediate(original, {"remediation_id": "use-safe"})
    assert status == 200, out
    labels = gw.stored_request(out["job_id"]).labels
    assert "approval_granted" not in labels and "safety_bypassed" not in labels
    assert labels["team"] == "blue"
