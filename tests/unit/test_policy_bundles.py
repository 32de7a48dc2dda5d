"""Policy bundles: the document's format, validation errors, hashing, the merge, and
how merged rules decide (deny over allow wherever each comes from).

The kernel reloading them from Redis and NATS: tests/integration/test_kernel_bundles.py.
"""

from __future__ import annotations

import pytest

from cordum.safety.bundles import (
    POLICY_DOC_KEY,
    Bundle,
    BundleError,
    base_snapshot_of,
    bundles_document,
    bundles_hash,
    effective_policy,
    parse_bundles,
    validate_bundle,
)
from cordum.safety.matching import PolicyInput
from cordum.safety.policy_document import DecisionKind
from cordum.safety.policy_file import PolicyError, snapshot_of

BASE = b"""\
default_decision: deny
rules:
  - {id: allow-echo, match: {topics: [job.echo]}, decision: allow, reason: base allows}
  - {id: deny-wire, match: {topics: [job.wire]}, decision: deny, reason: base denies}
  - {id: allow-all-jobs, match: {topics: ["job.*"]}, decision: allow}
tenants:
  default: {allow_topics: ["job.*"]}
output_rules:
  - {id: out-base, match: {topics: [job.echo]}, decision: quarantine}
"""


def bundle(bid: str, content: str, *, enabled: bool = True) -> Bundle:
    return Bundle(bid, content, enabled=enabled)


def decide(bundles: dict[str, Bundle], topic: str, base: bytes = BASE):
    return effective_policy(base, "safety.yaml", bundles).evaluate(PolicyInput(topic=topic))


# -- the document -------------------------------------------------------------------

def test_parse_bundles_reads_mappings_and_plain_yaml():
    doc = {"scope": "system", "scope_id": "policy", "revision": 3, "updated_at": "x",
           "data": {"bundles": {
               "secops/a": {"content": "rules: []", "enabled": False, "author": "ann",
                            "message": "m", "created_at": "c", "updated_at": "u"},
               "pack/b": "rules: []",
               "broken": 42}}}

    bundles = parse_bundles(doc)

    assert bundles["secops/a"] == Bundle("secops/a", "rules: []", enabled=False, author="ann",
                                         message="m", created_at="c", updated_at="u")
    assert bundles["pack/b"] == Bundle("pack/b", "rules: []")  # a plain string is live
    assert "broken" not in bundles
    assert parse_bundles(None) == {} == parse_bundles({"data": {}})


def test_bundles_document_round_trips():
    bundles = {"secops/a": Bundle("secops/a", "rules: []", author="ann")}

    doc = bundles_document(bundles, revision=7, updated_at="2026-11-27T02:00:00Z")

    assert (doc["scope"], doc["scope_id"], doc["revision"]) == ("system", "policy", 7)
    assert parse_bundles(doc) == bundles
    assert POLICY_DOC_KEY == "cfg:system:policy"


# -- validation ---------------------------------------------------------------------

@pytest.mark.parametrize(("content", "line", "rule_id", "words"), [
    ("rules:\n  - id: r1\n    match: {topics: [job.a]}\n    decision: maybe\n",
     4, "r1", "rules[0].decision"),
    ("rules:\n  - id: ok\n    decision: deny\n  - id: r2\n    match:\n      topix: [job.a]\n"
     "    decision: deny\n", 6, "r2", "rules[1].match.topix"),
    ("rules:\n  - id: twice\n    decision: deny\n  - id: twice\n    decision: allow\n",
     4, "twice", "duplicate rule id"),
    ("rules:\n  - id: v\n    decision: throttle\n    velocity: {max_requests: 0, "
     "window_seconds: 1, key: tenant}\n", 4, "v", "velocity.max_requests"),
    ("rules:\n  - decision: deny\n", 2, None, "rules[0].id"),
    ("default_decision: throttle\n", 1, None, "default_decision"),
    ("output_rules:\n  - id: o1\n    decision: nope\n", 3, "o1", "output_rules[0].decision"),
    ("rules: [\n  - oops", 2, None, "not valid YAML"),
    ("- just\n- a list\n", 1, None, "must be a mapping"),
])
def test_validation_names_the_line_and_the_rule(content, line, rule_id, words):
    with pytest.raises(BundleError) as err:
        validate_bundle(content)

    assert (err.value.line, err.value.rule_id) == (line, rule_id)
    assert words in err.value.message
    assert str(err.value).startswith(f"line {line}")
    assert isinstance(err.value, ValueError)


