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
- At most :data:`~cordum.gateway.policy.changes.MAX_BUNDLES` bundles (409 beyond); how a
  change is worked out: :mod:`cordum.gateway.policy.changes`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from cordum.gateway.core.errors import Conflict, Forbidden, InvalidRequest, NotFound
from cordum.gateway.policy import proposals, views
from cordum.gateway.policy.changes import (
    BaseFile,
    BasePolicyUnavailable,
    Change,
    ChangePlanner,
    checked_id,
    validated,
)
from cordum.gateway.policy.kernel import check_request, wire_answer
from cordum.gateway.policy.proposals import PROPOSAL_FIELD, ChangeRequest
from cordum.gateway.policy.store import MAX_PROPOSALS, Commit
from cordum.safety.bundles import (
    CONFIG_CHANGED_SUBJECT,
    Bundle,
    bundles_document,
    parse_bundles,
)
from cordum.store.audit_trail import SYSTEM_TENANT, AuditTrail, governance

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cordum.gateway.core.auth import Principal
    from cordum.gateway.policy.models import (
        BundleSimulate,
        BundleWrite,
        PublishRequest,
        RollbackRequest,
    )
    from cordum.gateway.policy.store import PolicyState, PolicyStore
    from cordum.store.jobs import AuditParts

log = logging.getLogger(__name__)

RESOURCE_TYPE = "policy_bundle"
VERSION_CONFLICT = "POLICY_VERSION_CONFLICT"
PROPOSAL_STALE = "POLICY_PROPOSAL_STALE"


class ConfigNews(Protocol):
    """Where ``sys.config.changed`` goes (``cordum.bus.publisher.NatsPublisher``)."""

    async def publish_bytes(self, subject: str, data: bytes) -> None: ...


