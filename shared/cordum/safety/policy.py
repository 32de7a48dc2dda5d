"""The input safety policy (config/safety.yaml), evaluated and explained.

:func:`~cordum.safety.policy_file.load_policy` turns the file into a
:class:`SafetyPolicy` (models: :mod:`cordum.safety.policy_document`);
``SafetyPolicy.evaluate(PolicyInput)`` gives the :class:`Decision` for one job (how a
rule's match is read: :mod:`cordum.safety.matching`). Evaluation order:

1. An empty topic, or one outside ``job.*``, is denied.
2. The tenant is the request's, else ``default_tenant``, else ``"default"``.
3. Risk tags: a ``risk_tag_derivers`` entry whose topic glob matches replaces the
   client's risk tags with tags derived from the job's payload (anti-spoofing; see
   :mod:`cordum.safety.risk`).
4. ``tenants.<tenant>``: a topic matching ``deny_topics`` is denied; with a
   non-empty ``allow_topics`` a topic matching none of them is denied.
5. ``rules``: every rule is tried, and of those that match the strongest decision
   wins: deny > require_approval > throttle > allow_with_constraints > allow (an
   explicit deny beats any allow, wherever each comes from, as in IAM). Among the
   matching rules of that decision the first in order (the base file's rules, then
   the bundles': :mod:`cordum.safety.bundle_merge`) names the decision (rule id,
   reason, constraints, remediations). A rule with ``velocity`` matches only once
   its window holds more than ``max_requests`` matching requests; every matching
   velocity rule counts the request, whatever decides.
6. With no ``rules`` at all, a topic in the tenant's ``allow_topics`` is allowed.
7. ``default_decision`` (deny unless it says allow).

Every decision carries the id of the rule (or gate) that made it, a reason and the
policy snapshot; a rule without ``reason`` gets "matched rule <id>".

Cordum reads the ``tenants`` lists only when a policy has no rules; here they are
also a gate in front of the rules, so a tenant's ``deny_topics`` cannot be
overridden by a broader allow rule.

Velocity windows are kept by whoever evaluates (:mod:`cordum.safety.velocity`): in
the kernel they are shared by every replica through Redis when ``REDIS_URL`` is set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cordum.safety.fields import first_glob, tenant_or_default
from cordum.safety.matching import mismatch, velocity_key
from cordum.safety.policy_document import DecisionKind
from cordum.safety.risk import derive_risk_tags

if TYPE_CHECKING:
    from cordum.safety.matching import PolicyInput
    from cordum.safety.policy_document import Constraints, PolicyDocument, Remediation, Rule
    from cordum.safety.velocity import VelocityWindows

TOPIC_PREFIX = "job."
"""Only job topics are evaluated; anything else (``sys.*``) is denied."""

DEFAULT_RULE_ID = "default"
"""``rule_id`` of a decision that fell through to ``default_decision``."""

PRECEDENCE = (DecisionKind.ALLOW, DecisionKind.ALLOW_WITH_CONSTRAINTS, DecisionKind.THROTTLE,
              DecisionKind.REQUIRE_APPROVAL, DecisionKind.DENY)
"""Decisions from weakest to strongest: of the rules that match, the strongest
decision wins, whichever rule (and whichever file or bundle) it comes from."""

_TENANT_GATE = "the tenant's topic lists decide before the rules"


@dataclass(frozen=True, slots=True)
class Decision:
    decision: DecisionKind
    reason: str
    rule_id: str
    snapshot: str
    constraints: Constraints | None = None
    approval_required: bool = False
    remediations: tuple[Remediation, ...] = ()
    risk_tags: tuple[str, ...] = ()
    """The risk tags the rules were matched against (derived ones when derived)."""
    cacheable: bool = True
    """False when a velocity window took part or the answer is THROTTLE: the same
    request may be answered differently a moment later."""


@dataclass(frozen=True, slots=True)
class _Outcome:
    decision: Decision
    skipped: tuple[str, ...]
    """One line per rule that did not match (or was within its velocity limit), why."""
    also_matched: tuple[str, ...] = ()
    """``<rule id> (<decision>)`` of every other rule that matched, in rule order."""
    gate: str = ""
    """Set when a gate in front of the rules decided, saying so."""


class SafetyPolicy:
    """A loaded, validated safety.yaml. Immutable; evaluation is thread-safe."""

    def __init__(self, document: PolicyDocument, snapshot: str, source: str = "") -> None:
        self.document = document
        self.snapshot = snapshot
        self.source = source

    def evaluate(self, request: PolicyInput, *, velocity: VelocityWindows | None = None,
                 dry_run: bool = False) -> Decision:
        """The decision for ``request``. ``velocity`` holds the rate windows (none:
        velocity rules are skipped); ``dry_run`` looks at them without counting."""
        return self._run(request, velocity, dry_run).decision

    def explain(self, request: PolicyInput, *,
                velocity: VelocityWindows | None = None) -> Decision:
        """Like a dry-run ``evaluate``, with a reason naming the deciding rule, every
        other rule that matched (and lost to it), and why each remaining rule did not
        match (or was within its velocity limit)."""
        outcome = self._run(request, velocity, dry_run=True)
        d = outcome.decision
        lines = [f"decided by {d.rule_id or 'kernel'}: {d.decision.value}"
                 + (f" ({d.reason})" if d.reason else "")]
        if outcome.gate:
            lines.append(outcome.gate)
        if outcome.also_matched:
            lines.append("also matched: " + ", ".join(outcome.also_matched))
        if outcome.skipped:
            lines.append("not matched: " + "; ".join(outcome.skipped))
        return Decision(d.decision, ". ".join(lines), d.rule_id, d.snapshot, d.constraints,
                        d.approval_required, d.remediations, d.risk_tags, cacheable=False)

    # -- evaluation ---------------------------------------------------------------

    def _run(self, req: PolicyInput, velocity: VelocityWindows | None,
             dry_run: bool) -> _Outcome:
        doc = self.document
        topic = req.topic.strip()
        if not topic:
            return _Outcome(self._deny("kernel:missing-topic", "missing topic"), (),
                            gate=self._not_evaluated("the topic is empty"))
        if not topic.startswith(TOPIC_PREFIX):
            return _Outcome(self._deny("kernel:unsupported-topic",
                                       f"unsupported topic {topic!r}: only job.* is accepted"),
                            (), gate=self._not_evaluated("the topic is outside job.*"))
        tenant = tenant_or_default(req.tenant, doc.default_tenant)
        risk_tags = derive_risk_tags(doc.risk_tag_derivers, topic, req.labels,
                                     req.input_content, req.risk_tags)
        skipped: list[str] = []

        tenant_policy = doc.tenants.get(tenant)
        if tenant_policy is not None:
            denied = first_glob(tenant_policy.deny_topics, topic)
            if denied is not None:
                return _Outcome(self._deny(
                    f"tenant:{tenant}:deny_topics",
                    f"topic {topic!r} denied by tenant {tenant!r} policy ({denied!r})",
                    risk_tags), (), gate=self._not_evaluated(_TENANT_GATE))
            if tenant_policy.allow_topics and first_glob(tenant_policy.allow_topics,
                                                         topic) is None:
                return _Outcome(self._deny(
                    f"tenant:{tenant}:allow_topics",
                    f"topic {topic!r} not in tenant {tenant!r} allow_topics", risk_tags), (),
                    gate=self._not_evaluated(_TENANT_GATE))

        counted = False
        matched: list[Rule] = []
        for rule in doc.rules:
            why_not = mismatch(rule.match, req, topic, tenant, risk_tags)
            if why_not is not None:
                skipped.append(f"{rule.id}: {why_not}")
                continue
            if rule.velocity is not None:
                counted = True
                within = self._within_velocity(rule, req, topic, tenant, velocity, dry_run)
                if within is not None:
                    skipped.append(f"{rule.id}: {within}")
                    continue
            matched.append(rule)
        if matched:
            # max() keeps the first of equal rank: the earliest rule of the winning
            # decision names it.
            winner = max(matched, key=lambda r: PRECEDENCE.index(_kind_of(r)))
            decision = self._from_rule(winner, risk_tags, cacheable=not counted)
            others = tuple(f"{r.id} ({_kind_of(r).value})" for r in matched if r is not winner)
            return _Outcome(decision, tuple(skipped), others)

        if not doc.rules and tenant_policy is not None and tenant_policy.allow_topics:
            return _Outcome(Decision(DecisionKind.ALLOW,
                                     f"topic {topic!r} allowed by tenant {tenant!r} policy",
                                     f"tenant:{tenant}:allow_topics", self.snapshot,
                                     risk_tags=risk_tags), tuple(skipped))
        kind = doc.default_decision
        return _Outcome(Decision(kind, f"no matching rule — default policy: {kind.value}",
                                 DEFAULT_RULE_ID, self.snapshot, risk_tags=risk_tags,
                                 cacheable=not counted),
                        tuple(skipped))

    def _not_evaluated(self, why: str) -> str:
        if not self.document.rules:
            return ""
        return f"rules not evaluated: {why}"

    def _within_velocity(self, rule: Rule, req: PolicyInput, topic: str, tenant: str,
                         velocity: VelocityWindows | None, dry_run: bool) -> str | None:
        """None when the rule's limit is exceeded (it fires); else why it is skipped."""
        assert rule.velocity is not None
        if velocity is None:
            return "velocity not counted here"
        key = velocity_key(rule.velocity.key, req, topic, tenant)
        limit = rule.velocity
        if dry_run:
            count = velocity.peek(rule.id, key, limit.window_seconds)
        else:
            count = velocity.record(rule.id, key, req.job_id, limit.window_seconds)
        if count > limit.max_requests:
            return None
        return (f"velocity {count}/{limit.max_requests} in {limit.window_seconds:g}s "
                f"for {limit.key}={key!r}, within limit")

    def _from_rule(self, rule: Rule, risk_tags: tuple[str, ...], *,
                   cacheable: bool) -> Decision:
        kind = _kind_of(rule)
        constraints = None if rule.constraints.is_empty() else rule.constraints
        return Decision(kind, rule.reason or f"matched rule {rule.id}", rule.id, self.snapshot,
                        constraints, kind is DecisionKind.REQUIRE_APPROVAL,
                        tuple(rule.remediations), risk_tags,
                        cacheable=cacheable and kind is not DecisionKind.THROTTLE)

    def _deny(self, rule_id: str, reason: str, risk_tags: tuple[str, ...] = ()) -> Decision:
        return Decision(DecisionKind.DENY, reason, rule_id, self.snapshot, risk_tags=risk_tags)



def _kind_of(rule: Rule) -> DecisionKind:
    """The decision a matching rule gives: an allow carrying constraints is an
    allow_with_constraints (and ranks as one)."""
    if rule.decision is DecisionKind.ALLOW and not rule.constraints.is_empty():
        return DecisionKind.ALLOW_WITH_CONSTRAINTS
    return rule.decision
