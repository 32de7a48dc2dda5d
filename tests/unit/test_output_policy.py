"""Output rules: each decision, each match field, redaction, loading errors."""

from __future__ import annotations

import pytest

from cordum.safety.output_policy import (
    REDACTED,
    OutputDecision,
    OutputInput,
    parse_output_policy,
)
from cordum.safety.policy_file import PolicyError, parse_policy


def policy(rules, output_policy=None, **extra):
    raw = {"output_rules": rules, **extra}
    if output_policy is not None:
        raw["output_policy"] = output_policy
    return parse_output_policy(raw, "sha256:test")


def rule(decision="quarantine", rid="r1", **match):
    return {"id": rid, "decision": decision, "match": match}


def meta(topic="job.default", **kw):
    return OutputInput(topic=topic, **kw)


def content(text, topic="job.default", **kw):
    return OutputInput(topic=topic, content=text, **kw)


@pytest.mark.parametrize("word, expected", [
    ("allow", OutputDecision.ALLOW), ("deny", OutputDecision.DENY),
    ("quarantine", OutputDecision.QUARANTINE), ("REDACT", OutputDecision.REDACT)])
def test_each_decision_is_returned_with_rule_id_reason_and_snapshot(word, expected):
    # Given a rule matching every job result
    p = policy([{"id": "all", "decision": word, "reason": "because"}])
    # When a result is evaluated
    got = p.evaluate(meta())
    # Then the rule decides
    assert (got.decision, got.rule_id, got.reason, got.policy_snapshot) == (
        expected, "all", "because", "sha256:test")


def test_default_reason_names_the_decision():
    got = policy([rule("quarantine")]).evaluate(meta())
    assert got.reason == "output quarantined by policy"


def test_no_match_is_allow_without_rule():
    got = policy([rule(topics=["job.secret.*"])]).evaluate(meta("job.default"))
    assert got.decision is OutputDecision.ALLOW and got.rule_id == ""


def test_first_matching_rule_wins():
    p = policy([rule("allow", "first", topics=["job.a"]), rule("quarantine", "second")])
    assert p.evaluate(meta("job.a")).rule_id == "first"
    assert p.evaluate(meta("job.b")).rule_id == "second"


def test_topics_are_globs():
    p = policy([rule(topics=["job.fin.*"])])
    assert p.evaluate(meta("job.fin.pay")).decision is OutputDecision.QUARANTINE
    assert p.evaluate(meta("job.other")).decision is OutputDecision.ALLOW


def test_tenants_are_case_insensitive_and_default_applies():
    p = policy([rule(tenants=["ACME"])])
    assert p.evaluate(meta(tenant="acme")).decision is OutputDecision.QUARANTINE
    assert p.evaluate(meta(tenant="other")).decision is OutputDecision.ALLOW
    p = policy([rule(tenants=["default"])])
    assert p.evaluate(meta(tenant="")).decision is OutputDecision.QUARANTINE


def test_content_types():
    p = policy([rule(content_types=["application/json"])])
    assert p.evaluate(meta(content_type="Application/JSON")).decision is OutputDecision.QUARANTINE
    assert p.evaluate(meta(content_type="text/plain")).decision is OutputDecision.ALLOW
    assert p.evaluate(meta()).decision is OutputDecision.ALLOW


def test_labels_must_all_be_present():
    p = policy([rule(labels={"env": "prod", "pii": True})])
    assert p.evaluate(meta(labels={"env": "prod", "pii": "true"})).decision \
        is OutputDecision.QUARANTINE
    assert p.evaluate(meta(labels={"env": "prod"})).decision is OutputDecision.ALLOW


def test_max_output_bytes_matches_larger_results_only():
    p = policy([rule(max_output_bytes=10)])
    assert p.evaluate(meta(size_bytes=11)).decision is OutputDecision.QUARANTINE
    assert p.evaluate(meta(size_bytes=10)).decision is OutputDecision.ALLOW
    # Without a reported size the content's own length counts.
    assert p.evaluate(content("x" * 11)).decision is OutputDecision.QUARANTINE


