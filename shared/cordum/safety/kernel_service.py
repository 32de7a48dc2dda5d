"""CAP's SafetyKernel gRPC service, answering from the policy in force: a hot-reloaded
safety.yaml merged with the policy bundles (:mod:`cordum.safety.live_policy`).

- ``Check`` / ``Evaluate``: the decision; velocity windows count the request.
- ``Simulate``: the same decision without side effects (velocity is looked at, not
  counted; nothing is cached).
- ``Explain``: like Simulate, with a reason naming what decided and why every other
  rule did not.
- ``ListSnapshots``: snapshots in force in this process (``<file>|cfg:<bundles>``
  once bundles are enabled), the current one first.

Every decision is then restricted by the request's ``effective_config`` (its
``safety.denied_topics`` / ``allowed_topics``): :mod:`cordum.safety.effective_config`.

Simulate and Explain answer from the loaded policy, or from a candidate policy sent
as the YAML text of binary metadata ``cordum-policy-bin`` (see
:func:`candidate_metadata`). A candidate is parsed for that one call and never
replaces the loaded policy; the answer carries the candidate's snapshot. A candidate
that does not parse is INVALID_ARGUMENT naming the field. Metadata of up to
:data:`MAX_METADATA_BYTES` is accepted.

The rules: :mod:`cordum.safety.policy`; hot reload: :mod:`cordum.safety.policy_file`;
the decision cache: :mod:`cordum.safety.decision_cache`; velocity windows, shared by
every replica through Redis when ``REDIS_URL`` is set: :mod:`cordum.safety.velocity`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from cordum import protocol  # noqa: F401  (makes cordum.agent.v1 importable)
from cordum.agent.v1 import safety_pb2, safety_pb2_grpc
from cordum.safety.decision_cache import DecisionCache, cache_max_from_env, cache_ttl_from_env
from cordum.safety.effective_config import EFFECTIVE_CONFIG_RULE, restriction
from cordum.safety.matching import PolicyInput
from cordum.safety.policy_document import DecisionKind
from cordum.safety.policy_file import PolicyError, parse_policy
from cordum.safety.velocity import VelocityCounter

if TYPE_CHECKING:
    from pathlib import Path

    from cordum.safety.policy import Decision, SafetyPolicy
    from cordum.safety.policy_document import Constraints
    from cordum.safety.velocity import VelocityWindows

log = logging.getLogger("cordum.safety.kernel")

CANDIDATE_POLICY_METADATA = "cordum-policy-bin"
"""Binary metadata key carrying a candidate policy's YAML for Simulate / Explain."""
MAX_METADATA_BYTES = 1024 * 1024
"""Metadata the server accepts per call (gRPC's default, 8 KiB, is less than a policy)."""

_PROTO_DECISIONS = {
    DecisionKind.ALLOW: safety_pb2.DECISION_TYPE_ALLOW,
    DecisionKind.DENY: safety_pb2.DECISION_TYPE_DENY,
    DecisionKind.REQUIRE_APPROVAL: safety_pb2.DECISION_TYPE_REQUIRE_HUMAN,
    DecisionKind.THROTTLE: safety_pb2.DECISION_TYPE_THROTTLE,
    DecisionKind.ALLOW_WITH_CONSTRAINTS: safety_pb2.DECISION_TYPE_ALLOW_WITH_CONSTRAINTS,
}
_ACTOR_TYPES = {1: "human", 2: "service"}


def policy_input(request: Any) -> PolicyInput:
    """The fields of a PolicyCheckRequest that a policy evaluates."""
    meta = request.meta if request.HasField("meta") else None
    tenant = request.tenant.strip() or (meta.tenant_id.strip() if meta is not None else "")
    return PolicyInput(
        topic=request.topic,
        tenant=tenant,
        job_id=request.job_id,
        labels=dict(request.labels),
        capability=meta.capability if meta is not None else "",
        risk_tags=tuple(meta.risk_tags) if meta is not None else (),
        requires=tuple(meta.requires) if meta is not None else (),
        pack_id=meta.pack_id if meta is not None else "",
        actor_id=meta.actor_id if meta is not None else "",
        actor_type=_ACTOR_TYPES.get(meta.actor_type, "") if meta is not None else "",
        input_content=request.input_content,
    )


def to_response(decision: Decision, job_id: str) -> Any:
    response = safety_pb2.PolicyCheckResponse(
        decision=_PROTO_DECISIONS[decision.decision],
        reason=decision.reason,
        rule_id=decision.rule_id,
        policy_snapshot=decision.snapshot,
        approval_required=decision.approval_required,
        approval_ref=job_id if decision.approval_required else "",
    )
    if decision.constraints is not None:
        response.constraints.CopyFrom(_constraints(decision.constraints))
    for rem in decision.remediations:
        response.remediations.add(
            id=rem.id, title=rem.title, summary=rem.summary,
            replacement_topic=rem.replacement_topic,
            replacement_capability=rem.replacement_capability,
            add_labels=rem.add_labels, remove_labels=rem.remove_labels)
    return response


