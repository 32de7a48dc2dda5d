"""What the policy routes answer, built from what the store holds: bundle items, rules,
snapshot ids and summaries, audit pages. Pure functions of their arguments."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cordum.safety.bundles import Bundle

SECOPS_PREFIX = "secops/"


def bundle_source(bundle_id: str) -> str:
    """Cordum's names: ``secops/*`` is secops, any other id with a ``/`` a pack's, else core."""
    if bundle_id.startswith(SECOPS_PREFIX):
        return "secops"
    return "pack" if "/" in bundle_id else "core"


def content_sha256(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def _yaml_rules(content: str) -> list[Any] | None:
    """The top-level ``rules`` of a bundle's YAML; None when it is not readable YAML."""
    import yaml

    # libyaml's loader when the build has it: a list of 100 bundles is read per request.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        doc = yaml.load(content, Loader=loader)
    except yaml.YAMLError:
        return None
    if doc is None:
        return []
    if not isinstance(doc, dict):
        return None
    rules = doc.get("rules")
    return rules if isinstance(rules, list) else []


def rule_count(content: str) -> int:
    """How many top-level ``rules`` the bundle has (0 when it cannot be read)."""
    return len(_yaml_rules(content) or [])


def bundle_item(bundle: Bundle) -> dict[str, Any]:
    """One ``items`` entry of the bundle list. A time the bundle does not have is left
    out, not null: cordum-sdk parses any value it finds as a time."""
    item = {"id": bundle.id, "enabled": bundle.enabled, "source": bundle_source(bundle.id),
            "author": bundle.author, "message": bundle.message,
            "sha256": content_sha256(bundle.content), "rule_count": rule_count(bundle.content)}
    for name in ("created_at", "updated_at"):
        if value := getattr(bundle, name):
            item[name] = value
    return item


def bundle_detail(bundle: Bundle) -> dict[str, Any]:
    """GET of one bundle: Cordum's fields, and the list item's (cordum-sdk reads both)."""
    return {**bundle_item(bundle), "content": bundle.content}


def bundle_list(doc: Mapping[str, Any] | None, bundles: Mapping[str, Bundle]) -> dict[str, Any]:
    """GET of the bundles, in id order: ``items`` (the summaries), ``bundles`` (the same
    with each bundle's content) and when the document last changed (left out when no
    bundle was ever written).

    Cordum's server answers ``bundles`` as its stored map (id -> bundle); cordum-sdk
    reads a list of summaries there and fails on the map. A list whose entries carry
    the id and every stored field reads in both (docs/http-api.md, "cordum-sdk")."""
    out: dict[str, Any] = {
        "bundles": [bundle_detail(bundles[bid]) for bid in sorted(bundles)],
        "items": [bundle_item(bundles[bid]) for bid in sorted(bundles)]}
    updated = (doc or {}).get("updated_at")
    if isinstance(updated, str) and updated:
        out["updated_at"] = updated
    return out


def rules(bundles: Mapping[str, Bundle], include_disabled: bool) -> dict[str, Any]:
    """Every rule of the bundles (disabled bundles' only when asked), each with the bundle
    it comes from; ``errors`` names the bundles whose YAML cannot be read."""
    items: list[dict[str, Any]] = []
    errors: list[dict[str, str]] = []
    for bid in sorted(bundles):
        bundle = bundles[bid]
        if not bundle.enabled and not include_disabled:
            continue
        found = _yaml_rules(bundle.content)
        if found is None:
            errors.append({"fragment_id": bid, "error": "bundle content is not a YAML mapping"})
            continue
        source = {"bundle_id": bid, "fragment_id": bid, "enabled": bundle.enabled,
                  "sha256": content_sha256(bundle.content)}
        for rule in found:
            if isinstance(rule, dict):
                items.append({**_plain(rule), "source": source})
    out: dict[str, Any] = {"items": items}
    if errors:
        out["errors"] = errors
    return out


def _plain(value: Any) -> Any:
    """A YAML value as JSON can carry it (dates and other scalars become text)."""
    return json.loads(json.dumps(value, default=str))


def canonical_json(value: Any) -> str:
    """Sorted keys, compact separators: the bytes a snapshot's id hashes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def raw_bundles(bundles: Mapping[str, Bundle]) -> dict[str, dict[str, Any]]:
    """The bundles as ``data.bundles`` holds them."""
    return {bid: bundles[bid].to_json() for bid in sorted(bundles)}


def bundles_digest(raw: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(raw).encode()).hexdigest()


def snapshot(raw: Mapping[str, Any], created_at: str, note: str, author: str) -> dict[str, Any]:
    """A snapshot of the bundles map ``raw``: id ``<created_at>-<sha256 of its canonical
    JSON, 10 hex>``."""
    return {"id": f"{created_at}-{bundles_digest(raw)[:10]}", "created_at": created_at,
            "note": note, "author": author, "bundle_ids": sorted(raw),
            "bundles": dict(raw)}


def snapshot_summary(snap: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": snap.get("id", ""), "created_at": snap.get("created_at", ""),
            "note": snap.get("note", ""), "author": snap.get("author", ""),
            "bundle_ids": snap.get("bundle_ids") or sorted(snap.get("bundles") or {})}


def same_bundles(snap: Mapping[str, Any] | None, raw: Mapping[str, Any]) -> bool:
    """Whether ``snap`` holds exactly the bundles map ``raw``."""
    return snap is not None and bundles_digest(snap.get("bundles") or {}) == bundles_digest(raw)


AUDIT_SEARCHED = ("action", "resource_id", "actor_id", "message", "snapshot_before",
                  "snapshot_after")


@dataclass(frozen=True, slots=True)
class AuditPage:
    """A page of the policy audit: its entries and how many passed the filters."""

    items: list[dict[str, Any]]
    total: int
    offset: int

    @property
    def has_more(self) -> bool:
        return self.offset + len(self.items) < self.total


def audit_item(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An audit entry as stored, with the names cordum-sdk reads beside Cordum's:
    ``author`` (the actor), ``timestamp`` (created_at), ``bundle_id`` (the bundle
    changed, else the first of its bundles) and ``snapshot_id`` (the snapshot after)."""
    bundle_ids = entry.get("bundle_ids") or []
    bundle_id = (entry.get("resource_id") if entry.get("resource_type") == "policy_bundle"
                 else None) or (bundle_ids[0] if bundle_ids else None)
    item = {**entry, "author": entry.get("actor_id", ""), "bundle_id": bundle_id,
            "snapshot_id": entry.get("snapshot_after") or None}
    if entry.get("created_at"):
        item["timestamp"] = entry["created_at"]
    return item


def audit_page(entries: list[dict[str, Any]], *, limit: int, offset: int, action: str = "",
               rule_id: str = "", resource_type: str = "", search: str = "") -> AuditPage:
    """Entries (newest first) that pass every filter given, ``limit`` from ``offset``.
    ``rule_id`` is a bundle or snapshot id: the entry's resource or one of its bundles."""
    needle = search.lower()

    def kept(entry: dict[str, Any]) -> bool:
        if action and entry.get("action") != action:
            return False
        if resource_type and entry.get("resource_type") != resource_type:
            return False
        if rule_id and rule_id != entry.get("resource_id") and \
                rule_id not in (entry.get("bundle_ids") or []):
            return False
        if needle:
            text = " ".join([*(str(entry.get(k) or "") for k in AUDIT_SEARCHED),
                             *(str(b) for b in entry.get("bundle_ids") or [])])
            return needle in text.lower()
        return True

    found = [e for e in entries if kept(e)]
    return AuditPage([audit_item(e) for e in found[offset:offset + limit]], len(found), offset)
