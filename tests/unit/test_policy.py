"""The safety policy: validation and evaluation of policy text.

The shipped config/safety.yaml and loading from files: tests/integration/test_shipped_policy.py.
"""

from __future__ import annotations

import json

import pytest

from cordum.config import ConfigError
from cordum.safety.matching import PolicyInput
from cordum.safety.policy import DEFAULT_RULE_ID
from cordum.safety.policy_document import DecisionKind
from cordum.safety.policy_file import PolicyError, parse_policy
from cordum.safety.velocity import VelocityCounter


def policy(text: str):
    return parse_policy(text.encode(), "test.yaml")


def one_rule(match: str, decision: str = "deny", extra: str = "") -> str:
    return (f"default_decision: allow\nrules:\n  - id: r1\n    match: {match}\n"
            f"    decision: {decision}\n    reason: matched\n{extra}")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- decisions ----------------------------------------------------------------------

@pytest.mark.parametrize(("word", "kind"), [
    ("allow", DecisionKind.ALLOW), ("permit", DecisionKind.ALLOW),
    ("deny", DecisionKind.DENY), ("block", DecisionKind.DENY),
    ("require_approval", DecisionKind.REQUIRE_APPROVAL),
    ("require_human", DecisionKind.REQUIRE_APPROVAL),
    ("allow_with_constraints", DecisionKind.ALLOW_WITH_CONSTRAINTS),
    ("throttle", DecisionKind.THROTTLE),
])
def test_each_decision_word(word, kind):
    d = policy(one_rule("{topics: [job.x]}", word)).evaluate(PolicyInput(topic="job.x"))
    assert d.decision is kind
    assert (d.rule_id, d.reason) == ("r1", "matched")
    assert d.approval_required is (kind is DecisionKind.REQUIRE_APPROVAL)


def test_default_decision_allow_and_deny():
    allow = policy("default_decision: allow\n").evaluate(PolicyInput(topic="job.x"))
    deny = policy("default_decision: deny\n").evaluate(PolicyInput(topic="job.x"))
    unset = policy("{}").evaluate(PolicyInput(topic="job.x"))
    assert (allow.decision, allow.rule_id) == (DecisionKind.ALLOW, DEFAULT_RULE_ID)
    assert deny.decision is DecisionKind.DENY and unset.decision is DecisionKind.DENY
    assert deny.reason == "no matching rule — default policy: deny"


def test_first_matching_rule_wins():
    p = policy("rules:\n"
               "  - {id: a, match: {topics: ['job.x.*']}, decision: deny}\n"
               "  - {id: b, match: {topics: ['job.*']}, decision: allow}\n")
    assert p.evaluate(PolicyInput(topic="job.x.y")).rule_id == "a"
    assert p.evaluate(PolicyInput(topic="job.z")).rule_id == "b"


def test_topic_outside_job_namespace_and_missing_topic_are_denied():
    p = policy("default_decision: allow\n")
    assert p.evaluate(PolicyInput(topic="sys.destroy")).rule_id == "kernel:unsupported-topic"
    assert p.evaluate(PolicyInput(topic=" ")).rule_id == "kernel:missing-topic"


# -- match fields -------------------------------------------------------------------

