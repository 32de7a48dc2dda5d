"""Working a policy change out: what a PUT, DELETE, publish or rollback does to the
bundles as they are, checked, with the snapshots it takes and the answer it gives, and
the policy the bundles make over the base file. Pure but for reading the base file;
:class:`~cordum.gateway.policy.service.PolicyService` reads the state, commits the
change or keeps it as a proposal.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cordum.gateway.core.errors import Conflict, InvalidRequest, NotFound, Unavailable
from cordum.gateway.policy import views
from cordum.safety.bundles import (
    Bundle,
    BundleError,
    effective_policy,
    parse_bundles,
    validate_bundle,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from cordum.gateway.core.auth import Principal
    from cordum.gateway.policy.proposals import ChangeRequest
    from cordum.gateway.policy.store import PolicyState
    from cordum.safety.policy import SafetyPolicy

log = logging.getLogger(__name__)

MAX_BUNDLES = 100
"""Bundles the policy may hold; a PUT of one more is 409."""
MAX_BUNDLE_ID_CHARS = 128
BUNDLE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]*(/[A-Za-z0-9][A-Za-z0-9._:@-]*)*")
"""Segments of letters, digits and ``._:@-`` joined by ``/`` (no empty or dot segment)."""
RESERVED_IDS = ("snapshots",)
"""``/policy/bundles/snapshots`` is the snapshots' path, not a bundle's."""
VALIDATION_FAILED = "POLICY_VALIDATION_FAILED"


BaseFile = Callable[[], tuple[bytes, str]]
"""Reads safety.yaml: its bytes and a name for them (raises OSError when it cannot)."""


class BasePolicyUnavailable(Unavailable):
    part = "policy-file"

    def __init__(self, reason: str) -> None:
        super().__init__(f"base policy unavailable: {reason}", "base_policy_unavailable")


def bundle_key(raw: str) -> str:
    """The bundle id a path names: ``~`` stands for ``/``."""
    return raw.replace("~", "/")


def checked_id(bundle_id: str) -> str:
    """``bundle_id`` when a bundle may be stored under it; 400 otherwise."""
    if (len(bundle_id) > MAX_BUNDLE_ID_CHARS or not BUNDLE_ID.fullmatch(bundle_id)
            or bundle_id in RESERVED_IDS):
        raise InvalidRequest(
            f"invalid bundle id: at most {MAX_BUNDLE_ID_CHARS} characters, segments of "
            "letters, digits and ._:@- joined by / (~ in a path), not 'snapshots'",
            "invalid_bundle_id")
    return bundle_id


def validated(content: str) -> None:
    """400 ``POLICY_VALIDATION_FAILED`` naming the line and the rule of the mistake."""
    try:
        validate_bundle(content)
    except BundleError as exc:
        raise InvalidRequest(f"invalid policy bundle: {exc}", VALIDATION_FAILED) from None


@dataclass(frozen=True, slots=True)
class Change:
    """What a change does: the bundles after it (None: unchanged), its audit facts and
    the snapshots it takes."""

    action: str
    resource_id: str
    bundles: dict[str, Bundle] | None
    bundle_ids: tuple[str, ...] = ()
    message: str = ""
    snapshot_before: str = ""
    snapshot_after: str = ""
    snapshots: tuple[dict[str, Any], ...] = ()
    proposal_id: str = ""
    confirmed_by: str = ""
    """Who confirmed a proposed change (two people); the actor is its author."""
    confirmer_key: str = ""


def snapshot_fields(change: Change, now: str, who: Principal, note: str,
                     bundle_ids: Sequence[str]) -> dict[str, Any]:
    """The snapshot in force after a publish or rollback, under the names cordum-sdk
    reads its answer with (a ``PolicySnapshot``): ``id`` is ``snapshot_after``."""
    return {"id": change.snapshot_after, "created_at": now, "author": who.principal_id,
            "note": note, "bundle_ids": list(bundle_ids)}


class ChangePlanner:
    """Works changes out against the base file ``base_file`` reads."""

    def __init__(self, base_file: BaseFile) -> None:
        self._base_file = base_file

    def plan(self, who: Principal, state: PolicyState, request: ChangeRequest, now: str,
             target: Mapping[str, Any] | None = None) -> tuple[Change, dict[str, Any]]:
        """What ``request`` by ``who`` does to the policy ``state``: the change and the
        answer. ``target``: the snapshot a rollback restores (found by the caller before
        any snapshot is taken, so none can evict it). Reads and writes nothing."""
        bundles = parse_bundles(state.document)
        if request.action == "edit":
            return self.plan_edit(who, bundles, request, now)
        if request.action == "delete":
            if bundles.pop(request.bundle_id, None) is None:
                raise NotFound("bundle not found")
            return Change("delete", request.bundle_id, bundles, (request.bundle_id,)), {}
        if request.action == "publish":
            return self.plan_publish(who, state, bundles, request, now)
        if request.action == "rollback":
            if target is None:
                raise NotFound("snapshot not found")
            after = parse_bundles({"data": {"bundles": target.get("bundles") or {}}})
            self.check_combined(after, sorted(after))
            change = self.snapshotted("rollback", request.snapshot_id, state, bundles,
                                       after, now, request.note, who)
            change = replace(change, bundle_ids=tuple(sorted(after)), message=request.message)
            return change, {"snapshot_before": change.snapshot_before,
                            "snapshot_after": change.snapshot_after,
                            "rollback_to": request.snapshot_id,
                            **snapshot_fields(change, now, who, request.note, sorted(after))}
        raise InvalidRequest(f"unknown policy change {request.action!r}")

    def plan_edit(self, who: Principal, bundles: dict[str, Bundle], request: ChangeRequest,
                   now: str) -> tuple[Change, dict[str, Any]]:
        bundle_id = request.bundle_id
        if bundle_id not in bundles and len(bundles) >= MAX_BUNDLES:
            raise Conflict(f"too many policy bundles (at most {MAX_BUNDLES})",
                           "too_many_policy_bundles")
        before = bundles.get(bundle_id)
        enabled = request.enabled if request.enabled is not None else \
            bool(before and before.enabled)
        bundles[bundle_id] = Bundle(bundle_id, request.content, enabled=enabled,
                                    author=who.principal_id, message=request.message,
                                    created_at=before.created_at if before else now,
                                    updated_at=now)
        if enabled:
            self.check_combined(bundles, ())  # the content was validated before
        return (Change("edit", bundle_id, bundles, (bundle_id,), request.message),
                {"id": bundle_id, "updated_at": now, "enabled": enabled})

    def plan_publish(self, who: Principal, state: PolicyState, bundles: dict[str, Bundle],
                      request: ChangeRequest, now: str) -> tuple[Change, dict[str, Any]]:
        targets = list(request.bundle_ids) or sorted(bundles)
        if not targets:
            raise InvalidRequest("no policy bundles to publish", "no_policy_bundles")
        missing = [bid for bid in targets if bid not in bundles]
        if missing:
            named = ", ".join(bid[:MAX_BUNDLE_ID_CHARS] for bid in missing[:5])
            raise NotFound(f"bundle not found: {named}", "bundle_not_found")
        after = dict(bundles)
        for bid in targets:
            after[bid] = replace(after[bid], enabled=True, updated_at=now,
                                 author=who.principal_id,
                                 message=request.message or after[bid].message)
        self.check_combined(after, targets)
        change = self.snapshotted("publish", "", state, bundles, after, now, request.note, who)
        change = replace(change, bundle_ids=tuple(targets), message=request.message)
        return change, {"snapshot_before": change.snapshot_before,
                        "snapshot_after": change.snapshot_after, "published": targets,
                        **snapshot_fields(change, now, who, request.note, sorted(after))}

    def policy(self, bundles: Mapping[str, Bundle]) -> SafetyPolicy | None:
        """The policy ``bundles`` make over the base file; None when the base cannot be
        read; 400 when they cannot be combined with it."""
        from cordum.safety.policy_file import PolicyError

        try:
            data, source = self._base_file()
        except OSError as exc:
            log.error("policy: base file not read: %s", exc)
            return None
        try:
            return effective_policy(data, source, bundles)
        except PolicyError as exc:
            log.error("policy: base file %s is not a policy: %s", source, exc)
            return None
        except ValueError as exc:  # the bundles merged do not make a valid document
            raise InvalidRequest(f"policy bundles do not combine: {exc}",
                                 VALIDATION_FAILED) from None

    def check_combined(self, bundles: Mapping[str, Bundle], touched: Sequence[str]) -> None:
        """400 when a ``touched`` bundle put in force is not valid, or the bundles in
        force would not combine into a policy. Other bundles are not judged again: the
        kernel skips a broken one, and it must not block every other change."""
        for bundle in (bundles[bid] for bid in touched):
            if bundle.enabled:
                try:
                    validate_bundle(bundle.content)
                except BundleError as exc:
                    raise InvalidRequest(f"invalid policy bundle {bundle.id}: {exc}",
                                         VALIDATION_FAILED) from None
        self.policy(bundles)

    def snapshotted(self, action: str, resource_id: str, state: PolicyState,
                     before: Mapping[str, Bundle], after: dict[str, Bundle], now: str,
                     note: str, who: Principal) -> Change:
        """A change of the bundles from ``before`` to ``after`` with a snapshot of each
        (the newest snapshot when it holds the same bundles; none of no bundles)."""
        taken: list[dict[str, Any]] = []
        newest = state.newest_snapshot

        def snap(bundles: Mapping[str, Bundle]) -> str:
            nonlocal newest
            raw = views.raw_bundles(bundles)
            if not raw:
                return ""
            if views.same_bundles(newest, raw):
                return str(newest["id"])  # type: ignore[index]
            newest = views.snapshot(raw, now, note, who.principal_id)
            taken.append(newest)
            return str(newest["id"])

        first = snap(before)
        second = snap(after)
        return Change(action, resource_id, after, snapshot_before=first,
                       snapshot_after=second, snapshots=tuple(taken))
