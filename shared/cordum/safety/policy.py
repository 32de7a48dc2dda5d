"""The input safety policy (config/safety.yaml): parsed, validated, evaluated.

``load_policy(path)`` turns the file into a :class:`SafetyPolicy` (pydantic models,
errors name the file and the field); ``SafetyPolicy.evaluate(PolicyInput)`` gives the
:class:`Decision` for one job. Evaluation order:

1. An empty topic, or one outside ``job.*``, is denied.
2. The tenant is the request's, else ``default_tenant``, else ``"default"``.
3. Risk tags: a ``risk_tag_derivers`` entry whose topic glob matches replaces the
   client's risk tags with tags derived from the job's payload (anti-spoofing; see
   :mod:`cordum.safety.risk`).
4. ``tenants.<tenant>``: a topic matching ``deny_topics`` is denied; with a
   non-empty ``allow_topics`` a topic matching none of them is denied.
5. ``rules`` in file order, first match wins. A rule with ``velocity`` fires only
   once its window holds more than ``max_requests`` matching requests; below that
   it is skipped and evaluation goes on with the next rule.
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

import fnmatch
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from cordum.config import ConfigError
from cordum.safety.fields import StrList

# Re-exported: these lived here first and callers import them from this module.
from cordum.safety.risk import AmountThreshold as AmountThreshold
from cordum.safety.risk import RiskTagDeriver, derive_risk_tags
from cordum.safety.velocity import MISSING_KEY_PART, VelocityWindows
from cordum.safety.velocity import VelocityCounter as VelocityCounter

if TYPE_CHECKING:
    from pathlib import Path

TOPIC_PREFIX = "job."
"""Only job topics are evaluated; anything else (``sys.*``) is denied."""

DEFAULT_TENANT = "default"
DEFAULT_RULE_ID = "default"
"""``rule_id`` of a decision that fell through to ``default_decision``."""

VELOCITY_KEY_FIELDS = ("actor_id", "actor_type", "tenant", "topic", "pack_id", "capability")
"""Names a velocity ``key`` part may use, besides ``labels.<name>``."""

_TENANT_GATE = "the tenant's topic lists decide before the rules"

_R = TypeVar("_R")


def unique_rule_ids(rules: list[_R]) -> list[_R]:
    """``rules`` as given; ValueError naming the first id used twice."""
    seen: set[str] = set()
    for rule in rules:
        rule_id = rule.id  # type: ignore[attr-defined]
        if rule_id in seen:
            raise ValueError(f"duplicate rule id {rule_id!r}")
        seen.add(rule_id)
    return rules

class PolicyError(ConfigError):
    """safety.yaml cannot be read or does not describe a valid policy."""


class DecisionKind(StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    REQUIRE_APPROVAL = "require_approval"
    ALLOW_WITH_CONSTRAINTS = "allow_with_constraints"
    THROTTLE = "throttle"


_DECISION_ALIASES = {
    "allow": DecisionKind.ALLOW,
    "permit": DecisionKind.ALLOW,
    "deny": DecisionKind.DENY,
    "block": DecisionKind.DENY,
    "require_approval": DecisionKind.REQUIRE_APPROVAL,
    "require-approval": DecisionKind.REQUIRE_APPROVAL,
    "require_human": DecisionKind.REQUIRE_APPROVAL,
    "allow_with_constraints": DecisionKind.ALLOW_WITH_CONSTRAINTS,
    "allow-with-constraints": DecisionKind.ALLOW_WITH_CONSTRAINTS,
    "throttle": DecisionKind.THROTTLE,
}


def _decision(value: Any) -> DecisionKind:
    # An unknown word is a load error: a typo must never decide whether jobs run.
    kind = _DECISION_ALIASES.get(str(value).strip().lower())
    if kind is None:
        raise ValueError(f"must be one of {', '.join(DecisionKind)}, got {value!r}")
    return kind


def _scalar_text(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


def _text_map(value: Any) -> Any:
    if value is None:
        return {}
    if isinstance(value, dict):
        return {k: _scalar_text(v) for k, v in value.items()}
    return value


TextMap = Annotated[dict[str, str], BeforeValidator(_text_map)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BudgetConstraints(_Strict):
    max_runtime_ms: int = Field(default=0, ge=0)
    max_retries: int = Field(default=0, ge=0)
    max_artifact_bytes: int = Field(default=0, ge=0)
    max_concurrent_jobs: int = Field(default=0, ge=0)


class SandboxProfile(_Strict):
    isolated: bool = False
    network_allowlist: StrList = Field(default_factory=list)
    fs_read_only: StrList = Field(default_factory=list)
    fs_read_write: StrList = Field(default_factory=list)


class ToolchainConstraints(_Strict):
    allowed_tools: StrList = Field(default_factory=list)
    allowed_commands: StrList = Field(default_factory=list)


class DiffConstraints(_Strict):
    max_files: int = Field(default=0, ge=0)
    max_lines: int = Field(default=0, ge=0)
    deny_path_globs: StrList = Field(default_factory=list)


class Constraints(_Strict):
    """A rule's ``constraints``; maps field for field onto CAP's PolicyConstraints."""

    budgets: BudgetConstraints = Field(default_factory=BudgetConstraints)
    sandbox: SandboxProfile = Field(default_factory=SandboxProfile)
    toolchain: ToolchainConstraints = Field(default_factory=ToolchainConstraints)
    diff: DiffConstraints = Field(default_factory=DiffConstraints)
    redaction_level: str = ""

    def is_empty(self) -> bool:
        return self == Constraints()


class Remediation(_Strict):
    """A safer alternative the gateway may offer when a job is not allowed as sent."""

    id: str = ""
    title: str = ""
    summary: str = ""
    replacement_topic: str = ""
    replacement_capability: str = ""
    add_labels: TextMap = Field(default_factory=dict)
    remove_labels: StrList = Field(default_factory=list)


class Velocity(_Strict):
    """Sliding-window rate limit: the rule fires once more than ``max_requests``
    matching requests with the same key arrive within ``window_seconds``."""

    max_requests: int = Field(ge=1)
    window_seconds: float = Field(gt=0)
    key: str
    """``tenant``, ``topic``, ``actor_id``, ``actor_type``, ``pack_id``, ``capability``,
    ``labels.<name>``, or several of them joined by ``:`` (``tenant:topic``). A part the
    request lacks counts as ``_missing``: such requests share one window."""

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        parts = [p.strip() for p in v.split(":")]
        if not v.strip() or not all(parts):
            raise ValueError("must be non-empty")
        for part in parts:
            if part not in VELOCITY_KEY_FIELDS and not (
                    part.startswith("labels.") and len(part) > len("labels.")):
                raise ValueError(f"unknown key part {part!r}; use "
                                 f"{', '.join(VELOCITY_KEY_FIELDS)} or labels.<name>")
        return v.strip()


class Match(_Strict):
    """What a rule applies to. Every non-empty field must hold (AND); an empty field
    imposes nothing. Unknown fields are rejected rather than ignored, because an
    ignored condition would widen the rule."""

    tenants: StrList = Field(default_factory=list)
    topics: StrList = Field(default_factory=list)
    capabilities: StrList = Field(default_factory=list)
    risk_tags: StrList = Field(default_factory=list)
    requires: StrList = Field(default_factory=list)
    pack_ids: StrList = Field(default_factory=list)
    actor_ids: StrList = Field(default_factory=list)
    actor_types: StrList = Field(default_factory=list)
    labels: TextMap = Field(default_factory=dict)
    label_allowlist: dict[str, StrList] = Field(default_factory=dict)
    label_threshold: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _none_is_empty(cls, data: Any) -> Any:
        return {} if data is None else data


class Rule(_Strict):
    id: str = Field(min_length=1)
    match: Match = Field(default_factory=Match)
    velocity: Velocity | None = None
    decision: Annotated[DecisionKind, BeforeValidator(_decision)]
    reason: str = ""
    constraints: Constraints = Field(default_factory=Constraints)
    remediations: list[Remediation] = Field(default_factory=list)

    @field_validator("constraints", "match", mode="before")
    @classmethod
    def _none_is_default(cls, v: Any) -> Any:
        return {} if v is None else v

    @field_validator("remediations", mode="before")
    @classmethod
    def _none_is_no_remediation(cls, v: Any) -> Any:
        return [] if v is None else v


class TenantPolicy(BaseModel):
    """``tenants.<name>``: topic globs. Other keys (``mcp``, repo hosts) are kept
    for other components and not evaluated here."""

    model_config = ConfigDict(extra="allow", frozen=True)

    allow_topics: StrList = Field(default_factory=list)
    deny_topics: StrList = Field(default_factory=list)


class PolicyDocument(BaseModel):
    """safety.yaml. Sections read by other components (``input_policy``,
    ``output_policy``, ``output_rules``…) are accepted and not evaluated here."""

    model_config = ConfigDict(extra="allow", frozen=True)

    default_decision: Annotated[DecisionKind, BeforeValidator(_decision)] = DecisionKind.DENY
    default_tenant: str = ""
    rules: list[Rule] = Field(default_factory=list)
    tenants: dict[str, TenantPolicy] = Field(default_factory=dict)
    risk_tag_derivers: list[RiskTagDeriver] = Field(default_factory=list)

    @field_validator("default_decision")
    @classmethod
    def _allow_or_deny(cls, v: DecisionKind) -> DecisionKind:
        if v not in (DecisionKind.ALLOW, DecisionKind.DENY):
            raise ValueError("must be allow or deny")
        return v

    @field_validator("rules", "risk_tag_derivers", mode="before")
    @classmethod
    def _none_is_empty_list(cls, v: Any) -> Any:
        return [] if v is None else v

    @field_validator("tenants", mode="before")
    @classmethod
    def _none_is_empty_map(cls, v: Any) -> Any:
        if v is None:
            return {}
        if isinstance(v, dict):
            return {k: ({} if t is None else t) for k, t in v.items()}
        return v

    @field_validator("rules")
    @classmethod
    def _unique_ids(cls, v: list[Rule]) -> list[Rule]:
        return unique_rule_ids(v)


@dataclass(frozen=True, slots=True)
class PolicyInput:
    """What a policy looks at for one job (built from a PolicyCheckRequest)."""

    topic: str
    tenant: str = ""
    job_id: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    capability: str = ""
    risk_tags: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    pack_id: str = ""
    actor_id: str = ""
    actor_type: str = ""
    """``human`` / ``service`` (CAP ActorType without its prefix), or empty."""
    input_content: bytes = b""

    def cache_key(self) -> str:
        """Everything that can change a decision except ``job_id``, which only feeds
        ``approval_ref`` and velocity windows (decisions that involve a velocity window
        are never cached)."""
        doc = {
            "topic": self.topic, "tenant": self.tenant, "labels": dict(self.labels),
            "capability": self.capability, "risk_tags": list(self.risk_tags),
            "requires": list(self.requires), "pack_id": self.pack_id,
            "actor_id": self.actor_id, "actor_type": self.actor_type,
            "content": hashlib.sha256(self.input_content).hexdigest(),
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


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
    """One line per rule that did not decide before the one that did, saying why."""
    later: tuple[str, ...] = ()
    """One line per rule after the one that decided (filled for explain only)."""
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
        """Like a dry-run ``evaluate``, with a reason naming what decided and why each
        other rule did not: an earlier rule did not match (or was within its velocity
        limit), a later one was not reached or would not have matched either."""
        outcome = self._run(request, velocity, dry_run=True, explain=True)
        d = outcome.decision
        lines = [f"decided by {d.rule_id or 'kernel'}: {d.decision.value}"
                 + (f" ({d.reason})" if d.reason else "")]
        if outcome.gate:
            lines.append(outcome.gate)
        if outcome.skipped:
            lines.append("not matched: " + "; ".join(outcome.skipped))
        if outcome.later:
            lines.append("not reached: " + "; ".join(outcome.later))
        return Decision(d.decision, ". ".join(lines), d.rule_id, d.snapshot, d.constraints,
                        d.approval_required, d.remediations, d.risk_tags, cacheable=False)

    # -- evaluation ---------------------------------------------------------------

    def _run(self, req: PolicyInput, velocity: VelocityWindows | None,
             dry_run: bool, explain: bool = False) -> _Outcome:
        doc = self.document
        topic = req.topic.strip()
        if not topic:
            return _Outcome(self._deny("kernel:missing-topic", "missing topic"), (),
                            gate=self._not_evaluated("the topic is empty"))
        if not topic.startswith(TOPIC_PREFIX):
            return _Outcome(self._deny("kernel:unsupported-topic",
                                       f"unsupported topic {topic!r}: only job.* is accepted"),
                            (), gate=self._not_evaluated("the topic is outside job.*"))
        tenant = req.tenant.strip() or doc.default_tenant.strip() or DEFAULT_TENANT
        risk_tags = derive_risk_tags(doc.risk_tag_derivers, topic, req.labels,
                                     req.input_content, req.risk_tags)
        skipped: list[str] = []

        tenant_policy = doc.tenants.get(tenant)
        if tenant_policy is not None:
            denied = _first_glob(tenant_policy.deny_topics, topic)
            if denied is not None:
                return _Outcome(self._deny(
                    f"tenant:{tenant}:deny_topics",
                    f"topic {topic!r} denied by tenant {tenant!r} policy ({denied!r})",
                    risk_tags), (), gate=self._not_evaluated(_TENANT_GATE))
            if tenant_policy.allow_topics and _first_glob(tenant_policy.allow_topics,
                                                          topic) is None:
                return _Outcome(self._deny(
                    f"tenant:{tenant}:allow_topics",
                    f"topic {topic!r} not in tenant {tenant!r} allow_topics", risk_tags), (),
                    gate=self._not_evaluated(_TENANT_GATE))

        counted = False
        for index, rule in enumerate(doc.rules):
            why_not = _mismatch(rule.match, req, topic, tenant, risk_tags)
            if why_not is not None:
                skipped.append(f"{rule.id}: {why_not}")
                continue
            if rule.velocity is not None:
                counted = True
                within = self._within_velocity(rule, req, topic, tenant, velocity, dry_run)
                if within is not None:
                    skipped.append(f"{rule.id}: {within}")
                    continue
            decision = self._from_rule(rule, risk_tags, cacheable=not counted)
            later = (self._later(doc.rules[index + 1:], req, topic, tenant, risk_tags)
                     if explain else ())
            return _Outcome(decision, tuple(skipped), later)

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

    @staticmethod
    def _later(rules: list[Rule], req: PolicyInput, topic: str, tenant: str,
               risk_tags: tuple[str, ...]) -> tuple[str, ...]:
        lines = []
        for rule in rules:
            why_not = _mismatch(rule.match, req, topic, tenant, risk_tags)
            lines.append(f"{rule.id}: " + (why_not if why_not is not None
                                           else "would match too, but the first match decides"))
        return tuple(lines)

    def _within_velocity(self, rule: Rule, req: PolicyInput, topic: str, tenant: str,
                         velocity: VelocityWindows | None, dry_run: bool) -> str | None:
        """None when the rule's limit is exceeded (it fires); else why it is skipped."""
        assert rule.velocity is not None
        if velocity is None:
            return "velocity not counted here"
        key = _velocity_key(rule.velocity.key, req, topic, tenant)
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
        kind = rule.decision
        constraints = None if rule.constraints.is_empty() else rule.constraints
        if kind is DecisionKind.ALLOW and constraints is not None:
            kind = DecisionKind.ALLOW_WITH_CONSTRAINTS
        return Decision(kind, rule.reason or f"matched rule {rule.id}", rule.id, self.snapshot,
                        constraints, kind is DecisionKind.REQUIRE_APPROVAL,
                        tuple(rule.remediations), risk_tags,
                        cacheable=cacheable and kind is not DecisionKind.THROTTLE)

    def _deny(self, rule_id: str, reason: str, risk_tags: tuple[str, ...] = ()) -> Decision:
        return Decision(DecisionKind.DENY, reason, rule_id, self.snapshot, risk_tags=risk_tags)