class PolicyService:
    def __init__(self, store: PolicyStore, news: ConfigNews, base_file: BaseFile,
                 clock: Callable[[], float] = time.time, *, two_person: bool = False,
                 audit: AuditTrail | None = None) -> None:
        self._store = store
        self._audit = audit
        self._two_person = two_person
        self._news = news
        self._planner = ChangePlanner(base_file)
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
        return await self._change(who, ChangeRequest(
            "edit", bundle_id=bundle_id, content=body.content, enabled=body.enabled,
            message=body.message))

    async def delete_bundle(self, who: Principal, bundle_id: str) -> dict[str, Any] | None:
        """None when deleted; the proposal when it waits for confirmation."""
        answer = await self._change(who, ChangeRequest("delete", bundle_id=bundle_id))
        return answer if PROPOSAL_FIELD in answer else None

    async def publish(self, who: Principal, body: PublishRequest) -> dict[str, Any]:
        return await self._change(who, ChangeRequest(
            "publish", bundle_ids=tuple(sorted(set(body.bundle_ids))), message=body.message,
            note=body.note))

    async def rollback(self, who: Principal, body: RollbackRequest) -> dict[str, Any]:
        return await self._change(who, ChangeRequest(
            "rollback", snapshot_id=body.snapshot_id, message=body.message, note=body.note))

    async def take_snapshot(self, who: Principal, note: str) -> dict[str, Any]:
        state = await self._store.read()
        raw = views.raw_bundles(parse_bundles(state.document))
        if not raw:
            raise InvalidRequest("no policy bundles to snapshot", "no_policy_bundles")
        now = self._now()
        snap = views.snapshot(raw, now, note, who.principal_id)
        await self._commit(who, state, now, Change(
            "snapshot", snap["id"], None, tuple(raw), note, snapshot_after=snap["id"],
            snapshots=(snap,)))
        return snap

    async def _plan(self, who: Principal, state: PolicyState, request: ChangeRequest,
                    now: str) -> tuple[Change, dict[str, Any]]:
        """:meth:`ChangePlanner.plan`, a rollback's snapshot found first (the snapshots
        the change takes may evict it)."""
        target = await self.snapshot(request.snapshot_id) if request.action == "rollback" \
            else None
        return self._planner.plan(who, state, request, now, target)

    async def _change(self, who: Principal, request: ChangeRequest) -> dict[str, Any]:
        """Work ``request`` out against the policy as it is, then commit it; or, with two
        people required and the bundles in force changed, keep it as a proposal."""
        state = await self._store.read()
        now = self._now()
        change, answer = await self._plan(who, state, request, now)
        before = parse_bundles(state.document)
        if self._two_person and change.bundles is not None and \
                proposals.in_force(before) != proposals.in_force(change.bundles):
            return await self._propose(who, state, request, change, now)
        await self._commit(who, state, now, change)
        return answer

    # -- two people for a change ------------------------------------------------------

    async def proposals(self) -> dict[str, Any]:
        """The changes waiting for confirmation, oldest first (expired ones left out)."""
        kept = await self._store.proposals()
        now = self._clock()
        return {"items": sorted((proposals.view(p) for p in kept.values()
                                 if not proposals.expired(p, now)),
                                key=lambda p: (p["proposed_at"], p["id"]))}

    async def proposal(self, proposal_id: str) -> dict[str, Any]:
        return proposals.view(await self._pending(proposal_id))

    async def confirm(self, who: Principal, proposal_id: str) -> dict[str, Any]:
        """Put a proposed change in force. The confirmer is another identity than the
        proposer (403 ``self_confirmation_denied``), and the policy is as the proposer
        read it (409 ``POLICY_PROPOSAL_STALE`` otherwise: the proposal is dropped)."""
        proposal = await self._pending(proposal_id)
        if proposals.self_confirmation(who, proposal):
            raise Forbidden("the author of a policy change cannot confirm it; another "
                            "identity must", "self_confirmation_denied")
        state = await self._store.read()
        if state.revision != proposal.get("base_revision") or \
                state.newest_snapshot_id != proposal.get("base_snapshot", ""):
            await self._store.drop_proposals(proposal_id)
            raise Conflict("the policy changed since this change was proposed; propose it "
                           "again", PROPOSAL_STALE)
        author = proposals.author(proposal)
        now = self._now()
        change, answer = await self._plan(author, state, proposals.request(proposal), now)
        if change.bundles is None or \
                proposals.in_force_digest(change.bundles) != proposal.get("in_force_digest"):
            # The same request on the same revision: not expected, and never applied.
            await self._store.drop_proposals(proposal_id)
            raise Conflict("this change no longer puts in force what was proposed; propose "
                           "it again", PROPOSAL_STALE)
        await self._commit(author, state, now, replace(
            change, confirmed_by=who.principal_id, confirmer_key=who.key_id,
            proposal_id=proposal_id))
        await self._store.drop_proposals(proposal_id)
        return {**answer, "proposal_id": proposal_id, "proposed_by": author.principal_id,
                "confirmed_by": who.principal_id}

    async def reject(self, who: Principal, proposal_id: str, reason: str) -> dict[str, Any]:
        """Drop a proposed change (its author may withdraw it); audited."""
        proposal = await self._pending(proposal_id)
        state = await self._store.read()
        await self._commit(who, state, self._now(), Change(
            "reject_proposal", proposal_id, None, tuple(proposal.get("bundle_ids") or ()),
            reason, proposal_id=proposal_id))
        await self._store.drop_proposals(proposal_id)
        return {"id": proposal_id, "state": "rejected", "rejected_by": who.principal_id}

    async def _pending(self, proposal_id: str) -> dict[str, Any]:
        found = (await self._store.proposals()).get(proposal_id)
        if found is None or proposals.expired(found, self._clock()):
            raise NotFound("policy change proposal not found", "proposal_not_found")
        return found

    async def _propose(self, who: Principal, state: PolicyState, request: ChangeRequest,
                       change: Change, now: str) -> dict[str, Any]:
        kept = await self._store.proposals()
        expired = [pid for pid, p in kept.items() if proposals.expired(p, self._clock())]
        assert change.bundles is not None  # _change proposes only a change of the bundles
        proposal = proposals.new(who, state, request, change.bundles, change.bundle_ids, now,
                                 self._clock())
        entry = self._audit_entry(who, now, state.revision, Change(
            "propose", proposal["id"], None, tuple(proposal["bundle_ids"]), request.message,
            proposal_id=proposal["id"]))
        entry["proposed_action"] = request.action
        outcome = await self._store.propose(state, proposal, entry, expired,
                                            self._chain_event(who, entry))
        if outcome == "conflict":
            raise Conflict("the policy changed since it was read; read it again and retry",
                           VERSION_CONFLICT)
        if outcome == "full":
            raise Conflict(f"{MAX_PROPOSALS} policy changes already wait for confirmation; "
                           "confirm or reject one first", "too_many_policy_proposals")
        return {PROPOSAL_FIELD: proposals.view(proposal), "status": "pending_confirmation"}

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
        policy = self._planner.policy(bundles)
        if policy is None:
            raise BasePolicyUnavailable("the base policy file cannot be read")
        decision = policy.evaluate(policy_input(request), dry_run=True)
        return wire_answer(to_response(decision, request.job_id))

    # -- plumbing -----------------------------------------------------------------------

    def _now(self) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._clock()))

    async def _commit(self, who: Principal, state: PolicyState, now: str,
                      change: Change) -> None:
        document = None
        revision = state.revision
        if change.bundles is not None:
            revision += 1
            document = bundles_document(change.bundles, revision=revision, updated_at=now)
        entry = self._audit_entry(who, now, revision, change)
        chain = self._chain_event(who, entry, confirmer_key=change.confirmer_key)
        if not await self._store.commit(state, Commit(entry, document, change.snapshots,
                                                      chain)):
            raise Conflict("the policy changed since it was read; read it again and retry",
                           VERSION_CONFLICT)
        if document is not None:
            await self._announce(revision, change.action)

    def _chain_event(self, who: Principal, entry: Mapping[str, Any], *,
                     confirmer_key: str = "") -> AuditParts | None:
        """The change's event in the system audit chain (tenant ``*``: the policy governs
        every tenant), committed by the change's own script. The actor is the key that
        made the change take effect: a proposal's confirmer, else the caller."""
        if self._audit is None:
            return None
        confirmed_by = str(entry.get("confirmed_by") or "")
        extra = {k: entry[k] for k in ("resource_id", "bundle_ids", "revision", "proposal_id",
                                       "proposed_action") if entry.get(k) not in (None, "")}
        if confirmed_by:
            extra["proposed_by"] = who.principal_id
        event = governance(
            f"policy.{entry['action']}", SYSTEM_TENANT, confirmed_by or who.principal_id,
            confirmer_key if confirmed_by else who.key_id,
            reason=str(entry.get("message") or "") or None,
            snapshot={"before": entry.get("snapshot_before", ""),
                      "after": entry.get("snapshot_after", "")},
            extra=extra)
        return self._audit.script_parts(event)

    @staticmethod
    def _audit_entry(who: Principal, now: str, revision: int, change: Change
                     ) -> dict[str, Any]:
        entry = {"id": f"{now}-{uuid.uuid4().hex[:12]}", "action": change.action,
                 "resource_type": RESOURCE_TYPE, "resource_id": change.resource_id,
                 "actor_id": who.principal_id, "actor_tenant": who.tenant, "role": who.role,
                 "bundle_ids": list(change.bundle_ids), "message": change.message,
                 "snapshot_before": change.snapshot_before,
                 "snapshot_after": change.snapshot_after, "revision": revision,
                 "created_at": now}
        if change.proposal_id:
            entry["proposal_id"] = change.proposal_id
        if change.confirmed_by:
            entry["confirmed_by"] = change.confirmed_by
        return entry

    async def _announce(self, revision: int, action: str) -> None:
        import json

        news = json.dumps({"scope": "system", "scope_id": "policy", "revision": revision,
                           "action": action}, separators=(",", ":")).encode()
        try:
            await self._news.publish_bytes(CONFIG_CHANGED_SUBJECT, news)
        except Exception as exc:  # the kernels' revision poll picks the change up anyway
            log.warning("policy revision %d committed; %s not published: %s", revision,
                        CONFIG_CHANGED_SUBJECT, exc)
