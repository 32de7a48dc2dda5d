"""Policy bundles: YAML fragments kept in Redis and merged over safety.yaml.

Cordum's layout, shared by the gateway's bundle routes (which write it) and the
safety kernel (which reads it):

- :data:`POLICY_DOC_KEY` holds one JSON document
  ``{"scope": "system", "scope_id": "policy", "data": {"bundles": {<id>: <bundle>}},
  "revision": <int>, "updated_at": <RFC3339>}``; a bundle is
  ``{"content": <YAML>, "enabled": bool, "author", "message", "created_at",
  "updated_at"}``, or a plain YAML string (enabled).
- After any change the writer publishes on :data:`CONFIG_CHANGED_SUBJECT`; kernels
  also poll the document's revision, so a lost message delays a change, never loses it.

The policy in force (:func:`effective_policy`) is the base file, then every enabled
bundle in id order. ``rules`` are concatenated (a bundle rule whose id an earlier
rule already used replaces that rule where it stands); ``tenants`` and
``risk_tag_derivers`` are merged the same way by name / position; other top-level
keys keep the base's value unless the base leaves them unset. How the merged rules
decide (deny over allow, wherever each comes from): :mod:`cordum.safety.policy`.

The snapshot names both parts: ``<base snapshot>|cfg:<hash of the bundles>``, or the
base snapshot alone when no bundle is enabled.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from cordum.safety.bundle_merge import merge
from cordum.safety.output_policy import parse_output_policy
from cordum.safety.policy import SafetyPolicy
from cordum.safety.policy_document import PolicyDocument
from cordum.safety.policy_file import PolicyError, parse_policy

log = logging.getLogger("cordum.safety.kernel")

POLICY_DOC_KEY = "cfg:system:policy"
"""Redis key of the JSON document holding every bundle."""
CONFIG_CHANGED_SUBJECT = "sys.config.changed"
"""NATS subject published after any bundle change (body: informational only)."""
POLICY_DOC_SCOPE = "system"
POLICY_DOC_SCOPE_ID = "policy"
BUNDLES_HASH_PREFIX = "cfg:"
"""Prefix of :func:`bundles_hash`; the part of a snapshot after ``|``."""
SNAPSHOT_SEPARATOR = "|"
"""Between the base file's snapshot and the bundles' hash in a combined snapshot."""


@dataclass(frozen=True)
class Bundle:
    """One bundle of :data:`POLICY_DOC_KEY` (``data.bundles.<id>``)."""

    id: str
    """The key in ``data.bundles`` (``secops/…`` for bundles written by operators)."""
    content: str
    """The YAML text: the same sections as safety.yaml (``rules``, ``tenants``…)."""
    enabled: bool = True
    """Disabled bundles are kept but take no part in the policy."""
    author: str = ""
    message: str = ""
    created_at: str = ""
    """RFC3339, as written by the gateway; empty when unknown."""
    updated_at: str = ""

    def to_json(self) -> dict[str, Any]:
        """The bundle as a value of ``data.bundles`` (without its id)."""
        return {"content": self.content, "enabled": self.enabled, "author": self.author,
                "message": self.message, "created_at": self.created_at,
                "updated_at": self.updated_at}


def bundles_document(bundles: Mapping[str, Bundle], *, revision: int,
                     updated_at: str) -> dict[str, Any]:
    """The :data:`POLICY_DOC_KEY` document holding ``bundles`` (what a writer SETs)."""
    return {"scope": POLICY_DOC_SCOPE, "scope_id": POLICY_DOC_SCOPE_ID,
            "data": {"bundles": {bid: b.to_json() for bid, b in sorted(bundles.items())}},
            "revision": revision, "updated_at": updated_at}


class BundleError(ValueError):
    """A bundle's YAML is not a valid policy fragment.

    ``line`` is the 1-based line of the offending YAML (None when no line can be
    named); ``rule_id`` the ``id`` of the rule it is in, if any.
    """

    def __init__(self, message: str, *, line: int | None = None,
                 rule_id: str | None = None) -> None:
        self.message = message
        self.line = line
        self.rule_id = rule_id
        where = []
        if line is not None:
            where.append(f"line {line}")
        if rule_id is not None:
            where.append(f"rule {rule_id!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


def parse_bundles(doc: Mapping[str, Any] | None) -> dict[str, Bundle]:
    """The bundles of a :data:`POLICY_DOC_KEY` document (``{}`` for None or a document
    without bundles). A value that is neither a mapping nor a string is skipped with
    a log line: it cannot be a policy."""
    data = doc.get("data") if isinstance(doc, Mapping) else None
    raw = data.get("bundles") if isinstance(data, Mapping) else None
    if not isinstance(raw, Mapping):
        return {}
    bundles: dict[str, Bundle] = {}
    for bundle_id, value in raw.items():
        bid = str(bundle_id)
        if isinstance(value, str):
            # Cordum's older form: the YAML alone, live.
            bundles[bid] = Bundle(bid, value)
        elif isinstance(value, Mapping):
            bundles[bid] = Bundle(
                bid, _text(value.get("content")),
                enabled=value.get("enabled", True) is not False,
                author=_text(value.get("author")), message=_text(value.get("message")),
                created_at=_text(value.get("created_at")),
                updated_at=_text(value.get("updated_at")))
        else:
            log.error("policy bundle %r: not a mapping or YAML text (%s), skipped",
                      bid, type(value).__name__)
    return bundles


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def validate_bundle(content: str) -> PolicyDocument:
    """``content`` parsed with safety.yaml's models; :class:`BundleError` naming the
    line and rule otherwise. An empty bundle is a valid empty document."""
    import yaml  # only the processes that read policies pay for it

    try:
        raw = yaml.safe_load(content) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise BundleError(f"not valid YAML: {getattr(exc, 'problem', None) or exc}",
                          line=mark.line + 1 if mark is not None else None) from exc
    if not isinstance(raw, dict):
        raise BundleError(f"must be a mapping, got {type(raw).__name__}", line=1)
    locate = _Locator(content)
    _check_unique_ids(raw, "rules", locate)
    _check_unique_ids(raw, "output_rules", locate)
    try:
        document = PolicyDocument.model_validate(raw)
        # The output sections are the output service's; a bundle that breaks them
        # would leave that service on its last good policy, so refuse it here.
        parse_output_policy(dict(document.model_extra or {}), "", "bundle")
    except (ValidationError, PolicyError) as exc:
        cause = exc if isinstance(exc, ValidationError) else exc.__cause__
        if not isinstance(cause, ValidationError):
            raise BundleError(str(exc)) from exc
        err = cause.errors()[0]
        loc = tuple(err["loc"])
        raise BundleError(f"{_path(loc)}: {err['msg']}", line=locate.line(loc),
                          rule_id=_rule_id(raw, loc)) from exc
    return document


def _check_unique_ids(raw: dict[str, Any], section: str, locate: _Locator) -> None:
    # The models' own check names the id but not where it is used the second time.
    rules = raw.get(section)
    if not isinstance(rules, list):
        return
    seen: set[str] = set()
    for index, rule in enumerate(rules):
        rule_id = rule.get("id") if isinstance(rule, dict) else None
        if not isinstance(rule_id, str):
            continue
        if rule_id in seen:
            raise BundleError(f"{section}[{index}].id: duplicate rule id {rule_id!r}",
                              line=locate.line((section, index, "id")), rule_id=rule_id)
        seen.add(rule_id)


def _path(loc: tuple[Any, ...]) -> str:
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return text or "(top level)"


def _rule_id(raw: dict[str, Any], loc: tuple[Any, ...]) -> str | None:
    """The ``id`` of the rule ``loc`` points into (``rules[i]…``), if it has one."""
    if len(loc) < 2 or loc[0] not in _RULE_SECTIONS or not isinstance(loc[1], int):
        return None
    rules = raw.get(loc[0])
    rule = rules[loc[1]] if isinstance(rules, list) and loc[1] < len(rules) else None
    rule_id = rule.get("id") if isinstance(rule, dict) else None
    return str(rule_id) if rule_id not in (None, "") else None


_RULE_SECTIONS = ("rules", "output_rules", "input_rules")


class _Locator:
    """Lines of a YAML text's nodes, found by the path pydantic reports.

    The text is composed (not constructed) lazily, only when an error needs a line.
    """

    def __init__(self, content: str) -> None:
        self._content = content

    def line(self, loc: tuple[Any, ...]) -> int | None:
        """1-based line of the deepest node ``loc`` reaches (a missing key: its parent)."""
        import yaml

        try:
            node = yaml.compose(self._content)
        except yaml.YAMLError:
            return None
        if node is None:
            return None
        line = node.start_mark.line + 1
        for part in loc:
            found = _child(node, part)
            if found is None:
                break
            key_line, node = found
            line = key_line
        return line


def _child(node: Any, part: Any) -> tuple[int, Any] | None:
    """(line, node) of ``node``'s entry ``part``: the key's line for a mapping."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                return key.start_mark.line + 1, value
        return None
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int):
        if 0 <= part < len(node.value):
            item = node.value[part]
            return item.start_mark.line + 1, item
    return None


