"""Questions to the safety kernel about one job: Evaluate, Simulate, Explain and its
ListSnapshots, over gRPC; and the answer in Cordum's wire shape.

The request is Cordum's body (:class:`~cordum.gateway.policy.models.PolicyCheck`)
turned into a ``PolicyCheckRequest`` whose tenant is the caller's and whose principal
is the caller's key, whatever the body says. Labels the gateway owns are dropped:
``_content.*`` (only the job's payload describes itself to the kernel) and
``_action.descriptor_json`` (set from the body's ``action`` instead).

The answer is the kernel's response as protojson (camelCase, every field present), as
Cordum's server sends it, with two changes that cordum-sdk needs and Cordum's clients
read as well (docs/http-api.md, "cordum-sdk"):

- ``decision`` is the short name the jobs API uses (``ALLOW``, ``DENY``,
  ``REQUIRE_APPROVAL``, ``THROTTLE``, ``ALLOW_WITH_CONSTRAINTS``); the protojson name
  (``DECISION_TYPE_*``) is in ``decision_type``;
- ``rule_id`` and ``policy_snapshot`` are sent beside ``ruleId`` and ``policySnapshot``.
"""

from __future__ import annotations

import json
import logging
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from cordum.gateway.core.errors import InvalidRequest, Unavailable
from cordum.gateway.core.kernel import NO_KERNEL_REASON
from cordum.safety.content_labels import CONTENT_LABEL_PREFIX

if TYPE_CHECKING:
    from cordum.gateway.core.auth import Principal
    from cordum.gateway.policy.models import PolicyCheck

log = logging.getLogger(__name__)

ACTION_LABEL = "_action.descriptor_json"
_PRIORITIES = {"": 1, "interactive": 1, "batch": 2, "critical": 3}
_ACTOR_TYPES = {"": 0, "human": 1, "service": 2}


class Mode(StrEnum):
    """Which of the kernel's questions: only ``evaluate`` counts velocity windows."""

    EVALUATE = "Evaluate"
    SIMULATE = "Simulate"
    EXPLAIN = "Explain"


class KernelUnavailable(Unavailable):
    """The safety kernel cannot be asked (no address, unreachable, failing)."""

    part = "safety-kernel"

    def __init__(self, reason: str) -> None:
        super().__init__(f"safety kernel unavailable: {reason}", "kernel_unavailable")


class PolicyKernelPort(Protocol):
    """The safety kernel, as the policy routes ask it."""

    async def ask(self, mode: Mode, request: Any) -> Any:
        """The ``PolicyCheckResponse`` of ``mode`` for ``request``."""
        ...

    async def snapshots(self) -> list[str]:
        """The kernel's ListSnapshots, newest first."""
        ...


def _enum(value: str, known: dict[str, int], prefix: str, what: str) -> int:
    key = value.strip().lower()
    if key.startswith(prefix):
        key = key[len(prefix):]
    if key not in known:
        raise InvalidRequest(f"{what} must be one of {', '.join(k for k in known if k)}")
    return known[key]


def check_request(body: PolicyCheck, who: Principal) -> Any:
    """The ``PolicyCheckRequest`` for ``body``, asked by ``who``; 400 without a topic."""
    from cordum import protocol  # noqa: F401  (makes cordum.agent.v1 importable)
    from cordum.agent.v1 import safety_pb2

    topic = body.topic.strip()
    if not topic:
        raise InvalidRequest("topic is required", "topic_is_required")
    labels = {k: v for k, v in body.labels.items()
              if not k.startswith(CONTENT_LABEL_PREFIX) and k != ACTION_LABEL}
    if body.action is not None:
        labels[ACTION_LABEL] = json.dumps(body.action, separators=(",", ":"), sort_keys=True)
    req = safety_pb2.PolicyCheckRequest(
        job_id=body.job_id, topic=topic, tenant=who.tenant, principal_id=who.principal_id,
        priority=_enum(body.priority, _PRIORITIES, "job_priority_", "priority"),
        estimated_cost=body.estimated_cost, labels=labels, memory_id=body.memory_id)
    if body.budget is not None:
        req.budget.SetInParent()
        for name, value in body.budget.model_dump().items():
            setattr(req.budget, name, value)
    if body.effective_config is not None:
        req.effective_config = json.dumps(body.effective_config,
                                          separators=(",", ":")).encode()
    meta = body.meta
    risk_tags = (meta.risk_tags if meta is not None else []) or body.risk_tags
    capability = (meta.capability if meta is not None else "") or body.capability
    req.meta.tenant_id = who.tenant
    req.meta.capability = capability
    req.meta.risk_tags.extend(risk_tags)
    if meta is not None:
        req.meta.actor_id = meta.actor_id
        req.meta.actor_type = _enum(meta.actor_type, _ACTOR_TYPES, "actor_type_",
                                    "meta.actor_type")
        req.meta.idempotency_key = meta.idempotency_key
        req.meta.requires.extend(meta.requires)
        req.meta.pack_id = meta.pack_id
        req.meta.labels.update(meta.labels)
    return req