def test_an_empty_bundle_is_valid():
    assert validate_bundle("").rules == []
    assert validate_bundle("# nothing yet\n").rules == []


# -- hashing and snapshots ----------------------------------------------------------

def test_hash_covers_enabled_bundles_in_id_order():
    a, b = bundle("a", "rules: []"), bundle("b", "x: 1")

    digest = bundles_hash({"a": a, "b": b})

    assert digest.startswith("cfg:") and len(digest) == len("cfg:") + 16
    assert bundles_hash({"b": b, "a": a}) == digest  # order of the map is irrelevant
    assert bundles_hash({"a": a, "b": bundle("b", "x: 2")}) != digest
    assert bundles_hash({"a": a, "b": bundle("b", "x: 1", enabled=False)}) == \
        bundles_hash({"a": a})
    assert bundles_hash({}) == "" == bundles_hash({"a": bundle("a", "", enabled=False)})
    # the separator keeps id and content apart
    assert bundles_hash({"ab": bundle("ab", "c")}) != bundles_hash({"a": bundle("a", "bc")})


def test_snapshot_is_the_base_alone_without_enabled_bundles():
    base = snapshot_of(BASE)
    off = effective_policy(BASE, "safety.yaml", {"a": bundle("a", "rules: []", enabled=False)})
    on = effective_policy(BASE, "safety.yaml", {"a": bundle("a", "rules: []")})

    assert off.snapshot == base
    assert on.snapshot == f"{base}|{bundles_hash({'a': bundle('a', 'rules: []')})}"
    assert base_snapshot_of(on.snapshot) == base


def test_a_bad_base_raises_and_a_bad_bundle_is_skipped(caplog):
    with pytest.raises(PolicyError):
        effective_policy(b"rules: [{id: a, decision: maybe}]", "safety.yaml", {})

    bad = bundle("secops/bad", "rules: [{id: x, decision: maybe}]")
    good = bundle("secops/good", "rules: [{id: deny-echo, match: {topics: [job.echo]}, "
                                 "decision: deny}]")
    policy = effective_policy(BASE, "safety.yaml", {"secops/bad": bad, "secops/good": good})

    assert [r.id for r in policy.document.rules][-1] == "deny-echo"
    assert "x" not in {r.id for r in policy.document.rules}
    assert "policy bundle 'secops/bad' skipped" in caplog.text


# -- the merge ----------------------------------------------------------------------

def test_rules_are_concatenated_base_first_then_bundles_in_id_order():
    bundles = {
        "secops/b": bundle("secops/b", "rules: [{id: b1, decision: allow}]"),
        "secops/a": bundle("secops/a", "rules: [{id: a1, decision: allow}]"),
    }

    ids = [r.id for r in effective_policy(BASE, "s", bundles).document.rules]

    assert ids == ["allow-echo", "deny-wire", "allow-all-jobs", "a1", "b1"]


def test_a_bundle_cannot_replace_a_base_rule_so_the_base_is_a_floor():
    # A bundle that reuses the id of safety.yaml's deny to turn it into an allow would
    # lower the floor the file sets: its rule is left out, the base rule stays.
    bundles = {"secops/a": bundle(
        "secops/a",
        "rules:\n  - {id: deny-wire, match: {topics: [job.wire]}, decision: allow,"
        " reason: bundle allows}\n  - {id: new, decision: deny}\n")}

    policy = effective_policy(BASE, "s", bundles)

    assert [r.id for r in policy.document.rules] == [
        "allow-echo", "deny-wire", "allow-all-jobs", "new"]
    assert policy.document.rules[1].decision != "allow"
    assert policy.document.rules[1].reason != "bundle allows"


