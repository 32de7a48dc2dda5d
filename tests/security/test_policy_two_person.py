"""Two people for a policy change (``CORDUM_POLICY_TWO_PERSON``): a change of the bundles
in force is kept as a proposal until another identity confirms it. Each test is an
attack on that rule: the author confirming its own change, a viewer or a tenant's key
confirming one, a proposal confirmed after the policy moved on, a change slipped in
through an edit or a delete of a bundle in force.

Keys: root (admin, ``*``), gov (policy.write, ``*``), viewer (policy.read, ``*``),
acme-writer (policy.write, acme) and carol (admin, acme) from the conftest.
"""

from __future__ import annotations

import json

import pytest

from cordum import runtime
from cordum.gateway.policy.store import AUDIT_KEY, PROPOSALS_KEY, SNAPSHOTS_KEY
from cordum.safety.bundles import POLICY_DOC_KEY
from tests import helpers
from tests.security.conftest import CAROL, KEYS, configure

ROOT = "two-root-0123456789"
GOV = "two-gov-0123456789"
VIEWER = "two-viewer-0123456789"
ACME_WRITER = "two-acme-writer-0123456789"
TWO_KEYS = [*KEYS,
            {"key": ROOT, "tenant": "*", "role": "admin", "principal_id": "root"},
            {"key": GOV, "tenant": "*", "role": "policy.write", "principal_id": "gov"},
            {"key": VIEWER, "tenant": "*", "role": "policy.read", "principal_id": "viewer"},
            {"key": ACME_WRITER, "tenant": "acme", "role": "policy.write",
             "principal_id": "acme-writer"}]
DENY = "rules:\n  - id: two-deny\n    match: {topics: [job.two]}\n    decision: deny\n"
DENY_MORE = ("rules:\n  - id: two-deny\n    match: {topics: [job.two, job.three]}\n"
             "    decision: deny\n")


def forget_policy() -> None:
    runtime.run(runtime.redis_client().delete(POLICY_DOC_KEY, SNAPSHOTS_KEY, AUDIT_KEY,
                                              PROPOSALS_KEY))


def send(method, path, body=None, key=ROOT):
    return helpers.call(helpers.event(method, path, body, key=key))


def in_force() -> dict[str, str]:
    raw = runtime.run(runtime.redis_client().get(POLICY_DOC_KEY))
    bundles = (json.loads(raw) if raw else {}).get("data", {}).get("bundles", {})
    return {bid: b["content"] for bid, b in bundles.items() if b.get("enabled")}


def audit() -> list[dict]:
    status, entries, _ = send("GET", "/api/v1/policy/audit", key=VIEWER)
    assert status == 200, entries
    return entries


@pytest.fixture
def two_person(monkeypatch):
    configure(monkeypatch, TWO_KEYS, CORDUM_RATE_LIMIT_RPS="0",
              CORDUM_POLICY_TWO_PERSON="true")
    with helpers.gateway_process():
        forget_policy()
        # A draft changes nothing in force: written at once, no second person.
        status, body, _ = send("PUT", "/api/v1/policy/bundles/secops~two", {"content": DENY})
        assert (status, body["enabled"]) == (200, False), body
        try:
            yield
        finally:
            forget_policy()


def propose_publish(key: str = ROOT, **body) -> dict:
    status, answer, _ = send("POST", "/api/v1/policy/publish",
                             {"bundle_ids": ["secops/two"], **body}, key)
    assert status == 202, answer
    assert answer["status"] == "pending_confirmation"
    return answer["proposal"]


def test_a_publish_waits_for_a_second_person_and_the_author_cannot_confirm(two_person):
    proposal = propose_publish(message="deny job.two")
    assert (proposal["action"], proposal["proposed_by"], proposal["bundle_ids"]) == \
        ("publish", "root", ["secops/two"])
    assert in_force() == {}  # nothing in force yet

    status, answer, _ = send("POST", f"/api/v1/policy/proposals/{proposal['id']}/confirm")
    assert (status, answer["code"]) == (403, "self_confirmation_denied")
    assert in_force() == {}

    status, answer, _ = send("POST", f"/api/v1/policy/proposals/{proposal['id']}/confirm",
                             key=GOV)
    assert status == 200, answer
    assert (answer["proposed_by"], answer["confirmed_by"], answer["published"]) == \
        ("root", "gov", ["secops/two"])
    assert in_force() == {"secops/two": DENY}
    published = audit()[0]
    assert (published["action"], published["actor_id"], published["confirmed_by"],
            published["proposal_id"]) == ("publish", "root", "gov", proposal["id"])
    # Confirmed once: it is gone.
    status, _, _ = send("POST", f"/api/v1/policy/proposals/{proposal['id']}/confirm",
                        key=GOV)
    assert status == 404


def test_the_author_is_the_key_never_the_body(two_person):
    proposal = propose_publish(author="gov")  # a body cannot name someone else
    assert proposal["proposed_by"] == "root"
    status, answer, _ = send("POST", f"/api/v1/policy/proposals/{proposal['id']}/confirm")
    assert (status, answer["code"]) == (403, "self_confirmation_denied")
    assert in_force() == {}


@pytest.mark.parametrize(("key", "code"), [(VIEWER, "forbidden"),
                                           (ACME_WRITER, "policy_write_requires_any_tenant_key"),
                                           (CAROL, "policy_write_requires_any_tenant_key")])