@pytest.mark.parametrize(("match", "hit", "miss"), [
    ("{tenants: [acme]}", PolicyInput(topic="job.x", tenant="ACME"),
     PolicyInput(topic="job.x", tenant="other")),
    ("{topics: ['job.pay.*']}", PolicyInput(topic="job.pay.send"),
     PolicyInput(topic="job.payment")),
    ("{topics: ['job.?']}", PolicyInput(topic="job.a"), PolicyInput(topic="job.ab")),
    ("{capabilities: [write]}", PolicyInput(topic="job.x", capability="Write"),
     PolicyInput(topic="job.x", capability="read")),
    ("{risk_tags: [pii, money]}", PolicyInput(topic="job.x", risk_tags=("money", "x")),
     PolicyInput(topic="job.x", risk_tags=("x",))),
    ("{requires: [gpu, docker]}", PolicyInput(topic="job.x", requires=("docker", "gpu", "x")),
     PolicyInput(topic="job.x", requires=("gpu",))),
    ("{pack_ids: [bank]}", PolicyInput(topic="job.x", pack_id="bank"),
     PolicyInput(topic="job.x", pack_id="")),
    ("{actor_ids: [u1]}", PolicyInput(topic="job.x", actor_id="u1"),
     PolicyInput(topic="job.x", actor_id="u2")),
    ("{actor_types: [human]}", PolicyInput(topic="job.x", actor_type="human"),
     PolicyInput(topic="job.x", actor_type="service")),
    ("{labels: {env: prod, tier: 1}}", PolicyInput(topic="job.x",
                                                   labels={"env": "prod", "tier": "1", "o": "x"}),
     PolicyInput(topic="job.x", labels={"env": "prod"})),
    ("{label_allowlist: {region: [eu, us]}}", PolicyInput(topic="job.x", labels={"region": "ap"}),
     PolicyInput(topic="job.x", labels={"region": "EU"})),
    ("{label_threshold: {amount: 100}}", PolicyInput(topic="job.x", labels={"amount": "100.5"}),
     PolicyInput(topic="job.x", labels={"amount": "100"})),
])
def test_each_match_field(match, hit, miss):
    p = policy(one_rule(match))
    assert p.evaluate(hit).rule_id == "r1"
    assert p.evaluate(miss).rule_id == DEFAULT_RULE_ID


def test_label_allowlist_and_threshold_skip_absent_or_non_numeric_labels():
    allow = policy(one_rule("{label_allowlist: {region: [eu]}}"))
    threshold = policy(one_rule("{label_threshold: {amount: 10}}"))
    assert allow.evaluate(PolicyInput(topic="job.x")).rule_id == DEFAULT_RULE_ID
    assert threshold.evaluate(PolicyInput(topic="job.x",
                                          labels={"amount": "lots"})).rule_id == DEFAULT_RULE_ID


def test_all_match_fields_must_hold():
    p = policy(one_rule("{topics: [job.x], tenants: [acme]}"))
    assert p.evaluate(PolicyInput(topic="job.x", tenant="acme")).rule_id == "r1"
    assert p.evaluate(PolicyInput(topic="job.x", tenant="beta")).rule_id == DEFAULT_RULE_ID


# -- tenants ------------------------------------------------------------------------

TENANTS = ("default_decision: deny\n"
           "rules:\n  - {id: all-jobs, match: {topics: ['job.*']}, decision: allow}\n"
           "tenants:\n"
           "  acme: {allow_topics: ['job.acme.*', 'job.shared.*'],\n"
           "         deny_topics: ['job.acme.danger*']}\n"
           "  default: {deny_topics: ['job.private.*']}\n")


def test_tenant_deny_topics_win_over_allow_topics_and_rules():
    d = policy(TENANTS).evaluate(PolicyInput(topic="job.acme.danger", tenant="acme"))
    assert (d.decision, d.rule_id) == (DecisionKind.DENY, "tenant:acme:deny_topics")


def test_tenant_allow_topics_restrict_the_tenant():
    p = policy(TENANTS)
    assert p.evaluate(PolicyInput(topic="job.shared.a", tenant="acme")).rule_id == "all-jobs"
    d = p.evaluate(PolicyInput(topic="job.other", tenant="acme"))
    assert (d.decision, d.rule_id) == (DecisionKind.DENY, "tenant:acme:allow_topics")
    # A tenant without an entry is not restricted by another tenant's lists
    assert p.evaluate(PolicyInput(topic="job.other", tenant="beta")).rule_id == "all-jobs"


def test_missing_tenant_uses_default_tenant():
    p = policy(TENANTS)
    assert p.evaluate(PolicyInput(topic="job.private.x")).rule_id == "tenant:default:deny_topics"
    named = policy(TENANTS + "default_tenant: acme\n")
    assert named.evaluate(PolicyInput(topic="job.other")).rule_id == "tenant:acme:allow_topics"


def test_without_rules_tenant_allow_topics_allow():
    p = policy("tenants:\n  default: {allow_topics: ['job.*'], deny_topics: ['job.bad']}\n")
    d = p.evaluate(PolicyInput(topic="job.ok"))
    assert (d.decision, d.rule_id) == (DecisionKind.ALLOW, "tenant:default:allow_topics")
    assert p.evaluate(PolicyInput(topic="job.bad")).decision is DecisionKind.DENY


# -- velocity -----------------------------------------------------------------------

