"""Two people for a policy change (``CORDUM_POLICY_TWO_PERSON``): what a proposal holds
and how it is judged. Pure functions; :class:`~cordum.gateway.policy.service.PolicyService`
keeps and applies them.

A change that alters the bundles *in force* (the enabled bundles' ids and contents:
:func:`in_force`) is kept as a proposal instead of committed: a publish, a rollback,
a PUT of an enabled bundle or with ``enabled: true``, a DELETE of an enabled bundle.
Drafts (disabled bundles) and snapshots change nothing in force and need no second
person. A proposal holds the request, not its result, with the revision and the
newest snapshot the proposer read; confirming re-plans the request as its author on a
policy that must still be that revision, so what comes into force is exactly what
was proposed (:func:`in_force_digest` is checked again). The confirmer must be another
identity than the author, as for approvals; a key without a principal id can confirm
nothing. A proposal lives :data:`PROPOSAL_TTL_S`.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from cordum.gateway.core.auth import Principal

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cordum.gateway.policy.store import PolicyState
    from cordum.safety.bundles import Bundle

PROPOSAL_FIELD = "proposal"
"""The key of a change's answer when it waits for confirmation (HTTP 202)."""
PROPOSAL_TTL_S = 24 * 3600
"""How long a proposal waits for its confirmation before it lapses."""
CHANGE_ACTIONS = ("edit", "delete", "publish", "rollback")


@dataclass(frozen=True, slots=True)
class ChangeRequest:
    """What a caller asked to change: enough to work the change out again."""

    action: str
    bundle_id: str = ""
    content: str = ""
    enabled: bool | None = None
    message: str = ""
    note: str = ""
    bundle_ids: tuple[str, ...] = ()
    snapshot_id: str = ""


def in_force(bundles: Mapping[str, Bundle]) -> dict[str, str]:
    """The bundles that govern: id -> content of every enabled bundle."""
    return {bid: b.content for bid, b in sorted(bundles.items()) if b.enabled}


def in_force_digest(bundles: Mapping[str, Bundle]) -> str:
    raw = json.dumps(in_force(bundles), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()


def new(who: Principal, state: PolicyState, request: ChangeRequest,
        bundles_after: Mapping[str, Bundle], bundle_ids: tuple[str, ...], now: str,
        clock_s: float) -> dict[str, Any]:
    """A proposal of ``request`` by ``who`` on the policy ``state``, which would leave
    ``bundles_after`` (changing ``bundle_ids``)."""
    return {
        "id": f"prop-{uuid.uuid4().hex[:16]}",
        "request": {**asdict(request), "bundle_ids": list(request.bundle_ids)},
        "action": request.action,
        "bundle_ids": list(bundle_ids) or ([request.bundle_id] if request.bundle_id else []),
        "message": request.message,
        "proposed_by": who.principal_id,
        "proposer_tenant": who.tenant,
        "proposer_role": who.role,
        "proposed_at": now,
        "expires_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                    time.gmtime(clock_s + PROPOSAL_TTL_S)),
        "expires_at_s": int(clock_s + PROPOSAL_TTL_S),
        "base_revision": state.revision,
        "base_snapshot": state.newest_snapshot_id,
        "in_force_digest": in_force_digest(bundles_after),
    }


def view(proposal: Mapping[str, Any]) -> dict[str, Any]:
    """A proposal as the API shows it: no bundle content (GET the bundle for that)."""
    request = proposal.get("request") or {}
    return {
        "id": proposal.get("id", ""), "action": proposal.get("action", ""),
        "bundle_ids": list(proposal.get("bundle_ids") or []),
        "snapshot_id": request.get("snapshot_id") or None,
        "enabled": request.get("enabled"),
        "content_sha256": hashlib.sha256(str(request.get("content", "")).encode()).hexdigest()
        if proposal.get("action") == "edit" else None,
        "message": proposal.get("message", ""), "note": request.get("note", ""),
        "proposed_by": proposal.get("proposed_by", ""),
        "proposed_at": proposal.get("proposed_at", ""),
        "expires_at": proposal.get("expires_at", ""),
        "base_revision": proposal.get("base_revision", 0),
        "state": "pending_confirmation",
    }


def expired(proposal: Mapping[str, Any], clock_s: float) -> bool:
    expires = proposal.get("expires_at_s")
    return not isinstance(expires, int | float) or clock_s >= expires


def self_confirmation(who: Principal, proposal: Mapping[str, Any]) -> bool:
    """Whether ``who`` may not confirm ``proposal``: it wrote it, or it has no name (and
    so could be anyone, the author included)."""
    return not who.principal_id or who.principal_id == proposal.get("proposed_by", "")


def author(proposal: Mapping[str, Any]) -> Principal:
    """The proposer, as the change is made in its name (bundles' author, audit actor)."""
    return Principal(tenant=str(proposal.get("proposer_tenant", "")),
                     role=str(proposal.get("proposer_role", "")),
                     principal_id=str(proposal.get("proposed_by", "")))


def request(proposal: Mapping[str, Any]) -> ChangeRequest:
    raw = proposal.get("request") or {}
    action = raw.get("action", "")
    if action not in CHANGE_ACTIONS:
        raise ValueError(f"policy proposal {proposal.get('id')}: unknown action {action!r}")
    enabled = raw.get("enabled")
    return ChangeRequest(
        action=action, bundle_id=str(raw.get("bundle_id", "")),
        content=str(raw.get("content", "")),
        enabled=enabled if isinstance(enabled, bool) else None,
        message=str(raw.get("message", "")), note=str(raw.get("note", "")),
        bundle_ids=tuple(str(b) for b in raw.get("bundle_ids") or ()),
        snapshot_id=str(raw.get("snapshot_id", "")))