def _constraints(c: Constraints) -> Any:
    return safety_pb2.PolicyConstraints(
        budgets=safety_pb2.BudgetConstraints(**c.budgets.model_dump()),
        sandbox=safety_pb2.SandboxProfile(**c.sandbox.model_dump()),
        toolchain=safety_pb2.ToolchainConstraints(**c.toolchain.model_dump()),
        diff=safety_pb2.DiffConstraints(**c.diff.model_dump()),
        redaction_level=c.redaction_level,
    )


def restricted(request: Any, response: Any) -> Any:
    """``response``, or a deny by the request's effective config when that config
    restricts the topic (:mod:`cordum.safety.effective_config`). A new message: a
    cached answer is never changed."""
    reason = restriction(request.effective_config, request.topic.strip())
    if reason is None:
        return response
    return safety_pb2.PolicyCheckResponse(
        decision=safety_pb2.DECISION_TYPE_DENY, reason=reason, rule_id=EFFECTIVE_CONFIG_RULE,
        policy_snapshot=response.policy_snapshot)


def candidate_metadata(policy_text: str | bytes) -> tuple[tuple[str, bytes]]:
    """gRPC metadata asking Simulate / Explain to answer from ``policy_text``."""
    data = policy_text.encode() if isinstance(policy_text, str) else policy_text
    return ((CANDIDATE_POLICY_METADATA, data),)


class PolicyInForce(Protocol):
    """What the kernel answers from: the file alone (``policy_file.Policy``) or the
    file merged with the bundles (``live_policy.LivePolicy``)."""

    @property
    def path(self) -> Path: ...

    @property
    def snapshot(self) -> str: ...

    @property
    def snapshots(self) -> list[str]:
        """Snapshots in force in this process, newest first."""
        ...

    def refresh(self) -> SafetyPolicy:
        """The policy in force now (every decision records its snapshot)."""
        ...


class PolicyKernel(safety_pb2_grpc.SafetyKernelServicer):
    """The SafetyKernel servicer: the policy in force, its velocity windows, a cache."""

    def __init__(self, policy: PolicyInForce, *, cache_ttl_s: float | None = None,
                 velocity: VelocityWindows | None = None) -> None:
        self.policy = policy
        self.velocity: VelocityWindows = velocity or VelocityCounter()
        ttl = cache_ttl_from_env() if cache_ttl_s is None else cache_ttl_s
        self.cache = DecisionCache(ttl, cache_max_from_env()) if ttl > 0 else None

    def decide(self, request: Any) -> Any:
        """Check/Evaluate: the decision, counting velocity, through the cache, then
        restricted by the request's effective config (never cached with it)."""
        return restricted(request, self._policy_decision(request))

    def _policy_decision(self, request: Any) -> Any:
        current = self.policy.refresh()
        req = policy_input(request)
        key = ""
        if self.cache is not None:
            key = f"{current.snapshot}:{req.cache_key()}"
            cached = self.cache.get(current.snapshot, key)
            if cached is not None:
                if cached.approval_required:
                    cached.approval_ref = req.job_id
                return cached
        decision = current.evaluate(req, velocity=self.velocity)
        response = to_response(decision, req.job_id)
        if key and decision.cacheable and self.cache is not None:
            self.cache.put(current.snapshot, key, response)
        log.debug("decision %s rule=%s topic=%s tenant=%s job=%s", decision.decision.value,
                  decision.rule_id, req.topic, req.tenant, req.job_id)
        return response

    def Check(self, request, context):  # noqa: N802 (gRPC method names)
        return self.decide(request)

    def Evaluate(self, request, context):  # noqa: N802
        return self.decide(request)

    def Simulate(self, request, context):  # noqa: N802
        req = policy_input(request)
        decision = self._policy_for(context).evaluate(req, velocity=self.velocity,
                                                      dry_run=True)
        return restricted(request, to_response(decision, req.job_id))

    def Explain(self, request, context):  # noqa: N802
        req = policy_input(request)
        decision = self._policy_for(context).explain(req, velocity=self.velocity)
        return restricted(request, to_response(decision, req.job_id))

    def ListSnapshots(self, request, context):  # noqa: N802
        self.policy.refresh()
        return safety_pb2.ListSnapshotsResponse(snapshots=self.policy.snapshots)

    def _policy_for(self, context: Any) -> SafetyPolicy:
        """The candidate sent with the call, else the loaded policy."""
        for key, value in context.invocation_metadata() or ():
            if key == CANDIDATE_POLICY_METADATA:
                data = value if isinstance(value, bytes) else value.encode()
                try:
                    return parse_policy(data, "candidate policy")
                except PolicyError as exc:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return self.policy.refresh()

