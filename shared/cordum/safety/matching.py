"""A job as the input policy sees it (:class:`PolicyInput`), and how a rule's
``match`` and ``velocity.key`` are read against it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cordum.safety.fields import contains, first_glob
from cordum.safety.velocity import MISSING_KEY_PART

if TYPE_CHECKING:
    from cordum.safety.policy_document import Match


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


def mismatch(m: Match, req: PolicyInput, topic: str, tenant: str,
             risk_tags: tuple[str, ...]) -> str | None:
    """None when ``m`` matches; otherwise the first condition that failed."""
    if m.tenants and not contains(m.tenants, tenant):
        return f"tenant {tenant!r} not in {m.tenants}"
    if m.topics and first_glob(m.topics, topic) is None:
        return f"topic {topic!r} matches none of {m.topics}"
    if m.capabilities and not contains(m.capabilities, req.capability):
        return f"capability {req.capability!r} not in {m.capabilities}"
    if m.risk_tags and not any(contains(m.risk_tags, t) for t in risk_tags):
        return f"risk tags {list(risk_tags)} share none of {m.risk_tags}"
    if m.requires:
        missing = [r for r in m.requires if not contains(req.requires, r)]
        if missing:
            return f"requires {list(req.requires)} lacks {missing}"
    if m.pack_ids and not contains(m.pack_ids, req.pack_id):
        return f"pack_id {req.pack_id!r} not in {m.pack_ids}"
    if m.actor_ids and not contains(m.actor_ids, req.actor_id):
        return f"actor_id {req.actor_id!r} not in {m.actor_ids}"
    if m.actor_types and not contains(m.actor_types, req.actor_type):
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
        if key in labels and not contains(allowed, labels[key]):
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


def velocity_key(expr: str, req: PolicyInput, topic: str, tenant: str) -> str:
    """The window key of a ``velocity.key`` expression for ``req``."""
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