def test_a_viewer_or_a_tenants_key_can_neither_publish_nor_confirm(two_person, key, code):
    status, answer, _ = send("POST", "/api/v1/policy/publish", {}, key)
    assert (status, answer["code"]) == (403, code)
    proposal = propose_publish()
    status, answer, _ = send("POST", f"/api/v1/policy/proposals/{proposal['id']}/confirm",
                             key=key)
    assert (status, answer["code"]) == (403, code)
    assert in_force() == {}
    # A viewer sees what waits, and who asked.
    status, listed, _ = send("GET", "/api/v1/policy/proposals", key=VIEWER)
    assert status == 200 and [p["id"] for p in listed["items"]] == [proposal["id"]]


def test_an_edit_or_a_delete_of_a_bundle_in_force_is_a_proposal_too(two_person):
    first = propose_publish()
    assert send("POST", f"/api/v1/policy/proposals/{first['id']}/confirm", key=GOV)[0] == 200

    status, answer, _ = send("PUT", "/api/v1/policy/bundles/secops~two", {"content": DENY_MORE})
    assert status == 202, answer
    status, answer2, _ = send("DELETE", "/api/v1/policy/bundles/secops~two")
    assert status == 202, answer2
    assert in_force() == {"secops/two": DENY}  # neither slipped through

    # Taking a bundle out of force is a change of the policy in force as well.
    status, answer3, _ = send("PUT", "/api/v1/policy/bundles/secops~two",
                              {"content": DENY, "enabled": False})
    assert status == 202, answer3

    status, done, _ = send("POST",
                           f"/api/v1/policy/proposals/{answer['proposal']['id']}/confirm",
                           key=GOV)
    assert status == 200, done
    assert in_force() == {"secops/two": DENY_MORE}


def test_a_proposal_made_on_an_older_policy_is_stale(two_person):
    proposal = propose_publish()
    # The policy moves on (a new draft is a change of the document, not of what is in force).
    status, _, _ = send("PUT", "/api/v1/policy/bundles/secops~other", {"content": DENY}, GOV)
    assert status == 200
    status, answer, _ = send("POST", f"/api/v1/policy/proposals/{proposal['id']}/confirm",
                             key=GOV)
    assert (status, answer["code"]) == (409, "POLICY_PROPOSAL_STALE")
    assert in_force() == {}
    assert send("GET", f"/api/v1/policy/proposals/{proposal['id']}", key=VIEWER)[0] == 404


def test_the_author_may_withdraw_and_a_rejected_proposal_cannot_be_confirmed(two_person):
    proposal = propose_publish()
    status, answer, _ = send("POST", f"/api/v1/policy/proposals/{proposal['id']}/reject",
                             {"reason": "wrong topic"})
    assert (status, answer["state"], answer["rejected_by"]) == (200, "rejected", "root")
    status, _, _ = send("POST", f"/api/v1/policy/proposals/{proposal['id']}/confirm",
                        key=GOV)
    assert status == 404
    assert in_force() == {}
    entry = audit()[0]
    assert (entry["action"], entry["actor_id"], entry["message"]) == \
        ("reject_proposal", "root", "wrong topic")
    assert [e["action"] for e in audit()[:3]] == ["reject_proposal", "propose", "edit"]


def test_a_rollback_waits_too(two_person):
    first = propose_publish()
    confirmed = send("POST", f"/api/v1/policy/proposals/{first['id']}/confirm", key=GOV)[1]
    status, answer, _ = send("POST", "/api/v1/policy/rollback",
                             {"snapshot_id": confirmed["snapshot_before"]}, GOV)
    assert status == 202, answer
    assert in_force() == {"secops/two": DENY}
    status, answer, _ = send("POST",
                             f"/api/v1/policy/proposals/{answer['proposal']['id']}/confirm")
    assert status == 200, answer
    assert (answer["rollback_to"], answer["proposed_by"], answer["confirmed_by"]) == \
        (confirmed["snapshot_before"], "gov", "root")
    assert in_force() == {}


def test_a_lapsed_proposal_cannot_be_confirmed(two_person):
    proposal = propose_publish()
    redis = runtime.redis_client()
    kept = json.loads(runtime.run(redis.hget(PROPOSALS_KEY, proposal["id"])))
    assert kept["expires_at_s"] > 0 and kept["proposed_by"] == "root"
    kept["expires_at_s"] = 1  # lapsed long ago
    runtime.run(redis.hset(PROPOSALS_KEY, proposal["id"], json.dumps(kept)))
    status, answer, _ = send("POST", f"/api/v1/policy/proposals/{proposal['id']}/confirm",
                             key=GOV)
    assert (status, answer["code"]) == (404, "proposal_not_found")
    assert in_force() == {}
    assert send("GET", "/api/v1/policy/proposals", key=VIEWER)[1]["items"] == []


def test_without_two_people_configured_a_publish_is_in_force_at_once(monkeypatch):
    configure(monkeypatch, TWO_KEYS, CORDUM_RATE_LIMIT_RPS="0")
    with helpers.gateway_process():
        forget_policy()
        try:
            send("PUT", "/api/v1/policy/bundles/secops~two", {"content": DENY})
            status, answer, _ = send("POST", "/api/v1/policy/publish", {})
            assert status == 200 and "proposal" not in answer
            assert in_force() == {"secops/two": DENY}
        finally:
            forget_policy()
