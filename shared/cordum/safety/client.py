"""SafetyKernel client used at dispatch time, behind the safety circuit breaker.

Every check has one deadline (``timeout_s``, 2 s by default) covering all its
attempts. An unreachable kernel is reported as UNAVAILABLE, which the scheduler
handles by its input fail mode (closed: retry later). An open breaker answers
UNAVAILABLE "safety kernel circuit open" without calling the kernel.

Lambda freezes the process between invocations and gRPC keepalives do not run
meanwhile, so a thawed container may hold a dead socket. After UNAVAILABLE or any
other transport error the channel is dropped and rebuilt; after UNAVAILABLE the
call is tried once more on the new channel when the deadline leaves room.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import TYPE_CHECKING, Any

from cordum.safety.breaker import CircuitBreaker

if TYPE_CHECKING:
    from collections.abc import Callable

    import grpc.aio

    from cordum.protocol import JobRequest
    from cordum.safety.breaker import Breaker

CIRCUIT_OPEN_REASON = "safety kernel circuit open"
EFFECTIVE_CONFIG_ENV = "CORDUM_EFFECTIVE_CONFIG"
"""Job env entry holding the effective config JSON, sent as ``effective_config``."""

_MIN_RETRY_S = 0.05
"""A retry after UNAVAILABLE needs at least this much of the deadline left."""


class Decision(StrEnum):
    ALLOW = "ALLOW"
    ALLOW_WITH_CONSTRAINTS = "ALLOW_WITH_CONSTRAINTS"
    DENY = "DENY"
    REQUIRE_APPROVAL = "REQUIRE_APPROVAL"
    THROTTLE = "THROTTLE"
    UNAVAILABLE = "UNAVAILABLE"


@dataclass(frozen=True, slots=True)
class SafetyVerdict:
    decision: Decision
    reason: str = ""
    rule_id: str = ""
    policy_snapshot: str = ""
    constraints: Any = None
    """``cordum.agent.v1.PolicyConstraints`` when the kernel attached constraints."""
    approval_required: bool = False
    """The kernel asks for human approval even though the decision may be ALLOW*."""
    approval_ref: str = ""
    remediations: tuple[Any, ...] = ()
    """``cordum.agent.v1.PolicyRemediation`` messages, in the kernel's order."""


_DECISIONS = {
    1: Decision.ALLOW,
    2: Decision.DENY,
    3: Decision.REQUIRE_APPROVAL,
    4: Decision.THROTTLE,
    5: Decision.ALLOW_WITH_CONSTRAINTS,
}
"""DecisionType numbers (ALLOW=1, DENY=2, REQUIRE_HUMAN=3, THROTTLE=4,
ALLOW_WITH_CONSTRAINTS=5)."""


def decision_from_proto(value: int) -> Decision:
    """Map a DecisionType; UNSPECIFIED and any value this release does not know mean DENY."""
    return _DECISIONS.get(value, Decision.DENY)


def verdict_from_response(resp: Any) -> SafetyVerdict:
    """A SafetyVerdict carrying everything of a PolicyCheckResponse the scheduler uses."""
    return SafetyVerdict(
        decision=decision_from_proto(resp.decision),
        reason=resp.reason,
        rule_id=resp.rule_id,
        policy_snapshot=resp.policy_snapshot,
        constraints=resp.constraints if resp.HasField("constraints") else None,
        approval_required=resp.approval_required,
        approval_ref=resp.approval_ref,
        remediations=tuple(resp.remediations),
    )