def test_content_patterns_match_only_with_content():
    p = policy([rule(content_patterns=[r"AKIA[0-9A-Z]{16}"])])
    leak = "key=AKIAABCDEFGHIJKLMNOP"
    assert p.evaluate(meta()).decision is OutputDecision.ALLOW  # meta phase: no content
    assert p.evaluate(content(leak)).decision is OutputDecision.QUARANTINE
    assert p.evaluate(content("nothing here")).decision is OutputDecision.ALLOW


def test_keywords_are_case_insensitive_substrings():
    p = policy([rule("deny", keywords=["password"])])
    assert p.evaluate(content("my PassWord is x")).decision is OutputDecision.DENY
    assert p.evaluate(content("nothing")).decision is OutputDecision.ALLOW


def test_conditions_combine_with_and():
    p = policy([rule(topics=["job.a"], keywords=["secret"])])
    assert p.evaluate(content("secret", topic="job.b")).decision is OutputDecision.ALLOW
    assert p.evaluate(content("public", topic="job.a")).decision is OutputDecision.ALLOW
    assert p.evaluate(content("secret", topic="job.a")).decision is OutputDecision.QUARANTINE


def test_redact_replaces_patterns_and_keywords():
    p = policy([rule("redact", content_patterns=[r"\d{3}-\d{2}-\d{4}"], keywords=["hunter2"])])
    got = p.evaluate(content("ssn 123-45-6789 pw HUNTER2 ok"))
    assert got.decision is OutputDecision.REDACT
    assert got.redacted_content == f"ssn {REDACTED} pw {REDACTED} ok"


def test_redact_without_patterns_redacts_everything_and_meta_has_no_text():
    p = policy([rule("redact", topics=["job.pii.*"])])
    assert p.evaluate(meta("job.pii.x")).redacted_content is None
    assert p.evaluate(content("anything", topic="job.pii.x")).redacted_content == REDACTED


def test_disabled_rule_and_disabled_policy_allow():
    assert policy([{**rule(), "enabled": False}]).evaluate(meta()).decision \
        is OutputDecision.ALLOW
    off = policy([rule()], {"enabled": False, "fail_mode": "closed"})
    assert off.evaluate(meta()).decision is OutputDecision.ALLOW
    # A file without output_policy.fail_mode keeps its rules in force (older files).
    legacy = policy([rule()], {"enabled": False})
    assert legacy.evaluate(meta()).decision is OutputDecision.QUARANTINE
    assert policy([rule()], {"enabled": True, "fail_mode": "open"}).enabled


@pytest.mark.parametrize("bad, where", [
    ([rule("block")], "decision"),
    ([rule(content_patterns=["(a+)+"])], "nested quantifier"),
    ([rule(content_patterns=["a|b|c|d|e|f|g"])], "alternations"),
    ([rule(content_patterns=["x" * 300])], "longer than"),
    ([rule(content_patterns=["(unclosed"])], "invalid regex"),
    ([rule(unknown_field=["x"])], "unknown_field"),
    ([rule(rid="a"), rule(rid="a")], "duplicate"),
])
def test_invalid_rules_are_load_errors(bad, where):
    with pytest.raises(PolicyError, match=where):
        policy(bad)


def test_output_policy_of_reads_a_loaded_safety_yaml():
    from cordum.safety.output_policy import output_policy_of

    loaded = parse_policy(b"""
default_decision: deny
default_tenant: acme
output_policy: {enabled: true, fail_mode: closed}
output_rules:
  - id: acme-only
    decision: quarantine
    match: {tenants: [acme]}
""")
    p = output_policy_of(loaded)
    got = p.evaluate(meta(tenant=""))
    assert got.decision is OutputDecision.QUARANTINE
    assert got.policy_snapshot == loaded.snapshot