# -- loading ----------------------------------------------------------------------

def snapshot_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()[:16]


def parse_policy(data: bytes, source: str = "safety.yaml") -> SafetyPolicy:
    """A SafetyPolicy from YAML bytes; ``source`` names the file in errors."""
    import yaml  # only the processes that read config files pay for it

    try:
        raw = yaml.safe_load(data) or {}
    except yaml.YAMLError as exc:
        raise PolicyError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise PolicyError(f"{source}: must be a mapping, got {type(raw).__name__}")
    try:
        document = PolicyDocument.model_validate(raw)
    except ValidationError as exc:
        raise PolicyError(f"{source}: {_describe(exc, raw)}") from exc
    return SafetyPolicy(document, snapshot_of(data), source)


def load_policy(path: Path) -> SafetyPolicy:
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise PolicyError(f"config file not found: {path}") from exc
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read: {exc}") from exc
    return parse_policy(data, str(path))


def _describe(exc: ValidationError, raw: dict[str, Any]) -> str:
    """The first error as ``rules[2] (id 'x').match.topics: message``."""
    err = exc.errors()[0]
    parts: list[str] = []
    node: Any = raw
    for loc in err["loc"]:
        if isinstance(loc, int):
            label = f"[{loc}]"
            item = node[loc] if isinstance(node, list) and loc < len(node) else None
            if isinstance(item, dict) and item.get("id"):
                label += f" (id {item['id']!r})"
            parts.append(label)
            node = item
        else:
            parts.append(("." if parts else "") + str(loc))
            node = node.get(loc) if isinstance(node, dict) else None
    where = "".join(parts) or "(top level)"
    return f"{where}: {err['msg']}"


