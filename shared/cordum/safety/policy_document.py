"""The input policy's models: what config/safety.yaml may say, validated.

:class:`PolicyDocument` is the whole file; :mod:`cordum.safety.policy_file` reads it
and :class:`~cordum.safety.policy.SafetyPolicy` evaluates it. Sections read by other
components (``output_policy``, ``output_rules``…) are accepted and left alone here.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from cordum.safety.fields import RuleList, StrictModel, StrList
from cordum.safety.risk import RiskTagDeriver

VELOCITY_KEY_FIELDS = ("actor_id", "actor_type", "tenant", "topic", "pack_id", "capability")
"""Names a velocity ``key`` part may use, besides ``labels.<name>``."""


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


class BudgetConstraints(StrictModel):
    max_runtime_ms: int = Field(default=0, ge=0)
    max_retries: int = Field(default=0, ge=0)
    max_artifact_bytes: int = Field(default=0, ge=0)
    max_concurrent_jobs: int = Field(default=0, ge=0)


class SandboxProfile(StrictModel):
    isolated: bool = False
    network_allowlist: StrList = Field(default_factory=list)
    fs_read_only: StrList = Field(default_factory=list)
    fs_read_write: StrList = Field(default_factory=list)


class ToolchainConstraints(StrictModel):
    allowed_tools: StrList = Field(default_factory=list)
    allowed_commands: StrList = Field(default_factory=list)


class DiffConstraints(StrictModel):
    max_files: int = Field(default=0, ge=0)
    max_lines: int = Field(default=0, ge=0)
    deny_path_globs: StrList = Field(default_factory=list)


class Constraints(StrictModel):
    """A rule's ``constraints``; maps field for field onto CAP's PolicyConstraints."""

    budgets: BudgetConstraints = Field(default_factory=BudgetConstraints)
    sandbox: SandboxProfile = Field(default_factory=SandboxProfile)
    toolchain: ToolchainConstraints = Field(default_factory=ToolchainConstraints)
    diff: DiffConstraints = Field(default_factory=DiffConstraints)
    redaction_level: str = ""

    def is_empty(self) -> bool:
        return self == Constraints()


class Remediation(StrictModel):
    """A safer alternative the gateway may offer when a job is not allowed as sent."""

    id: str = ""
    title: str = ""
    summary: str = ""
    replacement_topic: str = ""
    replacement_capability: str = ""
    add_labels: TextMap = Field(default_factory=dict)
    remove_labels: StrList = Field(default_factory=list)


class Velocity(StrictModel):
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


class Match(StrictModel):
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


class Rule(StrictModel):
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
    rules: RuleList[Rule] = Field(default_factory=list)
    tenants: dict[str, TenantPolicy] = Field(default_factory=dict)
    risk_tag_derivers: list[RiskTagDeriver] = Field(default_factory=list)

    @field_validator("default_decision")
    @classmethod
    def _allow_or_deny(cls, v: DecisionKind) -> DecisionKind:
        if v not in (DecisionKind.ALLOW, DecisionKind.DENY):
            raise ValueError("must be allow or deny")
        return v

    @field_validator("risk_tag_derivers", mode="before")
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
