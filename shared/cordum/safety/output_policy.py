"""The output policy of safety.yaml: ``output_policy`` and ``output_rules``, evaluated.

Pure: no I/O. :func:`output_policy_of` reads the two sections out of a loaded
:class:`~cordum.safety.policy.SafetyPolicy` (whose own models accept and ignore
them); :meth:`OutputPolicy.evaluate` decides one job result::

    output_policy: {enabled: true, fail_mode: closed}
    output_rules:
      - id: secret-leak
        decision: quarantine          # allow | deny | quarantine | redact
        reason: "result contains a credential"
        match:
          topics: ["job.*"]           # globs; empty = any
          tenants: [acme]             # case-insensitive; empty = any
          content_types: [text/plain] # case-insensitive; empty = any
          labels: {env: prod}         # every pair must be on the job
          max_output_bytes: 1048576   # matches results LARGER than this
          content_patterns: ['AKIA[0-9A-Z]{16}']   # regex, any may match
          keywords: [password]        # case-insensitive substring, any may match

Every non-empty condition of a rule must hold; rules are tried in file order and
the first match decides. No match, or a disabled policy, is ALLOW.

Two phases, as in Cordum. The *meta* phase has no content: a rule with
``content_patterns`` or ``keywords`` never matches there, and the size is the
reported ``size_bytes``. The *content* phase sees the result text (at most
:data:`MAX_SCAN_BYTES`; the size is ``size_bytes`` or the content's length).

A REDACT decision in the content phase carries the redacted text: every match of
the deciding rule's patterns and keywords replaced by :data:`REDACTED`. A REDACT
rule without patterns or keywords has nothing narrower to cut, so the whole
content becomes :data:`REDACTED`.

Enabled: the policy applies when ``output_rules`` is non-empty and either
``output_policy.enabled`` is true or the file gives no ``output_policy.fail_mode``
(Cordum keeps files written before ``output_policy`` existed enabled).

Differences from Cordum, on purpose: Cordum maps ``deny`` to QUARANTINE; here DENY
stays its own decision (the scheduler treats both alike). Cordum skips a rule whose
decision or pattern is invalid, with a warning; here that is a load error, because
a skipped rule lets through what it was written to stop. Python's ``re`` has no
match timeout, so the complexity limits Cordum applies to patterns
(:data:`MAX_PATTERN_LEN`, no nested quantifiers, at most
:data:`MAX_ALTERNATIONS` alternations) are enforced at load time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from cordum.safety.fields import (
    RuleList,
    StrictModel,
    StrList,
    contains,
    first_glob,
    tenant_or_default,
)
from cordum.safety.output_wire import OutputDecision
from cordum.safety.policy_file import POLICY_FILE_NAME, PolicyError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cordum.safety.policy import SafetyPolicy

REDACTED = "[REDACTED]"
MAX_SCAN_BYTES = 2 * 1024 * 1024
"""Content beyond this many bytes is not scanned (Cordum's limit)."""
MAX_PATTERN_LEN = 256
MAX_ALTERNATIONS = 5

_NESTED_QUANTIFIER = re.compile(r"[+*]\)[+*?{]")


_DEFAULT_REASONS = {
    OutputDecision.ALLOW: "output allowed by policy",
    OutputDecision.DENY: "output denied by policy",
    OutputDecision.QUARANTINE: "output quarantined by policy",
    OutputDecision.REDACT: "output requires redaction by policy",
}


def _decision(value: Any) -> OutputDecision:
    try:
        return OutputDecision(str(value).strip().upper())
    except ValueError:
        raise ValueError(f"must be one of allow, deny, quarantine, redact; got {value!r}") \
            from None


def _text_map(value: Any) -> Any:
    if value is None:
        return {}
    if isinstance(value, dict):
        return {k: ("true" if v is True else "false" if v is False else str(v))
                for k, v in value.items()}
    return value


class OutputMatch(StrictModel):
    """What an output rule applies to. Unknown keys are rejected: an ignored
    condition would widen the rule."""

    topics: StrList = Field(default_factory=list)
    tenants: StrList = Field(default_factory=list)
    content_types: StrList = Field(default_factory=list)
    labels: Annotated[dict[str, str], BeforeValidator(_text_map)] = Field(default_factory=dict)
    max_output_bytes: int = Field(default=0, ge=0)
    """Matches a result larger than this many bytes; 0: any size."""
    content_patterns: StrList = Field(default_factory=list)
    keywords: StrList = Field(default_factory=list)

    @field_validator("content_patterns")
    @classmethod
    def _safe_patterns(cls, v: list[str]) -> list[str]:
        for pattern in v:
            if not pattern.strip():
                raise ValueError("empty pattern")
            if len(pattern) > MAX_PATTERN_LEN:
                raise ValueError(f"pattern longer than {MAX_PATTERN_LEN} characters")
            if _NESTED_QUANTIFIER.search(pattern):
                raise ValueError(f"nested quantifier in {pattern!r} (catastrophic backtracking)")
            if pattern.count("|") > MAX_ALTERNATIONS:
                raise ValueError(f"more than {MAX_ALTERNATIONS} alternations in {pattern!r}")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid regex {pattern!r}: {exc}") from None
        return v

    @property
    def needs_content(self) -> bool:
        return bool(self.content_patterns or self.keywords)


class OutputRule(StrictModel):
    id: str = Field(min_length=1)
    enabled: bool = True
    decision: Annotated[OutputDecision, BeforeValidator(_decision)]
    reason: str = ""
    severity: str = ""
    """Informational (Cordum reports it with findings); not evaluated."""
    match: OutputMatch = Field(default_factory=OutputMatch)

    @field_validator("match", mode="before")
    @classmethod
    def _none_is_empty(cls, v: Any) -> Any:
        return {} if v is None else v


class OutputPolicySettings(StrictModel):
    """``output_policy``."""

    enabled: bool = False
    fail_mode: str = ""
    """``open`` / ``closed`` / empty. Read by the scheduler (content-check errors);
    an empty value here still means closed there."""

    @field_validator("fail_mode")
    @classmethod
    def _mode(cls, v: str) -> str:
        v = v.strip().lower()
        if v not in ("", "open", "closed"):
            raise ValueError(f"must be open or closed, got {v!r}")
        return v


class _OutputSections(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    output_policy: OutputPolicySettings | None = None
    output_rules: RuleList[OutputRule] = Field(default_factory=list)
    default_tenant: str = ""


@dataclass(frozen=True, slots=True)
class OutputInput:
    """One job result, as the policy sees it. ``content`` is None in the meta phase."""

    topic: str
    tenant: str = ""
    job_id: str = ""
    content_type: str = ""
    size_bytes: int = 0
    labels: Mapping[str, str] | None = None
    content: str | None = None


@dataclass(frozen=True, slots=True)
class OutputEvaluation:
    decision: OutputDecision
    reason: str = ""
    rule_id: str = ""
    policy_snapshot: str = ""
    redacted_content: str | None = None
    """Set for a REDACT decided in the content phase."""


class OutputPolicy:
    """The output sections of one safety.yaml snapshot. Immutable; thread-safe."""

    def __init__(self, settings: OutputPolicySettings | None, rules: list[OutputRule],
                 snapshot: str = "", default_tenant: str = "") -> None:
        self.settings = settings or OutputPolicySettings()
        self.rules = [r for r in rules if r.enabled]
        self.snapshot = snapshot
        self.default_tenant = default_tenant
        self.enabled = bool(self.rules) and (
            self.settings.enabled or settings is None or not self.settings.fail_mode)
        self._patterns = {r.id: [re.compile(p) for p in r.match.content_patterns]
                          for r in self.rules}

    def evaluate(self, req: OutputInput) -> OutputEvaluation:
        if not self.enabled:
            return OutputEvaluation(OutputDecision.ALLOW, "", "", self.snapshot)
        content = req.content
        if content is not None and len(content.encode("utf-8", "replace")) > MAX_SCAN_BYTES:
            content = content.encode("utf-8", "replace")[:MAX_SCAN_BYTES].decode(
                "utf-8", "ignore")
        for rule in self.rules:
            if not self._matches(rule, req, content):
                continue
            redacted = None
            if rule.decision is OutputDecision.REDACT and content is not None:
                redacted = self.redact(rule, content)
            return OutputEvaluation(rule.decision,
                                    rule.reason.strip() or _DEFAULT_REASONS[rule.decision],
                                    rule.id, self.snapshot, redacted)
        return OutputEvaluation(OutputDecision.ALLOW, "", "", self.snapshot)

    def redact(self, rule: OutputRule, content: str) -> str:
        """``content`` with every match of ``rule``'s patterns and keywords replaced."""
        if not rule.match.needs_content:
            return REDACTED
        for pattern in self._patterns.get(rule.id, ()):
            content = pattern.sub(REDACTED, content)
        for keyword in rule.match.keywords:
            if keyword:
                content = re.sub(re.escape(keyword), REDACTED, content, flags=re.IGNORECASE)
        return content

    def _matches(self, rule: OutputRule, req: OutputInput, content: str | None) -> bool:
        m = rule.match
        tenant = tenant_or_default(req.tenant, self.default_tenant)
        if m.tenants and not contains(m.tenants, tenant):
            return False
        if m.topics and first_glob(m.topics, req.topic.strip()) is None:
            return False
        if m.content_types and not contains(m.content_types, req.content_type):
            return False
        labels = req.labels or {}
        if any(labels.get(k) != v for k, v in m.labels.items()):
            return False
        if m.max_output_bytes:
            size = req.size_bytes
            if size <= 0 and content is not None:
                size = len(content.encode("utf-8", "replace"))
            if size <= m.max_output_bytes:
                return False
        if m.needs_content and not content:
            return False
        if m.content_patterns and not any(p.search(content or "")
                                          for p in self._patterns[rule.id]):
            return False
        if m.keywords:
            folded = (content or "").casefold()
            if not any(k and k.casefold() in folded for k in m.keywords):
                return False
        return True


def parse_output_policy(raw: Mapping[str, Any], snapshot: str = "",
                        source: str = POLICY_FILE_NAME) -> OutputPolicy:
    """The output policy of a parsed safety.yaml mapping; errors name ``source``."""
    try:
        sections = _OutputSections.model_validate(dict(raw))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise PolicyError(f"{source}: {where}: {err['msg']}") from exc
    return OutputPolicy(sections.output_policy, sections.output_rules, snapshot,
                        sections.default_tenant)


def output_policy_of(policy: SafetyPolicy) -> OutputPolicy:
    """The output policy of a loaded safety policy (same snapshot)."""
    doc = policy.document
    raw = dict(doc.model_extra or {})
    raw["default_tenant"] = doc.default_tenant
    return parse_output_policy(raw, policy.snapshot, policy.source or POLICY_FILE_NAME)
