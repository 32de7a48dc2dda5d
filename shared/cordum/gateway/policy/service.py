"""The system policy's bundles: read, change, snapshot, publish, roll back, audit.

Every change is read, worked out here, then committed in one step with the revision
it read (:mod:`cordum.gateway.policy.store`): a writer that lost the race gets 409
``POLICY_VERSION_CONFLICT`` and nothing is written. After a commit that changed the
bundles ``sys.config.changed`` is published; a publish that fails is logged, not
reported, because the kernels also poll the document's revision and pick the change
up within seconds.

Decisions (docs/http-api.md, "Policy governance"):

- A PUT of a new bundle stores a draft (``enabled: false``) unless the body says
  ``enabled: true``; publish puts drafts in force. A PUT without ``enabled`` keeps a
  bundle's state: an edit of a bundle in force is in force at once (as in Cordum),
  so a deny rule never lapses between an edit and a publish.
- A bundle's ``author`` and every audit entry's ``actor_id`` are the caller's key
  (its principal id); an ``author`` in a body is ignored.
- Publish and rollback snapshot the bundles before and after; a snapshot of the same
  bundles as the newest one is that one (no second slot spent). A rollback finds its
  snapshot before it takes any, so the one it restores cannot be evicted on the way.
- At most :data:`MAX_BUNDLES` bundles (409 beyond).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from cordum.gateway.core.errors import Conflict, InvalidRequest, NotFound, Unavailable
from cordum.gateway.policy import views
from cordum.gateway.policy.kernel import check_request, wire_answer
from cordum.gateway.policy.store import Commit
from cordum.safety.bundles import (
    CONFIG_CHANGED_SUBJECT,
    Bundle,
    BundleError,
    bundles_document,
    effective_policy,
    parse_bundles,
    validate_bundle,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from cordum.gateway.core.auth import Principal
    from cordum.gateway.policy.models import (
        BundleSimulate,
        BundleWrite,
        PublishRequest,
        RollbackRequest,
    )
    from cordum.gateway.policy.store import PolicyState, PolicyStore
    from cordum.safety.policy import SafetyPolicy

log = logging.getLogger(__name__)

MAX_BUNDLES = 100
"""Bundles the policy may hold; a PUT of one more is 409."""
MAX_BUNDLE_ID_CHARS = 128
BUNDLE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]*(/[A-Za-z0-9][A-Za-z0-9._:@-]*)*")
"""Segments of letters, digits and ``._:@-`` joined by ``/`` (no empty or dot segment)."""
RESERVED_IDS = ("snapshots",)
"""``/policy/bundles/snapshots`` is the snapshots' path, not a bundle's."""
RESOURCE_TYPE = "policy_bundle"
VALIDATION_FAILED = "POLICY_VALIDATION_FAILED"
VERSION_CONFLICT = "POLICY_VERSION_CONFLICT"


class ConfigNews(Protocol):
    """Where ``sys.config.changed`` goes (``cordum.bus.publisher.NatsPublisher``)."""

    async def publish_bytes(self, subject: str, data: bytes) -> None: ...


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
class _Change:
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


def _snapshot_fields(change: _Change, now: str, who: Principal, note: str,
                     bundle_ids: Sequence[str]) -> dict[str, Any]:
    """The snapshot in force after a publish or rollback, under the names cordum-sdk
    reads its answer with (a ``PolicySnapshot``): ``id`` is ``snapshot_after``."""
    return {"id": change.snapshot_after, "created_at": now, "author": who.principal_id,
            "note": note, "bundle_ids": list(bundle_ids)}


class PolicyService:
    def __init__(self, store: PolicyStore, news: ConfigNews, base_file: BaseFile,
                 clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._news = news
        self._base_file = base_file
        self._clock = clock

    # -- reads ----------------------------------------------------------------------

    async def bundles(self) -> dict[str, Any]:
        state = await self._store.read()
        return views.bundle_list(state.document, parse_bundles(state.document))

    async def bundle(self, bundle_id: str) -> dict[str, Any]:
        found = parse_bundles((await self._store.read()).document).get(bundle_id)
        if found is None:
            raise NotFound("bundle not found")
        return views.bundle_detail(found)

    async def rules(self, include_disabled: bool) -> dict[str, Any]:
        return views.rules(parse_bundles((await self._store.read()).document),
                           include_disabled)

    async def snapshots(self) -> dict[str, Any]:
        return {"items": [views.snapshot_summary(s) for s in await self._store.snapshots()]}

    async def snapshot(self, snapshot_id: str) -> dict[str, Any]:
        for snap in await self._store.snapshots():
            if snap.get("id") == snapshot_id:
                return snap
        raise NotFound("snapshot not found")

    async def audit(self, **filters: Any) -> views.AuditPage:
        return views.audit_page(await self._store.audit(), **filters)

    # -- changes ----------------------------------------------------------------------

    async def put_bundle(self, who: Principal, bundle_id: str, body: BundleWrite
                         ) -> dict[str, Any]:
        checked_id(bundle_id)
        validated(body.content)
        state = await self._store.read()
        bundles = parse_bundles(state.document)
        if bundle_id not in bundles and len(bundles) >= MAX_BUNDLES:
            raise Conflict(f"too many policy bundles (at most {MAX_BUNDLES})",
                           "too_many_policy_bundles")
        now = self._now()
        before = bundles.get(bundle_id)
        enabled = body.enabled if body.enabled is not None else bool(before and before.enabled)
        bundles[bundle_id] = Bundle(bundle_id, body.content, enabled=enabled,
                                    author=who.principal_id, message=body.message,
                                    created_at=before.created_at if before else now,
                                    updated_at=now)
        if enabled:
            self._check_combined(bundles, ())  # the content was validated above
        await self._commit(who, state, now, _Change("edit", bundle_id, bundles, (bundle_id,),
                                                    body.message))
        return {"id": bundle_id, "updated_at": now, "enabled": enabled}

    async def delete_bundle(self, who: Principal, bundle_id: str) -> None:
        state = await self._store.read()
        bundles = parse_bundles(state.document)
        if bundles.pop(bundle_id, None) is None:
            raise NotFound("bundle not found")
        await self._commit(who, state, self._now(),
                           _Change("delete", bundle_id, bundles, (bundle_id,)))

    async def take_snapshot(self, who: Principal, note: str) -> dict[str, Any]:
        state = await self._store.read()
        raw = views.raw_bundles(parse_bundles(state.document))
        if not raw:
            raise InvalidRequest("no policy bundles to snapshot", "no_policy_bundles")
        now = self._now()
        snap = views.snapshot(raw, now, note, who.principal_id)
        await self._commit(who, state, now, _Change(
            "snapshot", snap["id"], None, tuple(raw), note, snapshot_after=snap["id"],
            snapshots=(snap,)))
        return snap

    async def publish(self, who: Principal, body: PublishRequest) -> dict[str, Any]:
        state = await self._store.read()
        bundles = parse_bundles(state.document)
        targets = sorted(set(body.bundle_ids)) if body.bundle_ids else sorted(bundles)
        if not targets:
            raise InvalidRequest("no policy bundles to publish", "no_policy_bundles")
        missing = [bid for bid in targets if bid not in bundles]
        if missing:
            named = ", ".join(bid[:MAX_BUNDLE_ID_CHARS] for bid in missing[:5])
            raise NotFound(f"bundle not found: {named}", "bundle_not_found")
        now = self._now()
        after = dict(bundles)
        for bid in targets:
            after[bid] = replace(after[bid], enabled=True, updated_at=now,
                                 author=who.principal_id,
                                 message=body.message or after[bid].message)
        self._check_combined(after, targets)
        change = self._snapshotted("publish", "", state, bundles, after, now, body.note, who)
        await self._commit(who, state, now, replace(change, bundle_ids=tuple(targets),
                                                    message=body.message))
        return {"snapshot_before": change.snapshot_before,
                "snapshot_after": change.snapshot_after, "published": targets,
                **_snapshot_fields(change, now, who, body.note, sorted(after))}

    async def rollback(self, who: Principal, body: RollbackRequest) -> dict[str, Any]:
        # The target is found first: the snapshots taken below may evict it.
        target = await self.snapshot(body.snapshot_id)
        state = await self._store.read()
        bundles = parse_bundles(state.document)
        after = parse_bundles({"data": {"bundles": target.get("bundles") or {}}})
        self._check_combined(after, sorted(after))
        now = self._now()
        change = self._snapshotted("rollback", body.snapshot_id, state, bundles, after, now,
                                   body.note, who)
        await self._commit(who, state, now, replace(change, bundle_ids=tuple(sorted(after)),
                                                    message=body.message))
        return {"snapshot_before": change.snapshot_before,
                "snapshot_after": change.snapshot_after, "rollback_to": body.snapshot_id,
                **_snapshot_fields(change, now, who, body.note, sorted(after))}

    # -- simulation -----------------------------------------------------------------------

    async def simulate_bundle(self, who: Principal, bundle_id: str, body: BundleSimulate
                              ) -> dict[str, Any]:
        """What the kernel would answer ``body.request`` (as evaluate takes it) under the
        base file and the bundles, this one replaced by ``body.content`` and in force;
        evaluated here, counting no velocity window."""
        from cordum.safety.kernel_service import policy_input, to_response

        request = check_request(body.request, who)
        bundles = parse_bundles((await self._store.read()).document)
        current = bundles.get(bundle_id)
        if body.content is None and current is None:
            raise NotFound("bundle not found")
        content = body.content if body.content is not None else current.content  # type: ignore[union-attr]
        validated(content)
        bundles[bundle_id] = Bundle(bundle_id, content, enabled=True)
        policy = self._policy(bundles)
        if policy is None:
            raise BasePolicyUnavailable("the base policy file cannot be read")
        decision = policy.evaluate(policy_input(request), dry_run=True)
        return wire_answer(to_response(decision, request.job_id))

    # -- plumbing -----------------------------------------------------------------------

    def _now(self) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._clock()))

    def _policy(self, bundles: Mapping[str, Bundle]) -> SafetyPolicy | None:
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

    def _check_combined(self, bundles: Mapping[str, Bundle], touched: Sequence[str]) -> None:
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
        self._policy(bundles)

    def _snapshotted(self, action: str, resource_id: str, state: PolicyState,
                     before: Mapping[str, Bundle], after: dict[str, Bundle], now: str,
                     note: str, who: Principal) -> _Change:
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
        return _Change(action, resource_id, after, snapshot_before=first,
                       snapshot_after=second, snapshots=tuple(taken))

    async def _commit(self, who: Principal, state: PolicyState, now: str,
                      change: _Change) -> None:
        document = None
        revision = state.revision
        if change.bundles is not None:
            revision += 1
            document = bundles_document(change.bundles, revision=revision, updated_at=now)
        entry = {"id": f"{now}-{uuid.uuid4().hex[:12]}", "action": change.action,
                 "resource_type": RESOURCE_TYPE, "resource_id": change.resource_id,
                 "actor_id": who.principal_id, "actor_tenant": who.tenant, "role": who.role,
                 "bundle_ids": list(change.bundle_ids), "message": change.message,
                 "snapshot_before": change.snapshot_before,
                 "snapshot_after": change.snapshot_after, "revision": revision,
                 "created_at": now}
        if not await self._store.commit(state, Commit(entry, document, change.snapshots)):
            raise Conflict("the policy changed since it was read; read it again and retry",
                           VERSION_CONFLICT)
        if document is not None:
            await self._announce(revision, change.action)

    async def _announce(self, revision: int, action: str) -> None:
        import json

        news = json.dumps({"scope": "system", "scope_id": "policy", "revision": revision,
                           "action": action}, separators=(",", ":")).encode()
        try:
            await self._news.publish_bytes(CONFIG_CHANGED_SUBJECT, news)
        except Exception as exc:  # the kernels' revision poll picks the change up anyway
            log.warning("policy revision %d committed; %s not published: %s", revision,
                        CONFIG_CHANGED_SUBJECT, exc)