# -- matching ---------------------------------------------------------------------

def _norm(value: str) -> str:
    return value.strip().lower()


def _contains(values: list[str] | tuple[str, ...], value: str) -> bool:
    if not value.strip():
        return False
    return _norm(value) in {_norm(v) for v in values}


def _first_glob(patterns: list[str], topic: str) -> str | None:
    for pattern in patterns:
        p = pattern.strip()
        if p and fnmatch.fnmatchcase(topic, p):
            return pattern
    return None


def _mismatch(m: Match, req: PolicyInput, topic: str, tenant: str,
              risk_tags: tuple[str, ...]) -> str | None:
    """None when ``m`` matches; otherwise the first condition that failed."""
    if m.tenants and not _contains(m.tenants, tenant):
        return f"tenant {tenant!r} not in {m.tenants}"
    if m.topics and _first_glob(m.topics, topic) is None:
        return f"topic {topic!r} matches none of {m.topics}"
    if m.capabilities and not _contains(m.capabilities, req.capability):
        return f"capability {req.capability!r} not in {m.capabilities}"
    if m.risk_tags and not any(_contains(m.risk_tags, t) for t in risk_tags):
        return f"risk tags {list(risk_tags)} share none of {m.risk_tags}"
    if m.requires:
        missing = [r for r in m.requires if not _contains(req.requires, r)]
        if missing:
            return f"requires {list(req.requires)} lacks {missing}"
    if m.pack_ids and not _contains(m.pack_ids, req.pack_id):
        return f"pack_id {req.pack_id!r} not in {m.pack_ids}"
    if m.actor_ids and not _contains(m.actor_ids, req.actor_id):
        return f"actor_id {req.actor_id!r} not in {m.actor_ids}"
    if m.actor_types and not _contains(m.actor_types, req.actor_type):
        return f"actor_type {req.actor_type!r} not in {m.actor_types}"
    for key, want in m.labels.items():
        if req.labels.get(key) != want:
            return f"label {key}={req.labels.get(key)!r}, rule wants {want!r}"
    if m.label_allowlist and not _outside_allowlist(m.label_allowlist, req.labels):
        return f"every present label is inside label_allowlist {m.label_allowlist}"
    if m.label_threshold and not _over_threshold(m.label_threshold, req.labels):
        return f"no label exceeds label_threshold {m.label_threshold}"
    return None


def _outside_allowlist(allowlists: dict[str, list[str]], labels: Mapping[str, str]) -> bool:
    """True when a present label's value is NOT in its list; absent labels are skipped."""
    for key, allowed in allowlists.items():
        if key in labels and not _contains(allowed, labels[key]):
            return True
    return False


def _over_threshold(thresholds: dict[str, float], labels: Mapping[str, str]) -> bool:
    """True when a present, numeric label is greater than its threshold."""
    for key, limit in thresholds.items():
        try:
            value = float(labels[key].strip())
        except (KeyError, ValueError):
            continue
        if value > limit:
            return True
    return False


def _velocity_key(expr: str, req: PolicyInput, topic: str, tenant: str) -> str:
    values = {"actor_id": req.actor_id, "actor_type": req.actor_type, "tenant": tenant,
              "topic": topic, "pack_id": req.pack_id, "capability": req.capability}
    resolved = []
    for part in expr.split(":"):
        part = part.strip()
        value = (req.labels.get(part[len("labels."):], "") if part.startswith("labels.")
                 else values.get(part, ""))
        # Skipping the rule here would let a caller dodge it by leaving the field out.
        resolved.append(value or MISSING_KEY_PART)
    return ":".join(resolved)
