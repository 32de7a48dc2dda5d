"""How policy bundles are merged over safety.yaml (:func:`merge`).

The base document comes first, then each bundle's document in the order given (the
kernel gives them in id order: :func:`cordum.safety.bundles.with_bundles`):

- ``rules`` (and the id-keyed lists of other components, ``output_rules`` and
  ``input_rules``) are concatenated. A bundle's rule whose id an earlier bundle
  already used replaces that rule where it stands; one that reuses the id of a base
  rule is left out (logged): safety.yaml is a floor no bundle lowers, since a deny
  anywhere wins and a bundle can neither remove nor rewrite the file's rules. The
  order matters only for which rule of the winning decision is named
  (:mod:`cordum.safety.policy`).
- ``tenants``: a tenant's ``allow_topics`` and ``deny_topics`` are joined (a bundle
  can only add topics to either list); its other keys, and tenants the base does
  not name, come from the first document that sets them.
- ``risk_tag_derivers`` are concatenated (the first whose topics match decides).
- Every other top-level key keeps the first value set: the base wins unless it
  leaves the key unset (not written in the file).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from cordum.safety.policy_document import PolicyDocument, TenantPolicy

if TYPE_CHECKING:
    from collections.abc import Iterable

log = logging.getLogger(__name__)

_ID_KEYED_EXTRAS = ("output_rules", "input_rules")
"""Sections read by other components that are lists of rules with ids."""
_MERGED_FIELDS = ("rules", "tenants", "risk_tag_derivers")


def merge(base: PolicyDocument, fragments: Iterable[PolicyDocument]) -> PolicyDocument:
    """``base`` with ``fragments`` merged over it, in order; a new document."""
    values: dict[str, Any] = {name: getattr(base, name) for name in base.model_fields_set}
    values.update(base.model_extra or {})
    rules = list(base.rules)
    floor = {r.id for r in base.rules if r.id}
    floor_extras = {name: {i for i in map(_raw_id, values.get(name) or []) if i}
                    for name in _ID_KEYED_EXTRAS if isinstance(values.get(name), list)}
    tenants = dict(base.tenants)
    derivers = list(base.risk_tag_derivers)
    for fragment in fragments:
        rules = _by_id(rules, fragment.rules, lambda r: r.id, floor)
        for name, tenant in fragment.tenants.items():
            tenants[name] = _tenant(tenants[name], tenant) if name in tenants else tenant
        derivers.extend(fragment.risk_tag_derivers)
        for name in fragment.model_fields_set - set(_MERGED_FIELDS):
            values.setdefault(name, getattr(fragment, name))
        for name, value in (fragment.model_extra or {}).items():
            if name in _ID_KEYED_EXTRAS and isinstance(values.get(name), list) \
                    and isinstance(value, list):
                values[name] = _by_id(values[name], value, _raw_id,
                                      floor_extras.get(name, set()))
            elif values.get(name) is None:
                values[name] = value
    values.update(rules=rules, tenants=tenants, risk_tag_derivers=derivers)
    return PolicyDocument.model_validate(values)


def _by_id(first: list[Any], then: list[Any], id_of: Any, floor: set[str]) -> list[Any]:
    """``first`` followed by ``then``; an item of ``then`` whose id is already there
    takes that place instead, unless the id is one of the base's (``floor``)."""
    merged = list(first)
    index = {id_of(item): i for i, item in enumerate(merged) if id_of(item) is not None}
    for item in then:
        item_id = id_of(item)
        if item_id is not None and item_id in floor:
            log.warning("bundle rule %r left out: safety.yaml defines that id", item_id)
            continue
        if item_id is not None and item_id in index:
            merged[index[item_id]] = item
        else:
            if item_id is not None:
                index[item_id] = len(merged)
            merged.append(item)
    return merged


def _raw_id(item: Any) -> str | None:
    value = item.get("id") if isinstance(item, dict) else None
    return value if isinstance(value, str) and value else None


def _tenant(first: TenantPolicy, then: TenantPolicy) -> TenantPolicy:
    extras = {**(then.model_extra or {}), **(first.model_extra or {})}
    return TenantPolicy.model_validate({
        **extras,
        "allow_topics": _joined(first.allow_topics, then.allow_topics),
        "deny_topics": _joined(first.deny_topics, then.deny_topics),
    })


def _joined(first: list[str], then: list[str]) -> list[str]:
    return [*first, *(t for t in then if t not in first)]