def bundles_hash(bundles: Mapping[str, Bundle]) -> str:
    """``cfg:<16 hex>``: sha256 over ``id\\0content\\0`` of each enabled bundle in id
    order; ``""`` when none is enabled."""
    enabled = sorted((b.id, b.content) for b in bundles.values() if b.enabled)
    if not enabled:
        return ""
    digest = hashlib.sha256()
    for bundle_id, content in enabled:
        # The NUL after the content too: ("a", "bc") and ("ab", "c") must differ, and
        # so must one bundle's end and the next one's start.
        digest.update(bundle_id.encode() + b"\0" + content.encode() + b"\0")
    return BUNDLES_HASH_PREFIX + digest.hexdigest()[:16]


def combined_snapshot(base_snapshot: str, bundles: Mapping[str, Bundle]) -> str:
    """``<base>|cfg:<hex>``, or ``base_snapshot`` when no bundle is enabled."""
    digest = bundles_hash(bundles)
    return f"{base_snapshot}{SNAPSHOT_SEPARATOR}{digest}" if digest else base_snapshot


def base_snapshot_of(snapshot: str) -> str:
    """The base file's part of a (combined) snapshot."""
    return snapshot.split(SNAPSHOT_SEPARATOR, 1)[0]


def merge_documents(base: PolicyDocument,
                    fragments: list[tuple[str, PolicyDocument]]) -> PolicyDocument:
    """``base`` with each ``(bundle id, document)`` merged over it in the given order."""
    return merge(base, [doc for _, doc in fragments])