DECISION_TYPE_PREFIX = "DECISION_TYPE_"
_SHORT_NAMES = {"REQUIRE_HUMAN": "REQUIRE_APPROVAL"}
"""The kernel's REQUIRE_HUMAN is the jobs API's (and cordum-sdk's) REQUIRE_APPROVAL."""


def short_decision(decision_type: str) -> str:
    """``DECISION_TYPE_REQUIRE_HUMAN`` as ``REQUIRE_APPROVAL``, ``DECISION_TYPE_DENY`` as
    ``DENY``."""
    word = decision_type.removeprefix(DECISION_TYPE_PREFIX)
    return _SHORT_NAMES.get(word, word)


def wire_answer(response: Any) -> dict[str, Any]:
    """A ``PolicyCheckResponse`` as Cordum's protojson, with the short decision name and
    cordum-sdk's snake-case names of the rule and the snapshot beside the camel-case
    ones."""
    from google.protobuf import json_format

    out: dict[str, Any] = json_format.MessageToDict(
        response, always_print_fields_with_no_presence=True)
    out.setdefault("constraints", None)
    out["decision_type"] = str(out.get("decision", ""))
    out["decision"] = short_decision(out["decision_type"])
    out["rule_id"] = out.get("ruleId", "")
    out["policy_snapshot"] = out.get("policySnapshot", "")
    return out


class GrpcPolicyKernel:
    """The kernel at ``addr``, a channel per question (they are rare, and a channel kept
    across frozen Lambda invocations would have to be checked before each use)."""

    def __init__(self, addr: str, timeout_s: float) -> None:
        from cordum.safety.tls import client_tls_from_env

        self._addr = addr.strip()
        self._timeout_s = timeout_s
        self._tls = client_tls_from_env()

    async def ask(self, mode: Mode, request: Any) -> Any:
        return await self._call(mode.value, request)

    async def snapshots(self) -> list[str]:
        from cordum.agent.v1 import safety_pb2

        resp = await self._call("ListSnapshots", safety_pb2.ListSnapshotsRequest())
        return [s for s in resp.snapshots if s.strip()]

    async def _call(self, method: str, request: Any) -> Any:
        import grpc

        from cordum import protocol  # noqa: F401
        from cordum.agent.v1 import safety_pb2_grpc

        if not self._addr:
            raise KernelUnavailable(NO_KERNEL_REASON)
        try:
            async with self._tls.channel(self._addr) as channel:
                stub = safety_pb2_grpc.SafetyKernelStub(channel)
                return await getattr(stub, method)(request, timeout=self._timeout_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                raise InvalidRequest(f"safety kernel: {exc.details()}") from None
            log.warning("safety kernel %s: %s failed: %s", self._addr, method, exc.code())
            raise KernelUnavailable(exc.code().name.lower()) from None
        except Exception as exc:  # the channel could not be built or used
            log.warning("safety kernel %s: %s failed: %r", self._addr, method, exc)
            raise KernelUnavailable(type(exc).__name__) from None


class PolicyQuestions:
    """Evaluate, simulate, explain and the kernel's snapshots, for the routes."""

    def __init__(self, kernel: PolicyKernelPort) -> None:
        self._kernel = kernel

    async def ask(self, mode: Mode, body: PolicyCheck, who: Principal) -> dict[str, Any]:
        return wire_answer(await self._kernel.ask(mode, check_request(body, who)))

    async def snapshots(self) -> list[dict[str, Any]]:
        """The kernel's snapshots, the one in force first, each ``{id, in_force}``: a bare
        array of objects, as cordum-sdk reads it (Cordum answers ``{"snapshots":
        [id, ...]}``, which the SDK cannot read)."""
        return [{"id": snap, "in_force": i == 0}
                for i, snap in enumerate(await self._kernel.snapshots())]
