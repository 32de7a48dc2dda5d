"""What the safety.yaml models share (input rules, output rules, derivers): field
types, the strict base model, and how names and topic globs match."""

from __future__ import annotations

import fnmatch
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict

DEFAULT_TENANT = "default"
"""The tenant of a request that names none, when the file gives no ``default_tenant``."""

_R = TypeVar("_R")


def as_list(value: Any) -> Any:
    """YAML lets a one-item list be written as the item itself."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return value


def _none_is_empty_list(value: Any) -> Any:
    return [] if value is None else value


def unique_rule_ids(rules: list[_R]) -> list[_R]:
    """``rules`` as given; ValueError naming the first id used twice."""
    seen: set[str] = set()
    for rule in rules:
        rule_id = rule.id  # type: ignore[attr-defined]
        if rule_id in seen:
            raise ValueError(f"duplicate rule id {rule_id!r}")
        seen.add(rule_id)
    return rules


StrList = Annotated[list[str], BeforeValidator(as_list)]

RuleList = Annotated[list[_R], BeforeValidator(_none_is_empty_list),
                     AfterValidator(unique_rule_ids)]
"""A section of rules (``RuleList[Rule]``): empty when null, each id used once."""


class StrictModel(BaseModel):
    """A frozen model that rejects unknown keys: an ignored key in a rule would
    widen it, or a typo would pass for a setting."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def tenant_or_default(requested: str, default_tenant: str) -> str:
    """The request's tenant, else the file's ``default_tenant``, else ``"default"``."""
    return requested.strip() or default_tenant.strip() or DEFAULT_TENANT


def contains(values: list[str] | tuple[str, ...], value: str) -> bool:
    """Whether ``value`` is one of ``values``, ignoring case and outer blanks; a blank
    ``value`` is in no list."""
    want = value.strip().lower()
    return bool(want) and want in {v.strip().lower() for v in values}


def first_glob(patterns: list[str], topic: str) -> str | None:
    """The first of ``patterns`` (as written) whose glob matches ``topic``; blank
    patterns match nothing."""
    for pattern in patterns:
        p = pattern.strip()
        if p and fnmatch.fnmatchcase(topic, p):
            return pattern
    return None
