"""The pure parts of policy replay and analytics: how a change is named, what the
recorded decision was, and the approval latency histogram."""

from __future__ import annotations

import pytest

from cordum.gateway.policy.analytics import histogram, latency_ms
from cordum.gateway.policy.replay import change_kind, direction, recorded_decision


@pytest.mark.parametrize(("original", "new", "way", "kind"), [
    ("ALLOW", "DENY", "escalated", "allow_to_deny"),
    ("ALLOW_WITH_CONSTRAINTS", "DENY", "escalated", "allow_to_deny"),
    ("DENY", "ALLOW", "relaxed", "deny_to_allow"),
    ("ALLOW", "REQUIRE_APPROVAL", "escalated", "newly_gated"),
    ("DENY", "REQUIRE_APPROVAL", "relaxed", "newly_gated"),
    ("THROTTLE", "DENY", "escalated", "other"),
    ("REQUIRE_APPROVAL", "ALLOW", "relaxed", "other"),
    ("DENY", "DENY", "unchanged", "other"),
    ("UNAVAILABLE", "DENY", "unchanged", "other"),
])
def test_changes_are_named_by_severity(original, new, way, kind):
    assert direction(original, new) == way
    assert change_kind(original, new) == kind


def test_the_recorded_decision():
    assert recorded_decision({}) == "ALLOW"
    assert recorded_decision({"safety_decision": "deny"}) == "DENY"
    # Approved: ALLOW since the dispatch re-check, a gate by the policy.
    assert recorded_decision({"safety_decision": "ALLOW", "approval_status": "APPROVED",
                              "safety_approval_required": "true"}) == "REQUIRE_APPROVAL"


def test_latency_and_histogram():
    assert latency_ms({"safety_checked_at": "1000000", "approval_decided_at": "3000000"}) == 2000
    assert latency_ms({"safety_checked_at": "3000000", "approval_decided_at": "1000000"}) is None
    assert latency_ms({"safety_checked_at": "x"}) is None
    buckets = histogram([500, 1000, 5000, 10**9])
    assert buckets[0] == {"le_ms": 1000, "count": 2}
    assert buckets[1] == {"le_ms": 10000, "count": 3}
    assert buckets[-1] == {"le_ms": None, "count": 4}
