"""Labels the platform writes are reserved; keys, ids and list items are bounded text.

A label the platform itself sets (an approval, a bypass mark, workflow or saga
membership, bus bookkeeping) is refused at the API with 400 ``reserved_label``;
control characters in label keys and body ids, and oversized list items, are
400 ``invalid_request``.
"""

from __future__ import annotations

import pytest

from tests.helpers import call, event
from tests.security.conftest import BOB

RESERVED = [
    "approval_granted", "approval_snapshot", "approval_reason", "approval_note",
    "Approval_Granted", "safety_bypassed", "safety_bypass_reason", "safety_decision",
    "workflow_id", "run_id", "step_id", "saga_compensation", "saga_workflow_id",
    "is_compensation", "cordum.bus_msg_id", "policy.attachment_id", "_source", "_secret",
    "_content.payload_json", "_governance.x", "_ma.x", "retry", "dlq_entry", "retry_of_job",
]


def submit(body: dict) -> tuple[int, dict]:
    status, out, _ = call(event("POST", "/api/v1/jobs", {"prompt": "p", **body}, key=BOB))
    return status, out


@pytest.mark.parametrize("key", RESERVED)
def test_each_label_the_platform_writes_is_refused(gateway, key):
    status, out = submit({"labels": {"team": "blue", key: "true"}})
    assert status == 400, out
    assert set(out) == {"error", "code", "status"}
    assert (out["code"], out["status"]) == ("reserved_label", 400)
    assert key in out["error"]


@pytest.mark.parametrize("key", ["a\nb", "a\rb", "team\x00", "\tteam", "a\x1bb", "a\x7fb"])
def test_a_label_key_with_a_control_character_is_refused(gateway, key):
    status, out = submit({"labels": {key: "v"}})
    assert status == 400, out
    assert (out["code"], out["status"]) == ("invalid_request", 400)
    assert out["error"].startswith("labels")


@pytest.mark.parametrize("field", ["adapter_id", "memory_id", "pack_id", "capability",
                                   "actor_id", "team_id", "project_id", "org_id",
                                   "context_mode"])
def test_an_id_in_the_body_with_a_control_character_is_refused(gateway, field):
    status, out = submit({field: "id-1\nX-Injected: yes"})
    assert status == 400, out
    assert (out["code"], out["status"]) == ("invalid_request", 400)
    assert out["error"].startswith(field)


@pytest.mark.parametrize("field", ["risk_tags", "requires", "tags"])
@pytest.mark.parametrize("item", ["x" * 10_000, "x" * 257, "pii\nadmin"],
                         ids=["10000-chars", "257-chars", "newline"])
def test_each_list_item_is_bounded_text(gateway, field, item):
    status, out = submit({field: ["ok", item]})
    assert status == 400, out
    assert (out["code"], out["status"]) == ("invalid_request", 400)
    assert out["error"].startswith(field)
    # An item at the bound is accepted.
    status, out = submit({field: ["ok", "x" * 256]})
    assert status == 200, out