def check_request(req: JobRequest, tenant: str) -> Any:
    """The PolicyCheckRequest for a job, as Cordum's scheduler builds it.

    Not sent yet: ``input_content`` / ``input_content_type`` / ``input_size_bytes``.
    Cordum reads the payload behind ``context_ptr`` (``redis://`` stripped, at most
    2 MiB, original size in ``input_size_bytes``), takes the content type from
    ``labels["content_type"]`` and adds label ``_content.payload_json`` when the
    payload is at most 64 KiB. That costs a Redis read per check and matters only
    once the kernel evaluates content rules; until then the kernel sees metadata only.
    """
    from cordum import protocol  # noqa: F401  (makes cordum.agent.v1 importable)
    from cordum.agent.v1 import safety_pb2

    request = safety_pb2.PolicyCheckRequest(
        job_id=req.job_id,
        topic=req.topic,
        tenant=tenant,
        priority=req.priority,
        principal_id=req.principal_id,
        labels=dict(req.labels),
        memory_id=req.memory_id,
    )
    if req.HasField("budget"):
        request.budget.CopyFrom(req.budget)
    if req.HasField("meta"):
        request.meta.CopyFrom(req.meta)
    effective = req.env.get(EFFECTIVE_CONFIG_ENV, "")
    if effective:
        request.effective_config = effective.encode()
    return request


class KernelCallError(Exception):
    """The Check RPC failed; the message is what follows "safety kernel error: "."""


class SafetyClient:
    """Checks jobs against the SafetyKernel service.

    ``breaker`` defaults to an in-process breaker; processes that share Redis pass a
    :class:`~cordum.safety.breaker.CircuitBreaker` on it so all replicas open and
    recover together. ``channel_factory`` builds the gRPC channel for an address
    (tests add interceptors through it).
    """

    def __init__(
        self,
        addr: str,
        timeout_s: float = 2.0,
        *,
        breaker: Breaker | None = None,
        channel_factory: Callable[[str], grpc.aio.Channel] | None = None,
    ) -> None:
        self._addr = addr
        self._timeout = timeout_s
        self._breaker: Breaker = breaker or CircuitBreaker(None)
        self._channel_factory = channel_factory
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def breaker(self) -> Breaker:
        return self._breaker

    async def check(self, req: JobRequest, tenant: str) -> SafetyVerdict:
        admission = await self._breaker.allow()
        if not admission.admitted:
            return SafetyVerdict(Decision.UNAVAILABLE, CIRCUIT_OPEN_REASON)
        try:
            resp = await self._call_check(check_request(req, tenant))
        except KernelCallError as exc:
            await self._breaker.record_failure(admission)
            return SafetyVerdict(Decision.UNAVAILABLE, f"safety kernel error: {exc}")
        await self._breaker.record_success(admission)
        return verdict_from_response(resp)

    async def aclose(self) -> None:
        """Close the channel (end of a service or a test)."""
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            await channel.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    def _connect(self) -> Any:
        import grpc

        from cordum import protocol  # noqa: F401
        from cordum.agent.v1 import safety_pb2_grpc

        if self._channel_factory is not None:
            self._channel = self._channel_factory(self._addr)
        else:
            self._channel = grpc.aio.insecure_channel(self._addr)
        self._stub = safety_pb2_grpc.SafetyKernelStub(self._channel)
        return self._stub

    def _drop_channel(self) -> None:
        channel, self._channel, self._stub = self._channel, None, None
        if channel is None:
            return
        # Other checks may still be in flight on the old channel: they get the
        # rest of their deadline before it is torn down.
        task = asyncio.ensure_future(channel.close(grace=self._timeout))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _call_check(self, request: Any) -> Any:
        import grpc

        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        retried = False
        while True:
            stub = self._stub or self._connect()
            try:
                return await stub.Check(request, timeout=max(deadline - loop.time(), 0.001))
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                if code in _transport_codes():
                    self._drop_channel()
                if (retried or code != grpc.StatusCode.UNAVAILABLE
                        or deadline - loop.time() < _MIN_RETRY_S):
                    detail = exc.details() or ""
                    raise KernelCallError(f"{code.name}: {detail}" if detail else code.name) \
                        from exc
                retried = True
            except Exception as exc:  # channel or loop trouble below the RPC status layer
                self._drop_channel()
                raise KernelCallError(str(exc) or type(exc).__name__) from exc


@cache
def _transport_codes() -> frozenset[Any]:
    """Status codes after which the channel is rebuilt: the connection itself may be dead."""
    import grpc

    return frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                      grpc.StatusCode.INTERNAL, grpc.StatusCode.CANCELLED})