VELOCITY = one_rule("{topics: [job.x]}", "throttle",
                    "    velocity: {max_requests: 2, window_seconds: 10, key: 'tenant:topic'}\n")


def test_velocity_rule_fires_only_above_max_requests_per_key():
    # Given a throttle rule allowing 2 requests per tenant and topic in 10 s
    clock = Clock()
    counter = VelocityCounter(clock)
    p = policy(VELOCITY)
    seen = [p.evaluate(PolicyInput(topic="job.x", tenant="a", job_id=f"j{i}"),
                       velocity=counter).decision for i in range(3)]
    # Then the third throttles, while another tenant has its own window
    assert seen == [DecisionKind.ALLOW, DecisionKind.ALLOW, DecisionKind.THROTTLE]
    assert p.evaluate(PolicyInput(topic="job.x", tenant="b", job_id="j9"),
                      velocity=counter).decision is DecisionKind.ALLOW
    # And once the window has passed, requests are allowed again
    clock.now += 10.5
    assert p.evaluate(PolicyInput(topic="job.x", tenant="a", job_id="j4"),
                      velocity=counter).decision is DecisionKind.ALLOW


def test_velocity_counts_a_job_once_and_dry_run_does_not_count():
    counter = VelocityCounter(Clock())
    p = policy(VELOCITY)
    req = PolicyInput(topic="job.x", tenant="a", job_id="same")
    for _ in range(5):
        assert p.evaluate(req, velocity=counter).decision is DecisionKind.ALLOW
    for i in range(5):
        p.evaluate(PolicyInput(topic="job.x", tenant="a", job_id=f"d{i}"), velocity=counter,
                   dry_run=True)
    assert counter.peek("r1", "a:job.x", 10) == 1


def test_velocity_rule_without_key_value_shares_a_window_and_is_skipped_without_counter():
    p = policy(one_rule("{topics: [job.x]}", "throttle",
                        "    velocity: {max_requests: 1, window_seconds: 10, "
                        "key: labels.session}\n"))
    counter = VelocityCounter(Clock())
    seen = [p.evaluate(PolicyInput(topic="job.x", job_id=f"j{i}"), velocity=counter).decision
            for i in range(2)]
    assert seen == [DecisionKind.ALLOW, DecisionKind.THROTTLE]
    assert counter.peek("r1", "_missing", 10) == 2
    for i in range(3):
        assert p.evaluate(PolicyInput(topic="job.x", job_id=f"k{i}", labels={"session": "s"})
                          ).decision is DecisionKind.ALLOW


# -- constraints and remediations ---------------------------------------------------

CONSTRAINED = one_rule("{topics: [job.x]}", "allow", """\
    constraints:
      budgets: {max_runtime_ms: 5000, max_retries: 2, max_artifact_bytes: 1024,
                max_concurrent_jobs: 3}
      sandbox: {isolated: true, network_allowlist: [api.example.com], fs_read_only: [/data]}
      toolchain: {allowed_tools: [git], allowed_commands: [ls]}
      diff: {max_files: 5, max_lines: 100, deny_path_globs: ['*.pem']}
      redaction_level: strict
    remediations:
      - {id: fix, title: T, summary: S, replacement_topic: job.safe,
         replacement_capability: read, add_labels: {reviewed: true}, remove_labels: [danger]}
""")


def test_allow_with_constraints_carries_every_constraint_and_remediation():
    d = policy(CONSTRAINED).evaluate(PolicyInput(topic="job.x"))
    # An allow rule with constraints answers allow_with_constraints, as Cordum does
    assert d.decision is DecisionKind.ALLOW_WITH_CONSTRAINTS
    c = d.constraints
    assert c is not None
    assert (c.budgets.max_runtime_ms, c.budgets.max_retries, c.budgets.max_artifact_bytes,
            c.budgets.max_concurrent_jobs) == (5000, 2, 1024, 3)
    assert c.sandbox.isolated and c.sandbox.network_allowlist == ["api.example.com"]
    assert c.toolchain.allowed_tools == ["git"] and c.diff.deny_path_globs == ["*.pem"]
    assert c.redaction_level == "strict"
    (rem,) = d.remediations
    assert (rem.id, rem.replacement_topic, rem.add_labels, rem.remove_labels) == (
        "fix", "job.safe", {"reviewed": "true"}, ["danger"])