def effective_policy(base_data: bytes, base_source: str,
                     bundles: Mapping[str, Bundle]) -> SafetyPolicy:
    """The policy in force: safety.yaml's bytes (``base_source`` names them in errors;
    a bad base raises PolicyError) merged with the enabled, valid ``bundles`` in id
    order. An invalid bundle is skipped with a log line."""
    return with_bundles(parse_policy(base_data, base_source), bundles)


def with_bundles(base: SafetyPolicy, bundles: Mapping[str, Bundle]) -> SafetyPolicy:
    """:func:`effective_policy` over a base already parsed (the kernel keeps one)."""
    fragments: list[tuple[str, PolicyDocument]] = []
    for bundle_id in sorted(bundles):
        bundle = bundles[bundle_id]
        if not bundle.enabled:
            continue
        try:
            fragments.append((bundle_id, validate_bundle(bundle.content)))
        except BundleError as exc:
            # The PUT route refuses such a bundle; one written past it (by hand, by an
            # older gateway) must not take the others down with it.
            log.error("policy bundle %r skipped: %s", bundle_id, exc)
    if not fragments:
        # Still the combined snapshot: a change to a disabled-or-broken set is a change.
        return SafetyPolicy(base.document, combined_snapshot(base.snapshot, bundles),
                            base.source)
    return SafetyPolicy(merge_documents(base.document, fragments),
                        combined_snapshot(base.snapshot, bundles), base.source)
