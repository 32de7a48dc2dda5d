"""The shipped config/safety.yaml read from the repository: its example rules, explain, the
commented example at its end; and a missing policy file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cordum.safety.matching import PolicyInput
from cordum.safety.policy import DEFAULT_RULE_ID
from cordum.safety.policy_document import DecisionKind
from cordum.safety.policy_file import PolicyError, load_policy, parse_policy, snapshot_of
from cordum.safety.velocity import VelocityCounter

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "safety.yaml"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def policy(text: str):
    return parse_policy(text.encode(), "test.yaml")


# -- the shipped file ----------------------------------------------------------------

@pytest.mark.parametrize(("topic", "decision", "rule_id"), [
    ("job.default", DecisionKind.ALLOW, "default-topic-allow"),
    ("job.echo", DecisionKind.ALLOW, "default-topic-allow"),
    ("job.echo.denied", DecisionKind.DENY, "example-echo-denied"),
    ("job.echo.approval", DecisionKind.REQUIRE_APPROVAL, "example-echo-approval"),
    ("job.echo.late", DecisionKind.ALLOW, "default-topic-allow"),
    ("job.cordum.approval-gate", DecisionKind.REQUIRE_APPROVAL, "workflow-approval-gate"),
    ("job.unknown", DecisionKind.DENY, DEFAULT_RULE_ID),
])
def test_shipped_policy(topic, decision, rule_id):
    # Given the shipped safety.yaml
    p = load_policy(SHIPPED)
    # When a job on the topic is evaluated
    d = p.evaluate(PolicyInput(topic=topic, tenant="t1", job_id="j1"))
    # Then the example rules decide
    assert (d.decision, d.rule_id) == (decision, rule_id)
    assert d.snapshot == snapshot_of(SHIPPED.read_bytes())
    assert d.approval_required is (decision is DecisionKind.REQUIRE_APPROVAL)


def test_shipped_denied_example_has_reason_and_remediation():
    d = load_policy(SHIPPED).evaluate(PolicyInput(topic="job.echo.denied"))
    assert d.reason == "denied by example policy"
    assert d.remediations[0].replacement_topic == "job.echo"


# -- explain ------------------------------------------------------------------------

def test_explain_names_the_deciding_rule_and_why_others_did_not_match():
    d = load_policy(SHIPPED).explain(PolicyInput(topic="job.echo"))
    assert d.rule_id == "default-topic-allow"
    assert d.reason.startswith("decided by default-topic-allow: allow")
    assert "example-echo-denied: topic 'job.echo' matches none of ['job.echo.denied']" in d.reason


def test_missing_file(tmp_path):
    with pytest.raises(PolicyError, match="config file not found"):
        load_policy(tmp_path / "nope.yaml")


def shipped_example() -> str:
    """The commented example at the end of config/safety.yaml, uncommented."""
    lines = SHIPPED.read_text().splitlines()
    start, end = lines.index("# --- example begin"), lines.index("# --- example end")
    return "\n".join(line[2:] for line in lines[start + 1:end]) + "\n"


def test_the_commented_example_in_safety_yaml_works():
    p = policy(shipped_example())

    def transfer(amount: float, job_id: str = "j", actor: str = "u1"):
        return PolicyInput(topic="job.bank.transfer", tenant="t", actor_id=actor, job_id=job_id,
                           input_content=json.dumps({"amount": amount}).encode())

    counter = VelocityCounter(Clock())
    big = p.evaluate(transfer(25_000), velocity=counter)
    small = p.evaluate(transfer(120), velocity=counter)
    assert (big.decision, big.rule_id, big.risk_tags) == (
        DecisionKind.REQUIRE_APPROVAL, "high-value-transfer-approval", ("finance", "high_value"))
    assert (small.decision, small.rule_id) == (DecisionKind.ALLOW, "transfer-allow")
    seen = [p.evaluate(transfer(10, f"v{i}", "u2"), velocity=counter).decision
            for i in range(21)]
    assert seen[:20] == [DecisionKind.ALLOW] * 20 and seen[20] is DecisionKind.THROTTLE