def test_rule_without_constraints_has_none():
    assert policy(one_rule("{topics: [job.x]}", "allow")).evaluate(
        PolicyInput(topic="job.x")).constraints is None


# -- risk-tag derivation ------------------------------------------------------------

DERIVED = """\
default_decision: allow
risk_tag_derivers:
  - topics: [job.bank.transfer]
    base_tags: [finance]
    amount_thresholds: [{below: 100, tag: low}, {below: 300, tag: review}, {tag: blocked}]
rules:
  - {id: block-big, match: {risk_tags: [blocked]}, decision: deny}
  - {id: review, match: {risk_tags: [review]}, decision: require_approval}
"""


@pytest.mark.parametrize(("labels", "content", "rule_id", "tags"), [
    ({"_content.payload_json": json.dumps({"amount": 50})}, b"", DEFAULT_RULE_ID,
     ("finance", "low")),
    ({"_content.payload_json": json.dumps({"amount": "150"})}, b"", "review",
     ("finance", "review")),
    ({}, json.dumps({"amount": 300}).encode(), "block-big", ("finance", "blocked")),
    ({"_content.prompt": json.dumps({"amount": 99.9})}, b"", DEFAULT_RULE_ID,
     ("finance", "low")),
    ({}, b"", "block-big", ("finance", "blocked")),
    ({"_content.payload_json": json.dumps({"amount": -5})}, b"", "block-big",
     ("finance", "blocked")),
])
def test_amount_threshold_derives_risk_tags(labels, content, rule_id, tags):
    # Given a client that claims a low-risk tag
    req = PolicyInput(topic="job.bank.transfer", labels=labels, input_content=content,
                      risk_tags=("low",))
    # When the policy evaluates it
    d = policy(DERIVED).evaluate(req)
    # Then the derived tags replace the claimed ones
    assert (d.rule_id, d.risk_tags) == (rule_id, tags)


def test_other_topics_keep_client_risk_tags():
    d = policy(DERIVED).evaluate(PolicyInput(topic="job.other", risk_tags=("blocked",)))
    assert (d.rule_id, d.risk_tags) == ("block-big", ("blocked",))


# -- broken files -------------------------------------------------------------------

@pytest.mark.parametrize(("text", "where"), [
    ("rules: [{id: a, decision: maybe}]", "rules[0] (id 'a').decision"),
    ("rules: [{id: a, decision: deny, match: {topicz: [x]}}]", "rules[0] (id 'a').match.topicz"),
    ("rules: [{decision: deny}]", "rules[0].id"),
    ("rules: [{id: a, decision: deny}, {id: a, decision: allow}]", "duplicate rule id 'a'"),
    ("rules: [{id: v, decision: throttle, velocity: {max_requests: 0, window_seconds: 1, "
     "key: tenant}}]", "rules[0] (id 'v').velocity.max_requests"),
    ("rules: [{id: v, decision: throttle, velocity: {max_requests: 1, window_seconds: 1, "
     "key: nonsense}}]", "unknown key part 'nonsense'"),
    ("default_decision: throttle", "default_decision"),
    ("rules: [{id: c, decision: allow, constraints: {budgets: {max_retries: -1}}}]",
     "constraints.budgets.max_retries"),
    ("risk_tag_derivers: [{topics: [job.a], amount_thresholds: [{tag: x}, {below: 1, tag: y}]}]",
     "only the last threshold may omit"),
    ("rules: [unclosed", "not valid YAML"),
    ("- just\n- a list\n", "must be a mapping"),
])
def test_broken_policy_errors_name_file_and_field(text, where):
    with pytest.raises(PolicyError) as err:
        policy(text)
    assert str(err.value).startswith("test.yaml: ")
    assert where in str(err.value)
    assert isinstance(err.value, ConfigError)


def test_snapshot_is_a_hash_of_the_file():
    assert policy("default_decision: deny\n").snapshot != policy("default_decision: allow\n"
                                                                  ).snapshot
    assert policy("{}").snapshot.startswith("sha256:")


# -- what may be cached -------------------------------------------------------------