def test_a_later_bundle_replaces_an_earlier_bundles_rule_in_place():
    bundles = {
        "secops/a": bundle("secops/a", "rules: [{id: shared, decision: deny, reason: a}]"),
        "secops/b": bundle("secops/b", "rules: [{id: shared, decision: allow, reason: b}]"),
    }

    rules = effective_policy(BASE, "s", bundles).document.rules

    assert [r.id for r in rules].count("shared") == 1
    assert next(r for r in rules if r.id == "shared").reason == "b"


def test_scalars_keep_the_base_unless_unset_and_sections_merge():
    bundles = {
        "a": bundle("a", "default_decision: allow\ndefault_tenant: acme\n"
                         "tenants:\n  default: {deny_topics: [job.secret]}\n"
                         "  acme: {allow_topics: [job.acme.*]}\n"
                         "output_rules:\n  - {id: out-base, decision: allow}\n"
                         "  - {id: out-new, decision: redact}\n"),
        "b": bundle("b", "default_tenant: later\n"),
    }

    doc = effective_policy(BASE, "s", bundles).document

    assert doc.default_decision is DecisionKind.DENY  # the base set it
    assert doc.default_tenant == "acme"  # unset in the base: the first bundle's
    assert doc.tenants["default"].allow_topics == ["job.*"]
    assert doc.tenants["default"].deny_topics == ["job.secret"]
    assert doc.tenants["acme"].allow_topics == ["job.acme.*"]
    out = (doc.model_extra or {})["output_rules"]
    # The base's output rule stays as the file wrote it (the floor); the new one is added.
    assert [(r["id"], r["decision"]) for r in out] == [("out-base", "quarantine"),
                                                       ("out-new", "redact")]


def test_the_base_document_is_not_changed_by_a_merge():
    bundles = {"a": bundle("a", "rules: [{id: z, decision: deny}]")}
    effective_policy(BASE, "s", bundles)
    assert [r.id for r in effective_policy(BASE, "s", {}).document.rules] == [
        "allow-echo", "deny-wire", "allow-all-jobs"]


# -- precedence: deny > require_approval > throttle > allow_with_constraints > allow --

def test_a_deny_in_a_bundle_beats_an_allow_in_the_base():
    bundles = {"secops/x": bundle("secops/x", "rules: [{id: no-echo, match: {topics: "
                                              "[job.echo]}, decision: deny, reason: stop}]")}

    before = decide({}, "job.echo")
    after = decide(bundles, "job.echo")

    assert (before.decision, before.rule_id) == (DecisionKind.ALLOW, "allow-echo")
    assert (after.decision, after.rule_id, after.reason) == (DecisionKind.DENY, "no-echo",
                                                             "stop")


def test_an_allow_in_a_bundle_does_not_beat_a_deny_in_the_base():
    bundles = {"secops/x": bundle("secops/x", "rules: [{id: yes-wire, match: {topics: "
                                              "[job.wire]}, decision: allow}]")}

    d = decide(bundles, "job.wire")

    assert (d.decision, d.rule_id, d.reason) == (DecisionKind.DENY, "deny-wire", "base denies")


def test_a_deny_in_the_base_after_an_allow_still_wins():
    base = (b"rules:\n  - {id: allow-first, match: {topics: [job.x]}, decision: allow}\n"
            b"  - {id: deny-later, match: {topics: [job.x]}, decision: deny}\n")
    assert decide({}, "job.x", base).rule_id == "deny-later"


