"""What the policy routes answer, built from what the store holds: bundle items, rules,
snapshot ids and summaries, audit pages. Pure functions of their arguments."""

from __future__ import annotations

import hashlib
import json
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
    """One ``items`` entry of the bundle list."""
    return {"id": bundle.id, "enabled": bundle.enabled, "source": bundle_source(bundle.id),
            "author": bundle.author, "message": bundle.message,
            "created_at": bundle.created_at or None, "updated_at": bundle.updated_at or None,
            "sha256": content_sha256(bundle.content), "rule_count": rule_count(bundle.content)}


def bundle_detail(bundle: Bundle) -> dict[str, Any]:
    """GET of one bundle: Cordum's fields, and the list item's (cordum-sdk reads both)."""
    return {**bundle_item(bundle), "content": bundle.content}


def bundle_list(doc: Mapping[str, Any] | None, bundles: Mapping[str, Bundle]) -> dict[str, Any]:
    """GET of the bundles: the raw map as stored, the items in id order, and when the
    document last changed (null when there is none)."""
    data = (doc or {}).get("data")
    raw = data.get("bundles") if isinstance(data, dict) else None
    updated = (doc or {}).get("updated_at")
    return {"bundles": raw if isinstance(raw, dict) else {},
            "items": [bundle_item(bundles[bid]) for bid in sorted(bundles)],
            "updated_at": updated if isinstance(updated, str) and updated else None}


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


def audit_page(entries: list[dict[str, Any]], *, limit: int, offset: int, action: str = "",
               rule_id: str = "", resource_type: str = "", search: str = "") -> dict[str, Any]:
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
    items = found[offset:offset + limit]
    return {"items": items, "total": len(found), "has_more": offset + len(items) < len(found),
            "offset": offset}