def test_decisions_that_involve_a_velocity_window_or_throttle_are_not_cacheable():
    p = policy("default_decision: allow\nrules:\n"
               "  - {id: v, match: {topics: [job.v]}, decision: throttle,\n"
               "     velocity: {max_requests: 5, window_seconds: 10, key: tenant}}\n"
               "  - {id: t, match: {topics: [job.t]}, decision: throttle}\n"
               "  - {id: a, match: {topics: ['job.*']}, decision: allow}\n")
    counter = VelocityCounter(Clock())
    # A velocity rule within its limit falls through to the allow rule: still not cacheable
    under_limit = p.evaluate(PolicyInput(topic="job.v", tenant="x", job_id="1"), velocity=counter)
    assert (under_limit.rule_id, under_limit.cacheable) == ("a", False)
    assert p.evaluate(PolicyInput(topic="job.t"), velocity=counter).cacheable is False
    assert p.evaluate(PolicyInput(topic="job.other"), velocity=counter).cacheable is True
    assert policy("{}").evaluate(PolicyInput(topic="job.x")).cacheable is True


# -- velocity keys ------------------------------------------------------------------

@pytest.mark.parametrize(("key", "same", "different"), [
    ("actor_id", {"actor_id": "u1", "tenant": "a"}, {"actor_id": "u2", "tenant": "a"}),
    ("tenant:actor_type", {"tenant": "a", "actor_type": "human"},
     {"tenant": "a", "actor_type": "service"}),
    ("pack_id:capability", {"pack_id": "p", "capability": "c"},
     {"pack_id": "p", "capability": "d"}),
    ("labels.session", {"labels": {"session": "s1"}}, {"labels": {"session": "s2"}}),
])
def test_velocity_key_parts_separate_windows(key, same, different):
    p = policy(one_rule("{topics: [job.x]}", "throttle",
                        f"    velocity: {{max_requests: 1, window_seconds: 10, key: '{key}'}}\n"))
    counter = VelocityCounter(Clock())
    first = p.evaluate(PolicyInput(topic="job.x", job_id="1", **same), velocity=counter)
    other = p.evaluate(PolicyInput(topic="job.x", job_id="2", **different), velocity=counter)
    again = p.evaluate(PolicyInput(topic="job.x", job_id="3", **same), velocity=counter)
    assert [first.decision, other.decision, again.decision] == [
        DecisionKind.ALLOW, DecisionKind.ALLOW, DecisionKind.THROTTLE]


# -- risk-tag derivation: field, sources, the shipped example ------------------------

HIGH_VALUE = """\
default_decision: allow
risk_tag_derivers:
  - topics: ['job.bank.*']
    amount_field: transfer.amount
    amount_thresholds: [{below: 10000, tag: standard}, {tag: high_value}]
rules:
  - {id: big, match: {risk_tags: [high_value]}, decision: require_approval}
"""


@pytest.mark.parametrize(("content", "labels", "tags"), [
    ({"transfer": {"amount": 9999.99}}, {}, ("standard",)),
    ({"transfer": {"amount": 10000}}, {}, ("high_value",)),
    ({"amount": 5}, {}, ("high_value",)),                       # not at the configured field
    ({"transfer": {"amount": "NaN"}}, {}, ("high_value",)),
    ({"transfer": {"amount": True}}, {}, ("high_value",)),
    # The payload itself wins over a label describing it
    ({"transfer": {"amount": 50000}}, {"_content.payload_json": '{"transfer":{"amount":1}}'},
     ("high_value",)),
    (None, {"_content.payload_json": '{"transfer":{"amount":1}}'}, ("standard",)),
    # An ordinary label is never read
    (None, {"amount": "1", "transfer.amount": "1"}, ("high_value",)),
])
def test_amount_field_and_sources(content, labels, tags):
    body = json.dumps(content).encode() if content is not None else b""
    d = policy(HIGH_VALUE).evaluate(PolicyInput(topic="job.bank.send", labels=labels,
                                                input_content=body, risk_tags=("standard",)))
    assert d.risk_tags == tags
    assert d.decision is (DecisionKind.REQUIRE_APPROVAL if tags == ("high_value",)
                          else DecisionKind.ALLOW)


def test_a_bad_amount_field_is_a_load_error():
    with pytest.raises(PolicyError, match=r"risk_tag_derivers\[0\].amount_field"):
        policy("risk_tag_derivers: [{topics: [job.a], amount_field: 'a..b', "
               "amount_thresholds: [{tag: x}]}]")