def test_require_approval_beats_allow_and_throttle():
    bundles = {"secops/x": bundle("secops/x", """\
rules:
  - {id: slow, match: {topics: [job.echo]}, decision: throttle}
  - {id: ask, match: {topics: [job.echo]}, decision: require_approval, reason: a human}
""")}

    d = decide(bundles, "job.echo")

    assert (d.decision, d.rule_id, d.approval_required) == (
        DecisionKind.REQUIRE_APPROVAL, "ask", True)


def test_throttle_beats_constraints_which_beat_allow():
    bundles = {"secops/x": bundle("secops/x", """\
rules:
  - {id: boxed, match: {topics: [job.echo]}, decision: allow,
     constraints: {sandbox: {isolated: true}}}
""")}
    boxed = decide(bundles, "job.echo")
    assert (boxed.decision, boxed.rule_id) == (DecisionKind.ALLOW_WITH_CONSTRAINTS, "boxed")
    assert boxed.constraints is not None and boxed.constraints.sandbox.isolated

    bundles["secops/y"] = bundle("secops/y", "rules: [{id: later, match: {topics: "
                                             "[job.echo]}, decision: throttle}]")
    throttled = decide(bundles, "job.echo")
    assert (throttled.decision, throttled.rule_id) == (DecisionKind.THROTTLE, "later")
    assert throttled.cacheable is False


def test_the_first_rule_of_the_winning_decision_names_it():
    bundles = {"secops/x": bundle("secops/x", "rules: [{id: also-deny, match: {topics: "
                                              "[job.wire]}, decision: deny}]")}
    assert decide(bundles, "job.wire").rule_id == "deny-wire"


def test_explain_names_the_deciding_rule_and_every_other_match():
    bundles = {"secops/x": bundle("secops/x", """\
rules:
  - {id: ask-echo, match: {topics: [job.echo]}, decision: require_approval}
  - {id: other, match: {topics: [job.other]}, decision: deny}
""")}
    policy = effective_policy(BASE, "s", bundles)

    d = policy.explain(PolicyInput(topic="job.echo"))

    assert d.rule_id == "ask-echo"
    assert d.reason.startswith("decided by ask-echo: require_approval")
    assert "also matched: allow-echo (allow), allow-all-jobs (allow)" in d.reason
    assert "not matched: deny-wire: " in d.reason and "other: " in d.reason
    assert d.snapshot == policy.snapshot


def test_a_velocity_rule_matches_only_over_its_window():
    from cordum.safety.velocity import VelocityCounter

    bundles = {"secops/x": bundle("secops/x", """\
rules:
  - id: burst
    match: {topics: [job.echo]}
    velocity: {max_requests: 2, window_seconds: 60, key: tenant}
    decision: throttle
""")}
    policy = effective_policy(BASE, "s", bundles)
    windows = VelocityCounter()

    answers = [policy.evaluate(PolicyInput(topic="job.echo", job_id=f"j{i}"),
                               velocity=windows) for i in range(3)]

    assert [a.rule_id for a in answers] == ["allow-echo", "allow-echo", "burst"]
    assert [a.cacheable for a in answers] == [False, False, False]


# -- settings -----------------------------------------------------------------------

def test_reload_interval_from_the_environment():
    from cordum.config import ConfigError
    from cordum.safety.live_policy import RELOAD_INTERVAL_ENV, BundleReload

    assert BundleReload.from_env({}).interval_s == 2.0
    assert BundleReload.from_env({RELOAD_INTERVAL_ENV: "0.5"}).interval_s == 0.5
    for bad in ("soon", "0", "-1"):
        with pytest.raises(ConfigError, match=RELOAD_INTERVAL_ENV):
            BundleReload.from_env({RELOAD_INTERVAL_ENV: bad})


def test_the_kernel_user_may_read_the_bundles_document_only():
    from cordum.redis_acl import KERNEL

    rules = KERNEL.rules.split()
    assert f"%R~{POLICY_DOC_KEY}" in rules  # read-only: the gateway writes it
    assert f"~{POLICY_DOC_KEY}" not in rules
